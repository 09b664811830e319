#include "p2p/backlog.hpp"

#include <algorithm>
#include <cmath>

#include "common/error.hpp"

namespace gpustripe::p2p {
namespace {
constexpr uint64_t kPage = 4096;
}  // namespace

CopyQueues::Queue CopyQueues::queued(int src, int dst) const {
  auto it = queues_.find({src, dst});
  return it == queues_.end() ? Queue{} : it->second;
}

void CopyQueues::add(int src, int dst, uint64_t bytes) {
  Queue& q = queues_[{src, dst}];
  q.bytes += bytes;
  ++q.copies;
}

void CopyQueues::remove(int src, int dst, uint64_t bytes) {
  auto it = queues_.find({src, dst});
  GS_REQUIRE(it != queues_.end() && it->second.copies > 0 && it->second.bytes >= bytes, GPUSTRIPE_ERR_INTERNAL, "copy queue %d -> %d: removing a copy of %llu bytes that was never added", src,
             dst, static_cast<unsigned long long>(bytes));
  Queue& q = it->second;
  q.bytes -= bytes;
  if (--q.copies == 0) queues_.erase(it);
}

uint64_t host_staged_bytes(const Plan& plan) {
  uint64_t n = 0;
  for (const PathPlan& p : plan.paths)
    if (p.kind == PathKind::HostStaged) n += p.bytes;
  return n;
}

bool direct_plus_host(const Plan& plan) {
  return plan.paths.size() == 2 && plan.paths[0].kind == PathKind::Direct &&
         plan.paths[1].kind == PathKind::HostStaged;
}

Plan queued_split(const Plan& alone, double host_share, uint64_t chunk_bytes) {
  GS_REQUIRE(direct_plus_host(alone), GPUSTRIPE_ERR_INTERNAL, "queued_split: plan %s is not a direct plus a host path",
             alone.describe().c_str());
  const PathPlan& d = alone.paths[0];
  const PathPlan& h = alone.paths[1];
  const uint64_t chunk = std::max<uint64_t>(
      kPage, chunk_bytes > 0 ? chunk_bytes : h.bytes / static_cast<uint64_t>(std::max(1, h.chunks)));
  const uint64_t d_min = static_cast<uint64_t>(std::max(1, d.chunks)) * kPage;
  if (alone.bytes < d_min + kPage || !(host_share > 0)) return alone;
  uint64_t host = static_cast<uint64_t>(std::min(host_share, 1.0) * static_cast<double>(alone.bytes)) / kPage * kPage;
  host = std::clamp<uint64_t>(host, kPage, (alone.bytes - d_min) / kPage * kPage);
  const int chunks = static_cast<int>(std::clamp<uint64_t>(
      static_cast<uint64_t>(std::llround(static_cast<double>(host) / static_cast<double>(chunk))), 1, host / kPage));
  Plan out = alone;
  out.paths[0].bytes = alone.bytes - host;
  out.paths[0].predicted_us = 0;
  PathPlan& hp = out.paths[1];
  hp.offset = out.paths[0].bytes;
  hp.bytes = host;
  hp.chunks = chunks;
  hp.taper_head = hp.taper_tail = 0;
  hp.predicted_us = 0;
  out.predicted_us = 0;
  out.bottleneck.clear();
  return out;
}

}  // namespace gpustripe::p2p
