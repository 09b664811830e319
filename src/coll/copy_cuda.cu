// The copy kernel: several segments (a source and up to kMaxCopyDests destinations each) in
// one launch, sources and destinations anywhere the device maps (peers over NVLink). Blocks
// take the segments in turn (block b on segment b mod n), so every destination's link gets
// work from the first wave of blocks on; each thread loads 4 vectors before storing them to
// every destination (copy_elems.cuh). Optionally the
// GPUs' entry and exit barrier run inside (fused_barrier.cuh): one kernel per collective call.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "coll/copy_elems.cuh"
#include "coll/fused_barrier.cuh"
#include "coll/kernel_done.cuh"
#include "coll/reduce.hpp"
#include "coll/on_device.cuh"
#include "common/error.hpp"

namespace gpustripe::coll {
namespace {

// The launch's segments, by value: S segments of D destinations each (see SegOf).
template <int S, int D>
struct SegsOf {
  SegOf<D> s[S];
  int n;
};
// The argument a kernel without a barrier inside takes in FusedBarrier's place (~1 KB less to
// launch).
struct NoBarrier {};

constexpr int kThreads = 512;

template <int S, int D, class Bar>
__global__ void __launch_bounds__(kThreads) copy_kernel(SegsOf<S, D> p, Bar bar, KernelDone end) {
  constexpr bool fused = std::is_same_v<Bar, FusedBarrier>;
  unsigned long long e = 0;
  if constexpr (fused) e = fused_entry(bar);
  if (p.n > 0) {
    const SegShare my = seg_share(static_cast<unsigned>(p.n));
    copy_segment(p.s[my.seg], my.tid, my.stride);
  }
  if constexpr (fused) fused_exit(bar, e);
  if (end.word) announce_done(end);
}

// Most blocks of kThreads threads per SM of a copy kernel. 4 ranks, 1M-32M: 4 blocks per SM
// within noise of 2 (40-52 registers a thread by variant: two blocks of 512 threads fill most of an
// SM's registers).
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

// Segments and destinations a small argument block holds: a pair's or a 4-rank node's calls.
constexpr int kFewSegments = 4;

// Fills the launch's segments from a's (at most S of at most D destinations each); the largest
// segment's count of elements (16, 4 or 1 bytes) in *work, and in *wide_pull whether a segment
// reads a peer into several destinations from kPullMin bytes.
template <int S, int D>
SegsOf<S, D> segments(const CopyArgs& a, int dev, size_t* work, bool* wide_pull) {
  SegsOf<S, D> p{};
  for (const CopySegment& c : a.segs) {
    if (c.bytes == 0 || c.dsts.empty()) continue;
    *wide_pull = *wide_pull || (c.src_dev >= 0 && c.src_dev != dev && c.dsts.size() > 1 && c.bytes >= kPullMin);
    SegOf<D>& s = p.s[p.n++];
    s.src = static_cast<const unsigned char*>(c.src);
    s.nd = static_cast<int>(c.dsts.size());
    for (int d = 0; d < s.nd; ++d) s.dst[d] = static_cast<unsigned char*>(c.dsts[d]);
    s.bytes = c.bytes;
    s.align = alignment(c);
    *work = std::max(*work, (c.bytes + s.align - 1) / s.align);
  }
  return p;
}

template <int S, int D, class Bar>
void launch(const CopyArgs& a, const Bar& bar, bool blocks_wait, const KernelDone& done, int dev, cudaStream_t s) {
  size_t work = 0;  // elements of the largest segment
  bool wide_pull = false;
  const SegsOf<S, D> p = segments<S, D>(a, dev, &work, &wide_pull);
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
  auto* k = copy_kernel<S, D, Bar>;
  if (blocks_wait) {
    static std::atomic<int> resident[2] = {0, 0};  // this kernel's blocks per SM
    grid = std::min(grid, resident_blocks(k, kThreads, dev, resident));
  }
  k<<<grid, kThreads, 0, s>>>(p, bar, done);
  const cudaError_t e = cudaGetLastError();
  GS_REQUIRE(e == cudaSuccess, GPUSTRIPE_ERR_CUDA, "copy kernel (%d segments) on device %d: %s", p.n, dev,
             cudaGetErrorString(e));
}

// The launch in the smallest argument block that holds its segments (`few`: at most
// kFewSegments of at most kFewSegments destinations).
template <class Bar>
void launch_sized(const CopyArgs& a, bool few, const Bar& bar, bool blocks_wait, const KernelDone& done, int dev,
                  cudaStream_t s) {
  if (few)
    launch<kFewSegments, kFewSegments>(a, bar, blocks_wait, done, dev, s);
  else
    launch<kMaxCopySegments, kMaxCopyDests>(a, bar, blocks_wait, done, dev, s);
}

}  // namespace

void launch_copy_kernel(const CopyArgs& a, int dev, void* cuda_stream, unsigned* blocks_done) {
  GS_REQUIRE(a.segs.size() <= static_cast<size_t>(kMaxCopySegments), GPUSTRIPE_ERR_INTERNAL,
             "copy kernel takes at most %d segments, got %zu", kMaxCopySegments, a.segs.size());
  size_t n = 0, nd = 0;  // segments that copy something, and the most destinations of one
  for (const CopySegment& c : a.segs) {
    GS_REQUIRE(c.dsts.size() <= static_cast<size_t>(kMaxCopyDests), GPUSTRIPE_ERR_INTERNAL,
               "copy kernel writes at most %d destinations per segment, got %zu", kMaxCopyDests, c.dsts.size());
    if (c.bytes != 0 && !c.dsts.empty()) {
      ++n;
      nd = std::max(nd, c.dsts.size());
    }
  }
  if (n == 0 && !a.barrier) return;
  KernelDone done;
  if (a.done_word) {
    GS_REQUIRE(blocks_done != nullptr, GPUSTRIPE_ERR_INTERNAL, "copies announcing their end without a block counter");
    done = KernelDone{a.done_word, a.done_value, blocks_done};
  }
  const bool few = n <= size_t{kFewSegments} && nd <= size_t{kFewSegments};
  const auto s = static_cast<cudaStream_t>(cuda_stream);
  if (a.barrier)
    launch_sized(a, few, *a.barrier, a.barrier->blocks_wait(), done, dev, s);
  else
    launch_sized(a, few, NoBarrier{}, false, done, dev, s);
}

}  // namespace gpustripe::coll
