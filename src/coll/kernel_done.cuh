// The end of a launch announced in host memory (ReduceArgs::done_word, CopyArgs::done_word):
// the write a stream would make after the kernel (cuStreamWriteValue32), made by the kernel's
// last block to finish instead, without a driver call of its own. Device code only; each
// including .cu file gets its own copy.
#pragma once
#include <cstdint>

namespace gpustripe::coll {
namespace {

// word = value once every block's stores are visible to the system; blocks_done counts the
// finished blocks (a device word, 0 between launches). No word: nothing announced.
struct KernelDone {
  uint32_t* word = nullptr;
  uint32_t value = 0;
  unsigned* blocks_done = nullptr;
};

// Every thread of every block calls it, last; true in one thread of the last block to finish,
// once every block's stores are visible to the system. blocks_done (a device word, 0 between
// launches) is left 0 for the next launch, which stream order puts after this one.
// One fence per block, by the thread that counts the block, after the block's barrier: the
// barrier orders the other threads' stores before it and the fence is cumulative (the pattern of
// cooperative groups' grid sync). A fence in every thread cost a pair's reduce-scatter a fifth
// of its time at 2-8 MB (bench/results/*-mpi-coll-fence-ab-*).
__device__ __forceinline__ bool last_block_done(unsigned* blocks_done) {
  __syncthreads();
  if (threadIdx.x != 0) return false;
  __threadfence_system();
  if (atomicAdd(blocks_done, 1u) != gridDim.x - 1) return false;
  *blocks_done = 0;
  return true;
}

// The last block to finish writes the word, so a host that sees it may read every result.
__device__ __forceinline__ void announce_done(const KernelDone& d) {
  if (!last_block_done(d.blocks_done)) return;
  __threadfence_system();
  *reinterpret_cast<volatile uint32_t*>(d.word) = d.value;
}

}  // namespace
}  // namespace gpustripe::coll
