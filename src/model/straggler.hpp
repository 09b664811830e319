// Lanes that finish together on average do not finish together in each repetition: the
// cross-stream wake-ups on a lane's way (its fork, relays, the join) vary from one
// repetition to the next by microseconds (4x H200: a 1 MB relay GPU 0 -> host -> GPU 1
// repeated back to back spreads over several microseconds while a peer copy of the same
// length stays within one). A plan waits for its LAST lane, so its typical time is later
// than the latest typical lane: with n lanes that end together, the median of their
// maximum is the single lane's 0.5^(1/n) quantile (3 lanes: +0.82 standard deviations).
// The model's plans split bytes so that paths end together: this is where they are.
#pragma once
#include <vector>

namespace gpustripe {

// A lane's finish: typical (median) time and spread (standard deviation), us.
struct LaneFinish {
  double median_us = 0;
  double sd_us = 0;
};

// The median of max(floor, X_1, .., X_n) for independent normal X_i ~ (median_us, sd_us):
// the t >= floor where prod_i Phi((t - median_i) / sd_i) = 1/2 (a lane with sd 0 is a step
// at its median). With every sd 0 it is the plain maximum.
double median_of_latest(double floor_us, const std::vector<LaneFinish>& lanes);

}  // namespace gpustripe
