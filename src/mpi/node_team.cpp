#include "mpi/node_team.hpp"

#include <algorithm>
#include <cstdlib>
#include <exception>
#include <string>

#include "mpi/coll_calls.hpp"
#include "common/error.hpp"
#include "common/log.hpp"

namespace gpustripe::mpi {
namespace {

bool disjoint(const void* a, size_t an, const void* b, size_t bn) {
  const char* x = static_cast<const char*>(a);
  const char* y = static_cast<const char*>(b);
  return x + an <= y || y + bn <= x;
}

bool reducible(coll::DataType dt, coll::RedOp op) {
  try {
    coll::check_dtype(dt);
    coll::check_redop(op);
    return true;
  } catch (const Error&) {
    return false;
  }
}

// A call of form `name` on the caller's `stream`, entered now: its "lookup" phase (the buffers'
// devices, the call's closure) starts here.
CollCall entered_call(const char* name, coll::CollOp op, StreamHandle stream) {
  CollCall c;
  c.entered = std::chrono::steady_clock::now();
  c.stream = stream;
  c.name = name;
  c.op = op;
  return c;
}

}  // namespace

NodeTeam::NodeTeam(std::unique_ptr<ipc::Bootstrap> boot) {
  ipc::Bootstrap& b = *boot;
  ctx_ = std::make_unique<Context>();
  ch_ = ipc::join_channel(
      b.rank(), b.size(), [&b](char* name) { b.bcast(name, 128, 0); }, [&b] { b.barrier(); });
  ep_ = std::make_unique<p2p::Endpoint>(*ch_, &ctx_->backend(), p2p::engine_copy(ctx_->engine(), ch_.get()),
                                         p2p::engine_plain(ctx_->engine()));
  std::vector<int> channel_rank(static_cast<size_t>(b.size()));
  for (int r = 0; r < b.size(); ++r) channel_rank[r] = r;  // the channel was joined in bootstrap order
  team_ = std::make_unique<CollTeam>(*ctx_, *ep_, std::move(boot), std::move(channel_rank));
  marks_ = std::make_unique<CallMarks>(ctx_->backend());
  queue_ = std::make_unique<CallQueue>();
  GS_LOG_INFO(Subsys::Mpi, "node team: rank %d of %d, %s backend", team_->rank(), team_->size(), ctx_->backend_name());
}

NodeTeam::~NodeTeam() {
  // The queued calls first (each releases what it holds, also when it fails), then the team,
  // which settles the stream-ordered calls.
  queue_.reset();
  team_.reset();
  marks_.reset();
  Backend& be = ctx_->backend();
  for (auto& [dev, e] : ends_) {
    try {
      be.synchronize_stream(e.stream);
      be.destroy_stream(e.stream);
      if (e.join) be.destroy_event(e.join);
    } catch (const Error& err) {
      GS_LOG_WARN(Subsys::Mpi, "node team: closing its calls' ends on GPU %d: %s", dev, err.what());
    }
  }
  for (auto& [dev, evs] : free_events_)
    for (EventHandle e : evs) try {
        be.destroy_event(e);
      } catch (const Error&) {
      }
  for (auto& [dev, s] : streams_) {
    try {
      ctx_->backend().synchronize_stream(s);
      ctx_->backend().destroy_stream(s);
    } catch (const Error& e) {
      GS_LOG_WARN(Subsys::Mpi, "node team: closing its stream on GPU %d: %s", dev, e.what());
    }
  }
  try {
    ep_->flush();
  } catch (const Error& e) {
    GS_LOG_WARN(Subsys::Mpi, "node team: closing: %s", e.what());
  }
  ep_.reset();
  ch_.reset();
  ctx_.reset();
}

StreamHandle NodeTeam::stream(int dev) {
  auto it = streams_.find(dev);
  if (it == streams_.end()) it = streams_.emplace(dev, ctx_->backend().create_stream(dev)).first;
  return it->second;
}

ipc::HandleCacheStats NodeTeam::mapping_stats() const {
  std::lock_guard<std::mutex> lock(team_mu_);  // the worker maps meanwhile
  const ipc::HandleCache* cache = ep_->handle_cache();
  return cache ? cache->stats() : ipc::HandleCacheStats{};
}

int NodeTeam::device_of(CollCall& c, std::initializer_list<const void*> bufs) {
  return mpi::device_of(ep_->mover(), c, bufs);
}

NodeTeam::Ends& NodeTeam::ends(int device) {
  std::lock_guard<std::mutex> lock(ends_mu_);  // an entry, once made, stays where it is
  auto it = ends_.find(device);
  if (it == ends_.end()) it = ends_.emplace(device, Ends{ctx_->backend().create_stream(device), nullptr}).first;
  return it->second;
}

EventHandle NodeTeam::take_event(int device) {
  {
    std::lock_guard<std::mutex> lock(events_mu_);
    std::vector<EventHandle>& pool = free_events_[device];
    if (!pool.empty()) {
      EventHandle e = pool.back();
      pool.pop_back();
      return e;
    }
    ++events_created_;
  }
  return ctx_->backend().create_event(device, false);
}

void NodeTeam::give_event(int device, EventHandle e) {
  std::lock_guard<std::mutex> lock(events_mu_);
  free_events_[device].push_back(e);
}

void NodeTeam::settle() {
  queue_->drain("settle");
  std::lock_guard<std::mutex> lock(team_mu_);
  team_->settle();
  std::lock_guard<std::mutex> ends_lock(ends_mu_);
  for (auto& [dev, e] : ends_) ctx_->backend().synchronize_stream(e.stream);
}

StreamHandle NodeTeam::ends_current(int device) {
  Ends& e = ends(device);
  if (e.behind) {
    team_->join_calls(device, e.stream);
    e.behind = false;
  }
  return e.stream;
}

StreamHandle NodeTeam::calls_stream(int device) {
  queue_->drain("calls_stream");
  std::lock_guard<std::mutex> lock(team_mu_);
  return ends_current(device);
}

StreamHandle NodeTeam::wait_queued(uint64_t job, int device) {
  queue_->wait(job, "a queued call's end");
  return ends(device).stream;
}

size_t NodeTeam::mark(int device) {
  StreamHandle end = ends(device).stream;
  if (queue_->done() == queue_->posted()) {
    // Nothing queued (only this thread posts): the ends' stream is past every call once it has
    // followed the joined ones.
    {
      std::lock_guard<std::mutex> team_lock(team_mu_);
      ends_current(device);
    }
    std::lock_guard<std::mutex> lock(marks_mu_);
    return marks_->mark(device, end);
  }
  // The worker makes the mark once it has ordered the ends' stream after the calls queued so
  // far: the caller does not wait for their meetings. The marks stay in the order they were asked
  // for (a mark made here comes only once the queue is empty), and a mark not made yet is not
  // among those counted passed.
  queue_->post([this, device, end] {
    std::lock_guard<std::mutex> lock(marks_mu_);
    marks_->mark(device, end);
  });
  return marks_passed();
}

size_t NodeTeam::marks_passed() {
  std::lock_guard<std::mutex> lock(marks_mu_);
  return marks_->passed();
}

CallMarks::Stats NodeTeam::marks_stats() const {
  std::lock_guard<std::mutex> lock(marks_mu_);
  return {marks_->in_flight(), marks_->events_created()};
}

void NodeTeam::join(int device, StreamHandle stream) {
  queue_->drain("join");
  std::lock_guard<std::mutex> lock(team_mu_);
  Ends& e = ends(device);
  ends_current(device);
  if (!e.join) e.join = ctx_->backend().create_event(device, false);
  ctx_->backend().record_event(e.join, e.stream);
  ctx_->backend().wait_event(stream, e.join);
}

CollTeam::PhaseTimes NodeTeam::phase_times(bool reset) {
  std::lock_guard<std::mutex> lock(team_mu_);
  return team_->phase_times(reset);
}

bool NodeTeam::submit(CollCall& c, bool queued, bool joined) {
  Backend& be = ctx_->backend();
  GS_REQUIRE(!(queued && joined), GPUSTRIPE_ERR_INVALID_ARGUMENT,
             "%s: a call is either queued (its end on the team's stream) or joined (run on the caller's stream)",
             c.name);
  // A staged call meets no other rank's host: the caller's thread enqueues it, no worker between,
  // where the worker has nothing left to run. Behind queued calls it would first wait for them
  // (drain: every rank enqueues the team's calls in one order, which the GPUs' barriers need),
  // that is for the other ranks' hosts at those calls' meetings; it is queued behind them
  // instead, where its enqueue on the worker waits for no host. (A call whose buffers cannot be
  // queued stays here: it goes through the slot, which only a staged call can.)
  if (queued && c.stream && team_->stageable(c) && (!c.eligible || queue_->idle())) queued = false;
  if (!queued || !c.stream || !team_->stream_flags()) {
    queue_->drain(c.name);  // the calls queued before it come first, on every rank
    std::lock_guard<std::mutex> lock(team_mu_);
    if (!c.stream) return team_->run(c);
    c.on_stream = joined;
    const uint64_t call = ++ordered_calls_;
    const bool served = team_->run(c);
    if (!served) return false;
    note_behind(call);
    // A staged call of buffers on no one GPU ran on the slots' GPU.
    const int dev = c.device >= 0 ? c.device : team_->staging_device();
    // The ends' stream follows the team's: now, or for a joined call once it is next asked for
    // (a blocking caller's steady state enqueues nothing there).
    if (joined)
      ends(dev).behind = true;
    else
      team_->join_calls(dev, ends(dev).stream);
    return true;
  }
  queue_->check();  // a queued call that failed: raised at the caller's next call
  if (!c.eligible) {
    // The others may have queued it: they meet it and learn that this rank declined, so that no
    // rank waits for it, and every rank's call fails.
    CollCall declined;
    declined.name = c.name;
    declined.op = c.op;
    queue_->post([this, declined]() mutable {
      {
        std::lock_guard<std::mutex> lock(team_mu_);
        team_->run(declined);
      }
      GS_THROW(GPUSTRIPE_ERR_NOT_SUPPORTED, "%s: a queued call this rank declined failed on every rank; the calls "
               "after it fail too", declined.name);
    });
    GS_THROW(GPUSTRIPE_ERR_NOT_SUPPORTED,
             "%s: this rank's buffers cannot take gpustripe's path (not memory of one GPU, empty, or overlapping in a "
             "way the schedules do not take); a queued call cannot go another way once the others went on: the call "
             "fails on every rank", c.name);
  }
  Ends& e = ends(c.device);  // made here: the worker only enqueues on it
  // Its time before the worker takes it is the queue's, not the call's (phase_times' lookup).
  c.entered = {};
  c.ready = take_event(c.device);
  be.record_event(c.ready, c.stream);
  c.stream = nullptr;
  const int dev = c.device;
  const EventHandle ready = c.ready;
  StreamHandle end = e.stream;
  const uint64_t call = ++ordered_calls_;
  try {
    queue_->post([this, c = std::move(c), end, call]() mutable { run_queued(c, end, call); });
    ++queued_calls_;
  } catch (...) {
    give_event(dev, ready);  // not queued (a failed team, or a worker that stopped taking calls)
    throw;
  }
  return true;
}

void NodeTeam::note_behind(uint64_t call) {
  behind_[call % kBehindKept].store((call << 1) | (team_->enqueued_behind() ? 1 : 0), std::memory_order_release);
}

int NodeTeam::enqueued_behind(uint64_t call) const {
  const uint64_t v = behind_[call % kBehindKept].load(std::memory_order_acquire);
  return call && (v >> 1) == call ? static_cast<int>(v & 1) : -1;
}

void NodeTeam::run_queued(CollCall& c, StreamHandle end, uint64_t call) {
  std::lock_guard<std::mutex> lock(team_mu_);
  bool served = false;
  std::exception_ptr failed;
  try {
    served = team_->run(c);
    if (served) note_behind(call);
    // The ends' stream follows the call by an event recorded now, after it: nothing on a GPU
    // waits for a value a host thread writes later (see the header).
    if (served) {
      team_->join_calls(c.device, end);
      ends(c.device).behind = false;
    }
  } catch (...) {
    failed = std::current_exception();
  }
  give_event(c.device, c.ready);
  if (failed) std::rethrow_exception(failed);
  if (!served)
    GS_THROW(GPUSTRIPE_ERR_NOT_SUPPORTED,
             "%s: another rank's side declined this queued call at the ranks' meeting (a buffer it cannot share, e.g. "
             "memory of a cudaMallocAsync pool; an alltoallv block whose sender and receiver give different sizes): "
             "it was not made, and the calls after it fail", c.name);
}

bool NodeTeam::allreduce(const void* send, void* recv, size_t count, coll::DataType dt, coll::RedOp op, StreamHandle stream, bool queued, bool joined, bool staged) {
  CollCall c = entered_call("allreduce", coll::CollOp::AllReduce, stream);
  const bool ok_types = reducible(dt, op);
  const size_t bytes = ok_types ? count * coll::dtype_size(dt) : 0;
  c.device = ok_types ? device_of(c, {send, recv}) : -1;
  c.eligible = c.device >= 0 && count > 0 && (send == recv || disjoint(send, bytes, recv, bytes));
  if (ok_types && count > 0) allreduce_call(c, send, recv, count, dt, op);  // staged whatever the buffers
  if (!staged) c.staged = nullptr;
  return submit(c, queued, joined);
}

bool NodeTeam::reduce_scatter(const void* send, void* recv, size_t count, coll::DataType dt, coll::RedOp op, StreamHandle stream, bool queued, bool joined, bool staged) {
  CollCall c = entered_call("reduce_scatter", coll::CollOp::ReduceScatter, stream);
  const int n = size();
  const bool ok_types = reducible(dt, op);
  const size_t block = ok_types ? count * coll::dtype_size(dt) : 0;
  const bool in_place = static_cast<const char*>(send) + rank() * block == recv;
  c.device = ok_types ? device_of(c, {send, recv}) : -1;
  c.eligible = c.device >= 0 && count > 0 && (in_place || disjoint(send, block * n, recv, block));
  if (ok_types && count > 0) reduce_scatter_call(c, n, send, recv, count, dt, op);
  if (!staged) c.staged = nullptr;
  return submit(c, queued, joined);
}

bool NodeTeam::allgather(const void* send, void* recv, size_t block, StreamHandle stream, bool queued, bool joined, bool staged) {
  CollCall c = entered_call("allgather", coll::CollOp::AllGather, stream);
  const size_t total = block * size();
  const bool in_place = static_cast<char*>(recv) + rank() * block == send;
  c.device = device_of(c, {send, recv});
  c.eligible = c.device >= 0 && block > 0 && (in_place || disjoint(send, block, recv, total));
  if (block > 0) allgather_call(c, size(), send, recv, block);
  if (!staged) c.staged = nullptr;
  return submit(c, queued, joined);
}

bool NodeTeam::alltoall(const void* send, void* recv, size_t block, StreamHandle stream, bool queued, bool joined,
                        bool staged) {
  CollCall c = entered_call("alltoall", coll::CollOp::AllToAll, stream);
  const size_t total = block * size();
  c.device = device_of(c, {send, recv});
  c.eligible = c.device >= 0 && block > 0 && disjoint(send, total, recv, total);
  if (block > 0) alltoall_call(c, size(), send, recv, block);  // staged whatever the buffers
  if (!staged) c.staged = nullptr;
  return submit(c, queued, joined);
}

bool NodeTeam::alltoallv(const void* send, void* recv, const std::vector<size_t>& send_at,
                         const std::vector<size_t>& send_len, const std::vector<size_t>& recv_at,
                         const std::vector<size_t>& recv_len, StreamHandle stream, bool queued, bool joined,
                         int device) {
  const int n = size();
  const size_t un = static_cast<size_t>(n);
  GS_REQUIRE(send_at.size() == un && send_len.size() == un && recv_at.size() == un && recv_len.size() == un,
             GPUSTRIPE_ERR_INVALID_ARGUMENT, "alltoallv: %zu, %zu, %zu and %zu blocks for %d members",
             send_at.size(), send_len.size(), recv_at.size(), recv_len.size(), n);
  CollCall c = entered_call("alltoallv", coll::CollOp::AllToAll, stream);
  size_t send_span = 0, recv_span = 0;
  for (size_t i = 0; i < un; ++i) {
    if (send_len[i]) send_span = std::max(send_span, send_at[i] + send_len[i]);
    if (recv_len[i]) recv_span = std::max(recv_span, recv_at[i] + recv_len[i]);
  }
  // Only the sides with bytes are located (and mapped by the peers).
  if (!send_span) send = nullptr;
  if (!recv_span) recv = nullptr;
  c.device = send && recv ? device_of(c, {send, recv})
             : send         ? device_of(c, {send})
             : recv         ? device_of(c, {recv})
                            : device;
  c.eligible = c.device >= 0 && un <= CollCall::kMaxBlocks &&
               (!send || !recv || disjoint(send, send_span, recv, recv_span));
  if (c.eligible) alltoallv_call(c, n, rank(), send, send_at, send_len, send_span, recv, recv_at, recv_len, recv_span);
  return submit(c, queued, joined);
}

bool NodeTeam::bcast(void* buf, size_t bytes, int root, StreamHandle stream, bool queued, bool joined) {
  GS_REQUIRE(root >= 0 && root < size(), GPUSTRIPE_ERR_INVALID_ARGUMENT, "bcast: root %d of %d ranks", root, size());
  CollCall c = entered_call("bcast", coll::CollOp::Bcast, stream);
  c.device = device_of(c, {buf});
  c.eligible = c.device >= 0 && bytes > 0;
  if (c.eligible) bcast_call(c, buf, bytes, root);
  return submit(c, queued, joined);
}

bool NodeTeam::reduce(const void* send, void* recv, size_t count, coll::DataType dt, coll::RedOp op, int root, StreamHandle stream, bool queued, bool joined) {
  GS_REQUIRE(root >= 0 && root < size(), GPUSTRIPE_ERR_INVALID_ARGUMENT, "reduce: root %d of %d ranks", root, size());
  CollCall c = entered_call("reduce", coll::CollOp::Reduce, stream);
  const bool is_root = rank() == root;
  const bool ok_types = reducible(dt, op);
  const size_t bytes = ok_types ? count * coll::dtype_size(dt) : 0;
  c.device = !ok_types ? -1 : is_root ? device_of(c, {send, recv}) : device_of(c, {send});
  c.eligible = c.device >= 0 && count > 0 && (!is_root || send == recv || disjoint(send, bytes, recv, bytes));
  if (c.eligible) reduce_call(c, is_root, send, recv, count, dt, op, root);
  return submit(c, queued, joined);
}

}  // namespace gpustripe::mpi
