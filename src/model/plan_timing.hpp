// Times forced plans with the engine (Engine::copy_with_plan): what `gpustripe
// model-check` compares the model's predictions with and `gpustripe tune` searches over.
#pragma once
#include <cstdint>
#include <vector>

#include "backend/backend.hpp"
#include "model/plan.hpp"

namespace gpustripe {

class Context;
class Engine;
struct Topology;

struct PlanTiming {
  double median_us = 0, min_us = 0, max_us = 0;
  int reps = 0;
  // Host wall clock of one copy_with_plan call (median): the time the host takes to
  // enqueue the plan, which bounds back-to-back repetitions where it exceeds the GPUs'.
  double host_us = 0;
  // Every timed repetition (us) in the order they ran: the median hides a two-mode
  // distribution, which model-check's rows keep visible.
  std::vector<double> samples_us;
};

// How repetitions are timed: back to back (as `gpustripe bench` times its rows: each
// repetition's event pair queued behind the previous one), or isolated (the stream drained
// before each: from an idle GPU, the host's issue order shows in the time).
enum class PlanTimingMode { BackToBack, Isolated };

// The engine's host cost per backend call: the wall clock of Engine::copy_with_plan of a
// plan, issued back to back as model-check and bench issue them (8 untimed, then the median
// of 40), over the calls the model counts for it (schedule_calls and the pointer checks).
struct EngineCallCost {
  double per_call_us = 0;
  double per_plan_us = 0;
  int calls = 0;
};
EngineCallCost engine_call_cost(Engine& engine, Backend& b, const Plan& plan, void* dst, const void* src,
                                StreamHandle stream);
// The plan calibrate and model-check time for it: 4 MB 0 -> 1 in the size class where the
// host can be the bottleneck (direct; a path staged through each other GPU with peer access
// both ways; a host path; every staged path in one piece). The calls alone cost
// host_call_us; the engine adds its bookkeeping between them (lanes, staging ranges and
// their marks, the plan's checks).
Plan engine_probe_plan(Backend& b, const Topology& topo);

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
  // Runs `plans` at once, each on its own stream of its source GPU (two transfers from one
  // GPU do not queue behind each other), forked from and joined back into the first plan's
  // source stream, and times the whole as time() times one plan (back to back): a
  // repetition ends when the last transfer does. Each transfer reads and writes its own
  // range of its GPUs' buffers, so the sends of one GPU together, and its receives
  // together, must fit max_bytes (ERR_INVALID_SIZE otherwise). host_us: one repetition's.
  PlanTiming time_concurrent(const std::vector<Plan>& plans, int warmup, int reps);
  // The engine's host cost per call in this process (engine_call_cost of engine_probe_plan
  // with the context's engine): what calibrate measured as engine_call_us, again now. The
  // host's speed varied up to 1.9x between processes on one 4x H200 lease (session 3, r1:
  // 1.69 us per call in calibrate's process, 0.9-1.0 in others; a plain copy's call 3.8 us
  // against 2.0). Per call 0 when the engine would replay the probe as a graph.
  EngineCallCost host_cost();
  uint64_t max_bytes() const { return max_; }

 private:
  Context& ctx_;
  uint64_t max_;
  std::vector<void*> src_, dst_;
  std::vector<StreamHandle> streams_;
};

}  // namespace gpustripe
