// A barrier among the GPUs of a communicator that the GPUs run themselves, for the entry
// and exit of per-rank graphs (executor.hpp): on each rank's stream a one-thread kernel
// stores the barrier's number into this rank's flag in every peer's memory (over NVLink)
// and spins until every peer's flag in its own memory has reached that number. A CUDA
// event waited on by another GPU costs far more than that. The number is a counter in
// device memory that the kernel increments, so a barrier captured into a graph counts on
// at every replay; every rank runs the same barriers in the same order. A spin that
// outlasts GPUSTRIPE_COLL_BARRIER_TIMEOUT gives up and leaves a mark the host checks
// (ERR_TIMEOUT), never a hang.
#pragma once
#include <memory>
#include <vector>

#include "backend/backend.hpp"

namespace gpustripe::coll {

struct FusedBarrier;  // reduce.hpp (CUDA)
constexpr int kMaxBarrierRanks = 16;
// A copy a kernel makes before the barrier inside it (FusedBarrier::pre).
struct BarrierCopy {
  const void* src = nullptr;
  void* dst = nullptr;
  size_t bytes = 0;
};

class DeviceBarrier {
 public:
  virtual ~DeviceBarrier() = default;
  // Enqueues rank's part of the next barrier on s (a stream of rank's device).
  virtual void arrive_and_wait(int rank, StreamHandle s) = 0;
  // A dependency between ranks inside per-rank graphs, between the entry and exit
  // barriers: rank sets its flag `slot` in rank `to`'s memory to the current barrier
  // number; `to` waits on s until that flag reaches its own (equal) number.
  virtual int slots() const = 0;
  virtual void signal(int rank, int to, int slot, StreamHandle s) = 0;
  virtual void wait(int rank, int slot, StreamHandle s) = 0;
  // Throws ERR_TIMEOUT when a barrier gave up (call after the work has completed).
  virtual void check() = 0;
  // Device-side timeline (GPUSTRIPE_COLL_TRACE): a one-thread kernel on s stores the GPU's
  // global nanosecond timer into pinned stamp `index` (< stamps()); read after the work completed.
  virtual int stamps() const = 0;
  // Allocates the stamps (pinned memory: not while a stream is being captured).
  virtual void enable_stamps() = 0;
  virtual void stamp(int rank, int index, StreamHandle s) = 0;
  virtual unsigned long long stamp_value(int index) const = 0;
  // The entry and exit barrier of rank's per-rank graph run inside one reduction kernel
  // (reduce.hpp): fills *out and returns true where this barrier can (kernel barriers).
  virtual bool fused_args(int rank, FusedBarrier* out) {
    (void)rank;
    (void)out;
    return false;
  }
};

// nullptr where the backend cannot run one (emulated devices; not every pair of GPUs
// maps the other's memory): the executor then uses events.
std::unique_ptr<DeviceBarrier> make_device_barrier(Backend& backend, const std::vector<int>& devices, bool all_peer);

// The same barrier among the GPUs of a team of processes, one rank in this process: each rank's
// words (mapped_barrier_bytes, zero before the first barrier) lie in its own GPU's memory, which
// every other rank maps; `words[r]` is rank r's as this process addresses them (IPC mappings of
// the others'). The kernels and their numbers are DeviceBarrier's, so a reduction or copy kernel
// can run one inside (fused()).
class MappedBarrier {
 public:
  virtual ~MappedBarrier() = default;
  // Enqueues this rank's part of the next barrier on s (a stream of its GPU).
  virtual void arrive_and_wait(StreamHandle s) = 0;
  // The arguments of a kernel that runs the next two barriers inside it (entry and exit:
  // ReduceArgs::barrier, CopyArgs::barrier), with `pre` (at most kMaxBarrierRanks) copied by the
  // kernel before its entry, and end_word = end_value written by its exit's last block once every
  // rank has exited (a word in host memory registered for the device; null: none). With `post`
  // (at most kMaxBarrierRanks), three barriers: the kernel's work, a barrier, those copies, the
  // exit. Valid until the next call; null where no kernel can.
  virtual const FusedBarrier* fused(const std::vector<BarrierCopy>& pre, const std::vector<BarrierCopy>& post,
                                    uint32_t* end_word, uint32_t end_value) = 0;
  // Throws ERR_TIMEOUT when a barrier gave up (call after the work has completed).
  virtual void check() = 0;
};
size_t mapped_barrier_bytes(int nranks);
// nullptr where the backend cannot run one (emulated devices, more ranks than the kernels take).
std::unique_ptr<MappedBarrier> make_mapped_barrier(Backend& backend, int me, int dev, const std::vector<void*>& words);

#if GPUSTRIPE_HAVE_CUDA
// The kernel (barrier_cuda.cu): counter and error live in rank's memory / pinned memory.
struct BarrierKernelArgs {
  unsigned long long* counter = nullptr;                        // this rank's barrier number
  unsigned long long* peer_slot[kMaxBarrierRanks] = {};         // this rank's flag in each rank's array
  const unsigned long long* own_flags = nullptr;                // every rank's flag in this rank's array
  int n = 0, me = 0;
  unsigned long long timeout_ns = 0;
  int* error = nullptr;                                         // pinned host memory, set on a timeout
};
void launch_barrier_kernel(const BarrierKernelArgs& args, int dev, void* cuda_stream);
// Signal: *flag = *counter (flag in a peer's memory). Wait: spin until *flag >= *counter.
void launch_signal_kernel(const unsigned long long* counter, unsigned long long* flag, int dev, void* cuda_stream);
void launch_wait_kernel(const unsigned long long* counter, const unsigned long long* flag,
                        unsigned long long timeout_ns, int* error, int dev, void* cuda_stream);
// *slot = %globaltimer (slot in pinned host memory).
void launch_stamp_kernel(unsigned long long* slot, int dev, void* cuda_stream);
#endif

}  // namespace gpustripe::coll
