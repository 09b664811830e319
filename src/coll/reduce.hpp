// Element-wise reductions of several buffers into one, ordered on a stream: the
// one interface behind which the CUDA kernels (reduce_cuda.cu, real GPUs) and the
// CPU loops (reduce_host.cpp, emulated backend) sit. The schedules call only this.
#pragma once
#include <cstddef>
#include <memory>
#include <vector>

#include "backend/backend.hpp"
#include "coll/barrier.hpp"
#include "coll/program.hpp"
#include "coll/types.hpp"

namespace gpustripe::coll {

// dst[k] = op(srcs[0][k], srcs[1][k], ...) for k < count. dst may be srcs[0] (accumulate
// in place); it overlaps no other source. Any number of sources >= 1; peers' memory may be
// read directly where the backend allows peer access. more_dsts get the same result; each
// may be one of the sources (srcs[s] != srcs[0]) when element k of it is read and written by
// this reduction only: element k is read from every source before it is written anywhere.
struct FusedBarrier;

struct ReduceArgs {
  // The GPUs' entry and exit barrier run inside the reduction (CUDA; a per-rank graph whose
  // part on this rank is this reduction alone): nullptr, none.
  const FusedBarrier* barrier = nullptr;
  void* dst = nullptr;
  std::vector<void*> more_dsts;
  std::vector<const void*> srcs;
  size_t count = 0;
  DataType dtype = GPUSTRIPE_FLOAT32;
  RedOp op = GPUSTRIPE_SUM;
  int blocks_per_sm = 0;  // most thread blocks per SM of the kernel; 0: the reducer's own (reduce_cuda.cu)
  // Where set (and can_signal(args)), the reduction announces its own end: once every element
  // is stored and visible to the whole system, done_value goes into *done_word (a word in host
  // memory registered for the device: a stream flag, Backend::register_host). The write a
  // stream would make after the reduction (stream_write_flag), without a driver call of its
  // own nor the stream's turn-around between the kernel's end and the write.
  uint32_t* done_word = nullptr;
  uint32_t done_value = 0;
};

// Copies by the SMs of one device, several in one launch: each segment's bytes from src to
// every one of its dsts (the source is read once for all of them). Sources and destinations
// may be peers' memory; no destination overlaps a source or another destination.
struct CopySegment {
  const void* src = nullptr;
  std::vector<void*> dsts;
  size_t bytes = 0;
  int src_dev = -1;  // the source's device (-1: not known); another than the running one: loads over NVLink
};
struct CopyArgs {
  const FusedBarrier* barrier = nullptr;  // as ReduceArgs::barrier
  std::vector<CopySegment> segs;
  uint32_t* done_word = nullptr;  // as ReduceArgs::done_word (where can_signal_copy)
  uint32_t done_value = 0;
};

class Reducer {
 public:
  virtual ~Reducer() = default;
  // Enqueues the reduction on stream s of device dev (the device that runs it).
  virtual void reduce_async(const ReduceArgs& args, int dev, StreamHandle s) = 0;
  // Whether reduce_async can run the GPUs' barrier inside this reduction (args.barrier).
  virtual bool can_fuse_barrier(const ReduceArgs& args) const { return false; }
  // Whether reduce_async can write args.done_word itself at the reduction's end. One
  // announcing launch (a reduction, or copies: can_signal_copy) at a time per reducer and
  // device, each after the previous one's word was seen: its last block finds itself last
  // through a counter of the reducer's on the device.
  virtual bool can_signal(const ReduceArgs& args) const { return false; }
  // Enqueues the copies (a copy kernel on CUDA; on the emulated backend, after the stream
  // drains, on this thread) on stream s of device dev.
  virtual void copy_async(const CopyArgs& args, int dev, StreamHandle s) = 0;
  // Whether copy_async can run the GPUs' barrier inside these copies (args.barrier).
  virtual bool can_fuse_copy(const CopyArgs& args) const { return false; }
  // Whether copy_async can write args.done_word itself at the copies' end (as can_signal).
  virtual bool can_signal_copy(const CopyArgs& args) const { return false; }
};

// The segments of kernel copies (Op::by_kernel): one per source and size, with every
// destination of copies from it.
std::vector<CopySegment> copy_segments(const std::vector<const Op*>& copies);
// The CPU loop of copy_async, run now on the calling thread.
void copy_host(const CopyArgs& args);

// The reduction a program's Reduce op stands for.
ReduceArgs reduce_args(const Op& op);

// The reducer for a backend: CUDA kernels on "cuda", CPU loops on "emulated".
std::unique_ptr<Reducer> make_reducer(Backend& backend);

// The CPU loop, run now on the calling thread (the emulated reducer and tests use it).
void reduce_host(const ReduceArgs& args);

// Throws ERR_INVALID_ARGUMENT / ERR_INVALID_TYPE naming what is wrong.
void check_reduce_args(const ReduceArgs& args);

#if GPUSTRIPE_HAVE_CUDA
// Kernel launch (reduce_cuda.cu): at most kMaxKernelSources sources per launch.
constexpr int kMaxKernelSources = 16;
constexpr int kMaxKernelDests = 8;  // dst and up to 7 more_dsts
// A barrier inside the kernel: every block waits at its start for the peers' entry flags
// (block 0 first sets this rank's; with copies before the entry, the last block to finish its
// share of them), and the last block to finish sets and waits for the exit flags and advances
// the counter, exactly as the two barrier kernels would (barrier_cuda.cu).
struct FusedBarrier {
  BarrierKernelArgs args;
  unsigned int* blocks_done = nullptr;  // device word of this rank, 0 between launches
  // Copies the kernel makes before the entry (a staged call's stores into the peers' slots):
  // every block copies its share, and this rank's entry flags go out once every block's copies
  // are visible (counted in `arrived`, another device word, 0 between launches), so the launch's
  // blocks must all be resident at once: the kernel's grid is capped to what the GPU holds.
  BarrierCopy pre[kMaxBarrierRanks];
  int npre = 0;
  unsigned int* arrived = nullptr;
  // Copies the kernel makes after its own work and a barrier more (a two-shot staged call's copies
  // of the peers' results out of its slots), before the exit: the last block to finish its work
  // runs that barrier and then writes its number into `mid` (a device word of this rank, below
  // every later barrier's number), which the other blocks wait for. As with `pre`, every block
  // must be resident at once.
  BarrierCopy post[kMaxBarrierRanks];
  int npost = 0;
  unsigned long long* mid = nullptr;
  // Whether the kernel's blocks wait for each other (copies around its work): then its launch
  // runs no more blocks than the GPU holds at once, at any size.
  bool blocks_wait() const { return npre > 0 || npost > 0; }
  // Where set, the exit's last block writes end_value here after every rank's exit (a word in
  // host memory registered for the device: the stream write a run would make after the kernel).
  uint32_t* end_word = nullptr;
  uint32_t end_value = 0;
};
// blocks_done (here and for launch_copy_kernel): where args.done_word is set, a device word of
// dev, 0 between launches (the kernel's count of finished blocks; its last block resets it).
void launch_reduce_kernel(const ReduceArgs& args, int dev, void* cuda_stream, unsigned* blocks_done = nullptr);
int sm_count(int dev);  // the device's SMs (reduce_cuda.cu, asked once per device)
// A device word of dev for launch_reduce_kernel's blocks_done, zeroed in the order of
// cuda_stream (where its first launch goes), and its release.
unsigned* alloc_block_counter(int dev, void* cuda_stream);
void free_block_counter(int dev, unsigned* word) noexcept;
// Copy kernel (copy_cuda.cu): at most kMaxCopySegments segments of kMaxCopyDests destinations.
constexpr int kMaxCopySegments = 16;
constexpr int kMaxCopyDests = 16;
void launch_copy_kernel(const CopyArgs& args, int dev, void* cuda_stream, unsigned* blocks_done = nullptr);
#endif

}  // namespace gpustripe::coll
