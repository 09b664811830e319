// IPC of the CUDA backend, for each kind of device memory programs bring:
//   cudaMalloc                  cudaIpcGetMemHandle / cudaIpcOpenMemHandle (Legacy handles)
//   cuMemCreate, POSIX-fd types cuMemRetainAllocationHandle -> cuMemExportToShareableHandle (fd);
//                               the importer: cuMemImportFromShareableHandle, cuMemAddressReserve,
//                               cuMemMap, cuMemSetAccess (VmmFd handles)
//   pool with POSIX-fd handles  cudaMemPoolExportToShareableHandle (fd, once per importer and
//                               pool) + cudaMemPoolExportPointer (64 bytes in the handle);
//                               the importer: cudaMemPoolImportFromShareableHandle (kept per
//                               exporter and pool), cudaMemPoolImportPointer (PoolFd handles)
//   the default pool, VMM without handle types, fabric-only VMM: no handle (ERR_NOT_SUPPORTED;
//                               the p2p layer streams such buffers). Fabric handles need an IMEX
//                               channel, which single-node machines do not run: not used.
// The VMM calls come through driver entry points (driver_api.hpp), not by linking libcuda.
#include <cuda.h>
#include <unistd.h>

#include <cerrno>
#include <algorithm>
#include <cstring>
#include <vector>

#include "backend/cuda/cuda_backend.hpp"
#include "backend/cuda/cuda_check.hpp"
#include "backend/cuda/driver_api.hpp"
#include "common/log.hpp"

