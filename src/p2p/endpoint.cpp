#include "p2p/endpoint.hpp"

#include <algorithm>
#include <cstring>

#include "common/config.hpp"
#include "common/error.hpp"
#include "common/log.hpp"
#include "ipc/wait.hpp"
#include "p2p/trace.hpp"

namespace gpustripe::p2p {
namespace {
// Largest message sent eagerly through the node-local channel; larger ones use rendezvous
// (the sender copies into the receiver's mapped buffer).
constexpr uint64_t kEagerLimit = 16 << 10;
// A blocking device send up to this goes eagerly through an eager slot (two copies through host
// memory) so that it completes without the receiver; above it, and every nonblocking device send,
// is pulled by the receiver (one GPU-to-GPU copy). UCX makes the same choice for device memory: a
// blocking send copies in and out through host memory up to about 4 KB, a nonblocking one is a
// rendezvous read from 1 byte (bench/results/2026-11-26-ucx-protocols-29a9c71-nvidia-h200.txt). 4K
// is also Open MPI's shared-memory eager limit, so blocking sends that complete on Open MPI without
// their receiver complete here too (no new deadlock); 8-32 KB blocking took 16.7-18.6 us eagerly
// and 9.3-9.5 us pulled on 2x H200 (bench/results/2026-11-26-mpi-np2-w64-eager-slots-*).
constexpr uint64_t kDeviceEagerLimit = 4 << 10;
// Eager slots per ordered pair of ranks. A blocking send holds its slot until the receiver has
// read its record (into a posted receive: until the copy out of it completed), so a sender whose
// sends run ahead of its receiver holds one per message not read yet; past 128 (512 KB per pair of
// the 4 KB device eager limit) a send takes the bounce buffer (two synchronous copies) instead of
// waiting for one.
constexpr int kEagerSlots = 128;
}

uint64_t eager_limit() { return kEagerLimit; }

Endpoint::Endpoint(ipc::Channel& channel, Backend* backend, Mover::CopyFn copy, Mover::PlainFn plain)
    : ch_(channel), backend_(backend), mover_(backend, std::move(copy), std::move(plain)), outgoing_(channel.size()) {
  if (backend_) {
    fds_ = std::make_unique<ipc::FdExchange>(ch_, *backend_);
    cache_ = std::make_unique<ipc::HandleCache>(*backend_, 0, fds_.get());
  }
  fragment_bytes_ = (ch_.max_record() - sizeof(Frame) - 64) / 64 * 64;
  eager_max_ = std::min<uint64_t>(eager_limit(), fragment_bytes_);
  device_eager_max_ = std::min<uint64_t>(eager_max_, kDeviceEagerLimit);
  // Also without a backend or with device messages off here: a peer may still send them.
  slots_ = std::make_unique<EagerSlots>(ch_, backend_, std::max<uint64_t>(device_eager_max_, 1), kEagerSlots);
  offering_ = test_hook("offers", "yes") != "no";
  sent_to_.assign(ch_.size(), 0);
  read_from_.assign(ch_.size(), 0);
  offers_.resize(ch_.size());
}

Endpoint::~Endpoint() {
  try {
    flush();
  } catch (const Error& e) {
    GS_LOG_WARN(Subsys::P2p, "rank %d: leaving with undelivered records: %s", ch_.rank(), e.what());
  }
  if (bounce_) backend_->free_pinned(bounce_);
  try {
    trace_write(ch_.rank());
  } catch (const Error& e) {
    GS_LOG_WARN(Subsys::P2p, "rank %d: phase trace not written: %s", ch_.rank(), e.what());
  }
}

char* Endpoint::bounce(size_t bytes) {
  if (bytes > bounce_bytes_) {
    if (bounce_) backend_->free_pinned(bounce_);
    bounce_ = nullptr;
    bounce_bytes_ = std::max<size_t>(bytes, fragment_bytes_);
    bounce_ = static_cast<char*>(backend_->alloc_pinned(bounce_bytes_));
  }
  return bounce_;
}

const char* Endpoint::from_device(const void* src, int dev, size_t bytes) {
  char* b = bounce(bytes);
  mover_.copy_now_prechecked(b, kHostDevice, src, dev, bytes);  // ranges: check_within, our own bounce
  return b;
}

void Endpoint::to_device(void* dst, int dev, const char* payload, size_t bytes) {
  if (bytes == 0) return;
  char* b = bounce(bytes);
  if (b != payload) std::memcpy(b, payload, bytes);  // a message to oneself arrives in the bounce buffer
  mover_.copy_now_prechecked(dst, dev, b, kHostDevice, bytes);
}

bool Endpoint::matches(int want_src, int want_tag, uint64_t want_comm, int src, int tag, uint64_t comm) {
  return want_comm == comm && (want_src == kAnySource || want_src == src) && (want_tag == kAnyTag || want_tag == tag);
}

bool Endpoint::matches(const Request& r, int src, int tag, uint64_t comm) {
  return matches(r.peer_, r.tag_, r.comm_, src, tag, comm);
}

int Endpoint::receives_ahead(int src, uint64_t comm) const {
  int n = 0;
  for (const RequestPtr& p : posted_)
    if (p->comm_ == comm && (p->peer_ == src || p->peer_ == kAnySource)) ++n;
  for (const Unexpected& u : unexpected_)
    if (u.comm == comm && u.src == src && u.rendezvous) ++n;
  return n;
}

bool Endpoint::sends_in_flight_to(int peer) const {
  // Small pulled messages are left out: their copies are over in microseconds and load no link
  // for the length of a copy that is planned (those are above the direct limit, kilobytes more).
  for (const RequestPtr& s : active_sends_)
    if (s->peer_ == peer && s->loc_.device && s->bytes_ > device_eager_max_ &&
        (s->state_ == Request::State::Posted || s->state_ == Request::State::Copying))
      return true;
  return false;
}

RequestPtr Endpoint::find_send(uint64_t id) const {
  for (auto& r : active_sends_)
    if (r->id_ == id) return r;
  GS_THROW(GPUSTRIPE_ERR_INTERNAL, "rank %d: reply for unknown send %llu", ch_.rank(),
           static_cast<unsigned long long>(id));
}

RequestPtr Endpoint::find_recv(uint64_t id) const {
  for (auto& r : active_recvs_)
    if (r->id_ == id) return r;
  GS_THROW(GPUSTRIPE_ERR_INTERNAL, "rank %d: data for unknown receive %llu", ch_.rank(),
           static_cast<unsigned long long>(id));
}

// ---------------------------------------------------------------- outgoing

void Endpoint::post(int dst, const Frame& f, const void* payload, size_t payload_bytes, const RequestPtr& owner) {
  trace("x_out", -1, static_cast<uint64_t>(f.kind), 0, f.bytes);  // send_id: the record's kind
  if (dst == ch_.rank()) {  // a message to oneself never touches a ring
    handle(dst, f, static_cast<const char*>(payload));
    return;
  }
  auto& q = outgoing_[dst];
  if (q.empty() && ch_.try_send(dst, &f, sizeof f, payload, payload_bytes)) return;
  Queued e{std::vector<char>(sizeof f + payload_bytes), owner};
  std::memcpy(e.record.data(), &f, sizeof f);
  if (payload_bytes) std::memcpy(e.record.data() + sizeof f, payload, payload_bytes);
  if (owner) ++owner->unflushed_;
  q.push_back(std::move(e));
}

void Endpoint::flush_outgoing(int dst) {
  auto& q = outgoing_[dst];
  while (!q.empty() && (q.front().gate == 0 || mover_.done(q.front().gate)) &&
         ch_.try_send(dst, q.front().record.data(), q.front().record.size(), nullptr, 0)) {
    if (q.front().gate && q.front().owner) trace("e_posted", ch_.rank(), q.front().owner->id_, 0, q.front().owner->bytes_);
    if (q.front().owner) --q.front().owner->unflushed_;
    q.pop_front();
  }
}

// ---------------------------------------------------------------- posting

RequestPtr Endpoint::isend(const void* buf, uint64_t bytes, int dst, int tag, uint64_t comm, bool synchronous,
                           const MemLoc* where, bool blocking) {
  GS_REQUIRE(dst >= 0 && dst < ch_.size(), GPUSTRIPE_ERR_INVALID_ARGUMENT, "send to rank %d: ranks are 0..%d",
             dst, ch_.size() - 1);
  GS_REQUIRE(tag >= 0, GPUSTRIPE_ERR_INVALID_ARGUMENT, "send with tag %d: tags are >= 0", tag);
  GS_REQUIRE(buf || bytes == 0, GPUSTRIPE_ERR_INVALID_POINTER, "send of %llu bytes from a NULL buffer",
             static_cast<unsigned long long>(bytes));
  GS_REQUIRE(!range_wraps(buf, bytes), GPUSTRIPE_ERR_INVALID_SIZE, "send of %llu bytes at %p: wraps around the address "
             "space", static_cast<unsigned long long>(bytes), buf);
  std::lock_guard<std::recursive_mutex> lock(mu_);
  auto r = std::make_shared<Request>();
  r->send_ = true;
  r->id_ = next_id_++;
  r->peer_ = dst;
  r->tag_ = tag;
  r->comm_ = comm;
  r->sbuf_ = buf;
  r->bytes_ = bytes;
  r->loc_ = where ? *where : mover_.locate(buf);
  Mover::check_within(r->loc_, buf, bytes, "send buffer");  // eager copies then skip the backend's checks
  r->status_.tag = tag;
  r->status_.source = ch_.rank();
  r->status_.message_bytes = bytes;
  Frame f{};
  f.tag = tag;
  f.comm = comm;
  f.bytes = bytes;
  f.send_id = r->id_;
  // A device buffer to another rank is pulled (exported with the announcement) unless it is a
  // blocking standard send within the device eager limit, which must complete without the
  // receiver; one that cannot be exported (no IPC handle for its memory) goes eagerly when small.
  const bool device_peer = r->loc_.device && dst != ch_.rank() && bytes > 0;
  if (device_peer && push_into_offer(r)) return r;
  if (dst != ch_.rank()) sent_to(dst);
  const bool small = bytes <= (device_peer ? device_eager_max_ : eager_max_);
  Exported e;
  const bool pulled = device_peer && !(small && blocking && !synchronous) && try_export(buf, bytes, r->loc_, dst, &e);
  if (small && !pulled) {
    f.kind = FrameKind::Eager;
    f.flags = synchronous ? static_cast<uint32_t>(kSync) : 0u;
    if (synchronous) {
      r->state_ = Request::State::SyncWait;
      active_sends_.push_back(r);
    }
    const bool slot = device_peer && send_through_slot(r, f);
    if (!slot) {
      const void* payload = r->loc_.device && bytes ? from_device(buf, r->loc_.dev, bytes) : buf;
      post(dst, f, payload, bytes, r);
    }
    if (!synchronous) {
      r->status_.bytes = bytes;
      r->state_ = Request::State::Done;
    }
    // Through a slot, the copy waits for the next pass (the caller's wait makes it at once): sends
    // posted before a pass have their copies enqueued in one backend call, with one event, where a
    // pass here would enqueue each alone. The record needed a later pass anyway (it goes once the
    // copy has landed), so the send waits for nothing it did not wait for before.
    // A message whose record is in the ring is complete and needs nothing more of this process
    // (the benchmarks' one-byte acknowledgements): no pass either, as a pulled send's announcement
    // makes none; what the rings hold for this rank waits for its next wait or test.
    if (slot || r->done()) return r;
  } else {
    trace("s_post", ch_.rank(), r->id_, 0, bytes);
    f.kind = FrameKind::Rts;
    r->state_ = Request::State::Posted;
    active_sends_.push_back(r);
    if (pulled) {
      f.flags = kRtsExported;  // pull: the receiver copies out of our buffer
      post(dst, f, &e, sizeof e, r);
    } else {
      post(dst, f, nullptr, 0, r);
    }
    trace("s_rts", ch_.rank(), r->id_, 0, bytes);
    // The announcement is in the ring: the receiver moves the data, so a window of sends costs
    // the sender no progress pass per message (the waits make them).
    if (dst != ch_.rank() && outgoing_[dst].empty()) return r;
  }
  progress_locked();
  return r;
}

bool Endpoint::send_now(const void* buf, uint64_t bytes, int dst, int tag, uint64_t comm) {
  if (dst < 0 || dst >= ch_.size() || dst == ch_.rank() || tag < 0 || (!buf && bytes) || range_wraps(buf, bytes))
    return false;  // isend reports it
  std::lock_guard<std::recursive_mutex> lock(mu_);
  if (bytes > eager_max_ || !outgoing_[dst].empty()) return false;
  Frame f{};
  f.kind = FrameKind::Eager;
  f.tag = tag;
  f.comm = comm;
  f.bytes = bytes;
  f.send_id = next_id_;
  if (!ch_.try_send(dst, &f, sizeof f, buf, bytes)) return false;
  ++next_id_;
  sent_to(dst);
  trace("x_out", -1, static_cast<uint64_t>(f.kind), 0, f.bytes);
  return true;
}

Endpoint::Lean Endpoint::recv_now(void* buf, uint64_t capacity, int src, int tag, uint64_t comm, P2pStatus* st) {
  if (src < 0 || src >= ch_.size() || src == ch_.rank() || tag < kAnyTag || (!buf && capacity) ||
      range_wraps(buf, capacity))
    return Lean::Elsewhere;  // irecv reports it
  std::lock_guard<std::recursive_mutex> lock(mu_);
  if (!posted_.empty() || !active_sends_.empty() || !active_recvs_.empty()) return Lean::Elsewhere;
  for (const auto& q : outgoing_)
    if (!q.empty()) return Lean::Elsewhere;
  auto take = [&](int from_tag, uint64_t bytes, const char* payload) {
    if (bytes) std::memcpy(buf, payload, bytes);
    st->source = src;
    st->tag = from_tag;
    st->bytes = bytes;
    st->message_bytes = bytes;
    st->error = GPUSTRIPE_SUCCESS;
  };
  for (auto it = unexpected_.begin(); it != unexpected_.end(); ++it) {
    if (!matches(src, tag, comm, it->src, it->tag, it->comm)) continue;
    if (it->rendezvous || it->bytes > capacity) return Lean::Elsewhere;
    take(it->tag, it->bytes, it->payload.data());
    unexpected_.erase(it);
    return Lean::Taken;
  }
  size_t len = 0;
  const void* rec = ch_.peek(src, &len);
  Frame f;
  // The peer's offers of its own receives (frame.hpp) are taken in passing: they need nothing of
  // this receive, and the peer posts one with every device receive.
  while (rec && (std::memcpy(&f, rec, sizeof f), f.kind == FrameKind::Offer)) {
    handle(src, f, static_cast<const char*>(rec) + sizeof f);
    ch_.consume(src);
    rec = ch_.peek(src, &len);
  }
  if (!rec) return Lean::NotYet;
  if (f.kind != FrameKind::Eager || (f.flags & ~static_cast<uint32_t>(kEagerSlot)) != 0 ||
      !matches(src, tag, comm, src, f.tag, f.comm) || f.bytes > capacity)
    return Lean::Elsewhere;
  trace("x_in", -1, static_cast<uint64_t>(f.kind), 0, f.bytes);
  ++read_from_[src];
  if (f.flags & kEagerSlot) {  // a blocking send of device memory: its bytes are in the slot
    const int slot = static_cast<int>(std::min<uint64_t>(f.offset, INT32_MAX));
    take(f.tag, f.bytes, static_cast<const char*>(slots_->inbound(src, slot, f.bytes)));
    slots_->release(src, slot);
  } else {
    take(f.tag, f.bytes, static_cast<const char*>(rec) + sizeof f);
  }
  ch_.consume(src);
  return Lean::Taken;
}

Frame Endpoint::envelope(FrameKind kind, const Request& r) {
  Frame f{};
  f.kind = kind;
  f.tag = r.tag_;
  f.comm = r.comm_;
  f.bytes = r.bytes_;
  return f;
}

void Endpoint::sent_to(int dst) {
  ++sent_to_[dst];
  offers_[dst].valid = false;
}

void Endpoint::offer(const RequestPtr& r) {
  const int src = r->peer_;
  if (!offering_ || !backend_ || !r->loc_.device || src < 0 || src == ch_.rank() || r->bytes_ == 0) return;
  // Only a send within the device eager limit takes an offer (push_into_offer). A receive larger
  // than that mostly takes a larger message, which is pulled: its offer's export and record would
  // cost both hosts time ahead of that message's announcement, and the sender a record to read.
  if (r->bytes_ > device_eager_max_) return;
  // Only the one receive the source's next messages could take: no other posted receive of that
  // source (or any), nothing of it waiting unmatched.
  for (const RequestPtr& p : posted_)
    if (p->peer_ == src || p->peer_ == kAnySource) return;
  for (const Unexpected& u : unexpected_)
    if (u.src == src) return;
  Exported e;
  // Legacy handles alone (mapped per reader context, no descriptor to pass for a receive the
  // sender may never take).
  if (!try_export(r->rbuf_, r->bytes_, r->loc_, src, &e, /*pass_fd=*/false) || e.handle.kind != Backend::IpcKind::Legacy)
    return;
  Frame f = envelope(FrameKind::Offer, *r);
  f.recv_id = r->id_;
  f.offset = read_from_[src];
  post(src, f, &e, sizeof e, nullptr);
  r->offered_ = true;
}

bool Endpoint::cancel(const RequestPtr& r) {
  GS_REQUIRE(r, GPUSTRIPE_ERR_INVALID_ARGUMENT, "cancel of a NULL request");
  std::lock_guard<std::recursive_mutex> lock(mu_);
  if (r->is_send()) return false;
  progress_locked();  // a message already here takes the receive first
  auto it = std::find(posted_.begin(), posted_.end(), r);
  if (it == posted_.end()) return false;  // matched (or done)
  if (r->withdrawing_) return true;
  if (r->offered_) {
    // The source may be copying into the buffer now: only its answer says it no longer will.
    Frame f{};
    f.kind = FrameKind::Withdraw;
    f.recv_id = r->id_;
    post(r->peer_, f, nullptr, 0, nullptr);
    r->withdrawing_ = true;
    return true;
  }
  posted_.erase(it);
  cancelled(*r);
  return true;
}

RequestPtr Endpoint::take_posted(uint64_t id) {
  for (auto it = posted_.begin(); it != posted_.end(); ++it) {
    if ((*it)->id_ != id) continue;
    RequestPtr r = *it;
    posted_.erase(it);
    return r;
  }
  return nullptr;
}

void Endpoint::cancelled(Request& r) {
  r.status_.cancelled = true;
  r.status_.bytes = 0;
  r.status_.message_bytes = 0;
  r.state_ = Request::State::Done;
}

bool Endpoint::push_into_offer(const RequestPtr& s) {
  // Small messages only: there a push saves a slot's second copy or a pull's crossing; above, the
  // pushes measured slower than the receiver's pull (the sender's own enqueue and completion
  // replace the batched enqueue on the receiver), and a larger send reads nothing here.
  if (s->bytes_ > device_eager_max_) return false;
  const int dst = s->peer_;
  if (ch_.arrived(dst)) progress_locked();  // the peer's offer may wait in the ring
  Offered& o = offers_[dst];
  if (!o.valid || o.comm != s->comm_ || (o.tag != kAnyTag && o.tag != s->tag_) || s->bytes_ > o.capacity ||
      o.e.handle.device == s->loc_.dev || !mover_.plain(s->loc_.dev, o.e.handle.device, s->bytes_))
    return false;
  char* to = map_for_reader(dst, o.e, s->bytes_, s->loc_.dev);
  if (!to) return false;
  sent_to(dst);
  trace("s_push", ch_.rank(), s->id_, o.recv_id, s->bytes_);
  s->peer_id_ = o.recv_id;
  s->granted_ = s->bytes_;
  s->pushed_offer_ = true;
  s->state_ = Request::State::Copying;
  s->ticket_ = mover_.start_plain_out(to, backend_->ipc_named_device(o.e.handle.device, s->loc_.dev), s->sbuf_,
                                      s->loc_.dev, s->bytes_);
  active_sends_.push_back(s);
  // Takes the receive at once, in order with our later messages (which must not match it); Fin
  // follows once the copy has landed.
  Frame f = envelope(FrameKind::Pushed, *s);
  f.send_id = s->id_;
  f.recv_id = o.recv_id;
  post(dst, f, nullptr, 0, s);
  return true;
}

bool Endpoint::send_through_slot(const RequestPtr& r, Frame& f) {
  if (r->bytes_ > slots_->slot_bytes()) return false;
  const int slot = slots_->acquire(r->peer_);
  if (slot < 0) return false;
  trace("e_take", ch_.rank(), r->id_, 0, r->bytes_);
  r->eager_slot_ = true;
  // The range was checked against its allocation (isend), the slot is ours.
  const uint64_t copy = mover_.start_prechecked(slots_->outbound(r->peer_, slot), kHostDevice, r->sbuf_,
                                                r->loc_.dev, r->bytes_, /*defer=*/true);
  trace("e_slot", ch_.rank(), r->id_, 0, r->bytes_);
  f.flags |= kEagerSlot;
  f.offset = static_cast<uint64_t>(slot);
  // Queued behind whatever waits for this peer already, and everything posted to it later
  // queues behind this record: the peer sees its records in the order they were posted.
  Queued e{std::vector<char>(sizeof f), r, copy};
  std::memcpy(e.record.data(), &f, sizeof f);
  ++r->unflushed_;
  outgoing_[r->peer_].push_back(std::move(e));
  return true;
}

RequestPtr Endpoint::irecv(void* buf, uint64_t capacity, int src, int tag, uint64_t comm, const MemLoc* where) {
  GS_REQUIRE(src == kAnySource || (src >= 0 && src < ch_.size()), GPUSTRIPE_ERR_INVALID_ARGUMENT,
             "receive from rank %d: ranks are 0..%d or any (-1)", src, ch_.size() - 1);
  GS_REQUIRE(tag >= kAnyTag, GPUSTRIPE_ERR_INVALID_ARGUMENT, "receive with tag %d: tags are >= 0 or any (-1)", tag);
  GS_REQUIRE(buf || capacity == 0, GPUSTRIPE_ERR_INVALID_POINTER, "receive of %llu bytes into a NULL buffer",
             static_cast<unsigned long long>(capacity));
  GS_REQUIRE(!range_wraps(buf, capacity), GPUSTRIPE_ERR_INVALID_SIZE, "receive of %llu bytes at %p: wraps around the "
             "address space", static_cast<unsigned long long>(capacity), buf);
  std::lock_guard<std::recursive_mutex> lock(mu_);
  // No progress pass (as UCX's tag receive): a window of receives posted back to back would start
  // one pulled copy per receive, each alone on its stream with its own event, where the
  // next wait's pass starts them together (one batch call, one event per stream: 64 peer copies of
  // 8 KB-1 MB took 1.5-3.4x less time in one batch call than one call each on 2x H200,
  // bench/results/2026-11-26-ipc-batch-copy-nvidia-h200.json). Matching stays MPI's:
  // whatever the rings still hold arrived after everything in the unexpected queue, and is matched
  // against the posted receives in post order when a pass reads it.
  auto r = std::make_shared<Request>();
  r->id_ = next_id_++;
  r->peer_ = src;
  r->tag_ = tag;
  r->comm_ = comm;
  r->rbuf_ = buf;
  r->bytes_ = capacity;
  r->loc_ = where ? *where : mover_.locate(buf);
  Mover::check_within(r->loc_, buf, capacity, "receive buffer");
  for (auto it = unexpected_.begin(); it != unexpected_.end(); ++it) {
    if (!matches(*r, it->src, it->tag, it->comm)) continue;
    Unexpected u = std::move(*it);
    unexpected_.erase(it);
    deliver(r, u.src, u.tag, u.bytes, u.rendezvous, u.flags, u.send_id, u.payload.data());
    return r;
  }
  offer(r);
  posted_.push_back(r);
  return r;
}

// ---------------------------------------------------------------- incoming

void Endpoint::handle(int src, const Frame& f, const char* payload) {
  trace("x_in", -1, static_cast<uint64_t>(f.kind), 0, f.bytes);  // send_id: the record's kind
  switch (f.kind) {
    case FrameKind::Eager:
    case FrameKind::Rts: on_message(src, f, payload); break;
    case FrameKind::Cts: on_cts(src, f, payload); break;
    case FrameKind::Data: {
      RequestPtr r = find_recv(f.recv_id);
      uint64_t n = std::min<uint64_t>(f.bytes, r->granted_ - std::min(r->granted_, f.offset));
      char* dst = static_cast<char*>(r->rbuf_) + f.offset;
      if (r->loc_.device) to_device(dst, r->loc_.dev, payload, n);
      else std::memcpy(dst, payload, n);
      r->progress_ += n;
      if (r->progress_ >= r->granted_) complete_recv(*r);
      break;
    }
    case FrameKind::Fin: complete_recv(*find_recv(f.recv_id)); break;
    case FrameKind::Done: {  // the receiver pulled the data out of our buffer
      RequestPtr s = find_send(f.send_id);
      trace("s_done", ch_.rank(), s->id_, 0, f.bytes);
      s->status_.bytes = f.bytes;
      s->state_ = Request::State::Done;
      break;
    }
    case FrameKind::Offer: {
      Offered& o = offers_[src];
      o.valid = sent_to_[src] == f.offset;  // else a message of ours may be on its way to that receive
      if (o.valid) {
        o.recv_id = f.recv_id;
        o.tag = f.tag;
        o.comm = f.comm;
        o.capacity = f.bytes;
        std::memcpy(&o.e, payload, sizeof o.e);
      }
      break;
    }
    case FrameKind::Withdraw: {  // a receive it offered us is cancelled: no copy into it from now on
      if (offers_[src].valid && offers_[src].recv_id == f.recv_id) offers_[src].valid = false;
      Frame ack{};
      ack.kind = FrameKind::WithdrawAck;
      ack.recv_id = f.recv_id;
      post(src, ack, nullptr, 0, nullptr);
      break;
    }
    case FrameKind::WithdrawAck: {  // nothing of the source's can take it now unless it already has
      // Not posted any more: a message took it first, and it completes as usual.
      if (RequestPtr r = take_posted(f.recv_id)) cancelled(*r);
      break;
    }
    case FrameKind::Pushed: {  // the sender copies its message into a receive we offered; Fin ends it
      ++read_from_[src];
      RequestPtr r = take_posted(f.recv_id);
      GS_REQUIRE(r, GPUSTRIPE_ERR_INTERNAL, "rank %d: rank %d pushed into receive %llu, not posted", ch_.rank(), src,
                 static_cast<unsigned long long>(f.recv_id));
      trace("r_pushed", src, f.send_id, r->id_, f.bytes);
      r->status_.source = src;
      r->status_.tag = f.tag;
      r->status_.message_bytes = f.bytes;
      r->status_.bytes = f.bytes;
      r->granted_ = f.bytes;
      r->peer_id_ = f.send_id;
      r->state_ = Request::State::WaitFin;
      active_recvs_.push_back(r);
      break;
    }
    case FrameKind::SyncAck: {
      RequestPtr s = find_send(f.send_id);
      s->status_.bytes = s->bytes_;
      s->state_ = Request::State::Done;
      break;
    }
    default:
      GS_THROW(GPUSTRIPE_ERR_INTERNAL, "rank %d: unknown record kind %u from rank %d", ch_.rank(),
               static_cast<unsigned>(f.kind), src);
  }
}

void Endpoint::on_message(int src, const Frame& f, const char* payload) {
  if (src != ch_.rank()) ++read_from_[src];
  bool rendezvous = f.kind == FrameKind::Rts;
  int slot = -1;
  if (!rendezvous && (f.flags & kEagerSlot)) {
    slot = static_cast<int>(std::min<uint64_t>(f.offset, INT32_MAX));
    payload = slots_->inbound(src, slot, f.bytes);
    trace("e_read", src, f.send_id, 0, f.bytes);
  }
  for (auto it = posted_.begin(); it != posted_.end(); ++it) {
    if (!matches(**it, src, f.tag, f.comm)) continue;
    RequestPtr r = *it;
    posted_.erase(it);
    deliver(r, src, f.tag, f.bytes, rendezvous, f.flags, f.send_id, payload, slot);
    return;
  }
  Unexpected u{src, f.tag, f.comm, f.bytes, rendezvous, f.flags & ~static_cast<uint32_t>(kEagerSlot), f.send_id, {}};
  if (!rendezvous) {
    // Out of the slot at once: a receive that may never be posted must not hold it.
    u.payload.assign(payload, payload + f.bytes);
    if (slot >= 0) slots_->release(src, slot);
  } else if (f.flags & kRtsExported) {
    u.payload.assign(payload, payload + sizeof(Exported));
  }
  unexpected_.push_back(std::move(u));
}

void Endpoint::deliver(const RequestPtr& r, int src, int tag, uint64_t bytes, bool rendezvous, uint32_t flags,
                       uint64_t send_id, const char* payload, int slot) {
  bool sync = (flags & kSync) != 0;
  uint64_t n = std::min(bytes, r->bytes_);
  r->status_.source = src;
  r->status_.tag = tag;
  r->status_.message_bytes = bytes;
  r->granted_ = n;
  r->peer_id_ = send_id;
  if (bytes > r->bytes_) {
    r->status_.error = GPUSTRIPE_ERR_TRUNCATE;
    r->status_.message = format("message of %llu bytes from rank %d (tag %d) truncated to the %llu-byte buffer",
                                static_cast<unsigned long long>(bytes), src, tag,
                                static_cast<unsigned long long>(r->bytes_));
  }
  if (!rendezvous) {
    if (slot >= 0 && r->loc_.device && n > 0) {
      // Out of the slot on the device's stream; the slot is freed once that copy completes. In a
      // progress pass, the copies of the records it reads go to the backend in one call.
      r->ticket_ = mover_.start_prechecked(r->rbuf_, r->loc_.dev, payload, kHostDevice, n);
      trace("e_started", src, send_id, r->id_, n);
      r->eager_slot_ = true;
      r->slot_ = slot;
      r->slot_peer_ = src;
      r->state_ = Request::State::Copying;
      active_recvs_.push_back(r);
    } else {
      if (r->loc_.device) to_device(r->rbuf_, r->loc_.dev, payload, n);
      else if (n) std::memcpy(r->rbuf_, payload, n);
      if (slot >= 0) slots_->release(src, slot);
      r->status_.bytes = n;
      r->state_ = Request::State::Done;
    }
    if (sync) {
      Frame ack{};
      ack.kind = FrameKind::SyncAck;
      ack.send_id = send_id;
      post(src, ack, nullptr, 0, r);
    }
    return;
  }
  if (src == ch_.rank()) {  // rendezvous with oneself: one direct copy
    RequestPtr s = find_send(send_id);
    mover_.copy_now(r->rbuf_, r->loc_.device ? r->loc_.dev : kHostDevice, s->sbuf_,
                    s->loc_.device ? s->loc_.dev : kHostDevice, n);
    s->status_.bytes = n;
    s->state_ = Request::State::Done;
    r->status_.bytes = n;
    r->state_ = Request::State::Done;
    return;
  }
  active_recvs_.push_back(r);
  if (flags & kRtsExported) {  // pull out of the sender's device buffer
    Exported e;
    std::memcpy(&e, payload, sizeof e);
    if (n == 0) {
      Frame done{};
      done.kind = FrameKind::Done;
      done.send_id = send_id;
      post(src, done, nullptr, 0, r);
      complete_recv(*r);
      return;
    }
    trace("r_match", src, send_id, r->id_, n);
    const int into = r->loc_.device ? r->loc_.dev : kHostDevice;
    // One plain copy between two GPUs (the model's direct-alone sizes) runs in the receiver's own
    // GPU's context, through a mapping opened there, as UCX's cuda_ipc pulls: the driver's copy
    // within one context enqueues in less host time than a peer copy on a stream of the sender's
    // GPU (bench/results/*w1-floor*), and the other way round, through a mapping in the sender's
    // context, is the slowest. Legacy handles alone map per context; the mapping cache keeps the
    // receiver's mapping as another entry, with the same freed-and-reused check.
    char* from = into != kHostDevice && into != e.handle.device && e.handle.kind == Backend::IpcKind::Legacy &&
                         mover_.plain(e.handle.device, into, n)
                     ? map_for_reader(src, e, n, into)
                     : nullptr;
    const bool here = from != nullptr;
    if (!here) from = map_exported(src, e, n);
    if (ipc::HandleCache::leased(e.handle)) {
      r->lease_peer_ = src;
      r->lease_base_ = e.exporter_base;
      r->lease_buffer_ = e.handle.buffer_id;
    }
    trace("r_mapped", src, send_id, r->id_, n);
    r->ticket_ = here ? mover_.start_plain(r->rbuf_, into, from, backend_->ipc_named_device(e.handle.device, into), n)
                      : mover_.start(r->rbuf_, into, from, e.handle.device, n,
                                     Mover::Hints{receives_ahead(src, r->comm_), sends_in_flight_to(src)});
    trace("r_started", src, send_id, r->id_, n);
    r->state_ = Request::State::Copying;
    return;
  }
  Frame cts{};
  cts.kind = FrameKind::Cts;
  cts.send_id = send_id;
  cts.recv_id = r->id_;
  cts.bytes = n;
  Exported m;
  if (n > 0 && r->loc_.device && try_export(r->rbuf_, n, r->loc_, src, &m)) {
    cts.flags = kCtsMapped;
    r->state_ = Request::State::WaitFin;
    post(src, cts, &m, sizeof m, r);
  } else {
    cts.flags = kCtsStream;
    r->state_ = n ? Request::State::Streaming : Request::State::WaitFin;
    post(src, cts, nullptr, 0, r);
  }
}

bool Endpoint::try_export(const void* p, uint64_t bytes, const MemLoc& loc, int dst, Exported* e, bool pass_fd) {
  if (!backend_) return false;
  const uintptr_t u = reinterpret_cast<uintptr_t>(p);
  const bool known = loc.device && loc.base != 0 && loc.buffer_id != 0 && u >= loc.base;
  try {
    auto it = known ? exports_.find({loc.base, loc.buffer_id}) : exports_.end();
    // A kept handle covers the buffer unless it is VMM memory of another allocation in the
    // same reservation (the handle maps one allocation of it).
    if (it != exports_.end() && u >= it->second.exporter_base &&
        u - it->second.exporter_base + bytes <= it->second.handle.size) {
      *e = it->second;
    } else {
      PointerInfo info = backend_->pointer_info(p);
      if (info.kind != MemoryKind::Device || info.base == 0) return false;
      // VMM memory spanning several allocations (expandable segments) gets a vmm-multi handle.
      e->handle = backend_->ipc_export_range(p, bytes);
      e->exporter_base = e->handle.base;
      if (u < e->exporter_base || u - e->exporter_base + bytes > e->handle.size) {
        GS_LOG_DEBUG(Subsys::P2p, "rank %d: [%p, +%llu) spans more than the %s allocation it starts in: streaming it",
                     ch_.rank(), p, static_cast<unsigned long long>(bytes), ipc_kind_name(e->handle.kind));
        return false;
      }
      // Not kept for vmm-multi handles: the key names the piece at p only, and a later piece
      // freed and reallocated must give a new handle (the walk is made again per message).
      if (known && info.base == loc.base && e->handle.buffer_id == loc.buffer_id &&
          e->handle.kind != Backend::IpcKind::VmmMulti) {
        // Bounded: a program that allocates without end must not grow this without end.
        if (exports_.size() >= 4096) exports_.clear();
        exports_[{loc.base, loc.buffer_id}] = *e;
      }
    }
    e->offset = u - e->exporter_base;
    return !pass_fd || fds_->offer(dst, e->handle);  // fd kinds: the descriptor goes before the record naming it
  } catch (const Error& err) {
    if (err.status() == GPUSTRIPE_ERR_PEER_FAILED || err.status() == GPUSTRIPE_ERR_TIMEOUT ||
        err.status() == GPUSTRIPE_ERR_CONFIG)
      throw;
    // Memory without IPC handles (the default pool of cudaMallocAsync): the data takes the
    // stream path. Said once at info level, then at debug level.
    static bool said = false;
    if (!said && err.status() == GPUSTRIPE_ERR_NOT_SUPPORTED) {
      said = true;
      GS_LOG_INFO(Subsys::P2p, "rank %d: %p cannot be exported (%s): messages from or into such buffers stream "
                  "through the channel (slower)", ch_.rank(), p, err.what());
    } else {
      GS_LOG_DEBUG(Subsys::P2p, "rank %d: %p cannot be exported (%s): streaming it", ch_.rank(), p, err.what());
    }
    return false;
  }
}

void Endpoint::return_lease(Request& r) {
  if (r.lease_peer_ < 0) return;
  if (cache_) cache_->release(r.lease_peer_, r.lease_base_, r.lease_buffer_);
  r.lease_peer_ = -1;
}

char* Endpoint::map_exported(int peer, const Exported& e, uint64_t bytes, int reader) {
  GS_REQUIRE(cache_, GPUSTRIPE_ERR_INTERNAL, "rank %d: mapped rendezvous without a backend", ch_.rank());
  GS_REQUIRE(e.offset + bytes <= e.handle.size, GPUSTRIPE_ERR_INTERNAL,
             "rank %d's buffer [%llu, +%llu) exceeds its allocation of %zu bytes", peer,
             static_cast<unsigned long long>(e.offset), static_cast<unsigned long long>(bytes), e.handle.size);
  return static_cast<char*>(cache_->map(peer, e.exporter_base, e.handle, reader)) + e.offset;
}

char* Endpoint::map_for_reader(int peer, const Exported& e, uint64_t bytes, int reader) {
  const std::pair<int, int> pair{e.handle.device, reader};
  if (unmapped_for_reader_.count(pair)) return nullptr;
  try {
    return map_exported(peer, e, bytes, reader);
  } catch (const Error& err) {
    if (err.status() != GPUSTRIPE_ERR_CUDA) throw;
    // A driver that will not map GPU `owner`'s memory into the reader's context (no peer access
    // between them): the copy runs from the owner's GPU, as a larger one does. Asked once per pair.
    unmapped_for_reader_.insert(pair);
    GS_LOG_INFO(Subsys::P2p, "rank %d: GPU %d's buffers not mapped for GPU %d (%s): pulls between them run on GPU %d's "
                "streams", ch_.rank(), pair.first, reader, err.what(), pair.first);
    return nullptr;
  }
}

void Endpoint::advance_recvs() {
  for (auto it = active_recvs_.begin(); it != active_recvs_.end();) {
    Request& r = **it;
    if (r.state_ != Request::State::Copying || !mover_.done(r.ticket_)) {
      ++it;
      continue;
    }
    if (r.slot_ >= 0) {  // out of an eager slot: nothing for the sender to hear
      slots_->release(r.slot_peer_, r.slot_);
      r.slot_ = -1;
      r.status_.bytes = r.granted_;
      r.state_ = Request::State::Done;
      it = active_recvs_.erase(it);
      continue;
    }
    trace("r_copied", r.status_.source, r.peer_id_, r.id_, r.granted_);
    return_lease(r);  // before the sender may free its buffer
    Frame done{};
    done.kind = FrameKind::Done;
    done.send_id = r.peer_id_;
    done.bytes = r.granted_;
    post(r.status_.source, done, nullptr, 0, *it);
    r.status_.bytes = r.granted_;
    r.state_ = Request::State::Done;
    it = active_recvs_.erase(it);
  }
}

void Endpoint::complete_recv(Request& r) {
  r.status_.bytes = r.granted_;
  r.state_ = Request::State::Done;
  active_recvs_.remove_if([&](const RequestPtr& p) { return p.get() == &r; });
}

void Endpoint::on_cts(int src, const Frame& f, const char* payload) {
  RequestPtr s = find_send(f.send_id);
  s->peer_id_ = f.recv_id;
  s->granted_ = f.bytes;
  s->progress_ = 0;
  if (f.bytes == 0) {
    Frame fin{};
    fin.kind = FrameKind::Fin;
    fin.recv_id = f.recv_id;
    post(src, fin, nullptr, 0, s);
    s->state_ = Request::State::Done;
    return;
  }
  if (f.flags & kCtsMapped) {
    Exported m;
    std::memcpy(&m, payload, sizeof m);
    char* to = map_exported(src, m, f.bytes);
    if (ipc::HandleCache::leased(m.handle)) {
      s->lease_peer_ = src;
      s->lease_base_ = m.exporter_base;
      s->lease_buffer_ = m.handle.buffer_id;
    }
    s->ticket_ = mover_.start(to, m.handle.device, s->sbuf_, s->loc_.device ? s->loc_.dev : kHostDevice, f.bytes);
    s->state_ = Request::State::Copying;
  } else {
    s->state_ = Request::State::Streaming;
  }
}

void Endpoint::advance_sends() {
  streaming_ = 0;
  for (auto it = active_sends_.begin(); it != active_sends_.end();) {
    Request& s = **it;
    if (s.state_ == Request::State::Copying && mover_.done(s.ticket_)) {
      return_lease(s);  // before the receiver may free its buffer
      Frame fin{};
      fin.kind = FrameKind::Fin;
      fin.recv_id = s.peer_id_;
      if (s.pushed_offer_) trace("s_pushed", ch_.rank(), s.id_, s.peer_id_, s.granted_);
      post(s.peer_, fin, nullptr, 0, *it);
      s.status_.bytes = s.granted_;
      s.state_ = Request::State::Done;
    }
    // One fragment may wait in the outgoing queue per peer: the ring paces the stream.
    while (s.state_ == Request::State::Streaming && outgoing_[s.peer_].empty()) {
      uint64_t n = std::min<uint64_t>(fragment_bytes_, s.granted_ - s.progress_);
      const char* src = static_cast<const char*>(s.sbuf_) + s.progress_;
      if (s.loc_.device) src = from_device(src, s.loc_.dev, n);
      Frame d{};
      d.kind = FrameKind::Data;
      d.recv_id = s.peer_id_;
      d.offset = s.progress_;
      d.bytes = n;
      post(s.peer_, d, src, n, *it);
      s.progress_ += n;
      if (s.progress_ == s.granted_) {
        s.status_.bytes = s.granted_;
        s.state_ = Request::State::Done;
      }
    }
    if (s.state_ == Request::State::Done) {
      it = active_sends_.erase(it);
    } else {
      if (s.state_ == Request::State::Streaming) ++streaming_;
      ++it;
    }
  }
}

// ---------------------------------------------------------------- progress

void Endpoint::progress_locked() {
  ++passes_;
  mover_.new_pass();
  if (fds_) fds_->serve();  // peers asking for descriptors of our buffers (one load when none)
  // The pulls matched in this pass (a window's announcements) are enqueued together and complete
  // by one event per stream, recorded once the rings are read.
  mover_.begin_batch();
  for (int p = 0; p < ch_.size(); ++p) {
    if (p == ch_.rank()) continue;
    flush_outgoing(p);
    size_t bytes = 0;
    while (const void* rec = ch_.peek(p, &bytes)) {
      Frame f;
      std::memcpy(&f, rec, sizeof f);
      handle(p, f, static_cast<const char*>(rec) + sizeof f);
      ch_.consume(p);
    }
  }
  mover_.end_batch();
  advance_sends();
  advance_recvs();
  for (int p = 0; p < ch_.size(); ++p)
    if (p != ch_.rank()) flush_outgoing(p);
}

bool Endpoint::pass_needed() {
  if (fds_) fds_->serve();
  if (streaming_ > 0 || !mover_.idle()) return true;
  for (int p = 0; p < ch_.size(); ++p)
    if (p != ch_.rank() && (ch_.arrived(p) || !outgoing_[p].empty())) return true;
  return false;
}

void Endpoint::progress() {
  std::lock_guard<std::recursive_mutex> lock(mu_);
  if (pass_needed()) progress_locked();
}

bool Endpoint::test(const RequestPtr& r) {
  GS_REQUIRE(r, GPUSTRIPE_ERR_INVALID_ARGUMENT, "test of a NULL request");
  std::lock_guard<std::recursive_mutex> lock(mu_);
  if (!r->done() && pass_needed()) progress_locked();
  return done_now(r);
}

bool Endpoint::done_now(const RequestPtr& r) {
  GS_REQUIRE(r, GPUSTRIPE_ERR_INVALID_ARGUMENT, "test of a NULL request");
  std::lock_guard<std::recursive_mutex> lock(mu_);
  if (!r->done()) return false;
  if (trace_on() && !r->traced_ && r->eager_slot_) {
    r->traced_ = true;
    if (r->is_send()) trace("e_s_ret", ch_.rank(), r->id_, 0, r->status_.bytes);
    else trace("e_r_ret", r->status_.source, r->peer_id_, r->id_, r->status_.bytes);
  } else if (trace_on() && !r->traced_ && (r->bytes_ > fragment_bytes_ || r->loc_.device)) {  // pulled ones
    r->traced_ = true;
    if (r->is_send()) trace("s_ret", ch_.rank(), r->id_, 0, r->status_.bytes);
    else trace("r_ret", r->status_.source, r->peer_id_, r->id_, r->status_.bytes);
  }
  return true;
}

void Endpoint::check_peers_for(const Request& r) const {
  if (r.slot_ >= 0) return;  // the message is here: its copy out of the slot needs no peer
  check_source(r.send_ ? r.peer_ : (r.state_ == Request::State::Posted ? r.peer_ : r.status_.source));
}

void Endpoint::check_source(int peer) const {
  if (peer == ch_.rank()) return;
  if (peer >= 0) {
    ch_.check_peer(peer, true);
    return;
  }
  ch_.check_all_peers();
  bool anyone = false;
  for (int p = 0; p < ch_.size(); ++p)
    if (p != ch_.rank() && ch_.peer_state(p) == ipc::PeerState::Alive) anyone = true;
  GS_REQUIRE(anyone || ch_.size() == 1, GPUSTRIPE_ERR_PEER_FAILED,
             "rank %d: receive from any rank, but every other rank has finalized", ch_.rank());
}

void Endpoint::wait(const RequestPtr& r) {
  GS_REQUIRE(r, GPUSTRIPE_ERR_INVALID_ARGUMENT, "wait on a NULL request");
  if (ipc::ready_within_polls([&] { return test(r); })) return;
  std::string what = r->is_send() ? format("rank %d: send to rank %d (tag %d, %llu bytes)", ch_.rank(), r->peer_,
                                           r->tag_, static_cast<unsigned long long>(r->bytes_))
                                  : format("rank %d: receive from rank %d (tag %d)", ch_.rank(), r->peer_, r->tag_);
  ipc::Waiter w(what, [&] {
    try {
      check_peers_for(*r);
    } catch (const Error&) {
      // A peer that finalized may have left its last records behind: read them first.
      if (test(r)) return;
      throw;
    }
  });
  uint64_t seen = r->progress_;
  while (!test(r)) {
    if (r->progress_ != seen) {
      seen = r->progress_;
      w.progressed();
    }
    w.pause();
  }
}

void Endpoint::send(const void* buf, uint64_t bytes, int dst, int tag, uint64_t comm, bool synchronous) {
  wait(isend(buf, bytes, dst, tag, comm, synchronous, nullptr, /*blocking=*/true));
}

P2pStatus Endpoint::recv(void* buf, uint64_t capacity, int src, int tag, uint64_t comm) {
  RequestPtr r = irecv(buf, capacity, src, tag, comm);
  wait(r);
  return r->status();
}

bool Endpoint::iprobe(int src, int tag, uint64_t comm, P2pStatus* status) {
  // The same arguments a receive accepts: a probe that could never match is a caller's bug.
  GS_REQUIRE(src == kAnySource || (src >= 0 && src < ch_.size()), GPUSTRIPE_ERR_INVALID_ARGUMENT,
             "probe for rank %d: ranks are 0..%d or any (-1)", src, ch_.size() - 1);
  GS_REQUIRE(tag >= kAnyTag, GPUSTRIPE_ERR_INVALID_ARGUMENT, "probe with tag %d: tags are >= 0 or any (-1)", tag);
  std::lock_guard<std::recursive_mutex> lock(mu_);
  progress_locked();
  for (auto& u : unexpected_) {
    if (!matches(src, tag, comm, u.src, u.tag, u.comm)) continue;
    if (status) {
      *status = P2pStatus{};
      status->source = u.src;
      status->tag = u.tag;
      status->bytes = status->message_bytes = u.bytes;
    }
    return true;
  }
  return false;
}

P2pStatus Endpoint::probe(int src, int tag, uint64_t comm) {
  P2pStatus st;
  ipc::Waiter w(format("rank %d: probe for rank %d (tag %d)", ch_.rank(), src, tag), [&] {
    try {
      check_source(src);
    } catch (const Error&) {
      if (iprobe(src, tag, comm, nullptr)) return;  // a finalized peer's last message
      throw;
    }
  });
  while (!iprobe(src, tag, comm, &st)) w.pause();
  return st;
}

void Endpoint::flush() {
  std::lock_guard<std::recursive_mutex> lock(mu_);
  ipc::Waiter w(format("rank %d: delivering buffered records before leaving", ch_.rank()));
  for (;;) {
    progress_locked();
    bool pending = false;
    for (int p = 0; p < ch_.size(); ++p)
      if (!outgoing_[p].empty() && ch_.peer_state(p) == ipc::PeerState::Alive) pending = true;
    if (!pending) return;
    w.pause();
  }
}

}  // namespace gpustripe::p2p
