// What executing a plan costs beyond its copies: the engine's schedule
// (engine/engine.cpp, enqueue_schedule) of a multi-path plan
//   - forks the caller's stream: every lane it uses waits on an event of the caller, and
//     joins it: the caller waits on an event of every lane. On the GPUs that is two
//     cross-stream event waits (epsilon each) on every path's way;
//   - makes one backend call per copy, event record and event wait, each costing the CPU
//     `host_call_us` (a runtime call with its device switch). A host that issues copies
//     back to back cannot finish a plan faster than it can enqueue it: in steady state a
//     plan takes max(GPU time, calls x host_call_us) (the host-bound regime of mid-size
//     multi-path plans; MultipathModel::apply_schedule).
// The shape of the schedule (host lanes, staging area sizes that cut chunks into pieces,
// graph replay) is an EngineShape: from_settings() describes the engine as it runs (its
// staging sizes are the two settings declared here, which the engine reads through it).
// Other shapes describe other ways to run a schedule, for the model's tests.
#pragma once
#include <cstdint>
#include <vector>

#include "model/plan.hpp"

namespace gpustripe {

struct EngineShape {
  // Where the direct path of a multi-path plan runs: on the caller's stream (no fork or
  // join for it, one event mark per relay lane at the end: the engine), or on a lane of its
  // own like every path (a relay mark per staged piece).
  bool direct_on_caller = false;
  bool marks_per_piece = true;
  int host_lanes = 2;                     // relay (host-to-GPU) streams of a host path
  int host_first_lanes = 2;               // its GPU-to-host streams
  uint64_t host_staging = 128ull << 20;   // GPUSTRIPE_HOST_STAGING: pieces of at most half of it
  uint64_t gpu_staging = 256ull << 20;    // GPUSTRIPE_GPU_STAGING
  bool graphs = false;                    // a replayed graph is one launch
  bool graphs_gpu_staged = true;          // plans with GPU-staged paths are replayed too
  // The engine as it runs: direct path on the caller's stream, one stream per hop, graphs
  // replayed except for plans with GPU-staged paths, the staging sizes of the settings.
  // Throws Error(ERR_CONFIG) for a staging size that does not parse.
  static EngineShape from_settings();
};

// Backend queries of the engine's checks of a copy's two pointers (check_copy), before any
// of its schedule's calls.
constexpr int kPointerChecks = 2;

// Backend calls the engine makes to enqueue `plan` (a plain copy: 1; a replayed graph:
// the launch and the staging areas' waits and marks).
int schedule_calls(const Plan& plan, const EngineShape& shape);
// Copy nodes of the graph a replayed plan launches (0 when the plan is not replayed).
int graph_copies(const Plan& plan, const EngineShape& shape);
// Whether the engine replays `plan` as a captured graph: graphs on, the plan not one plain
// copy, and, unless graphs_gpu_staged, no GPU-staged path in it. On 4x H200 a replayed plan
// with GPU-staged paths ran at half its enqueued speed (direct + GPU staged + host) and
// 5-25% slower (direct + GPU staged); direct + host plans replay well.
bool replays(const Plan& plan, const EngineShape& shape);
bool replays(const std::vector<PathKind>& kinds, const EngineShape& shape);
// Lanes of a path that the caller's stream waits on at the end (one wait each, in the
// engine's order: direct paths first, then the others in plan order): a GPU-staged path's
// relay lane, a host path's relay lanes in use, a direct path's own lane (0 on the caller).
int final_lanes(const PathPlan& p, const EngineShape& shape);
// Whether a path of this kind runs on an engine lane forked from the caller's stream and
// joined back (two cross-stream event waits), in a plan that is not a plain copy.
bool runs_on_lane(PathKind kind, const EngineShape& shape);
// Pieces a staged path's chunk of `bytes` is cut into (at most half the staging area each).
uint64_t staged_pieces(uint64_t bytes, uint64_t staging_bytes);

}  // namespace gpustripe
