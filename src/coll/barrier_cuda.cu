#include <cuda_runtime.h>

#include "coll/barrier.hpp"
#include "common/error.hpp"

namespace gpustripe::coll {
namespace {

__device__ __forceinline__ unsigned long long global_ns() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

__global__ void barrier_kernel(BarrierKernelArgs a) {
  if (threadIdx.x != 0 || blockIdx.x != 0) return;
  const unsigned long long e = *a.counter + 1;
  *a.counter = e;
  // Everything this rank's stream did before is complete (stream order); make the flag
  // stores visible only after it.
  __threadfence_system();
  for (int q = 0; q < a.n; ++q)
    if (q != a.me) *reinterpret_cast<volatile unsigned long long*>(a.peer_slot[q]) = e;
  const unsigned long long start = global_ns();
  for (int q = 0; q < a.n; ++q) {
    if (q == a.me) continue;
    const volatile unsigned long long* f = a.own_flags + q;
    while (*f < e) {
      if (global_ns() - start > a.timeout_ns) {
        *reinterpret_cast<volatile int*>(a.error) = 1;
        __threadfence_system();
        return;
      }
    }
  }
  __threadfence_system();
}

}  // namespace

void launch_barrier_kernel(const BarrierKernelArgs& a, int dev, void* cuda_stream) {
  int prev = 0;
  cudaGetDevice(&prev);
  cudaError_t e = cudaSetDevice(dev);
  GS_REQUIRE(e == cudaSuccess, GPUSTRIPE_ERR_CUDA, "cudaSetDevice(%d): %s", dev, cudaGetErrorString(e));
  barrier_kernel<<<1, 32, 0, static_cast<cudaStream_t>(cuda_stream)>>>(a);
  e = cudaGetLastError();
  cudaSetDevice(prev);
  GS_REQUIRE(e == cudaSuccess, GPUSTRIPE_ERR_CUDA, "barrier kernel on device %d: %s", dev, cudaGetErrorString(e));
}

}  // namespace gpustripe::coll
