// The GPUs' entry and exit barrier run inside a kernel (a per-rank graph whose part on a
// rank is that one kernel: the reductions of reduce_cuda.cu, the copies of copy_cuda.cu),
// with the same numbers as the barrier kernels of barrier_cuda.cu, so fused and unfused
// calls mix on one communicator; barrier_cuda.cu's barrier kernel sets and waits on the flags
// with the same set_flags / wait_peers. Device code only; each including .cu file gets its own copy.
#pragma once
#include "coll/kernel_done.cuh"
#include "coll/reduce.hpp"

namespace gpustripe::coll {
namespace {

__device__ __forceinline__ unsigned long long global_ns() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

// Spins until every peer's flag in this rank's memory reached e (or the timeout: the mark
// the host checks; the results are then undefined, as with the barrier kernel).
__device__ void wait_peers(const BarrierKernelArgs& a, unsigned long long e) {
  const unsigned long long start = global_ns();
  for (int q = 0; q < a.n; ++q) {
    if (q == a.me) continue;
    const volatile unsigned long long* f = a.own_flags + q;
    while (*f < e)
      if (global_ns() - start > a.timeout_ns) {
        *reinterpret_cast<volatile int*>(a.error) = 1;
        __threadfence_system();
        return;
      }
  }
}

__device__ void set_flags(const BarrierKernelArgs& a, unsigned long long e) {
  for (int q = 0; q < a.n; ++q)
    if (q != a.me) *reinterpret_cast<volatile unsigned long long*>(a.peer_slot[q]) = e;
}

// Entry: the barrier number this call's entry has (the counter moves only at the exit).
__device__ unsigned long long fused_entry(const FusedBarrier& b) {
  __shared__ unsigned long long e;
  if (threadIdx.x == 0) {
    e = *reinterpret_cast<volatile unsigned long long*>(b.args.counter) + 1;
    if (blockIdx.x == 0) {
      __threadfence_system();  // what the stream did before is visible before the flags
      set_flags(b.args, e);
    }
    wait_peers(b.args, e);
  }
  __syncthreads();
  return e;
}

// Exit: the last block to finish (every block's stores visible first) sets the exit flags,
// waits for the peers' and advances the counter past both barriers.
__device__ void fused_exit(const FusedBarrier& b, unsigned long long e) {
  if (!last_block_done(b.blocks_done)) return;
  set_flags(b.args, e + 1);
  wait_peers(b.args, e + 1);
  *reinterpret_cast<volatile unsigned long long*>(b.args.counter) = e + 1;
  __threadfence_system();
}

}  // namespace
}  // namespace gpustripe::coll
