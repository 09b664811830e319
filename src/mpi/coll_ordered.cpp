// SliceRunner's stream-ordered runs (coll_slice.hpp): a rank's part of a collective enqueued
// behind the caller's stream and ahead of its later work, with no host waiting.
//
// Per call, on one origin stream per GPU, or on the caller's stream itself where the caller
// would join the run's end at once anyway (on_after: a blocking call; no event or wait between
// the streams, nothing recorded at its end). On the origin stream: wait for the caller's stream
// (an event: recorded here, or by the caller where another thread enqueues the run). Then a
// barrier of the ranks' GPUs (each writes its barrier word, waits for the others': nobody
// touches a buffer its owner's GPU may still be producing; the write and the waits are one
// driver call); fork to the lanes the program uses (a part on one lane runs on the run's
// stream itself, no fork), which run this rank's ops, edges between ranks set and awaited as
// the run's number; join the lanes, another GPU barrier (the exit: no rank's buffers are still
// read or written by a peer; a Barrier op of the program is one too). Nothing marks a run's
// end on the origin stream: settle() records an event there when it needs one. The caller's
// stream does not wait for a run on the origin stream: a caller that needs the results joins
// it (join_ordered). A GPU's runs follow each other (a run on another stream than the one
// before waits for it first), so a run's words are written only once the run before it has
// ended on every rank: a wait for run k cannot be met by run k-1's write, and a later run's
// write (k+1) meets it only once k has ended. A staged call's run (no entry barrier) has its
// GPUs' barriers on flags in the ranks' own GPU memory instead (coll::MappedBarrier): where its
// program is kernel copies, a Barrier op and one kernel (and maybe a Barrier op and kernel copies
// more: a two-shot allreduce), that kernel makes the copies, every barrier and the write of the
// run's end itself, so the run is one launch; before it, the ranks' streams meet on their
// arrival words (one driver call), so that the kernel's blocks do not spin on the SMs for a
// rank behind.
#include <chrono>

#include "common/error.hpp"
#include "common/log.hpp"
#include "ipc/wait.hpp"
#include "mpi/coll_slice.hpp"
#include "mpi/coll_watchdog.hpp"

