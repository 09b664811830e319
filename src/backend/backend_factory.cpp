// Picks the backend: GPUSTRIPE_BACKEND, or what make_backend is asked for.
#include "backend/emulated/emulated_backend.hpp"
#include "common/config.hpp"
#include "common/error.hpp"
#include "common/log.hpp"
#include "topology/topology.hpp"

#if GPUSTRIPE_HAVE_CUDA
#include <cuda_runtime_api.h>

#include "backend/cuda/cuda_backend.hpp"
#endif

namespace gpustripe {
namespace {

const ChoiceSetting kBackend{"GPUSTRIPE_BACKEND", "auto",
                             "Backend: cuda (real GPUs), emulated (GPUs of a topology emulated in host memory), "
                             "auto (cuda when a GPU is visible, else emulated)",
                             {"auto", "cuda", "emulated"}};

}  // namespace

int cuda_device_count() noexcept {
#if GPUSTRIPE_HAVE_CUDA
  // Counted once: the answer does not change within a process, and GS_REQUIRE_GPU asks often.
  static const int count = [] {
    int n = 0;
    cudaError_t err = cudaGetDeviceCount(&n);
    if (err != cudaSuccess) {
      cudaGetLastError();  // no driver or no device: not an error for the caller, and nothing printed
      return 0;
    }
    return n;
  }();
  return count;
#else
  return 0;
#endif
}

std::string resolve_backend_kind(const std::string& kind) {
  std::string k = kind.empty() || kind == "auto" ? kBackend.get() : kind;
  if (k == "auto") return cuda_device_count() > 0 ? "cuda" : "emulated";
  GS_REQUIRE(k == "cuda" || k == "emulated", GPUSTRIPE_ERR_INVALID_ARGUMENT,
             "backend kind '%s': expected auto, cuda or emulated", k.c_str());
  return k;
}

std::unique_ptr<Backend> make_emulated_backend(const Topology& topo) {
  return std::make_unique<emu::EmulatedBackend>(topo);
}

std::unique_ptr<Backend> make_cuda_backend() {
#if GPUSTRIPE_HAVE_CUDA
  GS_REQUIRE(cuda_device_count() > 0, GPUSTRIPE_ERR_NOT_SUPPORTED, "CUDA backend: no CUDA GPU is visible");
  return std::make_unique<CudaBackend>();
#else
  GS_THROW(GPUSTRIPE_ERR_NOT_SUPPORTED, "CUDA backend: this gpustripe was built without CUDA");
#endif
}

std::unique_ptr<Backend> make_backend(const Topology& topo, const std::string& kind) {
  std::string k = resolve_backend_kind(kind);
  if (k == "cuda") return make_cuda_backend();
  if (kind != "emulated" && kBackend.get() != "emulated")
    GS_LOG_DEBUG(Subsys::Backend, "no CUDA GPU visible: running on %d emulated GPUs of '%s'", topo.gpu_count(),
                topo.name.c_str());
  return make_emulated_backend(topo);
}

}  // namespace gpustripe
