// Checks of a copy's arguments before anything is enqueued: every failure names the
// argument and what is wrong with it, and leaves memory untouched.
#pragma once
#include <cstdint>

#include "backend/backend.hpp"

namespace gpustripe {

// ERR_INVALID_DEVICE for a device outside [0, device_count).
void check_device(const char* what, int dev, int device_count);
// ERR_INVALID_POINTER: null, host (also pinned) memory, memory of another GPU;
// ERR_INVALID_SIZE: [p, p + bytes) runs past the end of p's allocation. Returns what the
// backend said of p.
PointerInfo check_device_range(Backend& backend, const char* what, const void* p, int dev, uint64_t bytes);
// The allocations a checked copy reads and writes (default: not looked up, bytes == 0).
struct CopyAllocations {
  PointerInfo src, dst;
};
// Everything a copy needs; bytes == 0 checks only the devices (nothing will be touched).
// ERR_INVALID_ARGUMENT when src and dst ranges overlap.
CopyAllocations check_copy(Backend& backend, void* dst, int dst_dev, const void* src, int src_dev, uint64_t bytes);

}  // namespace gpustripe
