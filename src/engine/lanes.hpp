// The engine's own streams: one set per link direction, so that at most one transfer
// runs per direction of a link at a time (the seeds' integrity rule) and consecutive
// messages on a direction keep their order. Each stream carries a ring of events:
// an event re-recorded later on the same stream only marks later work, so waiting
// on a recycled event is conservative, never early.
#pragma once
#include <map>
#include <memory>
#include <tuple>
#include <vector>

#include "backend/backend.hpp"

namespace gpustripe {

// A point in a lane's work that other work can wait for.
struct LaneMark {
  StreamHandle stream = nullptr;
  EventHandle event = nullptr;
};

class Lane {
 public:
  Lane(Backend& backend, int device);
  // A lane over a stream someone else owns (a caller's): never synchronized or destroyed here,
  // its events made at its first mark.
  Lane(Backend& backend, int device, StreamHandle borrowed);
  ~Lane();
  Lane(const Lane&) = delete;
  Lane& operator=(const Lane&) = delete;

  StreamHandle stream() const { return stream_; }
  int device() const { return device_; }
  // Marks the work enqueued so far. Valid to wait on until kRing later marks of this lane
  // (after that it marks later work of this lane: still safe, only stricter).
  // `capturing`: a mark inside a graph capture, from a ring of its own. CUDA refuses to wait
  // outside a capture on an event last recorded inside one, so marks kept across transfers
  // (staging uses) must never be recycled by a capture.
  LaneMark mark(bool capturing = false);
  void wait(const LaneMark& m) {
    if (m.event) backend_.wait_event(stream_, m.event);
  }

 private:
  static constexpr size_t kRing = 64;
  Backend& backend_;
  int device_;
  StreamHandle stream_ = nullptr;
  bool owned_ = true;
  std::vector<EventHandle> ring_, capture_ring_;
  size_t next_ = 0, capture_next_ = 0;
  void make_rings();
};

// Lanes keyed by (from, to, index): from/to are GPU indices or kHostDevice. The lane's
// stream lives on the GPU that drives the copy (the source for peer and D2H copies,
// the destination for H2D copies).
class LaneSet {
 public:
  explicit LaneSet(Backend& backend) : backend_(backend) {}
  Lane& get(int from, int to, int index = 0);
  // Every lane created so far (for tests and statistics).
  size_t size() const { return lanes_.size(); }

 private:
  Backend& backend_;
  std::map<std::tuple<int, int, int>, std::unique_ptr<Lane>> lanes_;
};

}  // namespace gpustripe
