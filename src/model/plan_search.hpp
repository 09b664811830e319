// Chooses the paths, fractions and chunk counts of one transfer that minimise its
// finish time under the model, with other transfers' paths (if any) running beside it.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "model/multipath_model.hpp"
#include "model/plan.hpp"

namespace gpustripe {

enum class HostPathMode { Auto, On, Off };

struct SearchOptions {
  HostPathMode host = HostPathMode::Auto;
  int max_gpu_paths = -1;         // staging GPUs at most; -1: no limit
  int fixed_chunks = 0;           // chunks per staged path; 0: the model chooses
  uint64_t min_split = 1 << 20;   // below: one direct copy
  uint64_t align = 4096;          // path boundaries fall on multiples of this
  uint64_t min_chunk = 64 << 10;  // smallest pipeline chunk the model chooses
  // ... on host-staged paths: 4x H200, direct + host 14% at 64M (9.4 MB through the host) took
  // 257/258/287/347 us in 4/8/16/32 chunks: under ~1 MB a chunk costs more than it saves.
  uint64_t min_host_chunk = 1 << 20;
  int max_chunks = 64;
  double min_gain = 0.03;         // a path is added only if it shortens the finish time by this fraction
  // Staged paths' rates are planned this fraction below the model's (negative: above; the
  // planner's is search_options_from_env's): a staged share past the equal-finish point costs
  // many times what the same distance short of it does.
  double staged_margin = 0;
};

// The best plan for src -> dst of `bytes` with `background` running at the same time.
// Throws ERR_INVALID_DEVICE / ERR_INVALID_SIZE for bad transfers, ERR_NOT_SUPPORTED when
// the options leave no path (host path off on a pair without peer access).
Plan search_plan(const MultipathModel& model, int src, int dst, uint64_t bytes, const std::vector<PathLoad>& background,
                 const SearchOptions& opt);

// The equal-finish plan over exactly these routes of src -> dst (in route order) for this
// size, chunk counts chosen by the model, timed; a plan without paths when one of the
// routes would carry less than `opt.align` bytes. The planner's cache keeps a size class's
// routes and calls this for the exact size (a few microseconds).
Plan split_over(const MultipathModel& model, int src, int dst, uint64_t bytes, const std::vector<const Route*>& routes,
                const SearchOptions& opt);

// The equal-finish plan over exactly the named paths ("direct", "gpu2", "host0"), chunk
// counts chosen by the model; paths that would carry less than `opt.align` bytes are left
// out. Forced path sets of `gpustripe model-check`, `simulate` and `tune`. Throws
// ERR_INVALID_ARGUMENT for a name that is not a path of this transfer.
Plan plan_for_routes(const MultipathModel& model, int src, int dst, uint64_t bytes,
                     const std::vector<std::string>& names, const SearchOptions& opt);

// Path sizes of one plan whose first entry took the remainder: moves that entry's
// unaligned tail to the last path, so that every path boundary is a multiple of `align`.
void align_boundaries(std::vector<uint64_t>& sizes, uint64_t align);

// The PathLoads of a plan (for use as background of another transfer).
std::vector<PathLoad> loads_of(const MultipathModel& model, const Plan& plan);

}  // namespace gpustripe
