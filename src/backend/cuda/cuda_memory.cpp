// Memory and pointer attributes of the CUDA backend (IPC and the other allocators: cuda_ipc.cpp).
#include <cuda.h>

#include <cstring>
#include <vector>

#include "backend/cuda/cuda_backend.hpp"
#include "backend/cuda/cuda_check.hpp"
#include "backend/cuda/driver_api.hpp"
#include "common/log.hpp"

namespace gpustripe {

void* CudaBackend::alloc_device(int dev, size_t bytes) {
  check_device("alloc_device", "dev", dev);
  GS_REQUIRE(bytes > 0, GPUSTRIPE_ERR_INVALID_SIZE, "alloc_device: 0 bytes on GPU %d", dev);
  DeviceGuard guard(dev);
  void* p = nullptr;
  cudaError_t err = cudaMalloc(&p, bytes);
  if (err != cudaSuccess) throw_cuda_error(err, format("cudaMalloc(%zu bytes)", bytes).c_str(), dev);
  return p;
}

void CudaBackend::free_device(void* p) {
  if (p == nullptr) return;
  {
    std::unique_lock<std::mutex> lock(mu_);
    auto it = vmm_.find(reinterpret_cast<uintptr_t>(p));
    if (it != vmm_.end()) {
      GS_REQUIRE(!it->second.imported, GPUSTRIPE_ERR_INVALID_POINTER,
                 "free_device: %p was mapped by ipc_open; release it with ipc_close", p);
      VmmMapping m = it->second;
      vmm_.erase(it);
      lock.unlock();
      vmm_unmap(reinterpret_cast<uintptr_t>(p), m);
      return;
    }
  }
  PointerInfo i = pointer_info(p);
  GS_REQUIRE(i.kind == MemoryKind::Device, GPUSTRIPE_ERR_INVALID_POINTER, "free_device: %p is not device memory", p);
  GS_REQUIRE(i.base == 0 || i.base == reinterpret_cast<uintptr_t>(p), GPUSTRIPE_ERR_INVALID_POINTER,
             "free_device: %p is inside the allocation [0x%zx, 0x%zx) of GPU %d, not its start", p,
             static_cast<size_t>(i.base), static_cast<size_t>(i.base + i.size), i.device);
  DeviceGuard guard(i.device);
  GS_CUDA(cudaFree(p), i.device);
}

void* CudaBackend::alloc_pinned(size_t bytes) {
  GS_REQUIRE(bytes > 0, GPUSTRIPE_ERR_INVALID_SIZE, "alloc_pinned: 0 bytes");
  void* p = nullptr;
  // Portable: pinned for every GPU's context, not only the current one's.
  cudaError_t err = cudaHostAlloc(&p, bytes, cudaHostAllocPortable);
  if (err != cudaSuccess) throw_cuda_error(err, format("cudaHostAlloc(%zu bytes)", bytes).c_str(), -1);
  return p;
}

void CudaBackend::free_pinned(void* p) {
  if (p == nullptr) return;
  PointerInfo i = pointer_info(p);
  GS_REQUIRE(i.kind == MemoryKind::PinnedHost && (i.base == 0 || i.base == reinterpret_cast<uintptr_t>(p)),
             GPUSTRIPE_ERR_INVALID_POINTER, "free_pinned: %p is not the start of pinned host memory", p);
  GS_CUDA(cudaFreeHost(p), -1);
}

PointerInfo CudaBackend::pointer_info(const void* p) {
  PointerInfo out;
  DriverPointerAttributes a = driver_pointer_attributes(p);
  if (!a.known) return out;
  // Managed memory is reachable from every GPU; it is reported as device memory of the
  // GPU it is attributed to, the closest the interface comes.
  out.kind = a.device || a.managed ? MemoryKind::Device : MemoryKind::PinnedHost;
  out.device = out.kind == MemoryKind::Device ? a.device_ordinal : kHostDevice;
  out.base = a.base;
  out.size = a.size;
  out.buffer_id = a.buffer_id;
  return out;
}

// Stream flags (the MPI collectives' dependencies between processes): shared host memory
// registered for every context (portable, mapped), written and waited on by the streams
// with the driver's stream memory operations (cuStreamWriteValue32 / cuStreamWaitValue32).
uint32_t* CudaBackend::register_host(void* p, size_t bytes) {
  GS_REQUIRE(p != nullptr && bytes > 0, GPUSTRIPE_ERR_INVALID_ARGUMENT, "register_host: no memory");
  if (driver_entry_point("cuStreamWaitValue32") == nullptr || driver_entry_point("cuStreamWriteValue32") == nullptr)
    return nullptr;
  cudaError_t err = cudaHostRegister(p, bytes, cudaHostRegisterPortable | cudaHostRegisterMapped);
  if (err != cudaSuccess) {
    cudaGetLastError();
    GS_LOG_WARN(Subsys::Backend, "cudaHostRegister(%zu bytes of shared memory): %s: flags stay on the host", bytes,
                cudaGetErrorString(err));
    return nullptr;
  }
  void* d = nullptr;
  GS_CUDA(cudaHostGetDevicePointer(&d, p, 0), -1);
  return static_cast<uint32_t*>(d);
}

void CudaBackend::unregister_host(void* p) {
  if (p) GS_CUDA(cudaHostUnregister(p), -1);
}

namespace {
// CUresult f(CUstream, CUdeviceptr, cuuint32_t, unsigned int) of cuda.h, without cuda.h.
using StreamValue32Fn = int (*)(void*, unsigned long long, uint32_t, unsigned);
constexpr unsigned kWaitGeq = 0x0;       // CU_STREAM_WAIT_VALUE_GEQ: (int32_t)(*addr - value) >= 0
constexpr unsigned kWriteDefault = 0x0;  // CU_STREAM_WRITE_VALUE_DEFAULT: fenced after earlier work
StreamValue32Fn stream_value_fn(const char* name) {
  auto fn = reinterpret_cast<StreamValue32Fn>(driver_entry_point(name));
  GS_REQUIRE(fn != nullptr, GPUSTRIPE_ERR_NOT_SUPPORTED, "the CUDA driver has no %s", name);
  return fn;
}
}  // namespace

void CudaBackend::stream_write_flag(StreamHandle s, uint32_t* flag, uint32_t value) {
  static StreamValue32Fn fn = stream_value_fn("cuStreamWriteValue32");
  const int dev = stream_device(s, "stream_write_flag");
  DeviceGuard guard(dev);
  const int r = fn(s, reinterpret_cast<uintptr_t>(flag), value, kWriteDefault);
  GS_REQUIRE(r == 0, GPUSTRIPE_ERR_CUDA, "cuStreamWriteValue32 on GPU %d: CUDA driver error %d", dev, r);
}

void CudaBackend::stream_wait_flag(StreamHandle s, const uint32_t* flag, uint32_t value) {
  static StreamValue32Fn fn = stream_value_fn("cuStreamWaitValue32");
  const int dev = stream_device(s, "stream_wait_flag");
  DeviceGuard guard(dev);
  const int r = fn(s, reinterpret_cast<uintptr_t>(flag), value, kWaitGeq);
  GS_REQUIRE(r == 0, GPUSTRIPE_ERR_CUDA, "cuStreamWaitValue32 on GPU %d: CUDA driver error %d", dev, r);
}

void CudaBackend::stream_flag_barrier(StreamHandle s, uint32_t* mine, const uint32_t* const* others, size_t n,
                                      uint32_t value) {
  using BatchMemOpFn = CUresult (*)(CUstream, unsigned int, CUstreamBatchMemOpParams*, unsigned int);
  static BatchMemOpFn batch = reinterpret_cast<BatchMemOpFn>(driver_entry_point("cuStreamBatchMemOp"));
  // The driver takes at most 256 operations a batch.
  if (batch && n < 256 && !memop_batch_refused_.load(std::memory_order_relaxed)) {
    std::vector<CUstreamBatchMemOpParams> ops(n + 1);  // zeroed: no flags beyond those set here
    ops[0].writeValue.operation = CU_STREAM_MEM_OP_WRITE_VALUE_32;
    ops[0].writeValue.address = reinterpret_cast<CUdeviceptr>(mine);
    ops[0].writeValue.value = value;
    ops[0].writeValue.flags = CU_STREAM_WRITE_VALUE_DEFAULT;  // after the stream's earlier work, fenced
    for (size_t i = 0; i < n; ++i) {
      CUstreamBatchMemOpParams& w = ops[i + 1];
      w.waitValue.operation = CU_STREAM_MEM_OP_WAIT_VALUE_32;
      w.waitValue.address = reinterpret_cast<CUdeviceptr>(others[i]);
      w.waitValue.value = value;
      w.waitValue.flags = CU_STREAM_WAIT_VALUE_GEQ;
    }
    const int dev = stream_device(s, "stream_flag_barrier");
    DeviceGuard guard(dev);
    const CUresult r = batch(static_cast<CUstream>(s), static_cast<unsigned>(ops.size()), ops.data(), 0);
    if (r == CUDA_SUCCESS) return;
    // Enqueued nothing: the same operations one call each, from now on.
    memop_batch_refused_.store(true, std::memory_order_relaxed);
    GS_LOG_INFO(Subsys::Backend, "cuStreamBatchMemOp on GPU %d: CUDA driver error %d: stream barriers make one call "
                "per flag", dev, static_cast<int>(r));
  }
  Backend::stream_flag_barrier(s, mine, others, n, value);
}

}  // namespace gpustripe
