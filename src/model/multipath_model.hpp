// The contention-aware multi-path Hockney model (docs/model.md has the derivation).
// A path of k hops carrying m bytes in c chunks at a steady rate x finishes after
//   T = sum_j (alpha_j + eps_j) + (c - 1) max_j (alpha_j + eps_j) + (m / x) (c + k - 1) / c
// (eps_j: the staging synchronization before relay hop j >= 2). The rate x is the path's
// max-min fair share of every resource its hops load, among all paths running at once
// (of this transfer and of concurrent ones), recomputed as paths finish. A plan then costs
// the engine's schedule on top (schedule_cost.hpp): fork/join waits on the GPUs, and no
// less than the host's time to enqueue it.
#pragma once
#include <string>
#include <vector>

#include "model/fluid.hpp"
#include "model/hop.hpp"
#include "model/node_resources.hpp"
#include "model/plan.hpp"
#include "model/schedule_cost.hpp"

namespace gpustripe {

struct Topology;

// One path of a transfer in a concurrent mix.
struct PathLoad {
  const Route* route = nullptr;
  uint64_t bytes = 0;
  int chunks = 1;
  bool replayed = false;  // part of a plan the engine replays as a graph (schedule_cost.hpp)
  int taper_head = 0, taper_tail = 0;  // tapered chunks (PathPlan, chunk_edges)
};

struct PathTiming {
  double finish_us = 0;
  std::string limited_by;  // resource or per-hop rate that bounded the path while all ran
};

class MultipathModel {
 public:
  MultipathModel(const Topology& topo, ModelParams params, EngineShape shape = EngineShape::from_settings());

  const NodeResources& node() const { return node_; }
  const ModelParams& params() const { return params_; }
  const EngineShape& engine_shape() const { return shape_; }

  // Fixed cost of a route in c chunks: sum_j (alpha_j + eps_j) + (c - 1) max_j (alpha_j + eps_j).
  double overhead_us(const Route& r, int chunks, bool replayed = false) const;
  // (c + k - 1) / c: pipeline fill and drain, in units of the path's bytes at its rate.
  static double fill_factor(const Route& r, int chunks);
  // Bytes the last hop of a pipelined path still moves once its first hop is done, as the
  // fluid simulation drains them at the last hop's rate (its chunks as chunk_edges cuts
  // them, tapered or not). Two hops at rates x1, x2 with chunks s_1..s_c finish at
  // max_k (s_1 + .. + s_k) / x1 + (s_k + .. + s_c) / x2 (a two-stage flow shop); the path
  // moves its m bytes at min(x1, x2) and then drains the rest at x2. Equal chunks at equal
  // rates: one chunk, m / c, the fill of the closed form.
  double drain_bytes(const PathLoad& p) const;
  // The per-hop rate bound of a route in bytes/us (slowest hop's beta), 0 when none.
  double rate_cap(const Route& r) const;
  Flow flow(const PathLoad& p) const;
  std::vector<double> capacities() const;  // bytes/us per resource

  // Rates (bytes/us) of paths that all run at once, and what bounds each.
  FairShare rates(const std::vector<PathLoad>& paths) const;
  // Finish time of each path when all start together.
  std::vector<PathTiming> simulate(const std::vector<PathLoad>& paths) const;

  // Route of a planned path; throws ERR_INVALID_ARGUMENT when the node has no such path.
  const Route& route_of(int src, int dst, const PathPlan& p) const;
  // Fills predicted_us of each path and plan, and the bottleneck, for plans that run at once.
  void predict(std::vector<Plan>& plans) const;
  void predict(Plan& plan) const;
  // The schedule's share of a plan's time (schedule_cost.hpp): `plan.predicted_us` holds its
  // slowest path's finish; adds the fork/join waits of a multi-path schedule and raises the
  // time to the host's enqueue time where that is longer (bottleneck "host_enqueue").
  void apply_schedule(Plan& plan) const;
  // The cross-stream waits a path of this kind pays in a plan that is not one plain copy:
  // forked from the caller's stream and joined back when it runs on an engine lane.
  double fork_join_us(PathKind kind, bool replayed) const;
  // One cross-stream wait on the GPUs: epsilon, or inside a replayed graph its dependency.
  double wait_us(bool replayed) const;
  // The caller's wait on a lane that is already done (join_us, or graph_join_us in a replay).
  double join_us(bool replayed) const;
  // Spread of a lane's finish between repetitions (lane_jitter_us, or graph_lane_jitter_us in a replay).
  double lane_jitter_us(bool replayed) const;
  // The host's time to enqueue the plan: the engine's checks and backend calls x call_us()
  // (and a graph launch where it replays one).
  double enqueue_us(const Plan& plan) const;
  // Host time per call of the engine's schedule: calibrated with the engine's bookkeeping
  // (engine_call_us), else the backend call alone (host_call_us).
  double call_us() const;

 private:
  std::string limit_name(const Route& r, int limited_by) const;
  NodeResources node_;
  ModelParams params_;
  EngineShape shape_;
  std::vector<double> capacity_;  // bytes/us
};

// Nominal parameters of a node: per-hop startups of the order a copy-engine call costs
// (documented in docs/model.md), bandwidths left to the topology's resources.
ModelParams nominal_params(const Topology& topo);

}  // namespace gpustripe
