#include "coll/barrier.hpp"

#include <string>
#include <vector>

#include "coll/reduce.hpp"
#include "common/config.hpp"
#include "common/error.hpp"

namespace gpustripe::coll {
namespace {

const DoubleSetting kBarrierTimeout{"GPUSTRIPE_COLL_BARRIER_TIMEOUT", "10",
                                    "Seconds a GPU waits in a collective's entry or exit barrier for its peers "
                                    "before it gives up (the call then fails with ERR_TIMEOUT)"};

#if GPUSTRIPE_HAVE_CUDA
constexpr int kSlots = 4096;  // flags for dependencies between ranks, per rank
constexpr int kStamps = 1 << 15;  // timeline stamps (GPUSTRIPE_COLL_TRACE), all ranks together

// Per rank: n flags (one per peer), the counter, then kSlots dependency flags and the
// done-count of a fused barrier's blocks, in device memory; one pinned error word. Barriers,
// signals and waits are one-thread kernels (not stream memory operations): only a kernel can
// give up after a timeout, so a rank that never arrives fails the call instead of hanging it.
class CudaBarrier : public DeviceBarrier {
 public:
  CudaBarrier(Backend& b, std::vector<int> devices) : backend_(b), devices_(std::move(devices)) {
    const int n = static_cast<int>(devices_.size());
    const size_t words = blocks_done_index() + 1;
    for (int r = 0; r < n; ++r) {
      void* p = backend_.alloc_device(devices_[r], words * sizeof(unsigned long long));
      StreamHandle s = backend_.create_stream(devices_[r]);
      backend_.memset_async(p, devices_[r], 0, words * sizeof(unsigned long long), s);
      backend_.synchronize_stream(s);
      backend_.destroy_stream(s);
      mem_.push_back(static_cast<unsigned long long*>(p));
    }
    error_ = static_cast<int*>(backend_.alloc_pinned(sizeof(int)));
    *error_ = 0;
  }
  ~CudaBarrier() override {
    for (void* p : mem_) backend_.free_device(p);
    backend_.free_pinned(error_);
    if (stamps_) backend_.free_pinned(stamps_);
  }
  size_t blocks_done_index() const { return devices_.size() + 1 + kSlots; }
  int stamps() const override { return kStamps; }
  void enable_stamps() override {
    if (stamps_) return;  // only when tracing: most communicators never stamp
    stamps_ = static_cast<unsigned long long*>(backend_.alloc_pinned(kStamps * sizeof(unsigned long long)));
    for (int i = 0; i < kStamps; ++i) stamps_[i] = 0;
  }
  void stamp(int rank, int index, StreamHandle s) override {
    GS_REQUIRE(stamps_ && index >= 0 && index < kStamps, GPUSTRIPE_ERR_INTERNAL, "timeline stamp %d of %d%s", index,
               kStamps, stamps_ ? "" : " before enable_stamps");
    launch_stamp_kernel(stamps_ + index, devices_[rank], s);
  }
  unsigned long long stamp_value(int index) const override {
    if (!stamps_ || index < 0 || index >= kStamps) return 0;
    return reinterpret_cast<volatile unsigned long long*>(stamps_)[index];
  }
  bool fused_args(int rank, FusedBarrier* out) override {
    out->args = kernel_args(rank);
    out->blocks_done = reinterpret_cast<unsigned int*>(mem_[rank] + blocks_done_index());
    return true;
  }
  BarrierKernelArgs kernel_args(int rank) const {
    const int n = static_cast<int>(devices_.size());
    BarrierKernelArgs a;
    a.counter = mem_[rank] + n;
    for (int q = 0; q < n; ++q) a.peer_slot[q] = mem_[q] + rank;
    a.own_flags = mem_[rank];
    a.n = n;
    a.me = rank;
    a.timeout_ns = static_cast<unsigned long long>(kBarrierTimeout.get() * 1e9);
    a.error = error_;
    return a;
  }
  void arrive_and_wait(int rank, StreamHandle s) override {
    launch_barrier_kernel(kernel_args(rank), devices_[rank], s);
  }
  int slots() const override { return kSlots; }
  void signal(int rank, int to, int slot, StreamHandle s) override {
    const int n = static_cast<int>(devices_.size());
    launch_signal_kernel(mem_[rank] + n, mem_[to] + n + 1 + slot, devices_[rank], s);
  }
  void wait(int rank, int slot, StreamHandle s) override {
    const int n = static_cast<int>(devices_.size());
    launch_wait_kernel(mem_[rank] + n, mem_[rank] + n + 1 + slot,
                       static_cast<unsigned long long>(kBarrierTimeout.get() * 1e9), error_, devices_[rank], s);
  }
  void check() override {
    if (*reinterpret_cast<volatile int*>(error_) == 0) return;
    *error_ = 0;
    GS_THROW(GPUSTRIPE_ERR_TIMEOUT,
             "a GPU of the communicator waited more than %g s in a collective's barrier for its peers (a rank's "
             "stream blocked on another's later work?); results of that call are undefined",
             kBarrierTimeout.get());
  }