namespace gpustripe {
namespace {

static_assert(sizeof(cudaIpcMemHandle_t) <= Backend::kIpcHandleBytes, "a cudaIpcMemHandle_t must fit the handle");

// Layout of IpcMemHandle::bytes for the fd kinds: magic, exporter pid, pool export data.
constexpr char kVmmMagic[8] = "gscuvmm";
constexpr char kPoolMagic[8] = "gscupol";
constexpr size_t kPidOffset = 8;
constexpr size_t kPoolDataOffset = 16;
static_assert(kPoolDataOffset + sizeof(cudaMemPoolPtrExportData) <= Backend::kIpcHandleBytes,
              "pool export data must fit the handle");

using MemCreateFn = CUresult (*)(CUmemGenericAllocationHandle*, size_t, const CUmemAllocationProp*, unsigned long long);
using MemReleaseFn = CUresult (*)(CUmemGenericAllocationHandle);
using AddressReserveFn = CUresult (*)(CUdeviceptr*, size_t, size_t, CUdeviceptr, unsigned long long);
using AddressFreeFn = CUresult (*)(CUdeviceptr, size_t);
using MapFn = CUresult (*)(CUdeviceptr, size_t, size_t, CUmemGenericAllocationHandle, unsigned long long);
using UnmapFn = CUresult (*)(CUdeviceptr, size_t);
using SetAccessFn = CUresult (*)(CUdeviceptr, size_t, const CUmemAccessDesc*, size_t);
using GranularityFn = CUresult (*)(size_t*, const CUmemAllocationProp*, CUmemAllocationGranularity_flags);
using RetainFn = CUresult (*)(CUmemGenericAllocationHandle*, void*);
using ExportFn = CUresult (*)(void*, CUmemGenericAllocationHandle, CUmemAllocationHandleType, unsigned long long);
using ImportFn = CUresult (*)(CUmemGenericAllocationHandle*, void*, CUmemAllocationHandleType);
using AddressRangeFn = CUresult (*)(CUdeviceptr*, size_t*, CUdeviceptr);
using PropsFn = CUresult (*)(CUmemAllocationProp*, CUmemGenericAllocationHandle);
using ErrorNameFn = CUresult (*)(CUresult, const char**);

// The driver calls (cuMem*) need a current context. DeviceGuard leaves the device alone when it
// is current already, and in a process whose runtime has not started, device 0 is "current"
// with no context: cuMemGetAddressRange then fails with CUDA_ERROR_INVALID_CONTEXT.
// cudaSetDevice starts the primary context and makes it current (CUDA 12+).
void context_current(int dev) { GS_CUDA(cudaSetDevice(dev), dev); }

template <typename Fn>
Fn fn(void* p) {
  return reinterpret_cast<Fn>(p);
}

const DriverVmm& vmm_api(const char* call) {
  const DriverVmm& v = driver_vmm();
  GS_REQUIRE(v.complete(), GPUSTRIPE_ERR_NOT_SUPPORTED, "%s: the driver lacks the VMM calls (cuMem*)", call);
  return v;
}

[[noreturn]] void throw_driver_error(CUresult r, const char* call, int dev) {
  static ErrorNameFn name_fn = reinterpret_cast<ErrorNameFn>(driver_entry_point("cuGetErrorName"));
  const char* name = nullptr;
  if (name_fn) name_fn(r, &name);
  GS_THROW(r == CUDA_ERROR_OUT_OF_MEMORY ? GPUSTRIPE_ERR_NO_MEMORY : GPUSTRIPE_ERR_CUDA, "%s on GPU %d: %s (%d)", call,
           dev, name ? name : "CUDA driver error", static_cast<int>(r));
}

#define GS_CU(call, dev)                                                     \
  do {                                                                       \
    CUresult gs_r_ = (call);                                                 \
    if (gs_r_ != CUDA_SUCCESS) throw_driver_error(gs_r_, #call, (dev));      \
  } while (0)

CUmemAllocationProp vmm_prop(int dev) {
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = dev;
  prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
  return prop;
}

int32_t handle_pid(const Backend::IpcMemHandle& h) {
  int32_t pid = 0;
  std::memcpy(&pid, h.bytes + kPidOffset, sizeof pid);
  return pid;
}

}  // namespace

// ---------------------------------------------------------------- VMM mappings

void CudaBackend::vmm_grant_access(uintptr_t va, size_t size, int owner) {
  const DriverVmm& v = vmm_api("cuMemSetAccess");
  DeviceGuard guard(owner);
  context_current(owner);
  std::vector<CUmemAccessDesc> acc;
  for (int d = 0; d < device_count_; ++d) {
    if (d != owner && !can_access_peer(d, owner)) continue;
    CUmemAccessDesc a{};
    a.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    a.location.id = d;
    a.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    acc.push_back(a);
  }
  GS_CU(fn<SetAccessFn>(v.mem_set_access)(static_cast<CUdeviceptr>(va), size, acc.data(), acc.size()), owner);
}

void* CudaBackend::vmm_map(int dev, size_t size, const std::vector<VmmPiece>& pieces, bool imported) {
  const DriverVmm& v = vmm_api("VMM map");
  DeviceGuard guard(dev);
  context_current(dev);
  CUmemAllocationProp prop = vmm_prop(dev);
  size_t gran = 0;
  GS_CU(fn<GranularityFn>(v.mem_get_granularity)(&gran, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM), dev);
  CUdeviceptr va = 0;
  GS_CU(fn<AddressReserveFn>(v.mem_address_reserve)(&va, size, gran, 0, 0), dev);
  size_t mapped = 0;
  try {
    for (const VmmPiece& pc : pieces) {
      CUresult r = fn<MapFn>(v.mem_map)(va + pc.offset, pc.size, 0, static_cast<CUmemGenericAllocationHandle>(pc.handle), 0);
      if (r != CUDA_SUCCESS) throw_driver_error(r, "cuMemMap", dev);
      ++mapped;
      // Per allocation: an access descriptor covers mapped allocations, one each here.
      vmm_grant_access(static_cast<uintptr_t>(va + pc.offset), pc.size, dev);
    }
  } catch (...) {
    for (size_t i = 0; i < mapped; ++i) fn<UnmapFn>(v.mem_unmap)(va + pieces[i].offset, pieces[i].size);
    fn<AddressFreeFn>(v.mem_address_free)(va, size);
    throw;
  }
  std::lock_guard<std::mutex> lock(mu_);
  vmm_[static_cast<uintptr_t>(va)] = VmmMapping{size, pieces, dev, imported};
  return reinterpret_cast<void*>(va);
}

void CudaBackend::vmm_unmap(uintptr_t va, const VmmMapping& m) {
  const DriverVmm& v = vmm_api("VMM unmap");
  // As cudaFree does: no copy still in flight may touch the memory (any GPU may have one).
  for (int d = 0; d < device_count_; ++d) {
    DeviceGuard guard(d);
    GS_CUDA(cudaDeviceSynchronize(), d);
  }
  CUdeviceptr p = static_cast<CUdeviceptr>(va);
  DeviceGuard guard(m.device);
  context_current(m.device);
  for (const VmmPiece& pc : m.pieces) GS_CU(fn<UnmapFn>(v.mem_unmap)(p + pc.offset, pc.size), m.device);
  GS_CU(fn<AddressFreeFn>(v.mem_address_free)(p, m.size), m.device);
  for (const VmmPiece& pc : m.pieces)
    GS_CU(fn<MemReleaseFn>(v.mem_release)(static_cast<CUmemGenericAllocationHandle>(pc.handle)), m.device);
}

void CudaBackend::remap_piece(void* p) {
  const DriverVmm& v = vmm_api("remap_piece");
  const uintptr_t u = reinterpret_cast<uintptr_t>(p);
  std::unique_lock<std::mutex> lock(mu_);
  auto it = vmm_.upper_bound(u);
  GS_REQUIRE(it != vmm_.begin(), GPUSTRIPE_ERR_INVALID_POINTER, "remap_piece: %p is not VMM memory made here", p);
  --it;
  VmmMapping& m = it->second;
  VmmPiece* piece = nullptr;
  for (VmmPiece& pc : m.pieces)
    if (it->first + pc.offset == u) piece = &pc;
  GS_REQUIRE(piece && !m.imported && m.pieces.size() > 1, GPUSTRIPE_ERR_INVALID_POINTER,
             "remap_piece: %p is not the start of a piece of vmm_multi memory made here", p);
  const int dev = m.device;
  lock.unlock();
  for (int d = 0; d < device_count_; ++d) {  // nothing in flight may touch the old piece
    DeviceGuard guard(d);
    GS_CUDA(cudaDeviceSynchronize(), d);
  }
  DeviceGuard guard(dev);
  context_current(dev);
  CUmemAllocationProp prop = vmm_prop(dev);
  CUmemGenericAllocationHandle h = 0;
  GS_CU(fn<MemCreateFn>(v.mem_create)(&h, piece->size, &prop, 0), dev);
  GS_CU(fn<UnmapFn>(v.mem_unmap)(static_cast<CUdeviceptr>(u), piece->size), dev);
  GS_CU(fn<MemReleaseFn>(v.mem_release)(static_cast<CUmemGenericAllocationHandle>(piece->handle)), dev);
  piece->handle = static_cast<unsigned long long>(h);  // held by the mapping from here on, mapped or not
  GS_CU(fn<MapFn>(v.mem_map)(static_cast<CUdeviceptr>(u), piece->size, 0, h, 0), dev);
  vmm_grant_access(u, piece->size, dev);
}

void* CudaBackend::fd_pool(int dev) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = fd_pools_.find(dev);
  if (it != fd_pools_.end()) return it->second;
  cudaMemPoolProps props{};
  props.allocType = cudaMemAllocationTypePinned;
  props.handleTypes = cudaMemHandleTypePosixFileDescriptor;
  props.location.type = cudaMemLocationTypeDevice;
  props.location.id = dev;
  cudaMemPool_t pool = nullptr;
  GS_CUDA(cudaMemPoolCreate(&pool, &props), dev);
  fd_pools_[dev] = pool;
  return pool;
}

bool CudaBackend::pool_exportable(void* pool, int dev) {
  return pool_fd(pool, dev) >= 0;
}

int CudaBackend::pool_fd(void* pool, int dev) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = pool_fds_.find(pool);
    if (it != pool_fds_.end()) return it->second;
  }
  // Exported once per pool and kept open, the sequence the driver accepts (the pool shared
  // first, its pointers after: bench/probes/ipc_vmm_probe.cu): the pointer attributes need not list a pool's
  // handle types, and the pool is asked itself.
  int fd = -1;
  DeviceGuard guard(dev);
  cudaError_t err = cudaMemPoolExportToShareableHandle(&fd, static_cast<cudaMemPool_t>(pool),
                                                       cudaMemHandleTypePosixFileDescriptor, 0);
  if (err != cudaSuccess) {
    cudaGetLastError();
    fd = -1;
  }
  std::lock_guard<std::mutex> lock(mu_);
  auto it = pool_fds_.find(pool);
  if (it != pool_fds_.end()) {  // another thread was first
    if (fd >= 0) close(fd);
    return it->second;
  }
  pool_fds_[pool] = fd;
  return fd;
}

