// Probe (issue 5 item 1): what the driver says about memory cudaIpcGetMemHandle cannot
// export (VMM cuMemCreate memory, cudaMallocAsync pools), and whether POSIX-fd sharing of it
// works across two processes of this node. Two processes, forked before CUDA starts: the
// parent (exporter, GPU 0) and the child (importer, GPU 1) talk over a socketpair, file
// descriptors passed with SCM_RIGHTS. Questions, each answered by a "PROBE {json}" line:
//   attrs      pointer attributes (buffer id, range, legacy-IPC capable, allowed handle types,
//              mempool handle) of cudaMalloc, VMM, exportable-pool and default-pool memory
//   realloc    a freed allocation reallocated at the same address: new buffer id? (cudaMalloc,
//              VMM remapped in its reservation, pool); the retained VMM handle and the fd's inode
//   export     which export calls each kind accepts (cudaIpcGetMemHandle, cuMemRetainAllocationHandle,
//              pool export); fabric handles (IMEX) supported?
//   import     the importer maps VMM (import + reserve + map + set access) and pool pointers,
//              checks the bytes, times copies out of the mapping into its own GPU (GB/s)
//   stale      the exporter frees a pool pointer the importer still has mapped and allocates
//              again: what the importer sees
// Build: nvcc -O2 -arch=sm_90 -o ipc_vmm_probe ipc_vmm_probe.cu -lcuda
#include <cuda.h>
#include <cuda_runtime.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

static int g_sock = -1;
static const char* g_who = "?";

#define CK(x)                                                                                          \
  do {                                                                                                 \
    cudaError_t e_ = (x);                                                                              \
    if (e_ != cudaSuccess) {                                                                           \
      std::printf("PROBE {\"who\":\"%s\",\"fatal\":\"%s\",\"at\":\"%s:%d\"}\n", g_who,                  \
                  cudaGetErrorName(e_), #x, __LINE__);                                                 \
      std::fflush(stdout);                                                                             \
      std::exit(2);                                                                                    \
    }                                                                                                  \
  } while (0)

static const char* cu_name(CUresult r) {
  const char* s = nullptr;
  cuGetErrorName(r, &s);
  return s ? s : "?";
}
#define DK(x)                                                                                          \
  do {                                                                                                 \
    CUresult r_ = (x);                                                                                 \
    if (r_ != CUDA_SUCCESS) {                                                                          \
      std::printf("PROBE {\"who\":\"%s\",\"fatal\":\"%s\",\"at\":\"%s:%d\"}\n", g_who, cu_name(r_),     \
                  #x, __LINE__);                                                                       \
      std::fflush(stdout);                                                                             \
      std::exit(2);                                                                                    \
    }                                                                                                  \
  } while (0)

struct Msg {
  char what[32];
  uint64_t size;
  uint64_t addr;
  uint32_t seed;
  unsigned char data[64];  // pool export data
};

static void send_msg(const Msg& m, int fd) {
  msghdr h{};
  iovec io{const_cast<Msg*>(&m), sizeof m};
  h.msg_iov = &io;
  h.msg_iovlen = 1;
  char ctl[CMSG_SPACE(sizeof(int))] = {};
  if (fd >= 0) {
    h.msg_control = ctl;
    h.msg_controllen = sizeof ctl;
    cmsghdr* c = CMSG_FIRSTHDR(&h);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int));
    std::memcpy(CMSG_DATA(c), &fd, sizeof fd);
  }
  if (sendmsg(g_sock, &h, 0) != static_cast<ssize_t>(sizeof m)) {
    std::perror("sendmsg");
    std::exit(3);
  }
}

static Msg recv_msg(int* fd) {
  Msg m{};
  msghdr h{};
  iovec io{&m, sizeof m};
  h.msg_iov = &io;
  h.msg_iovlen = 1;
  char ctl[CMSG_SPACE(sizeof(int))] = {};
  h.msg_control = ctl;
  h.msg_controllen = sizeof ctl;
  if (recvmsg(g_sock, &h, 0) != static_cast<ssize_t>(sizeof m)) {
    std::perror("recvmsg");
    std::exit(3);
  }
  *fd = -1;
  for (cmsghdr* c = CMSG_FIRSTHDR(&h); c; c = CMSG_NXTHDR(&h, c))
    if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS) std::memcpy(fd, CMSG_DATA(c), sizeof(int));
  return m;
}

