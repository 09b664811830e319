// A rank's own GPU-to-GPU copies in flight, per GPU pair, and the split of a copy that
// joins such a queue (a window of messages to one peer).
//
// Why: a message planned alone gives its host-staged path the share that fills and
// drains that path's pipeline within the message (256 MB on 4x H200: 9.5%), and the
// direct path, carrying the rest, sets the rate (394 / 0.905 = ~435 GB/s). Queued behind
// other copies on the same lanes, the host path streams from one message into the next:
// its fill and drain are paid once per queue, so it can carry the share of the queue
// planned as one transfer (1 GB: 11%, the two-path bound of ~445 GB/s).
#pragma once
#include <cstdint>
#include <map>
#include <utility>

#include "model/plan.hpp"

namespace gpustripe::p2p {

class CopyQueues {
 public:
  struct Queue {
    uint64_t bytes = 0;  // of the copies in flight
    int copies = 0;
  };
  Queue queued(int src, int dst) const;
  void add(int src, int dst, uint64_t bytes);
  // Throws ERR_INTERNAL when more is removed than was added.
  void remove(int src, int dst, uint64_t bytes);

 private:
  std::map<std::pair<int, int>, Queue> queues_;
};

// Bytes of `plan` on host-staged paths.
uint64_t host_staged_bytes(const Plan& plan);
// A direct path followed by one host-staged path: the plans queued_split reshapes.
bool direct_plus_host(const Plan& plan);

// `alone` (direct_plus_host) with `host_share` of its bytes on the host path instead, in
// chunks of about the size `alone`'s host path has (the engine's per-chunk cost and the
// queue's final drain stay as planned), untapered (the pipeline is already full), page
// aligned, each path keeping a page per chunk. Throws ERR_INTERNAL for another plan shape.
// `chunk` > 0: host chunks of about that size instead.
Plan queued_split(const Plan& alone, double host_share, uint64_t chunk = 0);

}  // namespace gpustripe::p2p
