// The pointer check both backends run before queuing a copy or memset: that
// [p, p+bytes) lies in memory of the device named (kHostDevice: anything but device
// memory, within its pinned allocation if it is one). `info` is the backend's
// pointer_info(p). Throws ERR_INVALID_POINTER naming the call, the address, the
// device and the allocation's bounds.
#pragma once
#include <cstddef>

#include "backend/backend.hpp"

namespace gpustripe {

// Null: ERR_INVALID_POINTER; a range that wraps around the address space: ERR_INVALID_SIZE.
void check_pointer_not_null(const char* call, const char* what, const void* p, size_t bytes);
void check_pointer_range(const char* call, const char* what, const void* p, int dev, size_t bytes,
                         const PointerInfo& info);

}  // namespace gpustripe
