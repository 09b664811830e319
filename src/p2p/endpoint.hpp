// Send/receive between the ranks of one node, with MPI's matching rules.
//
// A message matches a receive when the communicator is equal, the source is equal
// or the receive takes any source, and the tag is equal or the receive takes any
// tag. Messages from one sender are matched in the order they were sent (the
// channel's rings are FIFO and unexpected messages queue in arrival order); a
// receive is matched against unexpected messages first, in arrival order.
//
// Eager up to eager_limit(): the data rides in the channel and the send
// completes once it is buffered. A device buffer is pulled instead (frame.hpp): exported
// with the announcement, the matched receiver copies out of it (one GPU-to-GPU copy, the
// engine's multi-path copy when there is one), so the data moves without the sender's
// progress; that is every nonblocking send of device memory, as UCX's. A blocking one (the
// caller waits for it at once: MPI_Send) up to the device eager limit rides in an eager slot
// (eager_slots.hpp) so that it completes without the receiver: the send queues the copy into
// the slot, progress posts the record once the copy is complete, in order with every other
// record to that peer, and the receiver copies out of the slot asynchronously (a pass's copies
// together). A host send buffer above the eager limit goes into an exported device receive
// buffer (push) or as fragments through the channel (stream). A message longer than the receive
// buffer delivers what fits and completes the receive with GPUSTRIPE_ERR_TRUNCATE.
//
// Progress happens inside the calls (test, wait, probe, progress): no thread.
// Thread-safe (one mutex). A dead peer fails the waits that need it with
// ERR_PEER_FAILED; a silent one with ERR_TIMEOUT after GPUSTRIPE_TIMEOUT.
#pragma once
#include <cstdint>
#include <deque>
#include <list>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <vector>

#include "backend/backend.hpp"
#include "ipc/channel.hpp"
#include "ipc/fd_exchange.hpp"
#include "ipc/handle_cache.hpp"
#include "p2p/eager_slots.hpp"
#include "p2p/frame.hpp"
#include "p2p/mover.hpp"
#include "p2p/request.hpp"

namespace gpustripe::p2p {

constexpr int kAnySource = -1;
constexpr int kAnyTag = -1;

// The largest message sent eagerly (16 KB).
uint64_t eager_limit();

class Endpoint {
 public:
  // `backend` null: host memory only (no device buffers, no mapped rendezvous).
  // `copy` empty: backend copies (single path); the MPI layer passes the engine's, and with it
  // `plain` (engine_plain): which pulls are one plain copy, issued in the receiver's context.
  Endpoint(ipc::Channel& channel, Backend* backend, Mover::CopyFn copy = {}, Mover::PlainFn plain = {});
  ~Endpoint();
  Endpoint(const Endpoint&) = delete;
  Endpoint& operator=(const Endpoint&) = delete;

  int rank() const { return ch_.rank(); }
  int size() const { return ch_.size(); }

  // Tags are >= 0 (kAnyTag only on receives); `comm` is any id both sides agree on.
  // `where`: where the buffer lives, when the caller has looked it up already (a
  // pointer query costs about a microsecond: small-message latency). `blocking`: the caller
  // waits for this send before it does anything else (MPI_Send, send()): a standard-mode device
  // message up to the device eager limit then goes through an eager slot and completes without
  // the receiver (what keeps Send/Send exchanges of small messages free of deadlock); otherwise
  // a device message of any size is pulled by the receiver.
  RequestPtr isend(const void* buf, uint64_t bytes, int dst, int tag, uint64_t comm, bool synchronous = false,
                   const MemLoc* where = nullptr, bool blocking = false);
  RequestPtr irecv(void* buf, uint64_t capacity, int src, int tag, uint64_t comm, const MemLoc* where = nullptr);

  // One progress pass, then whether `r` is complete.
  bool test(const RequestPtr& r);
  // MPI_Cancel's part: a receive no message has taken yet is cancelled (done, status().cancelled)
  // -- at once, or, if it was offered to its source, once the source has dropped the offer (its
  // answer; a message that took the receive first completes it as usual). Sends, and receives
  // already matched, are not cancelled: they complete as they would have. False then.
  bool cancel(const RequestPtr& r);
  // Whether `r` is complete, without progress (after a progress() that served many requests).
  bool done_now(const RequestPtr& r);
  // Progress until `r` completes. Throws ERR_PEER_FAILED / ERR_TIMEOUT (the request
  // then stays incomplete). A completed request's status carries truncation.
  void wait(const RequestPtr& r);
  // Blocking send/recv: isend (blocking) / irecv + wait; recv returns the status.
  void send(const void* buf, uint64_t bytes, int dst, int tag, uint64_t comm, bool synchronous = false);
  P2pStatus recv(void* buf, uint64_t capacity, int src, int tag, uint64_t comm);

