#include "coll/executor.hpp"

#include <algorithm>
#include <map>
#include <memory>
#include <set>

#include "common/config.hpp"
#include "common/error.hpp"
#include "common/log.hpp"

namespace gpustripe::coll {
namespace {

constexpr size_t kGraphCacheSize = 64;
constexpr size_t kSeenMax = 1024;
constexpr int kOriginLane = -1000;  // the stream graphs are captured and launched on (rank 0's device;
                                    // each rank's for per-rank graphs)
// Per-rank graphs come with the GPUs' own barrier or not at all: entered and left through
// events instead, their launches and cross-GPU waits cost more host time than one graph over
// all GPUs. Waits between GPUs inside them become flags only where that pays (flags_preferred:
// the exchanges' host path and pushed reduction inputs); a chain broadcast with flags lost to
// the one graph. A per-rank part that is one reduction, or kernel copies only, runs with the
// barrier inside its kernel: one kernel per call instead of three.
const StringSetting kTrace{"GPUSTRIPE_COLL_TRACE", "",
                           "File to which `gpustripe bench coll` appends a device-side timeline of each timed "
                           "collective's last call: per-rank graphs get a GPU timer stamp after every step (this "
                           "slows them a little; for diagnosis only). Empty: off"};

// What an op of a per-rank program is, for the timeline.
std::string step_label(const Op& op) {
  const std::string lane = format("L%d ", op.lane);
  switch (op.kind) {
    case Op::Copy:
      return lane + format("%s %s->%s %s", op.by_kernel ? "kernel copy" : "copy", op.src_dev == kHostDevice ? "host" : std::to_string(op.src_dev).c_str(),
                           op.dst_dev == kHostDevice ? "host" : std::to_string(op.dst_dev).c_str(),
                           format_size(op.bytes).c_str());
    case Op::Reduce: return lane + format("kernel %zu srcs %zu el", op.srcs.size(), op.count);
    case Op::Signal: return lane + format("signal->%d", op.dst_dev);
    case Op::Wait: return lane + "wait";
    default: return lane + "barrier";
  }
}

// Kernel copies that may run as one kernel: none reads or writes what another writes.
bool independent_copies(const std::vector<const Op*>& copies) {
  auto overlap = [](const void* a, const void* b, size_t n) {
    auto x = reinterpret_cast<uintptr_t>(a), y = reinterpret_cast<uintptr_t>(b);
    return x < y + n && y < x + n;
  };
  for (size_t i = 0; i < copies.size(); ++i)
    for (size_t j = 0; j < i; ++j) {
      const Op& a = *copies[i];
      const Op& b = *copies[j];
      const size_t n = std::max(a.bytes, b.bytes);  // bounds both ranges (over-cautious at most)
      if (overlap(a.dst, b.dst, n) || overlap(a.dst, b.src, n) || overlap(a.src, b.dst, n)) return false;
    }
  return true;
}

bool has_barrier(const Program& prog) {
  for (const Op& op : prog.ops())
    if (op.kind == Op::Barrier) return true;
  return false;
}

// The ops of one rank, in order, with their dependencies renumbered; a dependency on
// another rank's op becomes a wait on the flag that op's signal sets, on the waiting op's lane,
// or (flag_lanes) on a lane of waits that the op depends on, with signals on a lane of their own.
Program only_rank(const Program& prog, int rank, const CrossSlots& slots, bool flag_lanes) {
  Program sub(prog.nranks());
  std::vector<int> index(prog.size(), -1);
  std::set<std::pair<int, int>> waited;  // (lane, slot) already waited for on that lane
  std::map<int, int> wait_op;            // flag_lanes: slot -> its wait
  const auto& ops = prog.ops();
  for (size_t i = 0; i < ops.size(); ++i) {
    const Op& op = ops[i];
    if (op.rank != rank) continue;
    std::vector<int> deps;
    for (int d : op.deps) {
      if (ops[d].rank == rank) {
        deps.push_back(index[d]);
        continue;
      }
      const int slot = slots.at({d, rank});
      if (flag_lanes) {
        auto w = wait_op.find(slot);
        if (w == wait_op.end()) w = wait_op.emplace(slot, sub.wait(rank, kLaneWait, slot)).first;
        deps.push_back(w->second);
      } else if (waited.insert({op.lane, slot}).second) {
        sub.wait(rank, op.lane, slot);
      }
    }
    index[i] = op.kind == Op::Copy && op.by_kernel
                   ? sub.kernel_copy(op.rank, op.lane, op.dst, op.dst_dev, op.src, op.src_dev, op.bytes, deps)
               : op.kind == Op::Copy
                   ? sub.copy(op.rank, op.lane, op.dst, op.dst_dev, op.src, op.src_dev, op.bytes, deps)
                   : sub.reduce(op.rank, op.lane, op.dst, op.srcs, op.count, op.dtype, op.redop, deps, op.more_dsts,
                                op.blocks_per_sm);
    for (auto it = slots.lower_bound({static_cast<int>(i), -1});
         it != slots.end() && it->first.first == static_cast<int>(i); ++it)
      sub.signal(rank, flag_lanes ? kLaneSignal : op.lane, it->first.second, it->second, {index[i]});
  }
  return sub;
}

}  // namespace

// Per-rank graphs turn these into signal/wait pairs; the MPI collectives into flags in shared memory.
CrossSlots cross_slots(const Program& prog) {
  CrossSlots slots;
  const auto& ops = prog.ops();
  for (const Op& op : ops)
    for (int d : op.deps)
      if (ops[d].rank != op.rank) slots.emplace(std::make_pair(d, op.rank), static_cast<int>(slots.size()));
  return slots;
}

std::vector<Program> split_per_rank(const Program& prog, bool flag_lanes) {
  const CrossSlots slots = cross_slots(prog);
  std::vector<Program> out;
  for (int r = 0; r < prog.nranks(); ++r) out.push_back(only_rank(prog, r, slots, flag_lanes));
  return out;
}

Executor::Executor(Backend& backend, Reducer& reducer, std::vector<int> devices, DeviceBarrier* barrier)
    : backend_(backend), reducer_(reducer), devices_(std::move(devices)), lanes_(backend), capture_lanes_(backend),
      user_events_(devices_.size(), nullptr), graphs_(backend, kGraphCacheSize), barrier_(barrier) {}

Executor::~Executor() {
  try {
    synchronize();
  } catch (...) {
  }
  forget_per_rank_graphs();
  for (EventHandle e : user_events_)
    if (e) backend_.destroy_event(e);
  for (EventHandle e : exit_ev_)
    if (e) backend_.destroy_event(e);
  for (EventHandle e : forks_)
    if (e) backend_.destroy_event(e);
  if (fork_) backend_.destroy_event(fork_);
}

void Executor::forget_per_rank_graphs() {
  for (auto& [key, pr] : per_rank_)
    for (GraphExecHandle g : pr.graphs) backend_.destroy_graph(g);
  per_rank_.clear();
}

::gpustripe::Lane& Executor::lane(LaneSet& set, int rank, int role) {
  // Keyed apart from the engine's lanes (which key by link direction) by a negative index.
  return set.get(devices_[rank], devices_[rank], -1 - role);
}

EventHandle Executor::user_event(int rank) {
  if (!user_events_[rank]) user_events_[rank] = backend_.create_event(devices_[rank], false);
  return user_events_[rank];
}

std::vector<EventHandle> Executor::entry_events(const std::vector<StreamHandle>& user_streams) {
  std::vector<EventHandle> entry;
  for (const LaneMark& m : last_done_) entry.push_back(m.event);
  for (int r = 0; r < static_cast<int>(user_streams.size()); ++r) {
    EventHandle e = user_event(r);
    backend_.record_event(e, user_streams[r]);
    entry.push_back(e);
  }
  return entry;
}

void Executor::finish(const std::vector<LaneMark>& done, const std::vector<StreamHandle>& user_streams) {
  // The callers' streams wait for every lane (a rank's results are written by other
  // ranks' lanes too); the next run starts after these marks.
  last_done_ = done;
  for (StreamHandle s : user_streams)
    for (const LaneMark& m : last_done_) backend_.wait_event(s, m.event);
}

std::vector<Executor::LaneRef> Executor::enqueue_ops(const Program& prog, LaneSet& set,
                                                     const std::vector<EventHandle>& entry,
                                                     const std::function<void(size_t, ::gpustripe::Lane&)>& after_op) {
  const auto& ops = prog.ops();
  // Which ops other lanes wait for: those get a mark right after they are enqueued.
  std::vector<uint8_t> marked(ops.size(), 0);
  for (size_t j = 0; j < ops.size(); ++j)
    for (int d : ops[j].deps)
      if (ops[d].rank != ops[j].rank || ops[d].lane != ops[j].lane) marked[d] = 1;

  std::set<LaneRef> started;  // lanes that waited for the entry (and the last barrier)
  std::vector<LaneRef> used;  // every lane of this run, in first-use order
  std::vector<LaneMark> barrier_marks;
  std::vector<LaneMark> marks(ops.size());
  std::vector<uint8_t> in_batch(ops.size(), 0);  // kernel copies launched with an earlier one

  for (size_t i = 0; i < ops.size(); ++i) {
    const Op& op = ops[i];
    if (op.kind == Op::Barrier) {
      // Later ops wait for all lanes used so far; each lane waits once, on first use after.
      barrier_marks.clear();
      for (LaneRef u : used) barrier_marks.push_back(u->mark());
      started.clear();
      continue;
    }
    ::gpustripe::Lane& l = lane(set, op.rank, op.lane);
    if (started.insert(&l).second) {
      for (EventHandle e : entry) backend_.wait_event(l.stream(), e);
      for (const LaneMark& m : barrier_marks)
        if (m.stream != l.stream()) l.wait(m);
      bool seen = false;
      for (LaneRef u : used) seen = seen || u == &l;
      if (!seen) used.push_back(&l);
    }
    for (int d : op.deps)
      if (marks[d].event && marks[d].stream != l.stream()) l.wait(marks[d]);
    if (op.kind == Op::Copy && op.by_kernel) {
      // The kernel copies that follow on this lane with the same dependencies, none touching
      // what another writes, go in the same launch (one segment per source).
      if (!in_batch[i]) {
        std::vector<const Op*> batch = kernel_copy_batch(ops, i);
        for (size_t k = 1; k < batch.size(); ++k) in_batch[i + k] = 1;
        CopyArgs a;
        a.segs = copy_segments(batch);
        reducer_.copy_async(a, devices_[op.rank], l.stream());
      }
    } else if (op.kind == Op::Copy) {
      backend_.copy_async(op.dst, op.dst_dev, op.src, op.src_dev, op.bytes, l.stream());
    } else if (op.kind == Op::Signal || op.kind == Op::Wait) {
      GS_REQUIRE(barrier_, GPUSTRIPE_ERR_INTERNAL, "a flag signal or wait without the GPUs' barrier");
      if (op.kind == Op::Signal) barrier_->signal(op.rank, op.dst_dev, static_cast<int>(op.count), l.stream());
      else barrier_->wait(op.rank, static_cast<int>(op.count), l.stream());
    } else {
      reducer_.reduce_async(reduce_args(op), devices_[op.rank], l.stream());
    }
    if (after_op) after_op(i, l);
    if (marked[i]) marks[i] = l.mark();
  }
  return used;
}

void Executor::check_streams(int nranks, const std::vector<StreamHandle>& user_streams) const {
  const int n = static_cast<int>(devices_.size());
  GS_REQUIRE(nranks == n, GPUSTRIPE_ERR_INTERNAL, "program for %d ranks on a communicator of %d", nranks, n);
  GS_REQUIRE(user_streams.empty() || static_cast<int>(user_streams.size()) == n, GPUSTRIPE_ERR_INVALID_ARGUMENT,
             "%zu streams given for %d ranks", user_streams.size(), n);
}

void Executor::enqueue(const Program& prog, const std::vector<StreamHandle>& user_streams) {
  check_streams(prog.nranks(), user_streams);
  last_streams_.clear();
  std::vector<LaneRef> used = enqueue_ops(prog, lanes_, entry_events(user_streams));
  std::vector<LaneMark> done;
  for (LaneRef u : used) done.push_back(u->mark());
  finish(done, user_streams);
}

void Executor::enqueue_keyed(const std::string& key, const std::function<Program()>& build,
                             const std::vector<StreamHandle>& user_streams, bool as_graph, bool flags_preferred) {
  as_graph = as_graph && backend_.supports_graphs() && !uncapturable_.count(key);
  auto noted = notes_.find(key);
  note_ = noted != notes_.end() ? noted->second : std::string();
  if (as_graph) {
    auto it = user_streams.empty() ? per_rank_.end() : per_rank_.find(key);
    if (it != per_rank_.end()) {
      check_streams(static_cast<int>(devices_.size()), user_streams);
      launch_per_rank(it->second, user_streams);
      return;
    }
    if (GraphExecHandle g = graphs_.find(key)) {
      check_streams(static_cast<int>(devices_.size()), user_streams);
      launch(g, user_streams);
      return;
    }
  }
  Program prog = build();
  // First sight runs directly (and creates every lane and event outside any capture).
  if (as_graph) {
    if (seen_.size() >= kSeenMax) seen_.clear();
    if (!seen_.insert(key).second) {
      check_streams(prog.nranks(), user_streams);
      // Per-rank graphs between the GPUs' barriers, for calls on the caller's streams, of
      // programs without barriers whose dependencies stay on their rank (or, with flags,
      // cross ranks in few enough places). Blocking calls keep the one multi-GPU graph.
      const size_t crossing = cross_slots(prog).size();
      if (barrier_ && !user_streams.empty() && !has_barrier(prog) &&
          (crossing == 0 || (flags_preferred && crossing <= static_cast<size_t>(barrier_->slots())))) {
        PerRank pr = capture_per_rank(prog);
        if (!pr.graphs.empty()) {
          if (per_rank_.size() >= kGraphCacheSize) forget_per_rank_graphs();
          launch_per_rank(pr, user_streams);
          per_rank_.emplace(key, std::move(pr));
          return;
        }
      }
      // Else (or when per-rank capture failed) one graph over all GPUs; a program that
      // cannot be captured at all runs directly from now on (that program only).
      GraphExecHandle g = capture(prog);
      if (!note_.empty()) {
        if (notes_.size() >= kSeenMax) notes_.clear();
        notes_[key] = note_;
      }
      if (g) {
        graphs_.insert(key, g);
        launch(g, user_streams);
        return;
      }
      if (uncapturable_.size() >= kSeenMax) uncapturable_.clear();
      uncapturable_.insert(key);
    }
  }
  enqueue(prog, user_streams);
}

GraphExecHandle Executor::capture(const Program& prog) {
  ::gpustripe::Lane& origin = lane(lanes_, 0, kOriginLane);
  if (!fork_) fork_ = backend_.create_event(devices_[0], false);
  GraphExecHandle g = nullptr;
  try {
    backend_.begin_capture(origin.stream());
    try {
      backend_.record_event(fork_, origin.stream());
      std::vector<LaneRef> used = enqueue_ops(prog, capture_lanes_, {fork_});
      for (LaneRef u : used) backend_.wait_event(origin.stream(), u->mark().event);
    } catch (...) {
      try {
        backend_.destroy_graph(backend_.end_capture(origin.stream()));
      } catch (...) {
      }
      throw;
    }
    g = backend_.end_capture(origin.stream());
  } catch (const Error& e) {
    // A program the backend cannot capture still runs, directly (the caller remembers it).
    note_ += std::string(note_.empty() ? "" : "; ") + "graph capture failed: " + e.what();
    GS_LOG_WARN(Subsys::Coll, "capturing a collective into a graph failed, issuing calls directly: %s", e.what());
    return nullptr;
  }
  GS_LOG_DEBUG(Subsys::Coll, "captured a graph of %zu ops", prog.size());
  return g;
}

Executor::PerRank Executor::capture_per_rank(const Program& prog) {
  const int n = static_cast<int>(devices_.size());
  // Events recorded under capture are the graphs' own: these never mark work outside one.
  while (static_cast<int>(forks_.size()) < n)
    forks_.push_back(backend_.create_event(devices_[forks_.size()], false));
  PerRank out;
  std::vector<GraphExecHandle>& graphs = out.graphs;
  const CrossSlots slots = cross_slots(prog);
  std::vector<Program> subs;
  for (int r = 0; r < n; ++r) subs.push_back(only_rank(prog, r, slots, /*flag_lanes*/ true));
  // Tracing: a stamp before and after each barrier and after every op.
  size_t want = 0;
  for (const Program& sub : subs) want += sub.size() + 4;
  if (!kTrace.get().empty() && next_stamp_ + want <= static_cast<size_t>(barrier_->stamps())) {
    barrier_->enable_stamps();
    out.trace = std::make_shared<Trace>();
    out.trace->steps.resize(n);
  }
  for (int r = 0; r < n; ++r) {
    const Program& sub = subs[r];
    ::gpustripe::Lane& origin = lane(lanes_, r, kOriginLane);
    auto stamp = [&](StreamHandle s, const std::string& what) {
      if (!out.trace) return;
      barrier_->stamp(r, next_stamp_, s);
      out.trace->steps[r].emplace_back(next_stamp_++, what);
    };
    try {
      backend_.begin_capture(origin.stream());
      try {
        if (capture_fused(sub, r, origin.stream(), out.trace != nullptr)) {
          graphs.push_back(backend_.end_capture(origin.stream()));
          continue;
        }
        stamp(origin.stream(), "call");
        barrier_->arrive_and_wait(r, origin.stream());
        stamp(origin.stream(), "entry barrier");
        backend_.record_event(forks_[r], origin.stream());
        std::function<void(size_t, ::gpustripe::Lane&)> after;
        if (out.trace)
          after = [&](size_t i, ::gpustripe::Lane& l) { stamp(l.stream(), step_label(sub.ops()[i])); };
        std::vector<LaneRef> used = enqueue_ops(sub, capture_lanes_, {forks_[r]}, after);
        for (LaneRef u : used) backend_.wait_event(origin.stream(), u->mark().event);
        stamp(origin.stream(), "joined");
        barrier_->arrive_and_wait(r, origin.stream());
        stamp(origin.stream(), "exit barrier");
      } catch (...) {
        try {
          backend_.destroy_graph(backend_.end_capture(origin.stream()));
        } catch (...) {
        }
        throw;
      }
      graphs.push_back(backend_.end_capture(origin.stream()));
    } catch (const Error& e) {
      for (GraphExecHandle g : graphs) backend_.destroy_graph(g);
      note_ += std::string(note_.empty() ? "" : "; ") + "per-rank graph capture failed: " + e.what();
      GS_LOG_WARN(Subsys::Coll, "capturing a collective into per-rank graphs failed, trying one graph: %s", e.what());
      return {};
    }
  }
  GS_LOG_DEBUG(Subsys::Coll, "captured %d per-rank graphs of %zu ops between GPU barriers", n, prog.size());
  return out;
}

bool Executor::capture_fused(const Program& sub, int rank, StreamHandle s, bool tracing) {
#if GPUSTRIPE_HAVE_CUDA
  if (tracing || sub.size() == 0) return false;
  // One reduction, or kernel copies only, none waiting for another: one kernel with the
  // barriers inside.
  const bool reduction = sub.size() == 1 && sub.ops()[0].kind == Op::Reduce;
  std::vector<const Op*> copies;
  for (const Op& op : sub.ops())
    if (op.kind == Op::Copy && op.by_kernel && op.deps.empty()) copies.push_back(&op);
  if (!reduction && (copies.size() != sub.size() || !independent_copies(copies))) return false;
  FusedBarrier fb;
  if (!barrier_->fused_args(rank, &fb)) return false;
  // The kernels' parameters are copied at capture: fb need not outlive it.
  if (reduction) {
    ReduceArgs a = reduce_args(sub.ops()[0]);
    a.barrier = &fb;
    if (!reducer_.can_fuse_barrier(a)) return false;
    reducer_.reduce_async(a, devices_[rank], s);
    return true;
  }
  CopyArgs a;
  a.segs = copy_segments(copies);
  a.barrier = &fb;
  if (!reducer_.can_fuse_copy(a)) return false;
  reducer_.copy_async(a, devices_[rank], s);
  return true;
#else
  (void)sub;
  (void)rank;
  (void)s;
  (void)tracing;
  return false;
#endif
}

void Executor::launch_per_rank(const PerRank& pr, const std::vector<StreamHandle>& user_streams) {
  const int n = static_cast<int>(devices_.size());
  if (exit_ev_.empty())
    for (int r = 0; r < n; ++r) exit_ev_.push_back(backend_.create_event(devices_[r], false));
  const std::vector<StreamHandle>& s = user_streams;
  // The graphs begin and end with the GPUs' barrier: nothing to wait for across GPUs from
  // here, except, after a run that was not per-rank on these streams, that run's lanes.
  if (s != last_streams_)
    for (int r = 0; r < n; ++r)
      for (const LaneMark& m : last_done_) backend_.wait_event(s[r], m.event);
  for (int r = 0; r < n; ++r) backend_.launch_graph(pr.graphs[r], s[r]);
  graph_launches_ += n;
  last_trace_ = pr.trace;
  last_done_.clear();
  for (int r = 0; r < n; ++r) {
    backend_.record_event(exit_ev_[r], s[r]);
    last_done_.push_back({s[r], exit_ev_[r]});
  }
  last_streams_ = s;
}

void Executor::launch(GraphExecHandle g, const std::vector<StreamHandle>& user_streams) {
  last_streams_.clear();
  ::gpustripe::Lane& origin = lane(lanes_, 0, kOriginLane);
  for (EventHandle e : entry_events(user_streams)) backend_.wait_event(origin.stream(), e);
  backend_.launch_graph(g, origin.stream());
  ++graph_launches_;
  finish({origin.mark()}, user_streams);
}

std::string Executor::trace_path() { return kTrace.get(); }

std::string Executor::trace_text() const {
  if (!last_trace_ || !barrier_) return "";
  const auto& steps = last_trace_->steps;
  // Time zero: the first rank out of the entry barrier (the second stamp of each rank).
  unsigned long long t0 = ~0ull;
  for (const auto& rank_steps : steps)
    if (rank_steps.size() > 1) t0 = std::min(t0, barrier_->stamp_value(rank_steps[1].first));
  std::string out;
  for (size_t r = 0; r < steps.size(); ++r) {
    out += format("  rank %zu:", r);
    for (const auto& [index, what] : steps[r]) {
      const double us = (static_cast<double>(barrier_->stamp_value(index)) - static_cast<double>(t0)) / 1e3;
      out += format("  [%s] %.1f", what.c_str(), us);
    }
    out += "\n";
  }
  return out;
}

void Executor::synchronize() {
  for (const LaneMark& m : last_done_) backend_.synchronize_event(m.event);
  if (barrier_) barrier_->check();
}

std::vector<const Op*> kernel_copy_batch(const std::vector<Op>& ops, size_t i) {
  const Op& op = ops[i];
  std::vector<const Op*> batch{&op};
  for (size_t j = i + 1; j < ops.size(); ++j) {
    const Op& o = ops[j];
    if (o.kind != Op::Copy || !o.by_kernel || o.rank != op.rank || o.lane != op.lane || o.deps != op.deps) break;
    batch.push_back(&o);
    if (!independent_copies(batch)) {
      batch.pop_back();
      break;
    }
  }
  return batch;
}

}  // namespace gpustripe::coll