void* CudaBackend::alloc_device_as(int dev, size_t bytes, DeviceAlloc how) {
  check_device("alloc_device_as", "dev", dev);
  GS_REQUIRE(bytes > 0, GPUSTRIPE_ERR_INVALID_SIZE, "alloc_device_as: 0 bytes on GPU %d", dev);
  switch (how) {
    case DeviceAlloc::Plain: return alloc_device(dev, bytes);
    case DeviceAlloc::VmmFd:
    case DeviceAlloc::VmmMulti: {
      const DriverVmm& v = vmm_api("alloc_device_as(vmm)");
      CUmemAllocationProp prop = vmm_prop(dev);
      size_t gran = 0;
      GS_CU(fn<GranularityFn>(v.mem_get_granularity)(&gran, &prop, CU_MEM_ALLOC_GRANULARITY_RECOMMENDED), dev);
      const size_t size = (bytes + gran - 1) / gran * gran;
      const size_t piece = how == DeviceAlloc::VmmMulti ? vmm_multi_piece(bytes, gran) : size;
      DeviceGuard guard(dev);
      context_current(dev);
      std::vector<VmmPiece> pieces;
      try {
        for (size_t off = 0; off < size; off += piece) {
          VmmPiece pc{off, std::min(piece, size - off), 0};
          CUmemGenericAllocationHandle h = 0;
          GS_CU(fn<MemCreateFn>(v.mem_create)(&h, pc.size, &prop, 0), dev);
          pc.handle = static_cast<unsigned long long>(h);
          pieces.push_back(pc);
        }
        return vmm_map(dev, size, pieces, false);
      } catch (...) {
        for (const VmmPiece& pc : pieces) fn<MemReleaseFn>(v.mem_release)(static_cast<CUmemGenericAllocationHandle>(pc.handle));
        throw;
      }
    }
    case DeviceAlloc::PoolFd: {
      cudaMemPool_t pool = static_cast<cudaMemPool_t>(fd_pool(dev));
      DeviceGuard guard(dev);
      cudaStream_t s = nullptr;
      GS_CUDA(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), dev);
      void* p = nullptr;
      cudaError_t err = cudaMallocFromPoolAsync(&p, bytes, pool, s);
      if (err == cudaSuccess) err = cudaStreamSynchronize(s);
      cudaStreamDestroy(s);
      if (err != cudaSuccess) throw_cuda_error(err, "cudaMallocFromPoolAsync", dev);
      return p;
    }
    case DeviceAlloc::NotShareable: {
      DeviceGuard guard(dev);
      void* p = nullptr;
      GS_CUDA(cudaMallocAsync(&p, bytes, cudaStreamLegacy), dev);  // the device's default pool
      GS_CUDA(cudaStreamSynchronize(cudaStreamLegacy), dev);
      return p;
    }
  }
  GS_THROW(GPUSTRIPE_ERR_INVALID_ARGUMENT, "alloc_device_as: unknown kind");
}