  // The lean forms of a blocking send and receive of host memory (a ping-pong's messages, a
  // benchmark's acknowledgements): no request, no progress pass, one lock. Either does nothing
  // and says so where its conditions do not hold; the caller then takes isend/irecv.
  // send_now: an eager message straight into the ring to `dst` (another rank); false when it is
  // longer than the eager limit, records to `dst` wait in the outgoing queue, or the ring is full.
  bool send_now(const void* buf, uint64_t bytes, int dst, int tag, uint64_t comm);
  // recv_now: one look for a message from `src` (another rank) into host memory while this
  // endpoint has nothing else in flight (no receive posted, no send, copy or queued record
  // active): a matching eager message among the unexpected ones or at the head of the ring of
  // `src` is taken (Taken, *st filled). NotYet: look again. Elsewhere (something in flight, a
  // match that is a rendezvous or longer than `capacity`, another record at the ring's head):
  // nothing is taken (Elsewhere).
  enum class Lean { Taken, NotYet, Elsewhere };
  Lean recv_now(void* buf, uint64_t capacity, int src, int tag, uint64_t comm, P2pStatus* st);
  // Whether `src` (another rank) has written a record this endpoint has not read: no lock, so a
  // lean receive spins on it and looks (recv_now) only once something came.
  bool arrived(int src) const { return ch_.arrived(src); }

  // Whether a matching message has arrived, without receiving it; fills source,
  // tag and message_bytes.
  bool iprobe(int src, int tag, uint64_t comm, P2pStatus* status);
  P2pStatus probe(int src, int tag, uint64_t comm);

  // Moves messages: reads every ring, pushes queued records, finishes copies.
  void progress();
  // Before the channel goes away: pushes what is buffered for live peers (bounded).
  void flush();

  // Throws when the peers that `r` waits for are gone.
  void check_peers_for(const Request& r) const;
  // Throws when rank `src` (kAnySource: any rank dead, or all others finalized) is gone.
  void check_source(int src) const;

  ipc::HandleCache* handle_cache() { return cache_.get(); }
  // Passes the file descriptors of VMM / pool buffers (null without a backend).
  ipc::FdExchange* fd_exchange() { return fds_.get(); }
  Mover& mover() { return mover_; }
  // The eager slots of small device messages.
  const EagerSlots* eager_slots() const { return slots_.get(); }
  // Progress passes made so far (what a call costs the host: tests count them).
  uint64_t progress_passes() const { return passes_; }

 private:
  struct Unexpected {
    int src;
    int tag;
    uint64_t comm;
    uint64_t bytes;
    bool rendezvous;
    uint32_t flags;
    uint64_t send_id;
    std::vector<char> payload;  // eager data, or the Exported send buffer of a pull
  };