__global__ void fill(unsigned* p, size_t n, unsigned seed) {
  for (size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x)
    p[i] = static_cast<unsigned>(i) * 2654435761u + seed;
}
__global__ void count_bad(const unsigned* p, size_t n, unsigned seed, unsigned long long* bad) {
  unsigned long long b = 0;
  for (size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x)
    b += p[i] != static_cast<unsigned>(i) * 2654435761u + seed;
  if (b) atomicAdd(bad, b);
}

static unsigned long long bad_words(const void* p, size_t bytes, unsigned seed) {
  unsigned long long* d = nullptr;
  CK(cudaMalloc(&d, sizeof *d));
  CK(cudaMemset(d, 0, sizeof *d));
  count_bad<<<264, 512>>>(static_cast<const unsigned*>(p), bytes / 4, seed, d);
  CK(cudaDeviceSynchronize());
  unsigned long long h = 0;
  CK(cudaMemcpy(&h, d, sizeof h, cudaMemcpyDeviceToHost));
  CK(cudaFree(d));
  return h;
}

static void attrs(const char* kind, const void* p) {
  unsigned mt = 0, legacy = 0;
  int ord = -1;
  unsigned long long bid = 0, allowed = 0;
  CUdeviceptr start = 0;
  size_t size = 0;
  void* pool = nullptr;
  CUpointer_attribute a[] = {CU_POINTER_ATTRIBUTE_MEMORY_TYPE, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL,
                             CU_POINTER_ATTRIBUTE_BUFFER_ID, CU_POINTER_ATTRIBUTE_RANGE_START_ADDR,
                             CU_POINTER_ATTRIBUTE_RANGE_SIZE, CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE,
                             CU_POINTER_ATTRIBUTE_ALLOWED_HANDLE_TYPES, CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE};
  void* d[] = {&mt, &ord, &bid, &start, &size, &legacy, &allowed, &pool};
  CUresult r = cuPointerGetAttributes(8, a, d, reinterpret_cast<CUdeviceptr>(p) + 100);
  CUdeviceptr mbase = 0;
  size_t msize = 0;
  CUresult r2 = cuMemGetAddressRange(&mbase, &msize, reinterpret_cast<CUdeviceptr>(p) + 100);
  std::printf("PROBE {\"who\":\"%s\",\"q\":\"attrs\",\"kind\":\"%s\",\"result\":\"%s\",\"memtype\":%u,\"ordinal\":%d,"
              "\"buffer_id\":%llu,\"range_off\":%lld,\"range_size\":%zu,\"legacy_ipc\":%u,\"allowed\":%llu,"
              "\"pool\":%s,\"getaddressrange\":\"%s\",\"mapped_off\":%lld,\"mapped_size\":%zu}\n",
              g_who, kind, cu_name(r), mt, ord, bid, (long long)(reinterpret_cast<CUdeviceptr>(p) - start), size,
              legacy, allowed, pool ? "true" : "false", cu_name(r2),
              (long long)(reinterpret_cast<CUdeviceptr>(p) - mbase), msize);
}

static unsigned long long buffer_id(const void* p) {
  unsigned long long bid = 0;
  cuPointerGetAttribute(&bid, CU_POINTER_ATTRIBUTE_BUFFER_ID, reinterpret_cast<CUdeviceptr>(p));
  return bid;
}

static std::string fd_ident(int fd) {
  struct stat st{};
  if (fstat(fd, &st) != 0) return "\"fstat failed\"";
  char b[128];
  std::snprintf(b, sizeof b, "\"dev %llu ino %llu mode %o\"", (unsigned long long)st.st_dev,
                (unsigned long long)st.st_ino, st.st_mode & S_IFMT);
  return b;
}

static const size_t kBytes = 256ull << 20;

