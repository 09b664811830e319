// Buffers and GPU selection of the MPI benchmark clients that use the CUDA runtime
// directly (mpi_bench, nccl_bench, ucx_bench): plain CUDA + MPI, nothing of gpustripe.
// Built without CUDA (BENCH_HAVE_CUDA unset) only host memory exists.
#pragma once
#include <mpi.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include <map>
#include <string>
#include <utility>

#ifdef BENCH_HAVE_CUDA
#include <cuda.h>
#include <cuda_runtime.h>
#define CUDA_OK(call)                                                                              \
  do {                                                                                             \
    cudaError_t e_ = (call);                                                                       \
    if (e_ != cudaSuccess) {                                                                       \
      std::fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call, cudaGetErrorString(e_)); \
      MPI_Abort(MPI_COMM_WORLD, 4);                                                                \
    }                                                                                              \
  } while (0)
#endif

namespace bench {

// One GPU per rank of a node, as MPI programs do (GPU = local rank mod GPUs).
// Returns the GPU count (0 without CUDA or a driver); aborts when need_gpu and none.
inline int select_gpu(bool need_gpu, const char* prog) {
  int ndev = 0;
#ifdef BENCH_HAVE_CUDA
  if (cudaGetDeviceCount(&ndev) != cudaSuccess) ndev = 0;
#endif
  if (ndev == 0 && need_gpu) {
    std::fprintf(stderr, "%s: no CUDA device visible (or built without CUDA): device buffers need a GPU\n", prog);
    MPI_Abort(MPI_COMM_WORLD, 4);
  }
  MPI_Comm node;
  MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node);
  int local = 0;
  MPI_Comm_rank(node, &local);
  MPI_Comm_free(&node);
#ifdef BENCH_HAVE_CUDA
  if (ndev > 0) CUDA_OK(cudaSetDevice(local % ndev));
#endif
  return ndev;
}

