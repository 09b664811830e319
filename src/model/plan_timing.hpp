// Times forced plans with the engine (Engine::copy_with_plan): what `gpustripe
// model-check` compares the model's predictions with and `gpustripe tune` searches over.
#pragma once
#include <cstdint>

#include "backend/backend.hpp"
#include "model/plan.hpp"

namespace gpustripe {

class Context;

struct PlanTiming {
  double median_us = 0, min_us = 0, max_us = 0;
  int reps = 0;
  // Host wall clock of one copy_with_plan call (median): the time the host takes to
  // enqueue the plan, which bounds back-to-back repetitions where it exceeds the GPUs'.
  double host_us = 0;
};

// How repetitions are timed: back to back (as `gpustripe bench` times its rows: each
// repetition's event pair queued behind the previous one), or isolated (the stream drained
// before each: from an idle GPU, the host's issue order shows in the time).
enum class PlanTimingMode { BackToBack, Isolated };

// Source and destination buffers on every GPU, allocated once (up to `max_bytes`) and reused.
class PlanTimer {
 public:
  PlanTimer(Context& ctx, uint64_t max_bytes);
  ~PlanTimer();
  PlanTimer(const PlanTimer&) = delete;
  PlanTimer& operator=(const PlanTimer&) = delete;
  // Runs `plan` warmup + reps times on a stream of plan.src, timed as `gpustripe bench`
  // times its rows (bench/bench.hpp time_back_to_back: repetitions enqueued back to back,
  // an event pair around each on that stream, into which the engine joins every path), so
  // model-check's figures compare with bench p2p's. Throws ERR_INVALID_SIZE when the plan is
  // larger than max_bytes.
  PlanTiming time(const Plan& plan, int warmup, int reps, PlanTimingMode mode = PlanTimingMode::BackToBack);
  uint64_t max_bytes() const { return max_; }

 private:
  Context& ctx_;
  uint64_t max_;
  std::vector<void*> src_, dst_;
  std::vector<StreamHandle> streams_;
};

}  // namespace gpustripe
