// The median of repeated timings, shared by every benchmark and calibration that reports one.
#pragma once
#include <vector>

namespace gpustripe {

// The middle value; with an even count the mean of the two middle ones (the upper one alone
// would report the slower of two trials). 0 for no values.
double median_of(std::vector<double> v);

}  // namespace gpustripe