#ifdef BENCH_HAVE_CUDA
// Device memory the way other programs allocate it (--alloc): "vmm" is cuMemCreate with
// POSIX-fd handles mapped for every GPU (NCCL's cuMem buffers), "vmm_multi" one reservation
// mapped with several such allocations (PyTorch's expandable segments: 20 MiB pieces past
// 20 MiB, else the granularity, as gpustripe's vmm_multi_piece; restated here because these
// clients use plain MPI + CUDA only), "pool" a cudaMallocAsync pool made with POSIX-fd
// handles, "async" the device's default pool (no IPC handle). Driver calls through cudaGetDriverEntryPoint: no -lcuda.
template <typename Fn>
inline Fn driver_fn(const char* name) {
  void* f = nullptr;
  cudaDriverEntryPointQueryResult q{};
  CUDA_OK(cudaGetDriverEntryPointByVersion(name, &f, 12000, cudaEnableDefault, &q));
  if (q != cudaDriverEntryPointSuccess || !f) {
    std::fprintf(stderr, "driver call %s not found\n", name);
    MPI_Abort(MPI_COMM_WORLD, 4);
  }
  return reinterpret_cast<Fn>(f);
}
#define CU_OK(call)                                                          \
  do {                                                                       \
    CUresult r_ = (call);                                                    \
    if (r_ != CUDA_SUCCESS) {                                                \
      std::fprintf(stderr, "%s:%d: %s: CUresult %d\n", __FILE__, __LINE__, #call, (int)r_); \
      MPI_Abort(MPI_COMM_WORLD, 4);                                          \
    }                                                                        \
  } while (0)

struct VmmBuf {
  size_t size;
  std::vector<std::pair<size_t, CUmemGenericAllocationHandle>> pieces;  // (size, handle), back to back
};
inline std::map<char*, VmmBuf>& vmm_bufs() {
  static std::map<char*, VmmBuf> m;
  return m;
}

inline char* alloc_kind(size_t n, const std::string& kind) {
  int dev = 0;
  CUDA_OK(cudaGetDevice(&dev));
  char* p = nullptr;
  if (kind == "vmm" || kind == "vmm_multi") {
    CUmemAllocationProp prop{};
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = dev;
    prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
    size_t gran = 0;
    CU_OK(driver_fn<decltype(&cuMemGetAllocationGranularity)>("cuMemGetAllocationGranularity")(
        &gran, &prop, CU_MEM_ALLOC_GRANULARITY_RECOMMENDED));
    size_t size = (n + gran - 1) / gran * gran;
    const size_t page = size_t(20) << 20;
    size_t piece = kind == "vmm" ? size : n > page ? (page + gran - 1) / gran * gran : gran;
    CUdeviceptr va = 0;
    CU_OK(driver_fn<decltype(&cuMemAddressReserve)>("cuMemAddressReserve")(&va, size, gran, 0, 0));
    VmmBuf buf{size, {}};
    for (size_t off = 0; off < size; off += piece) {
      size_t len = std::min(piece, size - off);
      CUmemGenericAllocationHandle h;
      CU_OK(driver_fn<decltype(&cuMemCreate)>("cuMemCreate")(&h, len, &prop, 0));
      CU_OK(driver_fn<decltype(&cuMemMap)>("cuMemMap")(va + off, len, 0, h, 0));
      buf.pieces.emplace_back(len, h);
    }
    int ndev = 0;
    CUDA_OK(cudaGetDeviceCount(&ndev));
    std::vector<CUmemAccessDesc> acc;
    for (int d = 0; d < ndev; ++d) {
      int ok = d == dev;
      if (!ok) CUDA_OK(cudaDeviceCanAccessPeer(&ok, d, dev));
      if (!ok) continue;
      CUmemAccessDesc a{};
      a.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
      a.location.id = d;
      a.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
      acc.push_back(a);
    }
    size_t off = 0;
    for (const auto& pc : buf.pieces) {
      CU_OK(driver_fn<decltype(&cuMemSetAccess)>("cuMemSetAccess")(va + off, pc.first, acc.data(), acc.size()));
      off += pc.first;
    }
    p = reinterpret_cast<char*>(va);
    vmm_bufs()[p] = buf;
  } else if (kind == "pool") {
    static std::map<int, cudaMemPool_t> pools;
    if (!pools.count(dev)) {
      cudaMemPoolProps pp{};
      pp.allocType = cudaMemAllocationTypePinned;
      pp.handleTypes = cudaMemHandleTypePosixFileDescriptor;
      pp.location.type = cudaMemLocationTypeDevice;
      pp.location.id = dev;
      CUDA_OK(cudaMemPoolCreate(&pools[dev], &pp));
    }
    CUDA_OK(cudaMallocFromPoolAsync(reinterpret_cast<void**>(&p), n, pools[dev], cudaStreamLegacy));
    CUDA_OK(cudaStreamSynchronize(cudaStreamLegacy));
  } else if (kind == "async") {
    CUDA_OK(cudaMallocAsync(reinterpret_cast<void**>(&p), n, cudaStreamLegacy));
    CUDA_OK(cudaStreamSynchronize(cudaStreamLegacy));
  } else {
    CUDA_OK(cudaMalloc(reinterpret_cast<void**>(&p), n));
  }
  CUDA_OK(cudaMemset(p, 0x5a, n));
  return p;
}
#endif

// Device (or host) memory filled with a pattern, so nothing reads uninitialised bytes.
// `kind`: the allocator of device memory (alloc_kind), plain cudaMalloc by default.
inline char* alloc(size_t n, bool device, const std::string& kind = "plain") {
#ifdef BENCH_HAVE_CUDA
  if (device) return alloc_kind(n, kind);
#else
  (void)kind;
#endif
  char* p = static_cast<char*>(std::malloc(n));
  std::memset(p, 0x5a, n);
  return p;
}

inline void free_buf(char* p, bool device) {
#ifdef BENCH_HAVE_CUDA
  if (device) {
    auto it = vmm_bufs().find(p);
    if (it == vmm_bufs().end()) {
      cudaFree(p);  // cudaMalloc and pool memory alike
      return;
    }
    CUDA_OK(cudaDeviceSynchronize());
    auto va = reinterpret_cast<CUdeviceptr>(p);
    size_t off = 0;
    for (const auto& pc : it->second.pieces) {
      CU_OK(driver_fn<decltype(&cuMemUnmap)>("cuMemUnmap")(va + off, pc.first));
      off += pc.first;
    }
    CU_OK(driver_fn<decltype(&cuMemAddressFree)>("cuMemAddressFree")(va, it->second.size));
    for (const auto& pc : it->second.pieces) CU_OK(driver_fn<decltype(&cuMemRelease)>("cuMemRelease")(pc.second));
    vmm_bufs().erase(it);
    return;
  }
#endif
  std::free(p);
}

inline char* alloc_pinned(size_t n) {
#ifdef BENCH_HAVE_CUDA
  char* p = nullptr;
  CUDA_OK(cudaMallocHost(reinterpret_cast<void**>(&p), n));
  return p;
#else
  return static_cast<char*>(std::malloc(n));
#endif
}

inline void free_pinned(char* p) {
#ifdef BENCH_HAVE_CUDA
  cudaFreeHost(p);
#else
  std::free(p);
#endif
}

}  // namespace bench
