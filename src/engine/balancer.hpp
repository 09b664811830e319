// Closed-loop host share (GPUSTRIPE_BALANCE): for a transfer repeated with the same size and
// a plan of a direct path plus one staged path, the engine times both paths on the GPU
// (events) and moves bytes between them until the staged path finishes a little before the
// direct one. The planner's split rests on calibrated rates; on 4x H200 the best split sits
// at a cliff (0.1 pp of host share past the point where the host path finishes last costs
// ~0.8% at 256 MB, short of it ~0.1%) and the planner landed 0.2-0.4 pp off either way,
// depending on the calibration run. The measurement does not depend on it.
//
// Not thread-safe: the engine calls it under its mutex.
#pragma once
#include <cstdint>
#include <deque>
#include <map>
#include <tuple>
#include <vector>

#include "backend/backend.hpp"
#include "model/plan.hpp"

namespace gpustripe {

struct BalanceProbe {
  // start/direct_done on the caller's stream around the direct path; staged_start/staged_done
  // on the lane around the staged part (its own start: a split run as one graph starts both
  // paths together, and that is what the settled split runs as).
  EventHandle start = nullptr, direct_done = nullptr, staged_start = nullptr, staged_done = nullptr;
  int dev = 0;            // the GPU the events belong to (the transfer's source)
  int64_t shift = 0;      // the shift the probed call ran with
  bool counts = false;    // a replayed call (enqueued ones start their staged path late)
};

struct BalanceOptions {
  double margin = 0.005;    // the staged path aims to finish this fraction of the direct path's time earlier
  double deadband = 0.005;  // |error| below this fraction of the direct path's time: no step
  int samples = 2;          // calls measured at one shift before a step is considered
  double max_step = 0.25;   // a step moves at most this fraction of the staged path's bytes
  // A reading within the deadband settles the split: it then runs as one graph again, unmeasured
  // (measuring costs a few microseconds a call: the staged part is a graph of its own, joined
  // back through an event).
  double settled_band = 4;
};

class Balancer {
 public:
  Balancer(Backend& backend, BalanceOptions opt) : backend_(backend), opt_(opt) {}
  ~Balancer();
  Balancer(const Balancer&) = delete;
  Balancer& operator=(const Balancer&) = delete;

  // Whether `plan` is one the balancer steers: a direct path first, one staged path after it.
  static bool eligible(const Plan& plan);
  // Reads the finished probes of this transfer, steps its shift where they ask for it, and
  // returns the plan with the current shift applied (bytes moved from the direct path to the
  // staged one; negative: back). Every path keeps at least one page per chunk.
  Plan steer(const Plan& plan);
  // Timing events for one call of `plan` (as returned by steer), on its source GPU. The
  // caller records start/direct_done/staged_done and sets `counts`.
  BalanceProbe& probe(const Plan& plan);

  int64_t shift(int src, int dst, uint64_t bytes) const;
  // Whether calls of this transfer are still measured (false once its split has settled).
  bool measuring(const Plan& plan) const;
  // `plan` with the current shift applied, nothing read or stepped (for reports).
  Plan peek(const Plan& plan) const;
  uint64_t steps() const { return steps_; }
  uint64_t samples() const { return samples_; }

 private:
  using Key = std::tuple<int, int, uint64_t>;
  struct State {
    int64_t shift = 0;
    std::deque<BalanceProbe> pending;
    int n = 0;
    double sum_direct = 0, sum_staged = 0;
    bool settled = false;
  };
  void collect(const Plan& planned, State& s);
  static Plan apply(const Plan& plan, int64_t& shift);
  EventHandle take_event(int dev);
  void give_back(const BalanceProbe& p);

  Backend& backend_;
  BalanceOptions opt_;
  std::map<Key, State> states_;
  std::map<int, std::vector<EventHandle>> free_events_;  // per device, timing events
  uint64_t steps_ = 0, samples_ = 0;
};

}  // namespace gpustripe
