// A plan: how one transfer is split over paths and chunks. The model (planner.hpp)
// makes plans, the engine executes them, the CLI prints them. Shared by all three.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace gpustripe {

enum class PathKind {
  Direct,      // src -> dst peer copy (copy engine)
  GpuStaged,   // src -> staging GPU `via` -> dst
  HostStaged,  // src -> pinned host memory of socket `via` -> dst
};

const char* path_kind_name(PathKind kind);

struct PathPlan {
  PathKind kind = PathKind::Direct;
  int via = -1;             // staging GPU index, or host socket for HostStaged; -1 for Direct
  uint64_t offset = 0;      // first byte of the message this path carries
  uint64_t bytes = 0;       // bytes this path carries (contiguous range [offset, offset+bytes))
  int chunks = 1;           // pipeline depth of this path; chunk sizes: chunk_edges below
  // Tapered chunks: the first `taper_head` chunks grow x2 each up to the steady chunk size
  // (chunk j < head weighs 2^(j - head)), the last `taper_tail` shrink /2 each, the rest are
  // equal. A small first chunk starts the relay hop early (the pipeline fills sooner), a
  // small last one shortens the drain; 0/0: near-equal chunks. head + tail < chunks.
  int taper_head = 0;
  int taper_tail = 0;
  double predicted_us = 0;  // the model's finish time of this path alone, in the planned mix
};

// Edges of a path's chunks relative to its offset: chunks + 1 values from 0 to p.bytes,
// strictly increasing. Page-aligned (4096) when every chunk can be a page or more; the last
// chunk takes the unaligned rest. The engine cuts, and the model costs, exactly these chunks.
std::vector<uint64_t> chunk_edges(const PathPlan& p);
constexpr int kMaxTaper = 16;

struct Plan {
  int src = 0, dst = 0;
  uint64_t bytes = 0;
  std::vector<PathPlan> paths;  // ordered by offset; ranges cover [0, bytes) exactly
  double predicted_us = 0;      // finish time of the slowest path
  std::string bottleneck;       // the saturated resource that bounds the time, e.g. "nvlink_egress[gpu0]"
  std::string source;           // "model", "table", "fixed", "single"

  double predicted_gbps() const { return predicted_us > 0 ? bytes / (predicted_us * 1e3) : 0; }
  bool single_path() const { return paths.size() == 1 && paths[0].chunks == 1; }
  // "direct 90.5% x1 + host0 9.5% x8" (tapered: "x8h2t1"): short form for logs and the CLI.
  std::string describe() const;
  // Throws ERR_INTERNAL when the ranges do not tile [0, bytes) or a path is malformed.
  void check() const;
};

}  // namespace gpustripe