// ---------------------------------------------------------------- export

Backend::IpcMemHandle CudaBackend::ipc_export(const void* p) {
  DriverPointerAttributes a = driver_pointer_attributes(p);
  GS_REQUIRE(a.known && (a.device || a.managed) && a.base != 0, GPUSTRIPE_ERR_INVALID_POINTER,
             "ipc_export: %p is not device memory", p);
  const int dev = a.device_ordinal;
  IpcMemHandle h;
  h.device = dev;
  h.buffer_id = a.buffer_id;
  const int32_t pid = static_cast<int32_t>(getpid());
  const bool posix_fd = (a.allowed_handle_types & CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR) != 0;
  if (a.ipc_attributes_known && !a.legacy_ipc && a.mempool) {
    // cudaMemPoolExportPointer shares an allocation of an "already shared" pool: the pool
    // must have been exported once (every pointer export fails with cudaErrorInvalidValue
    // before it, and works after it).
    GS_REQUIRE(pool_exportable(a.mempool, dev), GPUSTRIPE_ERR_NOT_SUPPORTED,
               "ipc_export: %p is memory of a cudaMallocAsync pool without POSIX-fd handles (the device's default "
               "pool?): no IPC handle", p);
    h.kind = IpcKind::PoolFd;
    h.base = a.base;
    h.size = a.size;
    h.share_id = reinterpret_cast<uintptr_t>(a.mempool);
    std::memcpy(h.bytes, kPoolMagic, sizeof kPoolMagic);
    std::memcpy(h.bytes + kPidOffset, &pid, sizeof pid);
    cudaMemPoolPtrExportData data;
    DeviceGuard guard(dev);
    // The export names an allocation by its start. The range attributes may give the pool's
    // range rather than the allocation's: then the buffer's own pointer is tried as the start.
    cudaError_t err = cudaMemPoolExportPointer(&data, reinterpret_cast<void*>(a.base));
    if (err != cudaSuccess && reinterpret_cast<uintptr_t>(p) != a.base) {
      cudaGetLastError();
      err = cudaMemPoolExportPointer(&data, const_cast<void*>(p));
      if (err == cudaSuccess) {
        h.size = a.base + a.size - reinterpret_cast<uintptr_t>(p);  // at most this much follows it
        h.base = reinterpret_cast<uintptr_t>(p);
      }
    }
    if (err != cudaSuccess) {
      cudaGetLastError();
      GS_THROW(GPUSTRIPE_ERR_NOT_SUPPORTED, "ipc_export: cudaMemPoolExportPointer(%p) on GPU %d: %s: no IPC handle for "
               "this pool buffer (not the start of its allocation?)", p, dev, cudaGetErrorName(err));
    }
    std::memcpy(h.bytes + kPoolDataOffset, &data, sizeof data);
    return h;
  }
  if (a.ipc_attributes_known && !a.legacy_ipc) {  // VMM memory (cuMemCreate + cuMemMap)
    GS_REQUIRE(posix_fd, GPUSTRIPE_ERR_NOT_SUPPORTED,
               "ipc_export: %p is VMM memory created without POSIX-fd handles (%s): no IPC handle", p,
               (a.allowed_handle_types & CU_MEM_HANDLE_TYPE_FABRIC)
                   ? "fabric handles only, which need an IMEX channel this node does not run"
                   : "no shareable handle type");
    const DriverVmm& v = vmm_api("ipc_export");
    DeviceGuard guard(dev);
    context_current(dev);
    CUdeviceptr base = 0;
    size_t size = 0;
    // The allocation mapped at p, not the reservation around it (pointer attributes give that).
    GS_CU(fn<AddressRangeFn>(v.mem_get_address_range)(&base, &size, reinterpret_cast<CUdeviceptr>(p)), dev);
    h.kind = IpcKind::VmmFd;
    h.base = static_cast<uint64_t>(base);
    h.size = size;
    h.share_id = a.buffer_id;
    std::memcpy(h.bytes, kVmmMagic, sizeof kVmmMagic);
    std::memcpy(h.bytes + kPidOffset, &pid, sizeof pid);
    return h;
  }
  DeviceGuard guard(dev);
  cudaIpcMemHandle_t ch;
  cudaError_t err = cudaIpcGetMemHandle(&ch, reinterpret_cast<void*>(a.base));
  if (err != cudaSuccess) {
    cudaGetLastError();
    GS_THROW(GPUSTRIPE_ERR_NOT_SUPPORTED, "ipc_export: cudaIpcGetMemHandle(%p) on GPU %d: %s: no IPC handle", p, dev,
             cudaGetErrorName(err));
  }
  std::memcpy(h.bytes, &ch, sizeof ch);
  h.base = a.base;
  h.size = a.size;
  return h;
}

