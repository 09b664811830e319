// The GPU a coll kernel (or its memory) belongs to, current for a scope, and the caller's
// current device given back at its end, also when it throws. No switch where that GPU is
// current already: a rank's part mostly runs on its own GPU. Host code of the .cu files only.
#pragma once
#include <cuda_runtime_api.h>

#include "common/error.hpp"

namespace gpustripe::coll {
namespace {

class OnDevice {
 public:
  // Throws ERR_CUDA where `dev` cannot be made current.
  explicit OnDevice(int dev) : dev_(dev), prev_(dev) {
    cudaGetDevice(&prev_);
    if (prev_ == dev_) return;
    const cudaError_t e = cudaSetDevice(dev_);
    GS_REQUIRE(e == cudaSuccess, GPUSTRIPE_ERR_CUDA, "cudaSetDevice(%d): %s", dev_, cudaGetErrorString(e));
  }
  ~OnDevice() {
    if (prev_ != dev_) cudaSetDevice(prev_);
  }
  OnDevice(const OnDevice&) = delete;
  OnDevice& operator=(const OnDevice&) = delete;

 private:
  int dev_, prev_;
};

}  // namespace
}  // namespace gpustripe::coll
