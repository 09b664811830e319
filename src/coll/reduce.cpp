#include "coll/reduce.hpp"

#include <atomic>
#include <map>
#include <mutex>

#include "common/error.hpp"
#include "common/log.hpp"

namespace gpustripe::coll {

void check_reduce_args(const ReduceArgs& a) {
  check_reduction(a.dtype, a.op);
  GS_REQUIRE(!a.srcs.empty(), GPUSTRIPE_ERR_INVALID_ARGUMENT, "reduction without sources");
  if (a.count == 0) return;
  GS_REQUIRE(a.dst != nullptr, GPUSTRIPE_ERR_INVALID_POINTER, "reduction destination is NULL");
  for (size_t i = 0; i < a.srcs.size(); ++i)
    GS_REQUIRE(a.srcs[i] != nullptr, GPUSTRIPE_ERR_INVALID_POINTER, "reduction source %zu is NULL", i);
  for (size_t i = 0; i < a.more_dsts.size(); ++i)
    GS_REQUIRE(a.more_dsts[i] != nullptr, GPUSTRIPE_ERR_INVALID_POINTER, "reduction destination %zu is NULL", i + 1);
}

ReduceArgs reduce_args(const Op& op) {
  ReduceArgs a;
  a.dst = op.dst;
  a.more_dsts = op.more_dsts;
  a.srcs = op.srcs;
  a.count = op.count;
  a.dtype = op.dtype;
  a.op = op.redop;
  a.blocks_per_sm = op.blocks_per_sm;
  return a;
}

namespace {

// Emulated devices live in host memory, and the emulated backend offers no host
// callbacks on its streams: wait for the stream, then reduce on this thread. The
// reduction is thereby ordered after everything before it on s, and everything
// enqueued on s later runs after it, which is all the schedules rely on.
class HostReducer : public Reducer {
 public:
  explicit HostReducer(Backend& b) : backend_(b) {}
  void reduce_async(const ReduceArgs& args, int dev, StreamHandle s) override {
    check_reduce_args(args);
    backend_.synchronize_stream(s);
    reduce_host(args);
    if (args.done_word) reinterpret_cast<std::atomic<uint32_t>*>(args.done_word)->store(args.done_value,
                                                                                       std::memory_order_release);
  }
  bool can_signal(const ReduceArgs&) const override { return true; }
  void copy_async(const CopyArgs& args, int dev, StreamHandle s) override {
    (void)dev;
    backend_.synchronize_stream(s);
    copy_host(args);
    if (args.done_word) reinterpret_cast<std::atomic<uint32_t>*>(args.done_word)->store(args.done_value,
                                                                                       std::memory_order_release);
  }
  bool can_signal_copy(const CopyArgs&) const override { return true; }