// ------------------------------------------------------------------ exporter (GPU 0)
struct Vmm {
  CUdeviceptr va = 0;
  size_t size = 0;
  CUmemGenericAllocationHandle h = 0;
};
static Vmm vmm_alloc(int dev, size_t bytes, CUmemAllocationHandleType types, CUdeviceptr at = 0, CUresult* err = nullptr) {
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = dev;
  prop.requestedHandleTypes = types;
  size_t gran = 0;
  DK(cuMemGetAllocationGranularity(&gran, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
  Vmm v;
  v.size = (bytes + gran - 1) / gran * gran;
  CUresult r = cuMemCreate(&v.h, v.size, &prop, 0);
  if (err) {
    *err = r;
    if (r != CUDA_SUCCESS) return v;
  } else {
    DK(r);
  }
  if (at) v.va = at;
  else DK(cuMemAddressReserve(&v.va, v.size, 0, 0, 0));
  DK(cuMemMap(v.va, v.size, 0, v.h, 0));
  CUmemAccessDesc acc{};
  acc.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  acc.location.id = dev;
  acc.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  DK(cuMemSetAccess(v.va, v.size, &acc, 1));
  return v;
}

static int exporter() {
  g_who = "exporter";
  CK(cudaSetDevice(0));
  CK(cudaFree(nullptr));
  int posix = 0, fabric = 0, vmm = 0;
  cuDeviceGetAttribute(&vmm, CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, 0);
  cuDeviceGetAttribute(&posix, CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED, 0);
  cuDeviceGetAttribute(&fabric, CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_FABRIC_SUPPORTED, 0);
  int drv = 0;
  cudaDriverGetVersion(&drv);
  std::printf("PROBE {\"who\":\"exporter\",\"q\":\"device\",\"driver\":%d,\"vmm\":%d,\"posix_fd\":%d,\"fabric\":%d}\n",
              drv, vmm, posix, fabric);

  // cudaMalloc (legacy IPC): reference attributes and realloc at the same address.
  void* m = nullptr;
  CK(cudaMalloc(&m, kBytes));
  attrs("cudaMalloc", m);
  unsigned long long b1 = buffer_id(m);
  CK(cudaFree(m));
  void* m2 = nullptr;
  CK(cudaMalloc(&m2, kBytes));
  std::printf("PROBE {\"who\":\"exporter\",\"q\":\"realloc\",\"kind\":\"cudaMalloc\",\"same_addr\":%d,\"new_id\":%d}\n",
              m2 == m, buffer_id(m2) != b1);
  fill<<<264, 512>>>(static_cast<unsigned*>(m2), kBytes / 4, 7);
  CK(cudaDeviceSynchronize());
  cudaIpcMemHandle_t ih;
  CK(cudaIpcGetMemHandle(&ih, m2));

  // Fabric handle: IMEX?
  CUresult fr = CUDA_SUCCESS;
  Vmm fv = vmm_alloc(0, 2 << 20, CU_MEM_HANDLE_TYPE_FABRIC, 0, &fr);
  CUresult fe = CUDA_ERROR_NOT_SUPPORTED;
  if (fr == CUDA_SUCCESS) {
    CUmemFabricHandle fh;
    fe = cuMemExportToShareableHandle(&fh, fv.h, CU_MEM_HANDLE_TYPE_FABRIC, 0);
  }
  std::printf("PROBE {\"who\":\"exporter\",\"q\":\"fabric\",\"create\":\"%s\",\"export\":\"%s\"}\n", cu_name(fr),
              cu_name(fe));

  // VMM with POSIX fd.
  Vmm v = vmm_alloc(0, kBytes, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
  attrs("vmm", reinterpret_cast<void*>(v.va));
  cudaIpcMemHandle_t dummy;
  cudaError_t le = cudaIpcGetMemHandle(&dummy, reinterpret_cast<void*>(v.va));
  cudaGetLastError();
  CUmemGenericAllocationHandle rh = 0;
  CUresult rr = cuMemRetainAllocationHandle(&rh, reinterpret_cast<void*>(v.va + 4096));
  int fd = -1;
  CUresult er = rr == CUDA_SUCCESS ? cuMemExportToShareableHandle(&fd, rh, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0)
                                   : rr;
  std::string ident = fd >= 0 ? fd_ident(fd) : "null";
  std::printf("PROBE {\"who\":\"exporter\",\"q\":\"export\",\"kind\":\"vmm\",\"cudaIpcGetMemHandle\":\"%s\",\"retain\":\"%s\","
              "\"retained_eq_created\":%d,\"export_fd\":\"%s\",\"fd\":%s}\n",
              cudaGetErrorName(le), cu_name(rr), rh == v.h, cu_name(er), ident.c_str());
  if (rr == CUDA_SUCCESS) DK(cuMemRelease(rh));
  fill<<<264, 512>>>(reinterpret_cast<unsigned*>(v.va), v.size / 4, 11);
  CK(cudaDeviceSynchronize());

  // A reservation holding two allocations (expandable segments): what the range attributes
  // and cuMemGetAddressRange say for a pointer in the second one, and its buffer id.
  {
    Vmm a1 = vmm_alloc(0, 2 << 20, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
    DK(cuMemUnmap(a1.va, a1.size));
    DK(cuMemAddressFree(a1.va, a1.size));
    CUdeviceptr res = 0;
    DK(cuMemAddressReserve(&res, 3 * a1.size, 0, 0, 0));
    DK(cuMemMap(res, a1.size, 0, a1.h, 0));
    Vmm a2 = vmm_alloc(0, 2 << 20, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, res + a1.size);
    CUmemAccessDesc acc{};
    acc.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    acc.location.id = 0;
    acc.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    DK(cuMemSetAccess(res, a1.size, &acc, 1));
    attrs("vmm_reservation_first", reinterpret_cast<void*>(res));
    attrs("vmm_reservation_second", reinterpret_cast<void*>(res + a1.size));
    std::printf("PROBE {\"who\":\"exporter\",\"q\":\"reservation\",\"ids_differ\":%d}\n",
                buffer_id(reinterpret_cast<void*>(res)) != buffer_id(reinterpret_cast<void*>(res + a1.size)));
    DK(cuMemUnmap(res + a1.size, a2.size));
    DK(cuMemRelease(a2.h));
    Vmm a3 = vmm_alloc(0, 2 << 20, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, res + a1.size);
    std::printf("PROBE {\"who\":\"exporter\",\"q\":\"realloc\",\"kind\":\"vmm_in_reservation\",\"new_id\":%d}\n",
                buffer_id(reinterpret_cast<void*>(res + a1.size)) != buffer_id(reinterpret_cast<void*>(res)) &&
                    a3.h != 0);
    unsigned long long id_before = buffer_id(reinterpret_cast<void*>(res + a1.size));
    DK(cuMemUnmap(res + a1.size, a3.size));
    DK(cuMemRelease(a3.h));
    Vmm a4 = vmm_alloc(0, 2 << 20, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, res + a1.size);
    std::printf("PROBE {\"who\":\"exporter\",\"q\":\"realloc\",\"kind\":\"vmm_in_reservation_again\",\"id1\":%llu,"
                "\"id2\":%llu,\"new_id\":%d}\n", id_before, buffer_id(reinterpret_cast<void*>(res + a1.size)),
                id_before != buffer_id(reinterpret_cast<void*>(res + a1.size)));
    DK(cuMemUnmap(res + a1.size, a4.size));
    DK(cuMemRelease(a4.h));
    DK(cuMemUnmap(res, a1.size));
    DK(cuMemRelease(a1.h));
    DK(cuMemAddressFree(res, 3 * a1.size));
  }

  // Non-exportable VMM (no handle types): what export says.
  Vmm vn = vmm_alloc(0, 2 << 20, CU_MEM_HANDLE_TYPE_NONE);
  attrs("vmm_no_handle", reinterpret_cast<void*>(vn.va));
  CUmemGenericAllocationHandle rn = 0;
  int fdn = -1;
  CUresult rnr = cuMemRetainAllocationHandle(&rn, reinterpret_cast<void*>(vn.va));
  CUresult rne = rnr == CUDA_SUCCESS ? cuMemExportToShareableHandle(&fdn, rn, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0) : rnr;
  std::printf("PROBE {\"who\":\"exporter\",\"q\":\"export\",\"kind\":\"vmm_no_handle\",\"retain\":\"%s\",\"export_fd\":\"%s\"}\n",
              cu_name(rnr), cu_name(rne));
  if (rnr == CUDA_SUCCESS) cuMemRelease(rn);

  // Exportable pool.
  cudaMemPoolProps pp{};
  pp.allocType = cudaMemAllocationTypePinned;
  pp.handleTypes = cudaMemHandleTypePosixFileDescriptor;
  pp.location.type = cudaMemLocationTypeDevice;
  pp.location.id = 0;
  cudaMemPool_t pool;
  CK(cudaMemPoolCreate(&pool, &pp));
  cudaStream_t s;
  CK(cudaStreamCreate(&s));
  void* pa = nullptr;
  CK(cudaMallocFromPoolAsync(&pa, kBytes, pool, s));
  CK(cudaStreamSynchronize(s));
  attrs("pool", pa);
  le = cudaIpcGetMemHandle(&dummy, pa);
  cudaGetLastError();
  rr = cuMemRetainAllocationHandle(&rh, pa);
  if (rr == CUDA_SUCCESS) cuMemRelease(rh);
  int pfd = -1;
  cudaError_t pe = cudaMemPoolExportToShareableHandle(&pfd, pool, cudaMemHandleTypePosixFileDescriptor, 0);
  cudaMemPoolPtrExportData pdata;
  cudaError_t pe2 = cudaMemPoolExportPointer(&pdata, pa);
  std::printf("PROBE {\"who\":\"exporter\",\"q\":\"export\",\"kind\":\"pool\",\"cudaIpcGetMemHandle\":\"%s\",\"retain\":\"%s\","
              "\"pool_export\":\"%s\",\"export_pointer\":\"%s\"}\n",
              cudaGetErrorName(le), cu_name(rr), cudaGetErrorName(pe), cudaGetErrorName(pe2));
  fill<<<264, 512>>>(static_cast<unsigned*>(pa), kBytes / 4, 13);
  CK(cudaDeviceSynchronize());

  // What cudaMemPoolExportPointer accepts (device round 2: gpustripe's pool, with peer access
  // set and the allocation on the legacy stream, 6 MB, got cudaErrorInvalidValue).
  for (int variant = 0; variant < 4; ++variant) {
    cudaMemPool_t vp;
    CK(cudaMemPoolCreate(&vp, &pp));
    if (variant & 1) {
      cudaMemAccessDesc acc{};
      acc.location.type = cudaMemLocationTypeDevice;
      acc.location.id = 1;
      acc.flags = cudaMemAccessFlagsProtReadWrite;
      CK(cudaMemPoolSetAccess(vp, &acc, 1));
    }
    cudaStream_t vs = (variant & 2) ? cudaStreamLegacy : s;
    void* vpa = nullptr;
    CK(cudaMallocFromPoolAsync(&vpa, 6 << 20, vp, vs));
    CK(cudaStreamSynchronize(vs));
    cudaMemPoolPtrExportData vd;
    cudaError_t ve = cudaMemPoolExportPointer(&vd, vpa);
    cudaGetLastError();
    std::printf("PROBE {\"who\":\"exporter\",\"q\":\"export_pointer\",\"peer_access_set\":%d,\"legacy_stream\":%d,"
                "\"result\":\"%s\"}\n", variant & 1, (variant >> 1) & 1, cudaGetErrorName(ve));
    attrs("pool_6M", vpa);
    CK(cudaFreeAsync(vpa, vs));
    CK(cudaStreamSynchronize(vs));
    CK(cudaMemPoolDestroy(vp));
  }

  // Default pool.
  void* da = nullptr;
  CK(cudaMallocAsync(&da, 4 << 20, s));
  CK(cudaStreamSynchronize(s));
  attrs("default_pool", da);
  le = cudaIpcGetMemHandle(&dummy, da);
  cudaGetLastError();
  rr = cuMemRetainAllocationHandle(&rh, da);
  if (rr == CUDA_SUCCESS) cuMemRelease(rh);
  cudaMemPool_t dp;
  CK(cudaDeviceGetDefaultMemPool(&dp, 0));
  int dfd = -1;
  cudaError_t de = cudaMemPoolExportToShareableHandle(&dfd, dp, cudaMemHandleTypePosixFileDescriptor, 0);
  cudaGetLastError();
  cudaMemPoolPtrExportData ddata;
  cudaError_t de2 = cudaMemPoolExportPointer(&ddata, da);
  cudaGetLastError();
  std::printf("PROBE {\"who\":\"exporter\",\"q\":\"export\",\"kind\":\"default_pool\",\"cudaIpcGetMemHandle\":\"%s\",\"retain\":\"%s\","
              "\"pool_export\":\"%s\",\"export_pointer\":\"%s\"}\n",
              cudaGetErrorName(le), cu_name(rr), cudaGetErrorName(de), cudaGetErrorName(de2));
  std::fflush(stdout);

  // Hand everything to the importer.
  Msg msg{};
  std::strcpy(msg.what, "legacy");
  msg.size = kBytes;
  msg.seed = 7;
  std::memcpy(msg.data, &ih, sizeof ih);
  send_msg(msg, -1);
  std::strcpy(msg.what, "vmm");
  msg.size = v.size;
  msg.seed = 11;
  send_msg(msg, fd);
  std::strcpy(msg.what, "pool");
  msg.size = kBytes;
  msg.seed = 13;
  std::memcpy(msg.data, &pdata, sizeof pdata);
  send_msg(msg, pfd);
  if (fd >= 0) close(fd);
  if (pfd >= 0) close(pfd);
  int nofd;
  Msg ack = recv_msg(&nofd);  // importer mapped and read everything

  // Realloc at the same address: VMM within its reservation, and the pool.
  unsigned long long vb1 = buffer_id(reinterpret_cast<void*>(v.va));
  DK(cuMemUnmap(v.va, v.size));
  DK(cuMemRelease(v.h));
  Vmm v2 = vmm_alloc(0, kBytes, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, v.va);
  unsigned long long vb2 = buffer_id(reinterpret_cast<void*>(v2.va));
  rr = cuMemRetainAllocationHandle(&rh, reinterpret_cast<void*>(v2.va));
  int fd2 = -1;
  if (rr == CUDA_SUCCESS) cuMemExportToShareableHandle(&fd2, rh, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0);
  std::string ident2 = fd2 >= 0 ? fd_ident(fd2) : "null";
  std::printf("PROBE {\"who\":\"exporter\",\"q\":\"realloc\",\"kind\":\"vmm\",\"same_addr\":1,\"id1\":%llu,\"id2\":%llu,"
              "\"new_id\":%d,\"handle_differs\":%d,\"fd2\":%s}\n",
              vb1, vb2, vb1 != vb2, v2.h != v.h, ident2.c_str());
  if (rr == CUDA_SUCCESS) cuMemRelease(rh);
  if (fd2 >= 0) close(fd2);

  unsigned long long pb1 = buffer_id(pa);
  CK(cudaFreeAsync(pa, s));
  CK(cudaStreamSynchronize(s));
  void* pa2 = nullptr;
  CK(cudaMallocFromPoolAsync(&pa2, kBytes, pool, s));
  CK(cudaStreamSynchronize(s));
  unsigned long long pb2 = buffer_id(pa2);
  std::printf("PROBE {\"who\":\"exporter\",\"q\":\"realloc\",\"kind\":\"pool\",\"same_addr\":%d,\"id1\":%llu,\"id2\":%llu,\"new_id\":%d}\n",
              pa2 == pa, pb1, pb2, pb1 != pb2);
  fill<<<264, 512>>>(static_cast<unsigned*>(pa2), kBytes / 4, 17);
  CK(cudaDeviceSynchronize());
  cudaMemPoolPtrExportData pdata2;
  cudaError_t pe3 = cudaMemPoolExportPointer(&pdata2, pa2);
  std::printf("PROBE {\"who\":\"exporter\",\"q\":\"stale\",\"export_data_same\":%d,\"export2\":\"%s\"}\n",
              std::memcmp(&pdata, &pdata2, sizeof pdata) == 0, cudaGetErrorName(pe3));
  std::fflush(stdout);
  std::strcpy(msg.what, "pool2");
  msg.seed = 17;
  std::memcpy(msg.data, &pdata2, sizeof pdata2);
  send_msg(msg, -1);
  ack = recv_msg(&nofd);
  (void)ack;
  CK(cudaFreeAsync(pa2, s));
  CK(cudaStreamSynchronize(s));
  return 0;
}

// ------------------------------------------------------------------ importer (GPU 1)
static double copy_gbps(void* dst, const void* src, size_t bytes, cudaStream_t s) {
  cudaEvent_t a, b;
  CK(cudaEventCreate(&a));
  CK(cudaEventCreate(&b));
  CK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, s));
  CK(cudaEventRecord(a, s));
  const int reps = 10;
  for (int i = 0; i < reps; ++i) CK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, s));
  CK(cudaEventRecord(b, s));
  CK(cudaEventSynchronize(b));
  float ms = 0;
  CK(cudaEventElapsedTime(&ms, a, b));
  return bytes * reps / (ms * 1e-3) / 1e9;
}

