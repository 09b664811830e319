#include "backend/cuda/driver_api.hpp"

#include <cuda.h>
#include <cuda_runtime_api.h>

#include <mutex>

namespace gpustripe {
namespace {

using PointerGetAttributesFn = CUresult (*)(unsigned int, CUpointer_attribute*, void**, CUdeviceptr);

PointerGetAttributesFn pointer_get_attributes() {
  static PointerGetAttributesFn fn = reinterpret_cast<PointerGetAttributesFn>(driver_entry_point("cuPointerGetAttributes"));
  return fn;
}

}  // namespace

void* driver_entry_point(const char* name) noexcept {
  void* f = nullptr;
  cudaDriverEntryPointQueryResult found{};
  if (cudaGetDriverEntryPointByVersion(name, &f, 12000, cudaEnableDefault, &found) != cudaSuccess ||
      found != cudaDriverEntryPointSuccess) {
    cudaGetLastError();
    f = nullptr;
  }
  return f;
}

DriverPointerAttributes driver_pointer_attributes(const void* p) noexcept {
  DriverPointerAttributes out;
  PointerGetAttributesFn fn = pointer_get_attributes();
  if (!fn || !p) return out;
  unsigned int memory_type = 0;
  int ordinal = -1;
  unsigned int managed = 0;
  CUdeviceptr start = 0;
  size_t size = 0;
  unsigned long long buffer_id = 0;
  CUpointer_attribute attrs[] = {CU_POINTER_ATTRIBUTE_MEMORY_TYPE,  CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL,
                                 CU_POINTER_ATTRIBUTE_IS_MANAGED,   CU_POINTER_ATTRIBUTE_BUFFER_ID,
                                 CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, CU_POINTER_ATTRIBUTE_RANGE_SIZE};
  void* data[] = {&memory_type, &ordinal, &managed, &buffer_id, &start, &size};
  // Unlike cuPointerGetAttribute, the plural call succeeds for pointers the driver does
  // not know and leaves zeros, so plain host memory costs no error to clear. Should a
  // driver refuse the range for some kind of memory, ask again without it.
  const unsigned int all = sizeof attrs / sizeof attrs[0];
  CUdeviceptr ptr = reinterpret_cast<CUdeviceptr>(p);
  if (fn(all, attrs, data, ptr) != CUDA_SUCCESS) {
    start = 0;
    size = 0;
    if (fn(all - 2, attrs, data, ptr) != CUDA_SUCCESS) return out;
  }
  if (memory_type == 0) return out;
  out.known = true;
  out.device = memory_type == CU_MEMORYTYPE_DEVICE;
  out.managed = managed != 0;
  out.device_ordinal = ordinal;
  out.base = static_cast<uintptr_t>(start);
  out.size = size;
  out.buffer_id = buffer_id;
  return out;
}

}  // namespace gpustripe
