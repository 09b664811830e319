#include "backend/cuda/cuda_check.hpp"

#include <string>

namespace gpustripe {

void throw_cuda_error(cudaError_t err, const char* call, int device) {
  cudaGetLastError();
  Status status = err == cudaErrorMemoryAllocation ? GPUSTRIPE_ERR_NO_MEMORY : GPUSTRIPE_ERR_CUDA;
  std::string where = device >= 0 ? format(" on GPU %d", device) : std::string();
  throw Error(status, format("%s%s: %s: %s", call, where.c_str(), cudaGetErrorName(err),
                             cudaGetErrorString(err)));
}

DeviceGuard::DeviceGuard(int device) {
  GS_CUDA(cudaGetDevice(&previous_), -1);
  if (previous_ == device) {
    previous_ = -1;  // nothing to restore
    return;
  }
  GS_CUDA(cudaSetDevice(device), device);
}

DeviceGuard::~DeviceGuard() {
  if (previous_ >= 0) cudaSetDevice(previous_);
}

}  // namespace gpustripe
