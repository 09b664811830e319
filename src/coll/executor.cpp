#include "coll/executor.hpp"

#include <set>

#include "common/error.hpp"
#include "common/log.hpp"

namespace gpustripe::coll {
namespace {

constexpr size_t kGraphCacheSize = 64;
constexpr size_t kSeenMax = 1024;
constexpr int kOriginLane = -1000;  // the stream graphs are captured and launched on (rank 0's device)

}  // namespace

Executor::Executor(Backend& backend, Reducer& reducer, std::vector<int> devices)
    : backend_(backend), reducer_(reducer), devices_(std::move(devices)), lanes_(backend), capture_lanes_(backend),
      user_events_(devices_.size(), nullptr), graphs_(backend, kGraphCacheSize) {}

Executor::~Executor() {
  try {
    synchronize();
  } catch (...) {
  }
  for (EventHandle e : user_events_)
    if (e) backend_.destroy_event(e);
  if (fork_) backend_.destroy_event(fork_);
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
                                                     const std::vector<EventHandle>& entry) {
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
    if (op.kind == Op::Copy) {
      backend_.copy_async(op.dst, op.dst_dev, op.src, op.src_dev, op.bytes, l.stream());
    } else {
      ReduceArgs a;
      a.dst = op.dst;
      a.srcs = op.srcs;
      a.count = op.count;
      a.dtype = op.dtype;
      a.op = op.redop;
      reducer_.reduce_async(a, devices_[op.rank], l.stream());
    }
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
  std::vector<LaneRef> used = enqueue_ops(prog, lanes_, entry_events(user_streams));
  std::vector<LaneMark> done;
  for (LaneRef u : used) done.push_back(u->mark());
  finish(done, user_streams);
}

void Executor::enqueue_keyed(const std::string& key, const std::function<Program()>& build,
                             const std::vector<StreamHandle>& user_streams, bool as_graph) {
  as_graph = as_graph && backend_.supports_graphs() && !graphs_broken_;
  if (as_graph) {
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
      if (GraphExecHandle g = capture(prog)) {
        graphs_.insert(key, g);
        launch(g, user_streams);
        return;
      }
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
    // A backend that cannot capture this program still runs it, directly from now on.
    graphs_broken_ = true;
    GS_LOG_WARN(Subsys::Coll, "capturing a collective into a graph failed, issuing calls directly: %s", e.what());
    return nullptr;
  }
  GS_LOG_DEBUG(Subsys::Coll, "captured a graph of %zu ops", prog.size());
  return g;
}

void Executor::launch(GraphExecHandle g, const std::vector<StreamHandle>& user_streams) {
  ::gpustripe::Lane& origin = lane(lanes_, 0, kOriginLane);
  for (EventHandle e : entry_events(user_streams)) backend_.wait_event(origin.stream(), e);
  backend_.launch_graph(g, origin.stream());
  ++graph_launches_;
  finish({origin.mark()}, user_streams);
}

void Executor::synchronize() {
  for (const LaneMark& m : last_done_) backend_.synchronize_event(m.event);
}

}  // namespace gpustripe::coll
