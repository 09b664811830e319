#include "backend/pointer_check.hpp"

#include "common/error.hpp"

namespace gpustripe {

void check_pointer_not_null(const char* call, const char* what, const void* p, size_t bytes) {
  GS_REQUIRE(p != nullptr, GPUSTRIPE_ERR_INVALID_POINTER, "%s: %s is NULL (%zu bytes)", call, what, bytes);
  GS_REQUIRE(!range_wraps(p, bytes), GPUSTRIPE_ERR_INVALID_SIZE, "%s: %s %p + %zu bytes wraps around the address space",
             call, what, p, bytes);
}

void check_pointer_range(const char* call, const char* what, const void* p, int dev, size_t bytes,
                         const PointerInfo& info) {
  uintptr_t u = reinterpret_cast<uintptr_t>(p);
  size_t base = static_cast<size_t>(info.base), end = static_cast<size_t>(info.base + info.size);
  // size 0: the backend does not know the bounds (a driver that does not report them).
  bool in_range = info.holds(p, bytes);
  if (dev == kHostDevice) {
    if (info.kind == MemoryKind::Device)
      GS_THROW(GPUSTRIPE_ERR_INVALID_POINTER,
               "%s: %s %p is device memory of GPU %d (allocation [0x%zx, 0x%zx)), not host memory", call, what, p,
               info.device, base, end);
    if (!in_range)
      GS_THROW(GPUSTRIPE_ERR_INVALID_POINTER, "%s: %s range [%p, +%zu) runs past its pinned host allocation [0x%zx, 0x%zx)",
               call, what, p, bytes, base, end);
    return;  // plain host memory: nothing to check it against
  }
  if (info.kind != MemoryKind::Device)
    GS_THROW(GPUSTRIPE_ERR_INVALID_POINTER, "%s: %s %p is not device memory of GPU %d (it is %s)", call, what, p, dev,
             info.kind == MemoryKind::PinnedHost ? "pinned host memory" : "host memory, or not allocated");
  if (info.device != dev)
    GS_THROW(GPUSTRIPE_ERR_INVALID_POINTER, "%s: %s %p is memory of GPU %d (allocation [0x%zx, 0x%zx)), not of GPU %d",
             call, what, p, info.device, base, end, dev);
  if (!in_range)
    GS_THROW(GPUSTRIPE_ERR_INVALID_POINTER, "%s: %s range [%p, +%zu) runs past its allocation on GPU %d [0x%zx, 0x%zx) by %zu bytes",
             call, what, p, bytes, dev, base, end, static_cast<size_t>(u + bytes - end));
}

}  // namespace gpustripe
