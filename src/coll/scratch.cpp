#include "coll/scratch.hpp"

#include <algorithm>

#include "common/log.hpp"

namespace gpustripe::coll {

Scratch::Scratch(Backend& backend, std::vector<int> devices)
    : backend_(backend), devices_(std::move(devices)), dev_(devices_.size()) {}

Scratch::~Scratch() {
  release_retired();
  for (Buf& b : dev_)
    if (b.p && !b.external) backend_.free_device(b.p);
  if (host_.p && !host_.external) backend_.free_pinned(host_.p);
}

namespace {
// Grow geometrically so a sweep of sizes reallocates a few times, not every call.
size_t grown(size_t have, size_t need) {
  size_t n = have ? have : (1u << 20);
  while (n < need) n *= 2;
  return n;
}
}  // namespace

char* Scratch::device(int rank, size_t bytes) {
  Buf& b = dev_.at(rank);
  if (b.external) {
    b.wanted = std::max(b.wanted, bytes);
    return b.p;
  }
  if (b.bytes < bytes) {
    if (b.p) retired_.emplace_back(devices_[rank], b.p);
    size_t n = grown(b.bytes, bytes);
    b.p = static_cast<char*>(backend_.alloc_device(devices_[rank], n));
    b.bytes = n;
    ++generation_;
    GS_LOG_DEBUG(Subsys::Coll, "scratch on device %d grown to %zu bytes", devices_[rank], n);
  }
  return b.p;
}

char* Scratch::host(size_t bytes) {
  if (host_.external) {
    host_.wanted = std::max(host_.wanted, bytes);
    return host_.p;
  }
  if (host_.bytes < bytes) {
    if (host_.p) retired_.emplace_back(kHostDevice, host_.p);
    size_t n = grown(host_.bytes, bytes);
    host_.p = static_cast<char*>(backend_.alloc_pinned(n));
    host_.bytes = n;
    ++generation_;
    GS_LOG_DEBUG(Subsys::Coll, "pinned host scratch grown to %zu bytes", n);
  }
  return host_.p;
}

void Scratch::set_external(int rank, char* p, size_t bytes) {
  Buf& b = dev_.at(rank);
  if (b.p && !b.external) retired_.emplace_back(devices_[rank], b.p);
  b.p = p;
  b.bytes = bytes;
  b.external = true;
  b.wanted = 0;
  ++generation_;
}

void Scratch::set_external_host(char* p, size_t bytes) {
  if (host_.p && !host_.external) retired_.emplace_back(kHostDevice, host_.p);
  host_ = Buf{p, bytes, true, 0};
  ++generation_;
}

void Scratch::release_retired() {
  for (auto& [dev, p] : retired_) {
    if (dev == kHostDevice) backend_.free_pinned(p);
    else backend_.free_device(p);
  }
  retired_.clear();
}

}  // namespace gpustripe::coll
