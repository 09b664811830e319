// Each layer binds itself: a bind_<layer>.cpp defines a function taking the
// module and registers it with a static BindingRegistrar, so adding a layer
// never edits module.cpp.
#pragma once
#include <nanobind/nanobind.h>

#include <functional>
#include <vector>

namespace gpustripe::py {

namespace nb = nanobind;
using BindFn = void (*)(nb::module_&);

std::vector<std::pair<int, BindFn>>& binders();

struct BindingRegistrar {
  // Lower order binds first (types used by later layers: errors 0, topology 10, model 20, engine 30, ...).
  BindingRegistrar(int order, BindFn fn) { binders().emplace_back(order, fn); }
};

// Runs a core call with the GIL released (long transfers, calibration).
template <class F>
auto without_gil(F&& f) {
  nb::gil_scoped_release release;
  return f();
}

}  // namespace gpustripe::py
