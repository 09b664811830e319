#include <cuda_runtime.h>

#include "jacobi.hpp"

namespace halo {
namespace {

__global__ void init_kernel(double* a, long lr, long cols, long r0, long rows) {
  const long n = (lr + 2) * cols;
  for (long i = blockIdx.x * static_cast<long>(blockDim.x) + threadIdx.x; i < n; i += static_cast<long>(gridDim.x) * blockDim.x)
    a[i] = initial(r0 - 1 + i / cols, i % cols, rows);
}

// One thread per point of the owned interior, grid-stride: a slab of 8 rows x 2^26
// columns is as much work as 2^13 x 2^16.
__global__ void step_kernel(const double* a, double* b, long lr, long cols) {
  const long inner = cols - 2, n = lr * inner;
  for (long i = blockIdx.x * static_cast<long>(blockDim.x) + threadIdx.x; i < n; i += static_cast<long>(gridDim.x) * blockDim.x) {
    const long k = 1 + i / inner, j = 1 + i % inner;
    b[k * cols + j] = stencil(a, k, j, cols);
  }
}

int blocks_for(long n) {
  const long b = (n + 255) / 256;
  return static_cast<int>(b < 65536 ? (b > 0 ? b : 1) : 65536);
}

}  // namespace

void init_device(double* a, long lr, long cols, long r0, long rows, void* stream) {
  init_kernel<<<blocks_for((lr + 2) * cols), 256, 0, static_cast<cudaStream_t>(stream)>>>(a, lr, cols, r0, rows);
}

void step_device(const double* a, double* b, long lr, long cols, void* stream) {
  step_kernel<<<blocks_for(lr * (cols - 2)), 256, 0, static_cast<cudaStream_t>(stream)>>>(a, b, lr, cols);
}

}  // namespace halo
