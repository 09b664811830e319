// Enqueues a Program on a backend: each (rank, lane) is a stream of the rank's
// device (the engine's Lane), a dependency between lanes is an event, a barrier
// makes every later op wait for every earlier one. Every run is fenced after the
// previous one (scratch memory is reused), and optionally ordered with the
// caller's streams, one per rank.
// Graph mode (backends with graphs; the communicator asks for it at small sizes, where
// issuing dozens of async calls costs more than the transfer): a program seen before
// is captured once into a graph, on streams of its own, and replayed with one launch.
// A program whose dependencies never cross ranks (exchanges, reductions that read peers
// with kernels), called on the caller's streams, becomes one graph per rank launched on
// that rank's stream, beginning and ending with the GPUs' own barrier (barrier.hpp): no
// CUDA event crosses GPUs. Other programs become one graph over all GPUs, launched from
// rank 0's stream (an event hop into it and one out of it on each side).
#pragma once
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "backend/backend.hpp"
#include "coll/barrier.hpp"
#include "coll/program.hpp"
#include "coll/reduce.hpp"
#include "engine/graph_cache.hpp"
#include "engine/lanes.hpp"

namespace gpustripe::coll {

// The per-rank programs of a program without barriers (what per-rank graphs hold): each
// rank's ops in order, a dependency on another rank's op replaced by a wait on a flag slot
// before the waiting op (on its lane) and a signal of that slot right after the op waited for.
// flag_lanes: waits on a lane of their own that the waiting op depends on, signals on another.
std::vector<Program> split_per_rank(const Program& prog, bool flag_lanes = false);

// A flag slot for every (op, other rank waiting for it) pair: the dependencies that cross
// ranks, numbered in program order (the same on every rank that builds the same program).
using CrossSlots = std::map<std::pair<int, int>, int>;
CrossSlots cross_slots(const Program& prog);

// The kernel copies that run as one launch beginning with op i (a kernel copy): it and the
// ones right after it of the same rank, lane and dependencies, none touching what another
// writes (ops i, i+1, ... in that order).
std::vector<const Op*> kernel_copy_batch(const std::vector<Op>& ops, size_t i);

class Executor {
 public:
  // barrier (optional): the GPUs' own barrier for per-rank graphs.
  Executor(Backend& backend, Reducer& reducer, std::vector<int> devices, DeviceBarrier* barrier = nullptr);
  ~Executor();
  Executor(const Executor&) = delete;
  Executor& operator=(const Executor&) = delete;

  // user_streams: empty, or one stream per rank (see coll.h for the ordering contract).
  void enqueue(const Program& prog, const std::vector<StreamHandle>& user_streams);
  // As enqueue, for a program that `key` identifies (every address and size it holds).
  // With as_graph (and a backend with graphs) a key seen before is captured once and then
  // replayed without calling `build` at all, so a repeated call costs one graph launch.
  // flags_preferred: this program's waits between GPUs become
  // flags in per-rank graphs (the caller knows which schedules gain from that).
  void enqueue_keyed(const std::string& key, const std::function<Program()>& build,
                     const std::vector<StreamHandle>& user_streams, bool as_graph, bool flags_preferred = false);
  // Waits for everything enqueued so far.
  void synchronize();
  size_t graph_launches() const { return graph_launches_; }
  // GPUSTRIPE_COLL_TRACE: where `bench coll` appends timelines; "" when tracing is off.
  static std::string trace_path();
  // The device-side timeline of the last per-rank graph launch (captured with tracing on):
  // per rank, microseconds from the first rank leaving the entry barrier to each step's end.
  // Call after the work completed; "" when there is none.
  std::string trace_text() const;
  // Why the last call's program runs without (per-rank) graphs, if its capture failed; "" else.
  std::string take_note() { return std::exchange(note_, std::string()); }

 private:
  using LaneRef = ::gpustripe::Lane*;
  ::gpustripe::Lane& lane(LaneSet& set, int rank, int lane);
  EventHandle user_event(int rank);
  // Enqueues the ops on lanes of `set`, each lane first waiting for `entry`; returns the lanes used.
  // after_op (optional): called after each op is enqueued, with its index and lane.
  std::vector<LaneRef> enqueue_ops(const Program& prog, LaneSet& set, const std::vector<EventHandle>& entry,
                                   const std::function<void(size_t, ::gpustripe::Lane&)>& after_op = {});
  std::vector<EventHandle> entry_events(const std::vector<StreamHandle>& user_streams);
  void finish(const std::vector<LaneMark>& done, const std::vector<StreamHandle>& user_streams);
  void check_streams(int nranks, const std::vector<StreamHandle>& user_streams) const;
  GraphExecHandle capture(const Program& prog);
  void launch(GraphExecHandle g, const std::vector<StreamHandle>& user_streams);
  // Per-rank graphs: captured on each rank's origin stream between the GPUs' own entry and
  // exit barriers; empty when capturing failed.
  // Timeline stamps of a per-rank capture: per rank, (stamp index, what ended there).
  struct Trace {
    std::vector<std::vector<std::pair<int, std::string>>> steps;
  };
  struct PerRank {
    std::vector<GraphExecHandle> graphs;
    std::shared_ptr<Trace> trace;  // with GPUSTRIPE_COLL_TRACE only
  };
  PerRank capture_per_rank(const Program& prog);
  // Under capture on rank's origin stream s: a rank part that is one reduction, with the
  // GPUs' barriers inside its kernel, or kernel copies only
  // (Op::by_kernel, no deps: one copy kernel); false where it cannot.
  bool capture_fused(const Program& sub, int rank, StreamHandle s, bool tracing);
  void launch_per_rank(const PerRank& g, const std::vector<StreamHandle>& user_streams);
  void forget_per_rank_graphs();

  Backend& backend_;
  Reducer& reducer_;
  std::vector<int> devices_;
  LaneSet lanes_;          // direct runs
  LaneSet capture_lanes_;  // graph captures only: their events never mark work outside a graph
  std::vector<EventHandle> user_events_;
  std::vector<LaneMark> last_done_;  // end of the previous run on each lane it used
  GraphCache graphs_;
  DeviceBarrier* barrier_;
  std::map<std::string, PerRank> per_rank_;  // by key; bounded like graphs_
  std::vector<EventHandle> exit_ev_;                              // per rank: ends of per-rank launches
  std::vector<EventHandle> forks_;                                // per rank: per-rank captures' starts
  std::vector<StreamHandle> last_streams_;  // streams of the last per-rank launch: already in step
  std::set<std::string> seen_;  // programs run once directly: captured when seen again
  EventHandle fork_ = nullptr;  // the capture's start, on the origin stream
  std::set<std::string> uncapturable_;  // programs whose capture failed: run directly
  std::string note_;                    // what went wrong capturing the current call's program
  std::map<std::string, std::string> notes_;  // by key: what went wrong capturing it
  size_t graph_launches_ = 0;
  int next_stamp_ = 0;                  // stamp indices handed out to traced captures
  std::shared_ptr<Trace> last_trace_;   // of the last per-rank launch
};

}  // namespace gpustripe::coll
