#include "engine/validate.hpp"

#include "common/error.hpp"

namespace gpustripe {

void check_device(const char* what, int dev, int device_count) {
  GS_REQUIRE(dev >= 0 && dev < device_count, GPUSTRIPE_ERR_INVALID_DEVICE, "%s device %d is not a GPU of this context (0..%d)",
             what, dev, device_count - 1);
}

PointerInfo check_device_range(Backend& backend, const char* what, const void* p, int dev, uint64_t bytes) {
  GS_REQUIRE(p != nullptr, GPUSTRIPE_ERR_INVALID_POINTER, "%s is NULL", what);
  GS_REQUIRE(!range_wraps(p, bytes), GPUSTRIPE_ERR_INVALID_SIZE,
             "%s: %llu bytes at %p wrap around the address space (a negative size converted to unsigned?)", what,
             static_cast<unsigned long long>(bytes), p);
  PointerInfo info = backend.pointer_info(p);
  GS_REQUIRE(info.kind == MemoryKind::Device, GPUSTRIPE_ERR_INVALID_POINTER,
             "%s %p is %s memory; a copy needs device memory of GPU %d", what, p,
             info.kind == MemoryKind::PinnedHost ? "pinned host" : "host", dev);
  GS_REQUIRE(info.device == dev, GPUSTRIPE_ERR_INVALID_POINTER, "%s %p is memory of GPU %d, not of GPU %d", what, p,
             info.device, dev);
  if (!info.holds(p, bytes)) {
    uint64_t offset = reinterpret_cast<uintptr_t>(p) - info.base;
    GS_THROW(GPUSTRIPE_ERR_INVALID_SIZE, "%s range of %llu bytes at offset %llu runs past its allocation of %llu bytes",
             what, static_cast<unsigned long long>(bytes), static_cast<unsigned long long>(offset),
             static_cast<unsigned long long>(info.size));
  }
  return info;
}

CopyAllocations check_copy(Backend& backend, void* dst, int dst_dev, const void* src, int src_dev, uint64_t bytes) {
  int n = backend.device_count();
  check_device("src", src_dev, n);
  check_device("dst", dst_dev, n);
  CopyAllocations a;
  if (bytes == 0) return a;
  a.src = check_device_range(backend, "src", src, src_dev, bytes);
  a.dst = check_device_range(backend, "dst", dst, dst_dev, bytes);
  auto s = reinterpret_cast<uintptr_t>(src), d = reinterpret_cast<uintptr_t>(dst);
  GS_REQUIRE(src_dev != dst_dev || s + bytes <= d || d + bytes <= s, GPUSTRIPE_ERR_INVALID_ARGUMENT,
             "src and dst ranges of %llu bytes overlap on GPU %d", static_cast<unsigned long long>(bytes), src_dev);
  return a;
}

}  // namespace gpustripe