  void progress_locked();
  // Whether a pass now could change anything: a record arrived or waits to go out, a copy is in
  // flight, a send streams. The waits poll often and most polls find nothing: without it every
  // poll read each ring, walked the mover and the request lists (a record was seen 0.7 us after
  // it was written, on each of a window-1 message's three hops); with it a quiet poll costs a
  // few loads. Descriptor requests (fds_) are served here, as a pass would.
  bool pass_needed();
  // Writes a record to the ring to `dst`, or queues it when the ring is full; `owner`
  // does not complete before a queued record has gone out.
  void post(int dst, const Frame& f, const void* payload = nullptr, size_t payload_bytes = 0,
            const RequestPtr& owner = nullptr);
  void flush_outgoing(int dst);
  void handle(int src, const Frame& f, const char* payload);
  void on_message(int src, const Frame& f, const char* payload);
  // A matched receive takes the message (eager payload or a rendezvous start). `slot` >= 0:
  // the payload is that eager slot of `src`'s area, freed here or once the copy out completes.
  void deliver(const RequestPtr& r, int src, int tag, uint64_t bytes, bool rendezvous, uint32_t flags,
               uint64_t send_id, const char* payload, int slot = -1);
  // A small device send through an eager slot: false when no slot is free (the caller sends
  // the bytes in the record).
  bool send_through_slot(const RequestPtr& r, Frame& f);
  // Receives posted (and rendezvous messages arrived unmatched) that the next messages of
  // `src` on `comm` may meet: more copies from that peer soon (a window), for the copy's plan.
  int receives_ahead(int src, uint64_t comm) const;
  // Whether this rank has a message to `peer` in flight that the peer copies (pull or push):
  // a copy from `peer` now runs beside it, the other way.
  bool sends_in_flight_to(int peer) const;
  // Returns the pool import lease a finished copy of `r` held (HandleCache::release).
  void return_lease(Request& r);
  // This process's address of a buffer `peer` exported (mapping cache), mapped for GPU `reader`
  // (HandleCache::map; -1: in the owner's context).
  char* map_exported(int peer, const Exported& e, uint64_t bytes, int reader = -1);
  // map_exported for GPU `reader`, or null where the driver refuses such mappings between the
  // buffer's GPU and the reader (asked once per pair of GPUs).
  char* map_for_reader(int peer, const Exported& e, uint64_t bytes, int reader);
  // The Exported form of the device buffer [p, p + bytes) for rank `dst` (`loc`: where it
  // lives); false when it cannot be exported (no handle for that memory, or the buffer spans
  // two VMM allocations): the data then streams. Handles are kept per (allocation base,
  // buffer id): exporting costs three driver calls (two pointer queries and the handle), a
  // few microseconds per message. Fd kinds have their descriptor offered to `dst` here.
  // `pass_fd` false: the handle alone, its descriptor not offered to `dst` (an offer of a receive).
  bool try_export(const void* p, uint64_t bytes, const MemLoc& loc, int dst, Exported* e, bool pass_fd = true);
  // Device data of eager messages and stream fragments passes through one pinned host
  // buffer (copies to pageable memory take the driver's slower, staged path). One user
  // at a time: these copies finish before the call returns, under the mutex.
  char* bounce(size_t bytes);
  const char* from_device(const void* src, int dev, size_t bytes);
  void to_device(void* dst, int dev, const char* payload, size_t bytes);
  void advance_recvs();
  void complete_recv(Request& r);
  void on_cts(int src, const Frame& f, const char* payload);
  void advance_sends();
  // A device receive from one other rank, posted while no other receive could take that rank's
  // messages: offered to it (frame.hpp, Offer), so that its matching send copies into it.
  void offer(const RequestPtr& r);
  // A small device send that the peer's standing offer takes (a record from the peer is read
  // first): the copy starts now, into the offered buffer; false when the send is larger than the
  // device eager limit, there is no offer, it does not match, or the copy would not be one plain copy.
  bool push_into_offer(const RequestPtr& s);
  // A matchable message (eager or announced) posted to `dst`: counted, and any offer of its is
  // dropped (the message may take the offered receive).
  void sent_to(int dst);
  // A record of `kind` naming r's tag, communicator and size (its capacity, for a receive).
  static Frame envelope(FrameKind kind, const Request& r);
  // Ends receive `r` as cancelled (taken out of posted_ by the caller).
  static void cancelled(Request& r);
  // The posted receive `id`, taken out of posted_; null if it is not there (matched or done).
  RequestPtr take_posted(uint64_t id);
  // MPI's matching: a message (src, tag, comm) meets what a receive wants (a source or any, a tag
  // or any, its communicator).
  static bool matches(int want_src, int want_tag, uint64_t want_comm, int src, int tag, uint64_t comm);
  static bool matches(const Request& r, int src, int tag, uint64_t comm);
  RequestPtr find_send(uint64_t id) const;
  RequestPtr find_recv(uint64_t id) const;

  ipc::Channel& ch_;
  Backend* backend_;
  // Before mover_: the mover's destructor completes the copies into and out of the slots.
  std::unique_ptr<EagerSlots> slots_;
  Mover mover_;
  std::unique_ptr<ipc::FdExchange> fds_;  // before cache_: the cache's mappings close first
  std::unique_ptr<ipc::HandleCache> cache_;
  mutable std::recursive_mutex mu_;
  uint64_t next_id_ = 1;
  std::list<RequestPtr> posted_;        // receives not matched yet, in post order
  std::list<Unexpected> unexpected_;    // messages not matched yet, in arrival order
  std::list<RequestPtr> active_sends_;  // rendezvous / sync sends not done yet
  std::list<RequestPtr> active_recvs_;  // matched rendezvous receives not done yet
  struct Queued {
    std::vector<char> record;
    RequestPtr owner;
    uint64_t gate = 0;  // Mover ticket that completes before the record may go (0: none)
  };
  std::vector<std::deque<Queued>> outgoing_;  // per peer: records the ring had no room for
  size_t fragment_bytes_;
  uint64_t eager_max_ = 0;         // eager_limit(), at most a fragment
  uint64_t device_eager_max_ = 0;  // the same for blocking sends of device buffers (pulled above)
  std::map<std::pair<uintptr_t, uint64_t>, Exported> exports_;  // (base, buffer_id) -> handle, offset 0
  uint64_t passes_ = 0;
  // Offers (frame.hpp): per peer, the matchable messages posted to it and read from it, and its
  // standing offer.
  struct Offered {
    bool valid = false;
    uint64_t recv_id = 0;
    int tag = 0;
    uint64_t comm = 0;
    uint64_t capacity = 0;
    Exported e{};
  };
  std::vector<uint64_t> sent_to_, read_from_;
  std::vector<Offered> offers_;
  bool offering_ = true;  // GPUSTRIPE_TEST's offers=no turns offers off
  int streaming_ = 0;  // active sends in the Streaming state, as the last pass left them
  std::set<std::pair<int, int>> unmapped_for_reader_;  // (owner GPU, reader GPU) the driver refused
  char* bounce_ = nullptr;
  size_t bounce_bytes_ = 0;
};

}  // namespace gpustripe::p2p
