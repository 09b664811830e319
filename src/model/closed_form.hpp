// The ExaMPI'25 seed's closed form: with paths that share nothing, path i takes
// T_i = a_i + theta_i n / b_i, and the split that makes every path finish together is
//   theta_i = b_i / B * (1 - a_i B / n + (sum_j a_j b_j) / n),   B = sum_j b_j,
// with common finish time T = (n + sum_j a_j b_j) / B.
// The planner uses it with a_i, b_i of each path in its planned mix (contention and
// pipelining folded in, see docs/model.md); units: a in us, b in bytes/us, n in bytes.
#pragma once
#include <cstddef>
#include <vector>

namespace gpustripe {

std::vector<double> equal_finish_split(const std::vector<double>& a_us, const std::vector<double>& b, double n);
double equal_finish_time(const std::vector<double>& a_us, const std::vector<double>& b, double n);

}  // namespace gpustripe
