#include "model/closed_form.hpp"

#include <cstddef>

namespace gpustripe {

std::vector<double> equal_finish_split(const std::vector<double>& a, const std::vector<double>& b, double n) {
  double B = 0, ab = 0;
  for (size_t i = 0; i < b.size(); ++i) {
    B += b[i];
    ab += a[i] * b[i];
  }
  std::vector<double> theta(b.size(), 0.0);
  if (B <= 0 || n <= 0) return theta;
  for (size_t i = 0; i < b.size(); ++i) theta[i] = b[i] / B * (1.0 - a[i] * B / n + ab / n);
  return theta;
}

double equal_finish_time(const std::vector<double>& a, const std::vector<double>& b, double n) {
  double B = 0, ab = 0;
  for (size_t i = 0; i < b.size(); ++i) {
    B += b[i];
    ab += a[i] * b[i];
  }
  return B > 0 ? (n + ab) / B : 0;
}

}  // namespace gpustripe
