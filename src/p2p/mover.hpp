// The copies of the p2p layer: started asynchronously, polled for completion, so
// one rank can have many rendezvous transfers in flight (bandwidth windows, both
// directions at once) without a thread. Device copies run on one stream per device
// through `copy` (the engine's multi-path copy_async when the p2p layer has an
// engine, else the backend's single-path copy); host-to-host copies are memcpy.
#pragma once
#include <cstddef>
#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <map>
#include <vector>

#include "backend/backend.hpp"

namespace gpustripe {
class Engine;
namespace ipc {
class Channel;
}
}  // namespace gpustripe

namespace gpustripe::p2p {

// Where a buffer lives, as the copies need it.
struct MemLoc {
  bool device = false;
  int dev = kHostDevice;  // owning GPU for device memory
  uintptr_t base = 0;     // device memory: its allocation (size 0: bounds unknown)
  size_t size = 0;
  uint64_t buffer_id = 0; // device memory: the allocation's id (0: unknown), new for a reused address
};

// Plain copies a copy function leaves to the mover to enqueue together: the direct copies of
// small messages matched in one progress pass (a window) go to the backend in one call on the
// stream the mover chose, before the event that completes them is recorded. `enqueue` (with
// `context`) is set by the copy function that appended: it enqueues `n` copies on a stream.
struct PlainBatch {
  std::vector<Backend::BatchCopy> copies;
  void (*enqueue)(void* context, const Backend::BatchCopy* copies, size_t n, StreamHandle stream) = nullptr;
  void* context = nullptr;
};

// What the caller of a copy knows of the traffic around it, for its plan.
struct CopyHints {
  // How many more copies will follow this one between the same buffers' GPUs soon (a
  // receiver's receives posted behind the one it matched: a window).
  int ahead = 0;
  // The peer copies a message of this rank at the same time, the other way (this rank's own
  // sends to it in flight: a Sendrecv, a two-way window), whether or not it is listed yet.
  bool both_ways = false;
  // Set by the mover inside a batch (Mover::begin_batch): a copy that is one plain copy may be
  // appended here instead of enqueued (the mover enqueues the batch before its event).
  PlainBatch* batch = nullptr;
};

class Mover {
 public:
  using Hints = CopyHints;
  // Enqueues the copy on `stream`; returns what to run once it has completed (may be empty).
  using CopyFn = std::function<std::function<void()>(void* dst, int dst_dev, const void* src, int src_dev,
                                                     size_t bytes, StreamHandle stream, const Hints& hints)>;
  // Whether a copy of `bytes` from GPU `src_dev` to GPU `dst_dev` is one plain copy (the copy
  // function's regime of the model's direct-alone sizes, engine_plain): the receiver then issues
  // it in its own GPU's context (start_plain).
  using PlainFn = std::function<bool(int src_dev, int dst_dev, size_t bytes)>;
  // `backend` null: host memory only. `copy` empty: backend->copy_async. `plain` empty: no copy
  // is taken for a plain one (start_plain is then never chosen).
  explicit Mover(Backend* backend, CopyFn copy = {}, PlainFn plain = {});
  ~Mover();
  Mover(const Mover&) = delete;
  Mover& operator=(const Mover&) = delete;

  // Throws ERR_INVALID_POINTER unless [p, p + bytes) lies inside the device allocation
  // `loc` describes (nothing to check for host memory, or where the bounds are unknown).
  static void check_within(const MemLoc& loc, const void* p, size_t bytes, const char* what);
  // Device memory or not (plain host for pointers the backend does not know).
  MemLoc locate(const void* p) const;