 private:
  Backend& backend_;
};

#if GPUSTRIPE_HAVE_CUDA
// part.more_dsts = as many of args.more_dsts from `from` on as one launch writes.
void more_dsts_from(ReduceArgs& part, const ReduceArgs& args, size_t from) {
  part.more_dsts.clear();
  for (size_t i = from; i < args.more_dsts.size() && part.more_dsts.size() + 1 < kMaxKernelDests; ++i)
    part.more_dsts.push_back(args.more_dsts[i]);
}

// On 4x H200 (busbw GB/s, two runs): the barrier inside the kernel gains at 1-2M
// per rank (reduce-scatter 53/84 vs 48/81 at 1M/2M; allreduce 92/139 vs 81-85/128-132), is
// even at 4-8M and loses for larger reduce-scatters (16M/32M: 206-209/248-251 vs 230/270).
// So the barrier goes inside reductions of results up to 512K per rank's kernel.
constexpr size_t kFusedMax = size_t(512) << 10;

bool one_launch(const ReduceArgs& a) {
  return a.srcs.size() <= static_cast<size_t>(kMaxKernelSources) &&
         a.more_dsts.size() < static_cast<size_t>(kMaxKernelDests);
}

class CudaReducer : public Reducer {
 public:
  ~CudaReducer() override {
    for (auto& [dev, word] : blocks_done_) free_block_counter(dev, word);
  }
  bool can_fuse_copy(const CopyArgs& a) const override {
    if (a.segs.size() > static_cast<size_t>(kMaxCopySegments)) return false;
    for (const CopySegment& s : a.segs)
      if (s.dsts.size() > static_cast<size_t>(kMaxCopyDests)) return false;
    return true;
  }
  // One launch that copies something (an empty one launches nothing), no barrier inside.
  bool can_signal_copy(const CopyArgs& a) const override {
    if (a.barrier || !can_fuse_copy(a)) return false;
    for (const CopySegment& s : a.segs)
      if (s.bytes > 0 && !s.dsts.empty()) return true;
    return false;
  }
  void copy_async(const CopyArgs& args, int dev, StreamHandle s) override {
    if (args.done_word) {
      GS_REQUIRE(can_signal_copy(args), GPUSTRIPE_ERR_INTERNAL, "copies of %zu segments announcing their end",
                 args.segs.size());
      launch_copy_kernel(args, dev, s, block_counter(dev, s));
      return;
    }
    if (args.barrier) {
      GS_REQUIRE(can_fuse_copy(args), GPUSTRIPE_ERR_INTERNAL, "a barrier inside a copy kernel of %zu segments",
                 args.segs.size());
      launch_copy_kernel(args, dev, s);  // even of 0 bytes: the barrier still runs
      return;
    }
    // One launch per kMaxCopySegments segments of at most kMaxCopyDests destinations each.
    CopyArgs part;
    auto flush = [&] {
      if (!part.segs.empty()) launch_copy_kernel(part, dev, s);
      part.segs.clear();
    };
    for (const CopySegment& seg : args.segs) {
      if (seg.bytes == 0) continue;
      for (size_t d = 0; d < seg.dsts.size(); d += kMaxCopyDests) {
        CopySegment piece{seg.src, {}, seg.bytes};
        for (size_t k = d; k < seg.dsts.size() && k < d + kMaxCopyDests; ++k) piece.dsts.push_back(seg.dsts[k]);
        if (part.segs.size() == static_cast<size_t>(kMaxCopySegments)) flush();
        part.segs.push_back(std::move(piece));
      }
    }
    flush();
  }
  bool can_fuse_barrier(const ReduceArgs& a) const override {
    // With copies before the entry or after the work (a staged call's stores, its copies out), the
    // barriers go inside at any size: the alternative is launches and barrier kernels of their own.
    return one_launch(a) && (a.count * dtype_size(a.dtype) <= kFusedMax ||
                             (a.barrier && a.barrier->blocks_wait()));
  }
  // One launch, with elements (a reduction of none launches nothing), and no barrier inside.
  bool can_signal(const ReduceArgs& a) const override { return !a.barrier && a.count > 0 && one_launch(a); }
  void reduce_async(const ReduceArgs& args, int dev, StreamHandle s) override {
    check_reduce_args(args);
    if (args.done_word) {
      GS_REQUIRE(can_signal(args), GPUSTRIPE_ERR_INTERNAL, "a reduction of %zu sources, %zu elements announcing its end",
                 args.srcs.size(), args.count);
      launch_reduce_kernel(args, dev, s, block_counter(dev, s));
      return;
    }
    if (args.barrier) {
      GS_REQUIRE(one_launch(args), GPUSTRIPE_ERR_INTERNAL, "a barrier inside a reduction of %zu sources",
                 args.srcs.size());
      launch_reduce_kernel(args, dev, s);  // even of 0 elements: the barrier still runs
      return;
    }
    if (args.count == 0) return;
    if (one_launch(args)) {  // the common case: no copy of the arguments
      launch_reduce_kernel(args, dev, s);
      return;
    }
    // More sources than one launch takes: fold them in groups, accumulating into dst; the
    // other destinations only from the last group on (they may be sources: read them first).
    ReduceArgs part = args;
    size_t next = 0;
    bool first = true;
    while (next < args.srcs.size()) {
      part.srcs.clear();
      part.more_dsts.clear();
      if (!first) part.srcs.push_back(args.dst);
      size_t room = kMaxKernelSources - part.srcs.size();
      for (size_t i = 0; i < room && next < args.srcs.size(); ++i) part.srcs.push_back(args.srcs[next++]);
      if (next == args.srcs.size()) more_dsts_from(part, args, 0);
      launch_reduce_kernel(part, dev, s);
      first = false;
    }
    // More destinations than one launch writes: copy the result on, a launch per group.
    for (size_t done = part.more_dsts.size(); done < args.more_dsts.size(); done += part.more_dsts.size()) {
      part.srcs.assign(1, args.dst);
      more_dsts_from(part, args, done);
      launch_reduce_kernel(part, dev, s);
    }
  }

 private:
  // The announcing launches' counter of finished blocks on dev, made at the first (zeroed on
  // its stream, s). Later ones on other streams of dev follow the host's sight of the previous
  // one's done word, written after its last block reset the counter.
  unsigned* block_counter(int dev, StreamHandle s) {
    std::lock_guard<std::mutex> l(mu_);
    unsigned*& w = blocks_done_[dev];
    if (!w) w = alloc_block_counter(dev, s);
    return w;
  }
  std::mutex mu_;
  std::map<int, unsigned*> blocks_done_;
};
#endif

}  // namespace

std::unique_ptr<Reducer> make_reducer(Backend& backend) {
  if (backend.emulated()) return std::make_unique<HostReducer>(backend);
#if GPUSTRIPE_HAVE_CUDA
  return std::make_unique<CudaReducer>();
#else
  GS_THROW(GPUSTRIPE_ERR_NOT_SUPPORTED, "no reduction for backend '%s' in this build (built without CUDA)",
           backend.name());
#endif
}

}  // namespace gpustripe::coll
