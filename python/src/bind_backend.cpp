// The backend for Python: how many CUDA GPUs this build sees, and which backend
// "auto" picks here.
#include <nanobind/stl/string.h>

#include "backend/backend.hpp"
#include "bindings.hpp"

namespace gpustripe::py {
namespace {

void bind_backend(nb::module_& m) {
  m.def("cuda_device_count", &cuda_device_count,
        "Number of CUDA GPUs visible; 0 when built without CUDA or when there is no driver or device.");
  m.def(
      "backend_kind", [](const std::string& kind) { return resolve_backend_kind(kind); }, nb::arg("kind") = "auto",
      "The backend a context would use: 'cuda' or 'emulated' (GPUSTRIPE_BACKEND, whose 'auto' means cuda when a "
      "GPU is visible).");
}

BindingRegistrar reg(15, bind_backend);

}  // namespace
}  // namespace gpustripe::py
