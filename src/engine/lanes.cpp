#include "engine/lanes.hpp"

namespace gpustripe {

Lane::Lane(Backend& backend, int device) : backend_(backend), device_(device) {
  stream_ = backend_.create_stream(device);
  // All events up front: none is created while a graph capture is under way.
  make_rings();
}

Lane::Lane(Backend& backend, int device, StreamHandle borrowed)
    : backend_(backend), device_(device), stream_(borrowed), owned_(false) {}

void Lane::make_rings() {
  for (size_t i = 0; i < kRing; ++i) ring_.push_back(backend_.create_event(device_, false));
  for (size_t i = 0; i < kRing; ++i) capture_ring_.push_back(backend_.create_event(device_, false));
}

Lane::~Lane() {
  if (owned_) backend_.synchronize_stream(stream_);  // enqueued work may still read staging memory
  for (EventHandle e : ring_) backend_.destroy_event(e);
  for (EventHandle e : capture_ring_) backend_.destroy_event(e);
  if (owned_) backend_.destroy_stream(stream_);
}

LaneMark Lane::mark(bool capturing) {
  if (ring_.empty()) make_rings();
  std::vector<EventHandle>& ring = capturing ? capture_ring_ : ring_;
  size_t& next = capturing ? capture_next_ : next_;
  EventHandle e = ring[next];
  next = (next + 1) % kRing;
  backend_.record_event(e, stream_);
  return {stream_, e};
}

Lane& LaneSet::get(int from, int to, int index) {
  auto key = std::make_tuple(from, to, index);
  auto it = lanes_.find(key);
  if (it != lanes_.end()) return *it->second;
  int device = from != kHostDevice ? from : to;
  auto lane = std::make_unique<Lane>(backend_, device);
  Lane& ref = *lane;
  lanes_.emplace(key, std::move(lane));
  return ref;
}

}  // namespace gpustripe
