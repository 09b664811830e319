// The kinds of copies a path is made of, and the per-kind Hockney parameters
// (startup alpha, bandwidth beta) that the model charges for each hop.
#pragma once
#include <array>
#include <map>
#include <string>

namespace gpustripe {

enum class HopKind { Peer, D2H, H2D, Local, Kernel, Count };
constexpr int kHopKinds = static_cast<int>(HopKind::Count);

const char* hop_kind_name(HopKind kind);  // "peer", "d2h", "h2d", "local", "kernel"
// Throws ERR_PROFILE for an unknown name.
HopKind hop_kind_from_name(const std::string& name);

struct HopParams {
  double alpha_us = 0;   // startup per copy call (per chunk)
  double beta_gbps = 0;  // bandwidth of one copy of this kind alone; 0 = unbounded (resources bound it)
};

// Everything the model needs beyond the topology's structure. Nominal figures come
// from the topology file (nominal_params); a calibration profile replaces them.
struct ModelParams {
  std::array<HopParams, kHopKinds> hops{};
  // Cross-stream event wait on the GPU: the relay of a chunk waits on an event of its first
  // hop; a multi-path schedule forks the caller's stream into lanes and joins them back.
  double epsilon_us = 0;
  // CPU time of one backend call of the engine's schedule (a copy, an event record or an
  // event wait, with its device switch): a plan cannot run faster than the host enqueues
  // it (model/schedule_cost.hpp). Measured by calibration; nominal: the order of one
  // CUDA runtime call.
  double host_call_us = 1.5;
  // CPU time per backend call of the engine itself (Engine::copy_with_plan of a multi-path
  // plan, per call schedule_cost.hpp counts): the calls plus the engine's bookkeeping between
  // them (lanes, staging ranges and marks, checks). Measured by calibration; 0: host_call_us.
  double engine_call_us = 0.0;
  // Host time of replaying a captured schedule (CUDA graphs): one launch,
  // plus a share per copy node of the graph. Measured by calibration where the backend has
  // graphs; nominal: the order of a graph launch.
  double graph_launch_us = 3.0;
  double graph_node_us = 0.1;
  // On the GPUs, a replayed schedule: how much later its peer copy (a captured UVA copy
  // node) finishes than the same copy enqueued, and a cross-device dependency inside the
  // graph (a relay waiting for its first hop, a join), in place of epsilon. Measured by
  // calibration; nominal: none, epsilon.
  double graph_start_us = 0.0;
  double graph_epsilon_us = -1.0;  // < 0: epsilon_us
  // On the caller's stream, a join's wait whose lane is long done (its event complete):
  // the caller still spends this much on it before its next wait or its own next work.
  // The caller waits on its lanes one after the other, so these add up behind its direct
  // copy. Measured by calibration (a peer copy joined with 3 done lanes, less alone); in a
  // replayed graph, the same structure replayed (< 0: join_us). Nominal: none.
  double join_us = 0.0;
  double graph_join_us = -1.0;
  // Spread (standard deviation, us) of a lane's finish from one repetition to the next: a
  // 1 MB chunk relayed GPU 0 -> host -> GPU 1 with its fork and join (three cross-stream
  // wake-ups, as an engine lane has), repeated back to back; the standard deviation of the
  // middle 90% of the repetitions. Plans wait for their last lane (model/straggler.hpp). In a replayed graph, the
  // same relay replayed (< 0: lane_jitter_us). Measured by calibration; nominal: none.
  double lane_jitter_us = 0.0;
  double graph_lane_jitter_us = -1.0;
  // Capacity of a shared resource by name (e.g. "nvlink_egress[gpu0]"), GB/s; replaces the
  // nominal figure of that resource. Calibration fills these from concurrent measurements.
  std::map<std::string, double> capacities;
  std::string source = "nominal";  // "nominal", "profile <path>", "calibrated"

  const HopParams& hop(HopKind k) const { return hops[static_cast<int>(k)]; }
  HopParams& hop(HopKind k) { return hops[static_cast<int>(k)]; }
};

}  // namespace gpustripe
