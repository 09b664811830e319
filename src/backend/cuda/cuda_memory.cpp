// Memory, pointer attributes and IPC of the CUDA backend.
#include <cstring>

#include "backend/cuda/cuda_backend.hpp"
#include "backend/cuda/cuda_check.hpp"
#include "backend/cuda/driver_api.hpp"

namespace gpustripe {

static_assert(sizeof(cudaIpcMemHandle_t) <= Backend::kIpcHandleBytes, "a cudaIpcMemHandle_t must fit the handle");

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

Backend::IpcMemHandle CudaBackend::ipc_export(const void* p) {
  PointerInfo i = pointer_info(p);
  GS_REQUIRE(i.kind == MemoryKind::Device && i.base != 0, GPUSTRIPE_ERR_INVALID_POINTER,
             "ipc_export: %p is not device memory of a cudaMalloc allocation", p);
  DeviceGuard guard(i.device);
  cudaIpcMemHandle_t ch;
  GS_CUDA(cudaIpcGetMemHandle(&ch, reinterpret_cast<void*>(i.base)), i.device);
  IpcMemHandle h;
  std::memcpy(h.bytes, &ch, sizeof ch);
  h.device = i.device;
  h.size = i.size;
  h.buffer_id = i.buffer_id;
  return h;
}

void* CudaBackend::ipc_open(const IpcMemHandle& h) {
  check_device("ipc_open", "the handle's device", h.device);
  cudaIpcMemHandle_t ch;
  std::memcpy(&ch, h.bytes, sizeof ch);
  DeviceGuard guard(h.device);
  void* p = nullptr;
  GS_CUDA(cudaIpcOpenMemHandle(&p, ch, cudaIpcMemLazyEnablePeerAccess), h.device);
  return p;
}

void CudaBackend::ipc_close(void* base) {
  GS_REQUIRE(base != nullptr, GPUSTRIPE_ERR_INVALID_POINTER, "ipc_close: NULL");
  PointerInfo i = pointer_info(base);
  int dev = i.kind == MemoryKind::Device ? i.device : -1;
  if (dev >= 0) {
    DeviceGuard guard(dev);
    GS_CUDA(cudaIpcCloseMemHandle(base), dev);
  } else {
    GS_CUDA(cudaIpcCloseMemHandle(base), -1);
  }
}

}  // namespace gpustripe
