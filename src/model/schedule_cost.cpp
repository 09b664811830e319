#include "model/schedule_cost.hpp"

#include <algorithm>

#include "common/config.hpp"

namespace gpustripe {
namespace {

// Staging memory is the engine's, but the model cuts staged chunks into pieces of at most
// half of it, so both read these two here (the model sits below the engine).
const SizeSetting kHostStaging{"GPUSTRIPE_HOST_STAGING", "128M",
                               "Pinned host memory for staging, per CPU socket and source GPU, allocated on first "
                               "use and kept (lower it where pinned memory is scarce)"};
const SizeSetting kGpuStaging{"GPUSTRIPE_GPU_STAGING", "256M",
                              "GPU memory each GPU lends as scratch to transfers staged through it, allocated on "
                              "first use and kept (lower it where GPU memory is tight)"};

}  // namespace

EngineShape EngineShape::from_settings() {
  EngineShape e;
  e.direct_on_caller = true;
  e.marks_per_piece = false;
  e.host_lanes = 1;
  e.host_first_lanes = 1;
  e.host_staging = kHostStaging.get();
  e.gpu_staging = kGpuStaging.get();
  e.graphs = true;
  e.graphs_gpu_staged = false;
  return e;
}

uint64_t staged_pieces(uint64_t bytes, uint64_t staging_bytes) {
  const uint64_t align = 4096;
  const uint64_t piece = std::max<uint64_t>(align, staging_bytes / 2 / align * align);
  return bytes == 0 ? 0 : (bytes + piece - 1) / piece;
}

namespace {

// Pieces of a staged path: its chunks as the engine cuts them (chunk_edges: near-equal or
// tapered), each cut into pieces of at most half its staging area.
uint64_t path_pieces(const PathPlan& p, const EngineShape& shape) {
  const uint64_t area = p.kind == PathKind::HostStaged ? shape.host_staging : shape.gpu_staging;
  const std::vector<uint64_t> edge = chunk_edges(p);
  uint64_t pieces = 0;
  for (size_t c = 0; c + 1 < edge.size(); ++c) pieces += staged_pieces(edge[c + 1] - edge[c], area);
  return pieces;
}

}  // namespace

bool replays(const std::vector<PathKind>& kinds, const EngineShape& shape) {
  if (!shape.graphs || kinds.empty()) return false;
  if (kinds.size() == 1 && kinds[0] == PathKind::Direct) return false;  // (a chunked direct path alone is rare)
  for (PathKind k : kinds)
    if (k == PathKind::GpuStaged && !shape.graphs_gpu_staged) return false;
  return true;
}

bool replays(const Plan& plan, const EngineShape& shape) {
  if (plan.paths.empty() || (plan.single_path() && plan.paths[0].kind == PathKind::Direct)) return false;
  std::vector<PathKind> kinds;
  for (const PathPlan& p : plan.paths) kinds.push_back(p.kind);
  if (kinds.size() == 1 && kinds[0] == PathKind::Direct) return shape.graphs;
  return replays(kinds, shape);
}

int graph_copies(const Plan& plan, const EngineShape& shape) {
  if (!replays(plan, shape)) return 0;
  uint64_t copies = 0;
  for (const PathPlan& p : plan.paths) copies += p.kind == PathKind::Direct ? p.chunks : 2 * path_pieces(p, shape);
  return static_cast<int>(copies);
}

int final_lanes(const PathPlan& p, const EngineShape& shape) {
  if (p.kind == PathKind::Direct) return runs_on_lane(p.kind, shape) ? 1 : 0;
  if (p.kind == PathKind::GpuStaged) return 1;
  return static_cast<int>(std::min<uint64_t>(static_cast<uint64_t>(shape.host_lanes), path_pieces(p, shape)));
}

bool runs_on_lane(PathKind kind, const EngineShape& shape) {
  return !(kind == PathKind::Direct && shape.direct_on_caller);
}

int schedule_calls(const Plan& plan, const EngineShape& shape) {
  if (plan.paths.empty()) return 0;
  if (plan.single_path() && plan.paths[0].kind == PathKind::Direct) return 1;  // the engine's plain copy
  int staged = 0;
  for (const PathPlan& p : plan.paths) staged += p.kind != PathKind::Direct;
  if (replays(plan, shape)) return 1 + 2 * staged;  // wait on the staging areas' last users, one launch, a record per area
  bool forks = false;
  for (const PathPlan& p : plan.paths) forks = forks || runs_on_lane(p.kind, shape);
  int calls = forks ? 1 : 0;  // the caller's start event, which lanes wait on
  for (const PathPlan& p : plan.paths) {
    calls += p.kind == PathKind::Direct ? p.chunks : 0;
    if (p.kind == PathKind::Direct) {
      if (runs_on_lane(p.kind, shape)) calls += 3;  // its lane waits on the start; joined: mark + wait
      continue;
    }
    const bool host = p.kind == PathKind::HostStaged;
    const uint64_t pieces = path_pieces(p, shape);
    // Per piece: wait for the staging bytes' last reader, copy in, mark, relay waits, copy
    // out (and mark the relay, in engines that mark it per piece).
    calls += static_cast<int>((shape.marks_per_piece ? 6 : 5) * pieces);
    auto lanes_of = [&](int n) { return static_cast<int>(host ? std::min<uint64_t>(static_cast<uint64_t>(n), pieces) : 1); };
    const int first = lanes_of(shape.host_first_lanes), relay = lanes_of(shape.host_lanes);
    // First-hop lanes wait on the start event; relay lanes are joined (mark + caller's wait),
    // and in engines that mark per piece so are the first-hop lanes, and the relays wait too.
    calls += first + 2 * relay + (shape.marks_per_piece ? 2 * first + relay : 0);
  }
  return calls;
}

}  // namespace gpustripe