int CudaBackend::ipc_export_fd(const IpcMemHandle& h) {
  GS_REQUIRE(h.kind != IpcKind::Legacy, GPUSTRIPE_ERR_INVALID_ARGUMENT, "ipc_export_fd: a legacy handle has no descriptor");
  GS_REQUIRE(handle_pid(h) == static_cast<int32_t>(getpid()), GPUSTRIPE_ERR_INVALID_ARGUMENT,
             "ipc_export_fd: the handle was exported by another process");
  if (h.kind == IpcKind::PoolFd) {
    int kept = pool_fd(reinterpret_cast<void*>(static_cast<uintptr_t>(h.share_id)), h.device);
    GS_REQUIRE(kept >= 0, GPUSTRIPE_ERR_NOT_SUPPORTED, "ipc_export_fd: the pool of buffer %llu does not export",
               static_cast<unsigned long long>(h.buffer_id));
    int fd = dup(kept);
    GS_REQUIRE(fd >= 0, GPUSTRIPE_ERR_IO, "ipc_export_fd: dup: %s", strerror(errno));
    return fd;
  }
  // The memory at h.base must still be the allocation exported (a freed and reallocated
  // address has a new buffer id): never hand out a descriptor of other memory.
  DriverPointerAttributes a = driver_pointer_attributes(reinterpret_cast<const void*>(h.base));
  GS_REQUIRE(a.known && a.buffer_id == h.buffer_id, GPUSTRIPE_ERR_INVALID_POINTER,
             "ipc_export_fd: buffer %llu at 0x%llx is gone (freed since it was exported)",
             static_cast<unsigned long long>(h.buffer_id), static_cast<unsigned long long>(h.base));
  const DriverVmm& v = vmm_api("ipc_export_fd");
  DeviceGuard guard(h.device);
  context_current(h.device);
  CUmemGenericAllocationHandle ah = 0;
  GS_CU(fn<RetainFn>(v.mem_retain_handle)(&ah, reinterpret_cast<void*>(h.base)), h.device);
  int fd = -1;
  CUresult r = fn<ExportFn>(v.mem_export)(&fd, ah, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0);
  fn<MemReleaseFn>(v.mem_release)(ah);  // the retain's reference; the descriptor holds its own
  if (r != CUDA_SUCCESS) throw_driver_error(r, "cuMemExportToShareableHandle", h.device);
  return fd;
}

