// The few CUDA driver API calls the backend needs (pointer attributes that the
// runtime does not report: buffer id, allocation range). They are looked up at run
// time through cudaGetDriverEntryPointByVersion instead of linking libcuda: the
// library then loads on machines without the NVIDIA driver (CI, the emulated
// backend), where linking libcuda.so.1 would make it fail to load at all.
#pragma once
#include <cstddef>
#include <cstdint>

namespace gpustripe {

struct DriverPointerAttributes {
  bool known = false;     // the driver knows the pointer (device, pinned or managed memory)
  bool device = false;    // device memory (not host)
  bool managed = false;
  int device_ordinal = -1;
  uintptr_t base = 0;
  size_t size = 0;
  uint64_t buffer_id = 0;
};

// One driver call for all attributes; never throws (unknown pointers give known == false).
DriverPointerAttributes driver_pointer_attributes(const void* p) noexcept;

// The driver function `name` of the CUDA 12.0 ABI (which every CUDA 12+ driver serves), or
// nullptr where the driver lacks it; never throws, leaves no CUDA error behind.
void* driver_entry_point(const char* name) noexcept;

}  // namespace gpustripe
