// The planner: given a transfer (or a set of transfers that run at once), the plan
// that minimises the finish time on this node. Implementations: the contention-aware
// model (default), a static table from `gpustripe tune`, or a fixed spec
// (GPUSTRIPE_PLAN=model|table|<spec>). Thread-safe; plans are cached by size class.
#pragma once
#include <cstdint>
#include <memory>
#include <vector>

#include "model/plan.hpp"

namespace gpustripe {

struct Topology;

struct TransferSpec {
  int src = 0, dst = 0;
  uint64_t bytes = 0;
};

class Planner {
 public:
  virtual ~Planner() = default;
  // One transfer with the node otherwise idle. Throws ERR_INVALID_DEVICE / ERR_INVALID_SIZE
  // (src == dst, unknown device, zero bytes).
  virtual Plan plan(int src, int dst, uint64_t bytes) = 0;
  // Transfers that run at the same time and share the node's resources; one plan each, same order.
  virtual std::vector<Plan> plan_concurrent(const std::vector<TransferSpec>& transfers) = 0;
  // Predicted finish time of a given plan (any source), alone on the node, in microseconds.
  virtual double predict_us(const Plan& plan) = 0;
};

// The planner GPUSTRIPE_PLAN asks for, over the calibration profile for this node
// (GPUSTRIPE_PROFILE or the user's cache), else the topology's nominal figures (logged).
// `emulated`: the planner is for emulated devices of `topo` (model/profile.hpp).
std::unique_ptr<Planner> make_planner(const Topology& topo, bool emulated = false);

}  // namespace gpustripe