// ---------------------------------------------------------------- import

void CudaBackend::enable_peer_access_to(int owner) {
  // What cudaIpcMemLazyEnablePeerAccess does for legacy handles: cudaMemcpyPeerAsync between
  // two GPUs whose contexts have no peer access stages the copy through host memory (VMM
  // memory read from GPU 1 at 5 GB/s instead of ~390 on H200), whatever
  // cuMemSetAccess granted.
  for (int d = 0; d < device_count_; ++d)
    if (d != owner && can_access_peer(d, owner)) enable_peer_access(d, owner);
}

bool CudaBackend::ipc_open_needs_fd(const IpcMemHandle& h) {
  if (h.kind != IpcKind::PoolFd) return h.kind == IpcKind::VmmFd;
  std::lock_guard<std::mutex> lock(mu_);
  return imported_pools_.count({handle_pid(h), h.share_id}) == 0;
}

void* CudaBackend::ipc_open(const IpcMemHandle& h, int fd, int reader) {
  check_device("ipc_open", "the handle's device", h.device);
  if (reader >= 0) check_device("ipc_open", "the reader", reader);
  if (h.kind == IpcKind::Legacy) {
    cudaIpcMemHandle_t ch;
    std::memcpy(&ch, h.bytes, sizeof ch);
    // The mapping lives in the context current here: the reader's, so that its kernels can
    // load and store through it (the driver enables its peer access to the owner), as NCCL
    // and UCX open theirs.
    const int in = reader >= 0 ? reader : h.device;
    DeviceGuard guard(in);
    void* p = nullptr;
    GS_CUDA(cudaIpcOpenMemHandle(&p, ch, cudaIpcMemLazyEnablePeerAccess), in);
    std::lock_guard<std::mutex> lock(mu_);
    auto& o = legacy_opens_[reinterpret_cast<uintptr_t>(p)];
    o.first = in;
    ++o.second;
    return p;
  }
  GS_REQUIRE(std::memcmp(h.bytes, h.kind == IpcKind::VmmFd ? kVmmMagic : kPoolMagic, sizeof kVmmMagic) == 0,
             GPUSTRIPE_ERR_INVALID_ARGUMENT, "ipc_open: not a CUDA %s handle", ipc_kind_name(h.kind));
  GS_REQUIRE(handle_pid(h) != static_cast<int32_t>(getpid()), GPUSTRIPE_ERR_INVALID_ARGUMENT,
             "ipc_open: the handle was exported by this process");
  if (h.kind == IpcKind::VmmFd) {
    GS_REQUIRE(fd >= 0, GPUSTRIPE_ERR_INVALID_ARGUMENT, "ipc_open: a vmm-fd handle needs the exporter's descriptor");
    const DriverVmm& v = vmm_api("ipc_open");
    DeviceGuard guard(h.device);
    context_current(h.device);
    CUmemGenericAllocationHandle ah = 0;
    GS_CU(fn<ImportFn>(v.mem_import)(&ah, reinterpret_cast<void*>(static_cast<uintptr_t>(fd)),
                                     CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR),
          h.device);
    void* p = nullptr;
    try {
      p = vmm_map(h.device, h.size, {VmmPiece{0, h.size, static_cast<unsigned long long>(ah)}}, true);
    } catch (...) {
      fn<MemReleaseFn>(v.mem_release)(ah);
      throw;
    }
    enable_peer_access_to(h.device);
    return p;
  }
  // PoolFd: the pool once per exporter, then the pointer.
  const std::pair<int32_t, uint64_t> key{handle_pid(h), h.share_id};
  cudaMemPool_t pool = nullptr;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = imported_pools_.find(key);
    if (it != imported_pools_.end()) pool = static_cast<cudaMemPool_t>(it->second);
  }
  DeviceGuard guard(h.device);
  if (!pool) {
    GS_REQUIRE(fd >= 0, GPUSTRIPE_ERR_INVALID_ARGUMENT, "ipc_open: the first pool-fd handle of a pool needs its descriptor");
    GS_CUDA(cudaMemPoolImportFromShareableHandle(&pool, reinterpret_cast<void*>(static_cast<uintptr_t>(fd)),
                                                 cudaMemHandleTypePosixFileDescriptor, 0),
            h.device);
    for (int d = 0; d < device_count_; ++d) {
      if (d != h.device && !can_access_peer(d, h.device)) continue;
      cudaMemAccessDesc a{};
      a.location.type = cudaMemLocationTypeDevice;
      a.location.id = d;
      a.flags = cudaMemAccessFlagsProtReadWrite;
      cudaError_t err = cudaMemPoolSetAccess(pool, &a, 1);
      if (err != cudaSuccess) {
        cudaGetLastError();
        GS_LOG_DEBUG(Subsys::Backend, "imported pool of pid %d: access for GPU %d: %s", key.first, d,
                     cudaGetErrorName(err));
      }
    }
    std::lock_guard<std::mutex> lock(mu_);
    imported_pools_[key] = pool;
  }
  cudaMemPoolPtrExportData data;
  std::memcpy(&data, h.bytes + kPoolDataOffset, sizeof data);
  void* p = nullptr;
  GS_CUDA(cudaMemPoolImportPointer(&p, pool, &data), h.device);
  {
    std::lock_guard<std::mutex> lock(mu_);
    pool_imports_.insert(reinterpret_cast<uintptr_t>(p));
  }
  enable_peer_access_to(h.device);
  return p;
}

