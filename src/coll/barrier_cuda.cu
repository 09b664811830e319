#include <cuda.h>
#include <cuda_runtime.h>

#include <vector>

#include "backend/driver_entry.hpp"
#include "coll/barrier.hpp"
#include "coll/fused_barrier.cuh"
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
  int prev = 0;
  cudaGetDevice(&prev);
  cudaError_t e = cudaSetDevice(dev);
  GS_REQUIRE(e == cudaSuccess, GPUSTRIPE_ERR_CUDA, "cudaSetDevice(%d): %s", dev, cudaGetErrorString(e));
  launch();
  e = cudaGetLastError();
  cudaSetDevice(prev);
  GS_REQUIRE(e == cudaSuccess, GPUSTRIPE_ERR_CUDA, "%s kernel on device %d: %s", what, dev, cudaGetErrorString(e));
}

// cuStreamBatchMemOp, looked up at run time so that the library does not link libcuda.
using BatchMemOpFn = CUresult (*)(CUstream, unsigned int, CUstreamBatchMemOpParams*, unsigned int);
BatchMemOpFn batch_mem_op() {
  static BatchMemOpFn fn = reinterpret_cast<BatchMemOpFn>(driver_entry_point("cuStreamBatchMemOp"));
  return fn;
}

CUstreamBatchMemOpParams write_op(void* addr, unsigned value) {
  CUstreamBatchMemOpParams p{};
  p.writeValue.operation = CU_STREAM_MEM_OP_WRITE_VALUE_32;
  p.writeValue.address = reinterpret_cast<CUdeviceptr>(addr);
  p.writeValue.value = value;
  p.writeValue.flags = CU_STREAM_WRITE_VALUE_DEFAULT;  // fenced after the stream's earlier work
  return p;
}

CUstreamBatchMemOpParams wait_op(void* addr) {
  CUstreamBatchMemOpParams p{};
  p.waitValue.operation = CU_STREAM_MEM_OP_WAIT_VALUE_32;
  p.waitValue.address = reinterpret_cast<CUdeviceptr>(addr);
  p.waitValue.value = 1;
  p.waitValue.flags = CU_STREAM_WAIT_VALUE_EQ;
  return p;
}

// Enqueues `copies_first` (4-byte copies of `one`, if any) and then the batch on the stream.
void run_memops(const std::vector<void*>& copies_first, const void* one, std::vector<CUstreamBatchMemOpParams> ops,
                int dev, void* cuda_stream) {
  BatchMemOpFn fn = batch_mem_op();
  GS_REQUIRE(fn != nullptr, GPUSTRIPE_ERR_NOT_SUPPORTED, "the CUDA driver has no cuStreamBatchMemOp");
  cudaStream_t s = static_cast<cudaStream_t>(cuda_stream);
  CUresult result = CUDA_SUCCESS;
  launch_on(dev, "memory operations", [&] {
    for (void* r : copies_first)
      if (cudaMemcpyAsync(r, one, 4, cudaMemcpyDeviceToDevice, s) != cudaSuccess) return;  // launch_on reports it
    if (!ops.empty()) result = fn(reinterpret_cast<CUstream>(s), static_cast<unsigned>(ops.size()), ops.data(), 0);
  });
  GS_REQUIRE(result == CUDA_SUCCESS, GPUSTRIPE_ERR_CUDA, "cuStreamBatchMemOp (%zu operations) on device %d: error %d",
             ops.size(), dev, static_cast<int>(result));
}

}  // namespace

void launch_memop_barrier(const std::vector<void*>& remote, const std::vector<void*>& own, const void* one,
                          bool by_copy, int dev, void* cuda_stream) {
  std::vector<CUstreamBatchMemOpParams> ops;
  if (!by_copy)
    for (void* r : remote) ops.push_back(write_op(r, 1));
  for (void* o : own) ops.push_back(wait_op(o));
  for (void* o : own) ops.push_back(write_op(o, 0));
  run_memops(by_copy ? remote : std::vector<void*>{}, one, std::move(ops), dev, cuda_stream);
}

void launch_memop_writes(const std::vector<void*>& addrs, unsigned value, int dev, void* cuda_stream) {
  std::vector<CUstreamBatchMemOpParams> ops;
  for (void* a : addrs) ops.push_back(write_op(a, value));
  run_memops({}, nullptr, std::move(ops), dev, cuda_stream);
}

void launch_memop_waits(const std::vector<void*>& addrs, int dev, void* cuda_stream) {
  std::vector<CUstreamBatchMemOpParams> ops;
  for (void* a : addrs) ops.push_back(wait_op(a));
  run_memops({}, nullptr, std::move(ops), dev, cuda_stream);
}

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