static int importer() {
  g_who = "importer";
  CK(cudaSetDevice(1));
  CK(cudaFree(nullptr));
  cudaStream_t s;
  CK(cudaStreamCreate(&s));
  void* local = nullptr;
  CK(cudaMalloc(&local, kBytes));
  int fd = -1;

  Msg legacy = recv_msg(&fd);  // opened after the VMM part: it enables peer access (lazily)
  unsigned long long bad = 0;
  double g = 0;

  Msg m = recv_msg(&fd);  // vmm
  auto t0 = std::chrono::steady_clock::now();
  CUmemGenericAllocationHandle h = 0;
  CUresult r = cuMemImportFromShareableHandle(&h, reinterpret_cast<void*>(static_cast<uintptr_t>(fd)),
                                              CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
  if (r == CUDA_SUCCESS) {
    CUmemAllocationProp prop{};
    DK(cuMemGetAllocationPropertiesFromHandle(&prop, h));
    size_t gran = 0;
    DK(cuMemGetAllocationGranularity(&gran, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
    CUdeviceptr va = 0;
    DK(cuMemAddressReserve(&va, m.size, gran, 0, 0));
    DK(cuMemMap(va, m.size, 0, h, 0));
    CUmemAccessDesc acc{};
    acc.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    acc.location.id = 1;
    acc.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    DK(cuMemSetAccess(va, m.size, &acc, 1));
    double us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
    close(fd);
    bad = bad_words(reinterpret_cast<void*>(va), m.size, m.seed);
    g = copy_gbps(local, reinterpret_cast<void*>(va), std::min<size_t>(m.size, kBytes), s);
    std::printf("PROBE {\"who\":\"importer\",\"q\":\"import\",\"kind\":\"vmm\",\"owner_location\":%d,\"map_us\":%.1f,"
                "\"bad_words\":%llu,\"copy_gbps\":%.1f}\n", prop.location.id, us, bad, g);
    attrs("vmm_imported", reinterpret_cast<void*>(va));
    // cudaMemcpyPeerAsync (what the backend uses between two GPUs) out of the mapping, 64 MB,
    // without and with peer access between the contexts.
    for (int pass = 0; pass < 2; ++pass) {
      if (pass == 1) {
        cudaError_t pe = cudaDeviceEnablePeerAccess(0, 0);
        if (pe != cudaSuccess) cudaGetLastError();
      }
      cudaEvent_t a, b;
      CK(cudaEventCreate(&a));
      CK(cudaEventCreate(&b));
      CK(cudaMemcpyPeerAsync(local, 1, reinterpret_cast<void*>(va), 0, 64 << 20, s));
      CK(cudaEventRecord(a, s));
      for (int i = 0; i < 5; ++i) CK(cudaMemcpyPeerAsync(local, 1, reinterpret_cast<void*>(va), 0, 64 << 20, s));
      CK(cudaEventRecord(b, s));
      CK(cudaEventSynchronize(b));
      float ms = 0;
      CK(cudaEventElapsedTime(&ms, a, b));
      std::printf("PROBE {\"who\":\"importer\",\"q\":\"peer_copy\",\"kind\":\"vmm\",\"peer_access\":%d,\"gbps\":%.1f}\n",
                  pass, 5.0 * (64 << 20) / (ms * 1e-3) / 1e9);
    }
    // Access for GPU 1 only: a copy on a stream of GPU 0 (the owner) through this mapping?
    DK(cuMemUnmap(va, m.size));
    DK(cuMemAddressFree(va, m.size));
    DK(cuMemRelease(h));
  } else {
    std::printf("PROBE {\"who\":\"importer\",\"q\":\"import\",\"kind\":\"vmm\",\"result\":\"%s\"}\n", cu_name(r));
  }

  {
    cudaIpcMemHandle_t ih;
    std::memcpy(&ih, legacy.data, sizeof ih);
    void* lp = nullptr;
    CK(cudaIpcOpenMemHandle(&lp, ih, cudaIpcMemLazyEnablePeerAccess));
    bad = bad_words(lp, legacy.size, legacy.seed);
    g = copy_gbps(local, lp, legacy.size, s);
    std::printf("PROBE {\"who\":\"importer\",\"q\":\"import\",\"kind\":\"legacy\",\"bad_words\":%llu,\"copy_gbps\":%.1f}\n", bad, g);
    attrs("legacy_imported", lp);
  }

  m = recv_msg(&fd);  // pool
  t0 = std::chrono::steady_clock::now();
  cudaMemPool_t pool;
  cudaError_t pr = cudaMemPoolImportFromShareableHandle(&pool, reinterpret_cast<void*>(static_cast<uintptr_t>(fd)),
                                                        cudaMemHandleTypePosixFileDescriptor, 0);
  void* pp = nullptr;
  if (pr == cudaSuccess) {
    close(fd);
    cudaMemAccessDesc acc{};
    acc.location.type = cudaMemLocationTypeDevice;
    acc.location.id = 1;
    acc.flags = cudaMemAccessFlagsProtReadWrite;
    cudaError_t ar = cudaMemPoolSetAccess(pool, &acc, 1);
    cudaMemPoolPtrExportData d;
    std::memcpy(&d, m.data, sizeof d);
    cudaError_t ir = cudaMemPoolImportPointer(&pp, pool, &d);
    double us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
    bad = ir == cudaSuccess ? bad_words(pp, m.size, m.seed) : ~0ull;
    g = ir == cudaSuccess ? copy_gbps(local, pp, m.size, s) : 0;
    std::printf("PROBE {\"who\":\"importer\",\"q\":\"import\",\"kind\":\"pool\",\"set_access\":\"%s\",\"import_pointer\":\"%s\","
                "\"map_us\":%.1f,\"bad_words\":%llu,\"copy_gbps\":%.1f}\n",
                cudaGetErrorName(ar), cudaGetErrorName(ir), us, bad, g);
    if (ir == cudaSuccess) attrs("pool_imported", pp);
  } else {
    std::printf("PROBE {\"who\":\"importer\",\"q\":\"import\",\"kind\":\"pool\",\"result\":\"%s\"}\n", cudaGetErrorName(pr));
  }
  std::fflush(stdout);
  Msg ack{};
  send_msg(ack, -1);

  m = recv_msg(&fd);  // pool2: the exporter freed pp's allocation and made a new one
  if (pr == cudaSuccess) {
    unsigned long long old_id = pp ? buffer_id(pp) : 0;
    bad = pp ? bad_words(pp, m.size, m.seed) : ~0ull;  // the old mapping: new data (same memory)?
    cudaMemPoolPtrExportData d;
    std::memcpy(&d, m.data, sizeof d);
    void* pp2 = nullptr;
    cudaError_t ir2 = cudaMemPoolImportPointer(&pp2, pool, &d);  // without freeing the old import
    cudaGetLastError();
    cudaError_t fr = pp ? cudaFree(pp) : cudaSuccess;
    cudaGetLastError();
    void* pp3 = nullptr;
    cudaError_t ir3 = ir2 == cudaSuccess ? cudaSuccess : cudaMemPoolImportPointer(&pp3, pool, &d);
    cudaGetLastError();
    void* use = ir2 == cudaSuccess ? pp2 : pp3;
    unsigned long long bad2 = use && (ir2 == cudaSuccess || ir3 == cudaSuccess) ? bad_words(use, m.size, m.seed) : ~0ull;
    std::printf("PROBE {\"who\":\"importer\",\"q\":\"stale\",\"old_mapping_bad_vs_new\":%llu,\"import_again\":\"%s\","
                "\"same_ptr\":%d,\"free_old\":\"%s\",\"import_after_free\":\"%s\",\"new_bad\":%llu,\"old_id\":%llu,\"new_id\":%llu}\n",
                bad, cudaGetErrorName(ir2), pp2 == pp, cudaGetErrorName(fr), cudaGetErrorName(ir3), bad2, old_id,
                use ? buffer_id(use) : 0);
    if (use) cudaFree(use);
  }
  std::fflush(stdout);
  send_msg(ack, -1);
  return 0;
}

int main() {
  int sv[2];
  if (socketpair(AF_UNIX, SOCK_SEQPACKET, 0, sv) != 0) {
    std::perror("socketpair");
    return 1;
  }
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  pid_t pid = fork();  // before CUDA starts in either process
  if (pid == 0) {
    g_sock = sv[1];
    close(sv[0]);
    std::_Exit(importer());
  }
  g_sock = sv[0];
  close(sv[1]);
  int rc = exporter();
  int st = 0;
  waitpid(pid, &st, 0);
  std::printf("PROBE {\"who\":\"main\",\"exporter_rc\":%d,\"importer_status\":%d}\n", rc, st);
  return rc || st;
}