  // Starts a copy; the ticket polls as done() once the data is in place. Zero bytes
  // and host-to-host copies complete before start() returns. `hints`: as CopyFn's.
  // Device copies: the caller has checked both ranges (check_within, the mapping cache's
  // bounds); the copies of small messages skip the pointer queries.
  uint64_t start(void* dst, int dst_dev, const void* src, int src_dev, size_t bytes, const Hints& hints = {});
  // Whether a copy between these GPUs of this size is one plain copy (PlainFn).
  bool plain(int src_dev, int dst_dev, size_t bytes) const { return plain_ && plain_(src_dev, dst_dev, bytes); }
  // A plain copy into GPU `dev`'s memory out of a peer's buffer mapped in that GPU's context
  // (named `src_named`: Backend::ipc_named_device), on a stream of `dev`, as UCX's cuda_ipc pulls:
  // the driver's copy within one GPU's context costs the host less than a peer copy on a stream
  // of the source's GPU, on a pulled small message's latency path. Checked ranges only; polled
  // and batched (inside begin_batch/end_batch) like start()'s copies.
  uint64_t start_plain(void* dst, int dev, const void* src, int src_named, size_t bytes);
  // The same the other way: out of GPU `dev`'s memory into a peer's buffer mapped in that GPU's
  // context (named `dst_named`), on a stream of `dev` (a sender pushing into a receive offered).
  uint64_t start_plain_out(void* dst, int dst_named, const void* src, int dev, size_t bytes);
  // Between begin_batch and end_batch (one progress pass), the copies started share one event
  // per stream, recorded by end_batch after the last of them (a stream's copies complete in
  // order, so that one event completes them all), and plain copies are enqueued together
  // (PlainBatch). Outside a batch every copy is a group of its own (its event, or none while it
  // is alone on its stream: Group), except deferred ones
  // (start_prechecked), which begin_batch enqueues together. Asking done() of a copy whose event
  // is not recorded yet records it (a batch never left open holds a copy back).
  void begin_batch();
  void end_batch();
  // start() for a copy between device memory and host memory whose ranges the caller has
  // checked (eager slots: small messages, whose latency the pointer queries and the copy
  // function's planning would show): the backend's copy alone, polled like the others. Inside a
  // batch, the copies of one stream go to the backend in one call (Backend::copy_batch_prechecked)
  // at its end. `defer`: outside a batch too, the copy waits for the next begin_batch or
  // end_batch (the next progress pass), or for done() asking about it, so that the copies of a
  // window of sends posted back to back are enqueued together; its ticket works at once.
  uint64_t start_prechecked(void* dst, int dst_dev, const void* src, int src_dev, size_t bytes, bool defer = false);
  // Whether the copy has completed. The copies of one stream complete in the order they were
  // started, so each stream's events are asked in that order and, within one poll pass
  // (new_pass), a stream whose oldest event was seen running is not asked again: an event query
  // is a driver call (0.17-0.22 us on 2x H200, bench/probes/completion_mark.cu), and a window of
  // 64 receives in flight asked all of them on every pass. A ticket is its stream and its place
  // there: no lookup per copy.
  bool done(uint64_t ticket);
  // No copy in flight or waiting to be enqueued: polling would find nothing to finish.
  bool idle() const;
  // Starts a new poll pass (the endpoint's progress calls it once per pass).
  void new_pass() { ++pass_; }
  // A copy that has finished when it returns.
  void copy_now(void* dst, int dst_dev, const void* src, int src_dev, size_t bytes);
  // The same between host and device memory whose ranges the caller has checked
  // (within_allocation, its own pinned memory): the backend skips its pointer queries,
  // which small messages notice (two driver calls per copy on CUDA).
  void copy_now_prechecked(void* dst, int dst_dev, const void* src, int src_dev, size_t bytes);

