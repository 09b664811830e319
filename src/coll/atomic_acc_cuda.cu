// The atomic accumulate kernel (atomic_acc.hpp): one thread per unit, a grid-stride
// loop, a system-scope compare-and-swap per unit (the target may be a peer's memory
// over NVLink, updated by other processes at the same time). Units of 1 or 2 bytes
// swap the aligned 4-byte word holding them: the narrowest compare-and-swap every GPU has.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "coll/atomic_acc_ops.hpp"
#include "coll/reduce.hpp"
#include "coll/on_device.cuh"
#include "common/error.hpp"

namespace gpustripe::coll {
namespace {

constexpr int kAccThreads = 256;

__device__ __forceinline__ unsigned int cas_word(unsigned int* w, unsigned int old, unsigned int next) {
  return atomicCAS_system(w, old, next);
}
__device__ __forceinline__ unsigned long long cas_word(unsigned long long* w, unsigned long long old,
                                                       unsigned long long next) {
  return atomicCAS_system(w, old, next);
}

// Unit k, inside the word W at its aligned address.
template <class S, int OP, class W>
__device__ void device_unit(const AtomicAccArgs& a, size_t ub, size_t k) {
  const uintptr_t at = reinterpret_cast<uintptr_t>(a.target) + k * ub;
  W* w = reinterpret_cast<W*>(at & ~uintptr_t(sizeof(W) - 1));
  const size_t off = at & (sizeof(W) - 1);
  const auto* in = a.origin ? static_cast<const unsigned char*>(a.origin) + k * ub : nullptr;
  const auto* cmp = a.compare ? static_cast<const unsigned char*>(a.compare) + k * ub : nullptr;
  W old = *reinterpret_cast<volatile W*>(w);
  for (;;) {
    W next = old;
    if (!acc_unit_new<S, OP>(a.kind, reinterpret_cast<const unsigned char*>(&old) + off, in, cmp,
                             reinterpret_cast<unsigned char*>(&next) + off, a.per_unit) ||
        next == old)
      break;
    const W seen = cas_word(w, old, next);
    if (seen == old) break;
    old = seen;
  }
  if (a.result) memcpy(static_cast<unsigned char*>(a.result) + k * ub, reinterpret_cast<unsigned char*>(&old) + off, ub);
}

template <class S, int OP>
__global__ void atomic_acc_kernel(AtomicAccArgs a, size_t ub) {
  for (size_t k = blockIdx.x * size_t(blockDim.x) + threadIdx.x; k < a.units; k += size_t(gridDim.x) * blockDim.x) {
    if constexpr (sizeof(S) <= 4) {
      if (ub <= 4) {
        device_unit<S, OP, unsigned int>(a, ub, k);
        continue;
      }
    }
    device_unit<S, OP, unsigned long long>(a, ub, k);
  }
  // The updates are visible to every process before the stream goes on.
  __threadfence_system();
}

template <class S, int OP>
struct DeviceRun {
  static void run(const AtomicAccArgs& a, int dev, cudaStream_t s) {
    const int blocks = static_cast<int>(
        std::min<size_t>((a.units + kAccThreads - 1) / kAccThreads, size_t(4) * sm_count(dev)));
    atomic_acc_kernel<S, OP><<<blocks, kAccThreads, 0, s>>>(a, acc_unit_bytes(a));
  }
};

}  // namespace

void launch_atomic_acc(const AtomicAccArgs& a, int dev, void* cuda_stream) {
  check_atomic_acc(a);
  if (a.units == 0) return;
  OnDevice on(dev);
  acc_dispatch<DeviceRun>(a, dev, static_cast<cudaStream_t>(cuda_stream));
  const cudaError_t e = cudaGetLastError();
  GS_REQUIRE(e == cudaSuccess, GPUSTRIPE_ERR_CUDA, "atomic accumulate kernel (%s %s, %zu units) on device %d: %s",
             dtype_name(a.dtype), redop_name(a.op), a.units, dev, cudaGetErrorString(e));
}

}  // namespace gpustripe::coll