void* CudaBackend::ipc_open_pieces(const IpcMemHandle& h, const std::vector<IpcPiece>& pieces,
                                   const std::vector<int>& fds) {
  check_device("ipc_open_pieces", "the handle's device", h.device);
  GS_REQUIRE(std::memcmp(h.bytes, kVmmMagic, sizeof kVmmMagic) == 0, GPUSTRIPE_ERR_INVALID_ARGUMENT,
             "ipc_open_pieces: not a CUDA vmm handle");
  GS_REQUIRE(handle_pid(h) != static_cast<int32_t>(getpid()), GPUSTRIPE_ERR_INVALID_ARGUMENT,
             "ipc_open_pieces: the handle was exported by this process");
  ipc_check_pieces(h, pieces);
  GS_REQUIRE(fds.size() == pieces.size(), GPUSTRIPE_ERR_INVALID_ARGUMENT, "ipc_open_pieces: %zu descriptors for %zu pieces",
             fds.size(), pieces.size());
  const DriverVmm& v = vmm_api("ipc_open_pieces");
  DeviceGuard guard(h.device);
  context_current(h.device);
  std::vector<VmmPiece> mine;
  void* p = nullptr;
  try {
    for (size_t i = 0; i < pieces.size(); ++i) {
      CUmemGenericAllocationHandle ah = 0;
      GS_CU(fn<ImportFn>(v.mem_import)(&ah, reinterpret_cast<void*>(static_cast<uintptr_t>(fds[i])),
                                       CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR),
            h.device);
      mine.push_back(VmmPiece{pieces[i].offset, pieces[i].size, static_cast<unsigned long long>(ah)});
    }
    p = vmm_map(h.device, h.size, mine, true);
  } catch (...) {
    for (const VmmPiece& pc : mine) fn<MemReleaseFn>(v.mem_release)(static_cast<CUmemGenericAllocationHandle>(pc.handle));
    throw;
  }
  enable_peer_access_to(h.device);
  return p;
}

