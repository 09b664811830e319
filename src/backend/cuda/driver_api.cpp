#include "backend/cuda/driver_api.hpp"

#include <cuda.h>
#include <cuda_runtime_api.h>

#include <initializer_list>
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
  unsigned int legacy = 0;
  unsigned long long allowed = 0;
  void* pool = nullptr;
  CUpointer_attribute attrs[] = {CU_POINTER_ATTRIBUTE_MEMORY_TYPE,  CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL,
                                 CU_POINTER_ATTRIBUTE_IS_MANAGED,   CU_POINTER_ATTRIBUTE_BUFFER_ID,
                                 CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, CU_POINTER_ATTRIBUTE_RANGE_SIZE,
                                 CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE,
                                 CU_POINTER_ATTRIBUTE_ALLOWED_HANDLE_TYPES, CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE};
  void* data[] = {&memory_type, &ordinal, &managed, &buffer_id, &start, &size, &legacy, &allowed, &pool};
  // Unlike cuPointerGetAttribute, the plural call succeeds for pointers the driver does
  // not know and leaves zeros, so plain host memory costs no error to clear. Should a
  // driver refuse the IPC attributes or the range for some kind of memory, ask again
  // without them.
  const unsigned int all = sizeof attrs / sizeof attrs[0];
  CUdeviceptr ptr = reinterpret_cast<CUdeviceptr>(p);
  bool ipc_known = true;
  if (fn(all, attrs, data, ptr) != CUDA_SUCCESS) {
    ipc_known = false;
    legacy = 0;
    allowed = 0;
    pool = nullptr;
    if (fn(all - 3, attrs, data, ptr) != CUDA_SUCCESS) {
      start = 0;
      size = 0;
      if (fn(all - 5, attrs, data, ptr) != CUDA_SUCCESS) return out;
    }
  }
  if (memory_type == 0) return out;
  out.known = true;
  out.device = memory_type == CU_MEMORYTYPE_DEVICE;
  out.managed = managed != 0;
  out.device_ordinal = ordinal;
  out.base = static_cast<uintptr_t>(start);
  out.size = size;
  out.buffer_id = buffer_id;
  out.legacy_ipc = legacy != 0;
  out.allowed_handle_types = allowed;
  out.mempool = pool;
  out.ipc_attributes_known = ipc_known;
  return out;
}

bool DriverVmm::complete() const {
  for (void* f : {mem_create, mem_release, mem_address_reserve, mem_address_free, mem_map, mem_unmap, mem_set_access,
                  mem_get_granularity, mem_retain_handle, mem_export, mem_import, mem_get_address_range,
                  mem_get_properties})
    if (!f) return false;
  return true;
}

const DriverVmm& driver_vmm() noexcept {
  static const DriverVmm vmm = [] {
    DriverVmm v;
    v.mem_create = driver_entry_point("cuMemCreate");
    v.mem_release = driver_entry_point("cuMemRelease");
    v.mem_address_reserve = driver_entry_point("cuMemAddressReserve");
    v.mem_address_free = driver_entry_point("cuMemAddressFree");
    v.mem_map = driver_entry_point("cuMemMap");
    v.mem_unmap = driver_entry_point("cuMemUnmap");
    v.mem_set_access = driver_entry_point("cuMemSetAccess");
    v.mem_get_granularity = driver_entry_point("cuMemGetAllocationGranularity");
    v.mem_retain_handle = driver_entry_point("cuMemRetainAllocationHandle");
    v.mem_export = driver_entry_point("cuMemExportToShareableHandle");
    v.mem_import = driver_entry_point("cuMemImportFromShareableHandle");
    v.mem_get_address_range = driver_entry_point("cuMemGetAddressRange");
    v.mem_get_properties = driver_entry_point("cuMemGetAllocationPropertiesFromHandle");
    return v;
  }();
  return vmm;
}

}  // namespace gpustripe
