#include "engine/staging.hpp"

#include "common/error.hpp"

namespace gpustripe {

std::vector<LaneMark> StagingUses::overlapping(uint64_t begin, uint64_t end) const {
  std::vector<LaneMark> out;
  auto it = uses_.upper_bound(begin);
  if (it != uses_.begin()) --it;
  for (; it != uses_.end() && it->first < end; ++it)
    if (it->second.end > begin) out.push_back(it->second.mark);
  return out;
}

void StagingUses::set(uint64_t begin, uint64_t end, const LaneMark& m) {
  // Cut the ranges that straddle the edges, drop those inside, insert the new one.
  auto it = uses_.upper_bound(begin);
  if (it != uses_.begin()) {
    auto prev = std::prev(it);
    if (prev->second.end > begin) {
      Use tail = prev->second;
      prev->second.end = begin;
      if (tail.end > end) uses_[end] = tail;
      if (prev->first == begin) uses_.erase(prev);
    }
  }
  it = uses_.lower_bound(begin);
  while (it != uses_.end() && it->first < end) {
    if (it->second.end > end) {
      Use tail = it->second;
      uses_.erase(it);
      uses_[end] = tail;
      break;
    }
    it = uses_.erase(it);
  }
  uses_[begin] = Use{end, m};
}

StagingArea::StagingArea(Backend& backend, int device, uint64_t capacity)
    : backend_(backend), device_(device), capacity_(capacity) {
  base_ = static_cast<char*>(device == kHostDevice ? backend_.alloc_pinned(capacity) : backend_.alloc_device(device, capacity));
  GS_REQUIRE(base_ != nullptr, GPUSTRIPE_ERR_NO_MEMORY, "staging area of %llu bytes on %s", 
             static_cast<unsigned long long>(capacity), device == kHostDevice ? "host" : "GPU");
}

StagingArea::~StagingArea() {
  if (device_ == kHostDevice) backend_.free_pinned(base_);
  else backend_.free_device(base_);
}

uint64_t StagingArea::take(uint64_t bytes, uint64_t& cursor) const {
  GS_REQUIRE(bytes <= capacity_, GPUSTRIPE_ERR_INTERNAL, "staging piece of %llu bytes exceeds the area (%llu)",
             static_cast<unsigned long long>(bytes), static_cast<unsigned long long>(capacity_));
  if (cursor + bytes > capacity_) cursor = 0;
  uint64_t at = cursor;
  cursor += (bytes + 255) / 256 * 256;  // keep pieces 256-byte aligned for the copy engines
  return at;
}

}  // namespace gpustripe