 private:
  // A stream and its copies: numbered in start order (seq), completed in that order.
  // Copies (prev group's last, last] and the one event recorded after them. A group alone on its
  // stream has no event (null): the stream's completion is its own, asked of the stream, which
  // spares the event's record in the copy's latency (bench/results/*w1-floor*); seal() records
  // its event before anything else is enqueued behind it.
  struct Group {
    EventHandle event;
    uint64_t last;
    std::vector<std::function<void()>> after;  // the copy function's completion steps
    uint64_t pass;  // recorded at the end of this pass's batch (0: outside one): not asked in it
  };
  struct Lane {
    StreamHandle stream = nullptr;
    int dev = kHostDevice;
    uint64_t next = 1;      // seq of the next copy
    uint64_t done = 0;      // copies up to this seq have completed
    uint64_t recorded = 0;  // copies up to this seq have their event
    bool open = false;      // listed in open_ (copies without an event)
    PlainBatch batch;       // plain copies not enqueued yet
    std::vector<std::function<void()>> open_after;
    std::deque<Group> groups;  // events in flight, oldest first
    uint64_t busy_pass = 0;    // the pass in which its oldest event was seen running
    // Copies [failed_from, failed_upto] whose batch the backend refused: done() throws `failure`.
    uint64_t failed_from = 1, failed_upto = 0;
    std::exception_ptr failure;
  };
  struct Device {
    std::vector<size_t> lanes;  // kStreams (mover.cpp) of them, taken in turn while busy
    size_t last = 0;            // the one the last copy took
    std::vector<EventHandle> free_events;
  };
  static constexpr int kLaneBits = 8;
  size_t lane_for(int dev);
  // start_plain's and start_plain_out's copy on a stream of GPU `dev`.
  uint64_t start_plain_on(int dev, const Backend::BatchCopy& c);
  // Enqueues the lane's batched plain copies and records one event after its copies.
  void close(size_t lane, bool batch_end = false);
  // Closes every lane with copies whose event is not recorded yet, and leaves the batch.
  void close_open(bool batch_end);
  // The ticket of the copy just put on `lane`: closed now, or (`together`) left open with the
  // lane's other copies until the batch ends.
  uint64_t issue(size_t lane, bool together);
  // Finishes the lane's groups whose events have completed (`wait`: through seq `upto`).
  void poll(Lane& l, uint64_t upto, bool wait);
  void finish_front(Lane& l);
  // Blocks until the lane's oldest group has completed.
  void wait_front(Lane& l);
  // An event (pooled per device) recorded on the lane's stream now.
  EventHandle mark(Lane& l);
  // Gives the lane's last group its event if it has none: before anything else goes on its stream.
  void seal(Lane& l);
  // A plain backend copy on the lane's stream whose ranges the caller checked: enqueued now, or
  // (`together`) into the lane's batch of the pass.
  void put_plain(Lane& l, const Backend::BatchCopy& c, bool together);

  Backend* backend_;
  CopyFn copy_;
  PlainFn plain_;
  std::deque<Lane> lanes_;  // a deque: references stay valid as lanes are added
  std::map<int, Device> devices_;
  std::vector<size_t> open_;  // lanes with copies whose event is not recorded yet
  bool batching_ = false;
  // start_prechecked's lanes, per (device, toward the device): a small copy does not queue
  // behind a large one, nor a receiver's copy in behind its own sends' copies out.
  std::map<std::pair<int, bool>, size_t> small_lanes_;
  size_t new_lane(int dev);
  uint64_t pass_ = 1;
};

// The copy of a p2p layer with an engine: GPU-to-GPU copies (a rendezvous into a
// peer's buffer) are the engine's multi-path copies; copies to and from host memory
// are plain backend copies (the engine moves data between GPUs only). With `board`,
// a copy is listed on the node's board while it runs, and planned together with the
// other ranks' copies in flight (Planner::plan_concurrent), which share the links.
Mover::CopyFn engine_copy(Engine& engine, ipc::Channel* board = nullptr);
// The regime engine_copy takes one plain copy for (between two GPUs, up to direct_limit), for
// the mover's start_plain.
Mover::PlainFn engine_plain(Engine& engine);

// The size (to 4 KB) up to which the engine's lone plan between two GPUs is the direct path
// alone (0: not even 4 KB): copies up to it take one plain copy and none of the planning,
// listing or pointer queries larger ones need. The model decides where splitting starts to pay
// on this node (its calibration), so the bound is asked of it (doubling, then halving the
// interval where the plan changes): callers keep it per GPU pair.
uint64_t direct_limit(Engine& engine, int src, int dst);

}  // namespace gpustripe::p2p
