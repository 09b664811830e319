// The GPUs' entry and exit barrier run inside a kernel (a per-rank graph whose part on a
// rank is that one kernel: the reductions of reduce_cuda.cu, the copies of copy_cuda.cu),
// with the same numbers as the barrier kernels of barrier_cuda.cu, so fused and unfused
// calls mix on one communicator; barrier_cuda.cu's barrier kernel sets and waits on the flags
// with the same set_flags / wait_peers. Device code (and resident_blocks, for the launches of
// those kernels); each including .cu file gets its own copy.
#pragma once
#include <cuda_runtime.h>

#include <atomic>
#include <cstdint>

#include "coll/copy_elems.cuh"
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

// This block's share of `n` copies (before the entry: FusedBarrier::pre; after the mid barrier:
// post), as the copy kernel's segments (block b on copy b mod n, so a store over NVLink and a
// local copy run side by side); with fewer blocks than copies, each block takes every
// gridDim.x-th copy alone.
__device__ void barrier_copies(const BarrierCopy* copies, int count) {
  auto seg = [&](int c) {
    SegOf<1> s;
    s.src = static_cast<const unsigned char*>(copies[c].src);
    s.dst[0] = static_cast<unsigned char*>(copies[c].dst);
    s.nd = 1;
    s.bytes = copies[c].bytes;
    const uintptr_t bits = reinterpret_cast<uintptr_t>(s.src) | reinterpret_cast<uintptr_t>(s.dst[0]);
    s.align = bits % 16 == 0 ? 16 : bits % 4 == 0 ? 4 : 1;
    return s;
  };
  const unsigned n = static_cast<unsigned>(count);
  if (gridDim.x < n) {
    for (unsigned c = blockIdx.x; c < n; c += gridDim.x) copy_segment(seg(c), threadIdx.x, blockDim.x);
    return;
  }
  const SegShare my = seg_share(n);
  copy_segment(seg(my.seg), my.tid, my.stride);
}

// Entry: the barrier number this call's entry has (the counter moves only at the exit).
__device__ unsigned long long fused_entry(const FusedBarrier& b) {
  __shared__ unsigned long long e;
  if (threadIdx.x == 0) e = *reinterpret_cast<volatile unsigned long long*>(b.args.counter) + 1;
  if (b.npre > 0) {
    // Every block read the number before it arrives, so the exit (after every arrival) cannot
    // have moved the counter under a block that starts late.
    __syncthreads();
    barrier_copies(b.pre, b.npre);
    if (last_block_done(b.arrived)) set_flags(b.args, e);  // every block's copies visible first
    if (threadIdx.x == 0) wait_peers(b.args, e);
  } else if (threadIdx.x == 0) {
    if (blockIdx.x == 0) {
      __threadfence_system();  // what the stream did before is visible before the flags
      set_flags(b.args, e);
    }
    wait_peers(b.args, e);
  }
  __syncthreads();
  return e;
}

// The barrier between the kernel's work and the copies after it (FusedBarrier::post): the last
// block to finish its work (every block's stores visible first, those into the peers' slots
// among them) sets the flags of barrier e + 1, waits for the peers' and lets the other blocks go
// on (b.mid); then every block makes its share of the copies. Returns that barrier's number.
__device__ unsigned long long fused_mid(const FusedBarrier& b, unsigned long long e) {
  volatile unsigned long long* mid = b.mid;
  if (last_block_done(b.blocks_done)) {
    set_flags(b.args, e + 1);
    wait_peers(b.args, e + 1);  // on a timeout too the blocks go on: marked, never a hang
    __threadfence();            // the block counter's reset before any block counts again
    *mid = e + 1;
  }
  if (threadIdx.x == 0)
    while (*mid < e + 1) {
    }
  __syncthreads();
  barrier_copies(b.post, b.npost);
  return e + 1;
}

// Exit: the last block to finish (every block's stores visible first) sets the exit flags,
// waits for the peers' and advances the counter past every barrier of the kernel.
__device__ void fused_exit(const FusedBarrier& b, unsigned long long e) {
  if (b.npost > 0) e = fused_mid(b, e);
  if (!last_block_done(b.blocks_done)) return;
  set_flags(b.args, e + 1);
  wait_peers(b.args, e + 1);
  *reinterpret_cast<volatile unsigned long long*>(b.args.counter) = e + 1;
  __threadfence_system();
  if (b.end_word) {
    *reinterpret_cast<volatile uint32_t*>(b.end_word) = b.end_value;
    __threadfence_system();
  }
}

// The most blocks of `threads` threads of `kernel` that device `dev` holds at once (a launch whose
// blocks wait for each other must fit: FusedBarrier::blocks_wait). `cache`: the caller's, one
// per kernel (128- and 512-thread blocks), so each kernel's occupancy is asked once.
template <class K>
unsigned resident_blocks(K kernel, unsigned threads, int dev, std::atomic<int> (&cache)[2]) {
  std::atomic<int>& slot = cache[threads > 128 ? 1 : 0];
  int n = slot.load(std::memory_order_relaxed);
  if (n <= 0) {
    if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, kernel, static_cast<int>(threads), 0) != cudaSuccess || n < 1)
      n = 1;
    slot.store(n, std::memory_order_relaxed);
  }
  return static_cast<unsigned>(n) * static_cast<unsigned>(sm_count(dev));
}

}  // namespace
}  // namespace gpustripe::coll
