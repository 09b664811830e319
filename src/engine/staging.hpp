// Staging memory: one pinned host area per CPU socket and one scratch area per staging
// GPU, allocated on first use, bounded by GPUSTRIPE_HOST_STAGING / GPUSTRIPE_GPU_STAGING,
// and reused by every later transfer. Space is handed out as a ring; each range remembers
// the relay that last read it, and a new first hop into the range waits for that relay
// (so a staging slot is overwritten only after its previous chunk has left it).
#pragma once
#include <cstdint>
#include <map>
#include <vector>

#include "backend/backend.hpp"
#include "engine/lanes.hpp"

namespace gpustripe {

class StagingUses {
 public:
  // Marks of the relays that last read any byte of [begin, end).
  std::vector<LaneMark> overlapping(uint64_t begin, uint64_t end) const;
  // [begin, end) is now read by the relay that `m` marks the end of.
  void set(uint64_t begin, uint64_t end, const LaneMark& m);
  void clear() { uses_.clear(); }
  size_t ranges() const { return uses_.size(); }

 private:
  struct Use {
    uint64_t end;
    LaneMark mark;
  };
  std::map<uint64_t, Use> uses_;  // by begin; ranges never overlap
};

class StagingArea {
 public:
  StagingArea(Backend& backend, int device, uint64_t capacity);  // device kHostDevice: pinned host
  ~StagingArea();
  StagingArea(const StagingArea&) = delete;
  StagingArea& operator=(const StagingArea&) = delete;

  char* base() const { return base_; }
  uint64_t capacity() const { return capacity_; }
  int device() const { return device_; }
  // Next ring range of `bytes` (<= capacity) after `cursor`, wrapping to the start when the
  // end is reached; advances the cursor. Transfers share the area's own cursor (cursor());
  // a captured graph's schedule starts its own from 0.
  uint64_t take(uint64_t bytes, uint64_t& cursor) const;
  uint64_t& cursor() { return cursor_; }
  StagingUses& uses() { return uses_; }

 private:
  Backend& backend_;
  int device_;
  uint64_t capacity_;
  char* base_ = nullptr;
  uint64_t cursor_ = 0;
  StagingUses uses_;
};

}  // namespace gpustripe