void CudaBackend::ipc_close(void* base) {
  GS_REQUIRE(base != nullptr, GPUSTRIPE_ERR_INVALID_POINTER, "ipc_close: NULL");
  const uintptr_t u = reinterpret_cast<uintptr_t>(base);
  std::unique_lock<std::mutex> lock(mu_);
  auto v = vmm_.find(u);
  if (v != vmm_.end()) {
    GS_REQUIRE(v->second.imported, GPUSTRIPE_ERR_INVALID_POINTER, "ipc_close: %p is VMM memory of this process", base);
    VmmMapping m = v->second;
    vmm_.erase(v);
    lock.unlock();
    vmm_unmap(u, m);
    return;
  }
  if (pool_imports_.erase(u)) {
    lock.unlock();
    int dev = driver_pointer_attributes(base).device_ordinal;
    DeviceGuard guard(dev >= 0 ? dev : 0);
    GS_CUDA(cudaFree(base), dev);  // an imported pool pointer is released with cudaFree
    return;
  }
  int dev = -1;
  auto l = legacy_opens_.find(u);
  if (l != legacy_opens_.end()) {
    dev = l->second.first;
    if (--l->second.second == 0) legacy_opens_.erase(l);
  }
  lock.unlock();
  if (dev < 0) {
    PointerInfo i = pointer_info(base);
    dev = i.kind == MemoryKind::Device ? i.device : -1;
  }
  if (dev >= 0) {
    DeviceGuard guard(dev);
    GS_CUDA(cudaIpcCloseMemHandle(base), dev);
  } else {
    GS_CUDA(cudaIpcCloseMemHandle(base), -1);
  }
}

}  // namespace gpustripe
