// The few CUDA driver API calls the backend needs (pointer attributes that the
// runtime does not report: buffer id, allocation range, IPC capabilities; the VMM
// calls of IPC for cuMemCreate memory). They are looked up at run
// time through cudaGetDriverEntryPointByVersion instead of linking libcuda: the
// library then loads on machines without the NVIDIA driver (CI, the emulated
// backend), where linking libcuda.so.1 would make it fail to load at all.
#pragma once
#include <cstddef>
#include <cstdint>

namespace gpustripe {

// The driver function `name` of the CUDA 12.0 ABI (which every CUDA 12+ driver serves), or
// nullptr where the driver lacks it; never throws, leaves no CUDA error behind.
void* driver_entry_point(const char* name) noexcept;

struct DriverPointerAttributes {
  bool known = false;     // the driver knows the pointer (device, pinned or managed memory)
  bool device = false;    // device memory (not host)
  bool managed = false;
  int device_ordinal = -1;
  uintptr_t base = 0;
  size_t size = 0;
  uint64_t buffer_id = 0;
  // IPC: whether cudaIpcGetMemHandle takes it, the CUmemAllocationHandleType bits it may be
  // exported as (VMM and pool memory), and its pool (cudaMallocAsync memory; null otherwise).
  bool legacy_ipc = false;
  uint64_t allowed_handle_types = 0;
  void* mempool = nullptr;
  bool ipc_attributes_known = false;  // the driver answered the three above
};

// One driver call for all attributes; never throws (unknown pointers give known == false).
DriverPointerAttributes driver_pointer_attributes(const void* p) noexcept;

// The VMM calls (cuMem*) as plain function pointers, looked up once; null members where the
// driver lacks them. Signatures are those of cuda.h (CUDA 12.0 ABI); kept as void* here so
// this header needs no cuda.h.
struct DriverVmm {
  void* mem_create = nullptr;                 // cuMemCreate
  void* mem_release = nullptr;                // cuMemRelease
  void* mem_address_reserve = nullptr;        // cuMemAddressReserve
  void* mem_address_free = nullptr;           // cuMemAddressFree
  void* mem_map = nullptr;                    // cuMemMap
  void* mem_unmap = nullptr;                  // cuMemUnmap
  void* mem_set_access = nullptr;             // cuMemSetAccess
  void* mem_get_granularity = nullptr;        // cuMemGetAllocationGranularity
  void* mem_retain_handle = nullptr;          // cuMemRetainAllocationHandle
  void* mem_export = nullptr;                 // cuMemExportToShareableHandle
  void* mem_import = nullptr;                 // cuMemImportFromShareableHandle
  void* mem_get_address_range = nullptr;      // cuMemGetAddressRange (v2)
  void* mem_get_properties = nullptr;         // cuMemGetAllocationPropertiesFromHandle
  bool complete() const;
};
const DriverVmm& driver_vmm() noexcept;

}  // namespace gpustripe
