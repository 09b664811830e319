// Fixed plan specs: the text GPUSTRIPE_PLAN takes when it is neither "model" nor
// "table", the entries of a tuned table, and what `gpustripe plan --spec` prints.
//
//   spec  := term ("," term)*
//   term  := path [":" share] ["x" chunks ["h" head] ["t" tail]]
//   path  := "direct" | "gpu" N | "host" S      (staging GPU N, host memory of socket S)
//   share := fraction of the bytes in (0, 1]; at most one term omits it and takes the rest
//   chunks:= pipeline depth of the path (default 1 for direct, 8 for staged paths)
//   head, tail := tapered chunks at either end (PathPlan::taper_head/taper_tail), e.g. x8h2
//
// e.g. "direct,host0:0.095x8,gpu2:0.1x4". Terms naming a path the transfer cannot take
// (gpu2 for a copy from or to GPU 2) are left out and their share goes to the rest term.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "model/plan.hpp"

namespace gpustripe {

class MultipathModel;

struct SpecTerm {
  PathKind kind = PathKind::Direct;
  int via = -1;
  double share = -1;  // < 0: the remainder
  int chunks = 0;     // 0: the default for the path kind
  int taper_head = 0, taper_tail = 0;
};

// Throws ERR_CONFIG naming the term that does not parse or shares that do not add up.
std::vector<SpecTerm> parse_plan_spec(const std::string& text);
// "direct:0.905x1,host0:0.095x8": shares of a plan, rounded to 4 decimals.
std::string format_plan_spec(const Plan& plan);
// The plan a spec gives for one transfer (path boundaries aligned to `align`), with the
// model's predicted times. Throws ERR_NOT_SUPPORTED when no term is a path of this transfer.
Plan build_fixed_plan(const MultipathModel& model, const std::vector<SpecTerm>& spec, int src, int dst, uint64_t bytes,
                      uint64_t align = 4096);

}  // namespace gpustripe