 private:
  Backend& backend_;
  std::vector<int> devices_;
  std::vector<unsigned long long*> mem_;
  int* error_ = nullptr;
  unsigned long long* stamps_ = nullptr;
};

// Rank me's words: n flags (one per rank), the counter, the done-count of a fused barrier's
// blocks, the count of its blocks arrived at the entry, the number of its mid barrier once passed
// (FusedBarrier::mid). The same kernels as CudaBarrier's.
class CudaMappedBarrier : public MappedBarrier {
 public:
  CudaMappedBarrier(Backend& b, int me, int dev, const std::vector<void*>& words) : backend_(b), dev_(dev) {
    const int n = static_cast<int>(words.size());
    error_ = static_cast<int*>(backend_.alloc_pinned(sizeof(int)));
    *error_ = 0;
    auto w = [&](int r) { return static_cast<unsigned long long*>(words[r]); };
    BarrierKernelArgs& a = fused_.args;
    a.counter = w(me) + n;
    for (int q = 0; q < n; ++q) a.peer_slot[q] = w(q) + me;
    a.own_flags = w(me);
    a.n = n;
    a.me = me;
    a.timeout_ns = static_cast<unsigned long long>(kBarrierTimeout.get() * 1e9);
    a.error = error_;
    fused_.blocks_done = reinterpret_cast<unsigned int*>(w(me) + n + 1);
    arrived_ = reinterpret_cast<unsigned int*>(w(me) + n + 2);
    mid_ = w(me) + n + 3;
  }
  ~CudaMappedBarrier() override { backend_.free_pinned(error_); }
  void arrive_and_wait(StreamHandle s) override { launch_barrier_kernel(fused_.args, dev_, s); }
  const FusedBarrier* fused(const std::vector<BarrierCopy>& pre, const std::vector<BarrierCopy>& post,
                            uint32_t* end_word, uint32_t end_value) override {
    if (pre.size() > static_cast<size_t>(kMaxBarrierRanks) || post.size() > static_cast<size_t>(kMaxBarrierRanks))
      return nullptr;
    launch_ = fused_;
    for (size_t i = 0; i < pre.size(); ++i) launch_.pre[i] = pre[i];
    launch_.npre = static_cast<int>(pre.size());
    launch_.arrived = pre.empty() ? nullptr : arrived_;
    for (size_t i = 0; i < post.size(); ++i) launch_.post[i] = post[i];
    launch_.npost = static_cast<int>(post.size());
    launch_.mid = post.empty() ? nullptr : mid_;
    launch_.end_word = end_word;
    launch_.end_value = end_value;
    return &launch_;
  }
  void check() override {
    if (*reinterpret_cast<volatile int*>(error_) == 0) return;
    *error_ = 0;
    GS_THROW(GPUSTRIPE_ERR_TIMEOUT,
             "this rank's GPU waited more than %g s in a collective's barrier for the other ranks' GPUs (a rank gone, "
             "or its stream blocked on later work?); results of that call are undefined",
             kBarrierTimeout.get());
  }

 private:
  Backend& backend_;
  int dev_;
  FusedBarrier fused_;          // the words' part, filled once
  FusedBarrier launch_;         // fused()'s answer
  unsigned int* arrived_ = nullptr;
  unsigned long long* mid_ = nullptr;
  int* error_ = nullptr;
};
#endif

}  // namespace

size_t mapped_barrier_bytes(int nranks) { return (static_cast<size_t>(nranks) + 4) * sizeof(unsigned long long); }

std::unique_ptr<MappedBarrier> make_mapped_barrier(Backend& backend, int me, int dev, const std::vector<void*>& words) {
#if GPUSTRIPE_HAVE_CUDA
  const int n = static_cast<int>(words.size());
  if (!backend.emulated() && n >= 2 && n <= kMaxBarrierRanks && me >= 0 && me < n)
    return std::make_unique<CudaMappedBarrier>(backend, me, dev, words);
#endif
  (void)backend;
  (void)me;
  (void)dev;
  (void)words;
  return nullptr;
}

std::unique_ptr<DeviceBarrier> make_device_barrier(Backend& backend, const std::vector<int>& devices, bool all_peer) {
#if GPUSTRIPE_HAVE_CUDA
  if (!backend.emulated() && all_peer && devices.size() >= 2 &&
      devices.size() <= static_cast<size_t>(kMaxBarrierRanks))
    return std::make_unique<CudaBarrier>(backend, devices);
#endif
  (void)backend;
  (void)devices;
  (void)all_peer;
  return nullptr;
}

}  // namespace gpustripe::coll
