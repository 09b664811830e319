// CUDA errors as gpustripe errors, and the current-device discipline of the CUDA
// backend: every call runs with its owning device current and leaves the caller's
// current device as it found it (libraries that change it break their callers).
#pragma once
#include <cuda_runtime_api.h>

#include "common/error.hpp"

namespace gpustripe {

// Throws ERR_CUDA "<call> on GPU <dev>: cudaErrorX: <text>" (ERR_NO_MEMORY for an
// allocation failure), after clearing the thread's non-sticky CUDA error so it does
// not resurface in an unrelated later call.
[[noreturn]] void throw_cuda_error(cudaError_t err, const char* call, int device);

class DeviceGuard {
 public:
  explicit DeviceGuard(int device);
  ~DeviceGuard();
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int previous_ = -1;
};

}  // namespace gpustripe

#define GS_CUDA(call, device)                                                  \
  do {                                                                         \
    cudaError_t gs_err_ = (call);                                              \
    if (gs_err_ != cudaSuccess) ::gpustripe::throw_cuda_error(gs_err_, #call, (device)); \
  } while (0)