namespace gpustripe::mpi {
namespace {
constexpr int kOrderedRole = -2000;  // the origin lane of stream-ordered runs
}  // namespace

StreamHandle SliceRunner::origin_stream(int device) { return lane(device, kOrderedRole).stream(); }

void SliceRunner::follow_tail(OrderedEvents& ev, int device, StreamHandle s, bool every_rank) {
  if (!ev.tail || ev.tail == s) return;
  if (ev.tail_is_caller) {
    // This rank's part of it done (its exit barrier's write): the next run's entry barrier then
    // waits for the others' exits by itself; without one, s waits for them here.
    for (int r = 0; r < nranks_; ++r)
      if (every_rank || r == rank_)
        backend_.stream_wait_flag(s, dev_flags_ + TeamFlags::kBarrierWord + r, ev.tail_count);
    return;
  }
  backend_.record_event(ev.last, origin_stream(device));
  backend_.wait_event(s, ev.last);
}

bool SliceRunner::tail_done(const OrderedEvents& ev) const {
  for (int r = 0; r < nranks_; ++r) {
    const uint32_t w = flags_.op(TeamFlags::kBarrierWord + r).load(std::memory_order_acquire);
    if (static_cast<int32_t>(w - ev.tail_count) < 0) return false;
  }
  return true;
}

bool SliceRunner::can_order(const coll::Program& prog, const coll::CrossSlots& slots) const {
  return dev_flags_ && slots.size() <= TeamFlags::kOrderedEdges && prog.nranks() == nranks_;
}

void SliceRunner::flag_barrier(StreamHandle s, size_t first, std::vector<const uint32_t*>& peers, uint64_t& count) {
  uint32_t* word = dev_flags_ + first;
  if (peers.empty())
    for (int r = 0; r < nranks_; ++r)
      if (r != rank_) peers.push_back(word + r);
  const uint32_t n = static_cast<uint32_t>(++count);
  backend_.stream_flag_barrier(s, word + rank_, peers.data(), peers.size(), n);
}

void SliceRunner::run_ordered(const coll::Program& prog, int device, StreamHandle after,
                              const coll::CrossSlots* given, EventHandle after_event, bool on_after, bool entry,
                              coll::MappedBarrier* gpus) {
  coll::CrossSlots computed;
  if (!given) computed = coll::cross_slots(prog);
  const coll::CrossSlots& slots = given ? *given : computed;
  GS_REQUIRE(can_order(prog, slots), GPUSTRIPE_ERR_INTERNAL, "a collective schedule that cannot run stream-ordered");
  GS_REQUIRE(after != nullptr || after_event != nullptr, GPUSTRIPE_ERR_INVALID_ARGUMENT,
             "a stream-ordered collective without a stream");
  GS_REQUIRE(!on_after || (after != nullptr && after_event == nullptr), GPUSTRIPE_ERR_INTERNAL,
             "a stream-ordered collective on the caller's stream without that stream");
  GS_REQUIRE(!(gpus && entry), GPUSTRIPE_ERR_INTERNAL, "a stream-ordered collective with an entry barrier on mapped flags");
  // A thread's own stream is not one stream to the runner (the handle names another on another
  // thread): the run goes on the origin stream, and the thread's stream joins it at the end.
  const bool join_after = on_after && backend_.thread_stream(after);
  if (join_after) on_after = false;
  const uint32_t run = static_cast<uint32_t>(++ordered_runs_);
  OrderedEvents& ev = ordered_events_[device];
  for (EventHandle* e : {&ev.in, &ev.fork, &ev.done, &ev.last})
    if (!*e) *e = backend_.create_event(device, false);
  // A run on another GPU than the unsettled ones: settle() waits on one GPU's last run.
  if (ordered_device_ >= 0 && ordered_device_ != device) settle();
  Lane* run_lane = &lane(device, kOrderedRole);
  if (on_after) {
    std::unique_ptr<Lane>& l = caller_lanes_[{device, after}];
    if (!l) l = std::make_unique<Lane>(backend_, device, after);
    run_lane = l.get();
  }
  const StreamHandle o = run_lane->stream();
  // The enqueue watched: a driver call may block behind a wait that a dead rank never meets (a
  // stream's full queue; the emulated reductions wait for their stream), and a staged call
  // (no meeting of the hosts before it) is the first to find such a rank. The watch releases every
  // ordered wait, and the run fails once its enqueue is past.
  WaitWatch watch(watch_enqueue_, check_alive_, release_ordered_fn_);

  launched_at_ = std::chrono::steady_clock::now();  // the run's driver calls begin here
  enqueued_behind_ = ev.tail && !tail_done(ev);
  if (!on_after) {
    if (!after_event) {
      backend_.record_event(ev.in, after);
      after_event = ev.in;
    }
    backend_.wait_event(o, after_event);
  }
  // The caller's stream, where the latest run was, is waited for already.
  // (The tail's event, or s itself, covers its exit barrier's waits: every rank's exit.)
  if (!(after && ev.tail == after)) follow_tail(ev, device, o, !entry);
  if (entry) gpu_barrier(o);  // every rank's buffers are ready
  // Segments between Barrier ops, as run() does, with the GPUs' barrier for the hosts'.
  const auto& ops = prog.ops();
  size_t begin = 0, stop = ops.size();
  // On the mapped flags, the last part's kernel may run the barrier before it and the exit, and
  // the copies around it too (a staged call: one launch), and mark the run's end itself.
  const Fused fused = gpus ? fuse(ops, slots, *gpus) : Fused{};
  // Every rank's stream at this run before its first kernel: the wait on the flags holds no SM,
  // where the kernels' barriers inside would spin on every SM they run on while a peer is behind,
  // the program's kernels beside them (a training's backward) finding none free meanwhile
  // (bench/probes/sm_footprint.cu). Inside, they then wait only for the peers' stores. Every rank
  // of a run on mapped flags makes it, whether its own part runs a barrier inside or not.
  if (gpus) flag_barrier(o, TeamFlags::kArrivalWord, arrival_peers_, arrivals_);
  if (fused.barrier && fused.folded) {
    begin = fused.last;
    stop = fused.stop;
  }
  while (begin <= stop) {
    size_t end = begin;
    while (end < stop && ops[end].kind != coll::Op::Barrier) ++end;
    // A part on one program lane (a kernel per rank, a chain of copies) runs on the run's
    // stream itself: a fork and a join are four driver calls of host time per call, and nothing
    // to overlap with there.
    const bool one_lane = on_one_lane(ops, begin, end);
    const bool last = end == stop;
    const coll::FusedBarrier* inside = last ? fused.barrier : nullptr;
    if (gpus && begin > 0 && !inside) gpus->arrive_and_wait(o);
    if (!one_lane) backend_.record_event(ev.fork, o);
    std::vector<Lane*> used;
    {
      struct Clear {  // issue() reads it only inside this enqueue
        const coll::FusedBarrier*& p;
        ~Clear() { p = nullptr; }
      } clear{fused_ = inside};
      enqueue_streams(prog, slots, begin, end, device, lanes_, one_lane ? nullptr : ev.fork, false,
                      dev_flags_ + TeamFlags::kOrderedEdges, run, used, one_lane ? run_lane : nullptr);
    }
    for (Lane* l : used)
      if (l != run_lane) backend_.wait_event(o, l->mark().event);
    // The last barrier is the exit: no rank's buffers are still in a peer's use.
    if (!gpus) gpu_barrier(o);
    else if (last && !inside) gpus->arrive_and_wait(o);
    begin = end + 1;
  }
  // On the mapped flags: this rank's part done, every rank's past its exit: its barrier word says
  // so (where the kernel did not write it).
  if (gpus) {
    ++gpu_barriers_;
    if (!fused.barrier)
      backend_.stream_write_flag(o, dev_flags_ + TeamFlags::kBarrierWord + rank_, static_cast<uint32_t>(gpu_barriers_));
  }
  // Nothing marks the run's end: on the origin stream an event recorded when settle() or a later
  // run on another stream needs it covers every run before it (runs on one GPU follow each
  // other there; one per run would be a driver call of every call's host time), and on a
  // caller's stream the exit barrier's count is its end (follow_tail, tail_done).
  ev.tail = o;
  ev.tail_is_caller = on_after;
  ev.tail_count = static_cast<uint32_t>(gpu_barriers_);
  ordered_device_ = device;
  if (join_after) join_ordered(device, after);
  watch.rethrow();
}

bool SliceRunner::on_one_lane(const std::vector<coll::Op>& ops, size_t begin, size_t end) const {
  for (size_t i = begin, first = end; i < end; ++i) {
    if (ops[i].rank != rank_) continue;
    if (first == end) first = i;
    if (ops[i].lane != ops[first].lane) return false;
  }
  return true;
}

bool SliceRunner::fits(const std::vector<coll::Op>& ops, size_t begin, size_t end, const coll::FusedBarrier* fb) const {
  size_t first = end, mine = 0;
  for (size_t i = begin; i < end; ++i)
    if (ops[i].rank == rank_) {
      if (first == end) first = i;
      ++mine;
    }
  if (!fb || first == end) return false;
  const coll::Op& op = ops[first];
  if (op.kind == coll::Op::Reduce && mine == 1) {
    coll::ReduceArgs a = coll::reduce_args(op);
    a.barrier = fb;
    return reducer_.can_fuse_barrier(a);
  }
  if (op.kind != coll::Op::Copy || !op.by_kernel) return false;
  const std::vector<const coll::Op*> batch = coll::kernel_copy_batch(ops, first);
  if (batch.size() != mine) return false;
  coll::CopyArgs a;
  a.segs = coll::copy_segments(batch);
  a.barrier = fb;
  return reducer_.can_fuse_copy(a);
}

SliceRunner::Fused SliceRunner::fuse(const std::vector<coll::Op>& ops, const coll::CrossSlots& slots,
                                     coll::MappedBarrier& gpus) {
  std::vector<size_t> bars;
  for (size_t i = 0; i < ops.size(); ++i)
    if (ops[i].kind == coll::Op::Barrier) bars.push_back(i);
  Fused f;
  if (bars.empty()) return f;
  uint32_t* end_word = dev_flags_ + TeamFlags::kBarrierWord + rank_;
  const uint32_t end_value = static_cast<uint32_t>(gpu_barriers_ + 1);
  // This rank's ops in [begin, end) as copies a kernel can make around its work: kernel copies
  // that wait for nothing and signal no other rank (at least one).
  auto copies = [&](size_t begin, size_t end, std::vector<coll::BarrierCopy>& out) {
    for (size_t i = begin; i < end; ++i) {
      const coll::Op& op = ops[i];
      if (op.rank != rank_) continue;
      auto edge = slots.lower_bound({static_cast<int>(i), -1});
      if (op.kind != coll::Op::Copy || !op.by_kernel || !op.deps.empty() ||
          (edge != slots.end() && edge->first.first == static_cast<int>(i)))
        return false;
      out.push_back({op.src, op.dst, op.bytes});
    }
    return !out.empty();
  };
  // The whole run in one kernel: copies, a Barrier op, the kernel's part (and a Barrier op and copies).
  if (bars.size() <= 2) {
    const size_t first = bars[0] + 1, stop = bars.size() == 2 ? bars[1] : ops.size();
    std::vector<coll::BarrierCopy> pre, post;
    if (on_one_lane(ops, first, stop) && copies(0, bars[0], pre) &&
        (bars.size() == 1 || copies(bars[1] + 1, ops.size(), post))) {
      const coll::FusedBarrier* fb = gpus.fused(pre, post, end_word, end_value);
      if (fits(ops, first, stop, fb)) {
        f.barrier = fb;
        f.folded = true;
        f.last = first;
        f.stop = stop;
        return f;
      }
    }
  }
  // The last part: after the program's last Barrier op, this rank's ops on one lane.
  f.last = bars.back() + 1;
  f.stop = ops.size();
  if (!on_one_lane(ops, f.last, f.stop)) return f;
  const coll::FusedBarrier* fb = gpus.fused({}, {}, end_word, end_value);
  if (fits(ops, f.last, f.stop, fb)) f.barrier = fb;
  return f;
}

void SliceRunner::join_ordered(int device, StreamHandle s) {
  OrderedEvents& ev = ordered_events_[device];
  if (ev.tail == s && s) return;  // the latest run ran on s: its later work follows them all
  if (ev.tail_is_caller) {
    // Every rank's part done, the peers' writes into this rank's buffers among them.
    for (int r = 0; r < nranks_; ++r)
      backend_.stream_wait_flag(s, dev_flags_ + TeamFlags::kBarrierWord + r, ev.tail_count);
    return;
  }
  EventHandle& e = ev.join;
  if (!e) e = backend_.create_event(device, false);
  backend_.record_event(e, origin_stream(device));
  backend_.wait_event(s, e);
}

void SliceRunner::release_ordered() {
  // Far ahead of every run's number (waits compare cyclically): every wait on a peer passes.
  const uint32_t past = static_cast<uint32_t>(ordered_runs_) + (uint32_t(1) << 30);
  for (size_t w = TeamFlags::kMaxOps; w < TeamFlags::kWords; ++w) flags_.op(w).store(past, std::memory_order_release);
}

void SliceRunner::settle() {
  if (ordered_device_ < 0) return;
  OrderedEvents& ev = ordered_events_[ordered_device_];
  // The latest run covers the ones before it (they follow each other): the origin stream's event
  // after it, or where it ran on a caller's stream, every rank's barrier word past its exit.
  const bool by_words = ev.tail_is_caller;
  if (!by_words) backend_.record_event(ev.done, origin_stream(ordered_device_));
  const auto t0 = std::chrono::steady_clock::now();
  try {
    ipc::Waiter w(format("collective: rank %d waiting for its stream-ordered collectives (and the other ranks' parts)",
                         rank_),
                  check_peers_);
    while (by_words ? !tail_done(ev) : !backend_.query_event(ev.done)) w.pause();
  } catch (...) {
    // A peer is gone or stuck: the team is broken (CollTeam fails every later call). Let this
    // rank's streams run out rather than wait forever on it (a caller's stream is the caller's
    // to wait for).
    GS_LOG_WARN(Subsys::Mpi, "rank %d: releasing its GPUs' waits on the other ranks' collectives", rank_);
    release_ordered();
    if (!by_words) {
      try {
        backend_.synchronize_event(ev.done);
      } catch (...) {
      }
    }
    ordered_device_ = -1;
    throw;
  }
  drain_us_ += std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
  ordered_device_ = -1;
}

}  // namespace gpustripe::mpi
