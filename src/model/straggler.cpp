#include "model/straggler.hpp"

#include <algorithm>
#include <cmath>

namespace gpustripe {
namespace {

// P(X <= t) for one lane.
double below(const LaneFinish& l, double t) {
  if (l.sd_us <= 0) return t >= l.median_us ? 1.0 : 0.0;
  return 0.5 * std::erfc(-(t - l.median_us) / (l.sd_us * std::sqrt(2.0)));
}

double all_below(const std::vector<LaneFinish>& lanes, double t) {
  double p = 1.0;
  for (const LaneFinish& l : lanes) p *= below(l, t);
  return p;
}

}  // namespace

double median_of_latest(double floor_us, const std::vector<LaneFinish>& lanes) {
  double lo = floor_us, hi = floor_us;
  for (const LaneFinish& l : lanes) hi = std::max(hi, l.median_us + 8.0 * std::max(0.0, l.sd_us));
  if (all_below(lanes, lo) >= 0.5) return lo;
  // all_below rises with t; below lo it is < 1/2, at hi (every lane 8 sd past its median) ~1.
  for (int i = 0; i < 100 && hi - lo > 1e-9; ++i) {
    const double mid = 0.5 * (lo + hi);
    (all_below(lanes, mid) >= 0.5 ? hi : lo) = mid;
  }
  return hi;
}

}  // namespace gpustripe
