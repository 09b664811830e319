#include <algorithm>

#include "bindings.hpp"

namespace gpustripe::py {
std::vector<std::pair<int, BindFn>>& binders() {
  static std::vector<std::pair<int, BindFn>> list;
  return list;
}
}  // namespace gpustripe::py

NB_MODULE(_core, m) {
  auto& list = gpustripe::py::binders();
  std::stable_sort(list.begin(), list.end(), [](auto& a, auto& b) { return a.first < b.first; });
  for (auto& [order, fn] : list) fn(m);
}
