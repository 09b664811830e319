#include <cuda.h>
#include <cuda_runtime.h>

#include <vector>

#include "coll/barrier.hpp"
#include "coll/fused_barrier.cuh"
#include "coll/on_device.cuh"
#include "common/error.hpp"

namespace gpustripe::coll {
namespace {

__global__ void barrier_kernel(BarrierKernelArgs a) {
  if (threadIdx.x != 0 || blockIdx.x != 0) return;
  const unsigned long long e = *a.counter + 1;
  *a.counter = e;
  // Everything this rank's stream did before is complete (stream order); make the flag
  // stores visible only after it.
  __threadfence_system();
  set_flags(a, e);
  wait_peers(a, e);
  __threadfence_system();
}

__global__ void signal_kernel(const unsigned long long* counter, unsigned long long* flag) {
  if (threadIdx.x != 0 || blockIdx.x != 0) return;
  __threadfence_system();
  *reinterpret_cast<volatile unsigned long long*>(flag) = *counter;
  __threadfence_system();
}

__global__ void wait_kernel(const unsigned long long* counter, const unsigned long long* flag,
                            unsigned long long timeout_ns, int* error) {
  if (threadIdx.x != 0 || blockIdx.x != 0) return;
  const unsigned long long e = *counter;
  const unsigned long long start = global_ns();
  while (*reinterpret_cast<const volatile unsigned long long*>(flag) < e) {
    if (global_ns() - start > timeout_ns) {
      *reinterpret_cast<volatile int*>(error) = 1;
      break;
    }
  }
  __threadfence_system();
}

__global__ void stamp_kernel(unsigned long long* slot) {
  if (threadIdx.x != 0 || blockIdx.x != 0) return;
  *reinterpret_cast<volatile unsigned long long*>(slot) = global_ns();
}

template <class F>
void launch_on(int dev, const char* what, F&& launch) {
  OnDevice on(dev);
  launch();
  const cudaError_t e = cudaGetLastError();
  GS_REQUIRE(e == cudaSuccess, GPUSTRIPE_ERR_CUDA, "%s kernel on device %d: %s", what, dev, cudaGetErrorString(e));
}

}  // namespace

void launch_signal_kernel(const unsigned long long* counter, unsigned long long* flag, int dev, void* cuda_stream) {
  launch_on(dev, "signal",
            [&] { signal_kernel<<<1, 32, 0, static_cast<cudaStream_t>(cuda_stream)>>>(counter, flag); });
}

void launch_wait_kernel(const unsigned long long* counter, const unsigned long long* flag,
                        unsigned long long timeout_ns, int* error, int dev, void* cuda_stream) {
  launch_on(dev, "wait", [&] {
    wait_kernel<<<1, 32, 0, static_cast<cudaStream_t>(cuda_stream)>>>(counter, flag, timeout_ns, error);
  });
}

void launch_stamp_kernel(unsigned long long* slot, int dev, void* cuda_stream) {
  launch_on(dev, "stamp", [&] { stamp_kernel<<<1, 32, 0, static_cast<cudaStream_t>(cuda_stream)>>>(slot); });
}

void launch_barrier_kernel(const BarrierKernelArgs& a, int dev, void* cuda_stream) {
  launch_on(dev, "barrier", [&] { barrier_kernel<<<1, 32, 0, static_cast<cudaStream_t>(cuda_stream)>>>(a); });
}

}  // namespace gpustripe::coll
