// The copy kernel: several segments (a source and up to kMaxCopyDests destinations each) in
// one launch, sources and destinations anywhere the device maps (peers over NVLink). Blocks
// take the segments in turn (block b on segment b mod n), so every destination's link gets
// work from the first wave of blocks on; each thread loads 4 vectors before storing them to
// every destination (copy_elems.cuh). Optionally the
// GPUs' entry and exit barrier run inside (fused_barrier.cuh): one kernel per collective call.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "coll/copy_elems.cuh"
#include "coll/fused_barrier.cuh"
#include "coll/kernel_done.cuh"
#include "coll/reduce.hpp"
#include "coll/on_device.cuh"
#include "common/error.hpp"

namespace gpustripe::coll {
namespace {

struct Segs {
  Seg s[kMaxCopySegments];
  int n;
};

constexpr int kThreads = 512;

__global__ void __launch_bounds__(kThreads) copy_kernel(Segs p, FusedBarrier bar, KernelDone end) {
  const bool fused = bar.blocks_done != nullptr;
  const unsigned long long e = fused ? fused_entry(bar) : 0;
  if (p.n > 0) {
    const SegShare my = seg_share(static_cast<unsigned>(p.n));
    copy_segment(p.s[my.seg], my.tid, my.stride);
  }
  if (fused) fused_exit(bar, e);
  if (end.word) announce_done(end);
}

// Most blocks of kThreads threads per SM of a copy kernel. 4 ranks, 1M-32M: 4 blocks per SM
// within noise of 2 (54 registers a thread: two blocks of 512 threads fill an SM's registers).
constexpr int64_t kCopyBlocksPerSm = 2;
// A segment that reads a peer and stores into several destinations (a broadcast's piece) from
// kPullMin bytes takes one block per SM: its loads from the peer gain from fewer blocks from
// ~10M per member on, and lose below.
constexpr int64_t kPullBlocksPerSm = 1;
constexpr size_t kPullMin = size_t(8) << 20;

int alignment(const CopySegment& c) {
  uintptr_t bits = reinterpret_cast<uintptr_t>(c.src);
  for (void* d : c.dsts) bits |= reinterpret_cast<uintptr_t>(d);
  return bits % 16 == 0 ? 16 : bits % 4 == 0 ? 4 : 1;
}

}  // namespace

void launch_copy_kernel(const CopyArgs& a, int dev, void* cuda_stream, unsigned* blocks_done) {
  GS_REQUIRE(a.segs.size() <= static_cast<size_t>(kMaxCopySegments), GPUSTRIPE_ERR_INTERNAL,
             "copy kernel takes at most %d segments, got %zu", kMaxCopySegments, a.segs.size());
  Segs p{};
  size_t work = 0;  // elements (16, 4 or 1 bytes) of the largest segment
  bool wide_pull = false;
  for (const CopySegment& c : a.segs) {
    if (c.bytes == 0 || c.dsts.empty()) continue;
    wide_pull = wide_pull || (c.src_dev >= 0 && c.src_dev != dev && c.dsts.size() > 1 && c.bytes >= kPullMin);
    GS_REQUIRE(c.dsts.size() <= static_cast<size_t>(kMaxCopyDests), GPUSTRIPE_ERR_INTERNAL,
               "copy kernel writes at most %d destinations per segment, got %zu", kMaxCopyDests, c.dsts.size());
    Seg& s = p.s[p.n++];
    s.src = static_cast<const unsigned char*>(c.src);
    s.nd = static_cast<int>(c.dsts.size());
    for (int d = 0; d < s.nd; ++d) s.dst[d] = static_cast<unsigned char*>(c.dsts[d]);
    s.bytes = c.bytes;
    s.align = alignment(c);
    work = std::max(work, (c.bytes + s.align - 1) / s.align);
  }
  const FusedBarrier bar = a.barrier ? *a.barrier : FusedBarrier{};
  if (p.n == 0 && !a.barrier) return;
  KernelDone done;
  if (a.done_word) {
    GS_REQUIRE(blocks_done != nullptr, GPUSTRIPE_ERR_INTERNAL, "copies announcing their end without a block counter");
    done = KernelDone{a.done_word, a.done_value, blocks_done};
  }
  OnDevice on(dev);
  // One thread per vector of the largest segment on each segment's blocks, up to the cap
  // (spread evenly over the segments): small copies get many short threads (latency),
  // large ones a grid that strides.
  const size_t nseg = std::max(1, p.n);
  const size_t per_seg = std::max<size_t>(1, (work + kThreads - 1) / kThreads);
  const int64_t per_sm = wide_pull ? kPullBlocksPerSm : kCopyBlocksPerSm;
  const size_t cap = std::max<size_t>(
      nseg, static_cast<size_t>(sm_count(dev)) * static_cast<size_t>(std::max<int64_t>(1, per_sm)) / nseg * nseg);
  unsigned grid = static_cast<unsigned>(std::min(cap, per_seg * nseg));
  if (bar.blocks_wait()) {
    static std::atomic<int> resident[2] = {0, 0};  // the copy kernel's blocks per SM
    grid = std::min(grid, resident_blocks(copy_kernel, kThreads, dev, resident));
  }
  copy_kernel<<<grid, kThreads, 0, static_cast<cudaStream_t>(cuda_stream)>>>(p, bar, done);
  const cudaError_t e = cudaGetLastError();
  GS_REQUIRE(e == cudaSuccess, GPUSTRIPE_ERR_CUDA, "copy kernel (%d segments) on device %d: %s", p.n, dev,
             cudaGetErrorString(e));
}

}  // namespace gpustripe::coll
