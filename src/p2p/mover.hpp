// The copies of the p2p layer: started asynchronously, polled for completion, so
// one rank can have many rendezvous transfers in flight (bandwidth windows, both
// directions at once) without a thread. Device copies run on one stream per device
// through `copy` (the engine's multi-path copy_async when the p2p layer has an
// engine, else the backend's single-path copy); host-to-host copies are memcpy.
#pragma once
#include <cstddef>
#include <cstdint>
#include <deque>
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

// What the caller of a copy knows of the traffic around it, for its plan.
struct CopyHints {
  // How many more copies will follow this one between the same buffers' GPUs soon (a
  // receiver's receives posted behind the one it matched: a window).
  int ahead = 0;
  // The peer copies a message of this rank at the same time, the other way (this rank's own
  // sends to it in flight: a Sendrecv, a two-way window), whether or not it is listed yet.
  bool both_ways = false;
};

class Mover {
 public:
  using Hints = CopyHints;
  // Enqueues the copy on `stream`; returns what to run once it has completed (may be empty).
  using CopyFn = std::function<std::function<void()>(void* dst, int dst_dev, const void* src, int src_dev,
                                                     size_t bytes, StreamHandle stream, const Hints& hints)>;
  // `backend` null: host memory only. `copy` empty: backend->copy_async.
  explicit Mover(Backend* backend, CopyFn copy = {});
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
  // start() for a copy between device memory and host memory whose ranges the caller has
  // checked (eager slots: small messages, whose latency the pointer queries and the copy
  // function's planning would show): the backend's copy alone, polled like the others.
  uint64_t start_prechecked(void* dst, int dst_dev, const void* src, int src_dev, size_t bytes);
  // Whether the copy has completed. The copies of one stream complete in the order they were
  // started, so each stream's are asked in that order and, within one poll pass (new_pass),
  // a stream whose oldest copy was seen running is not asked again: an event query costs
  // about 1.5 us of host time, and a window of 64 receives in flight asked all of them on
  // every pass.
  bool done(uint64_t ticket);
  // Starts a new poll pass (the endpoint's progress calls it once per pass).
  void new_pass() { ++pass_; }
  // A copy that has finished when it returns.
  void copy_now(void* dst, int dst_dev, const void* src, int src_dev, size_t bytes);
  // The same between host and device memory whose ranges the caller has checked
  // (within_allocation, its own pinned memory): the backend skips its pointer queries,
  // which small messages notice (two driver calls per copy on CUDA).
  void copy_now_prechecked(void* dst, int dst_dev, const void* src, int src_dev, size_t bytes);

 private:
  StreamHandle stream_for(int dev);
  // Records the completion of what `s` (of `dev`) has enqueued; returns its ticket.
  uint64_t track(int dev, StreamHandle s, std::function<void()> after);

  Backend* backend_;
  CopyFn copy_;
  struct Streams {
    std::vector<StreamHandle> all;  // GPUSTRIPE_P2P_STREAMS of them, taken in turn
    size_t next = 0;
  };
  std::map<int, Streams> streams_;
  // start_prechecked's streams, per (device, toward the device): a small copy does not queue
  // behind a large one, nor a receiver's copy in behind its own sends' copies out.
  std::map<std::pair<int, bool>, StreamHandle> small_streams_;
  struct Pending {
    EventHandle event;            // recorded after the copy
    std::function<void()> after;  // the copy function's completion step
    StreamHandle stream;
  };
  std::map<uint64_t, Pending> pending_;
  struct Order {
    std::deque<uint64_t> tickets;  // in flight on the stream, oldest first
    uint64_t busy_pass = 0;        // the pass in which its oldest was seen running
  };
  std::map<StreamHandle, Order> order_;
  uint64_t pass_ = 1;
  // Finishes the copies of `stream` up to and including `ticket` (all complete: stream order).
  void finish_through(StreamHandle stream, uint64_t ticket);
  void finish(std::map<uint64_t, Pending>::iterator it);
  std::vector<EventHandle> free_events_;
  std::map<EventHandle, int> event_dev_;
  uint64_t next_ticket_ = 1;
};

// The copy of a p2p layer with an engine: GPU-to-GPU copies (a rendezvous into a
// peer's buffer) are the engine's multi-path copies; copies to and from host memory
// are plain backend copies (the engine moves data between GPUs only). With `board`,
// a copy is listed on the node's board while it runs, and planned together with the
// other ranks' copies in flight (Planner::plan_concurrent), which share the links.
Mover::CopyFn engine_copy(Engine& engine, ipc::Channel* board = nullptr);

}  // namespace gpustripe::p2p
