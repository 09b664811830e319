// One rank's part of a collective Program, run in this process.
//
// Every rank of a node communicator builds the same Program with the coll layer's
// schedule builders, over its own view of the other ranks' buffers (IPC mappings),
// and enqueues only the ops placed on its rank, on its own GPU. Ordering inside the
// rank is the coll executor's (lanes are streams, a dependency on another lane is an
// event). A dependency on another rank's op crosses processes through shared memory:
// each such edge (op, waiting rank) has a flag word that the owner's stream sets to 1
// right after the op and the dependent's stream waits for (stream memory operations on
// the shared segment, registered for the GPUs: everything is enqueued at once, no host in
// between); the waiting rank's host sets it back to 0 once every rank's part is done (before
// it posts the next call's entry exchange, so before the owner can set it again). A Barrier op,
// and the end of the program, is where every rank's part so far is done: each rank's stream
// announces the end of its part in its done word (the part's number), and every host waits
// until all the done words have reached it -- the hosts do not meet, so a rank returns as soon
// as the GPUs are done, without waiting for the other hosts to see their own streams done. A
// collective thereby returns only when every rank's copies into this rank's buffers, and every
// read of them, are done. Waits are bounded by GPUSTRIPE_TIMEOUT and fail early when a rank dies.
#pragma once
#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "backend/backend.hpp"
#include "coll/executor.hpp"
#include "coll/program.hpp"
#include "coll/reduce.hpp"
#include "engine/lanes.hpp"
#include "ipc/shm_segment.hpp"
#include "ipc/wait.hpp"

namespace gpustripe::mpi {

// The flags a team's ranks share (one POSIX shared-memory segment per team).
class TeamFlags {
 public:
  static constexpr size_t kMaxOps = size_t(1) << 16;
  static constexpr int kMaxRanks = 256;
  // One rank's slot of a call's exchange: the length of its message, then the message (at most
  // kMessageBytes).
  static constexpr size_t kInfoBytes = 2048;
  static constexpr size_t kMessageBytes = kInfoBytes - sizeof(uint64_t);
  // Words of the stream-ordered runs (SliceRunner::run_ordered), after the op words: edge
  // slots (the run's number), then each rank's barrier word (how many GPU barriers its
  // streams have reached). Both only grow. Then each rank's done word: how many parts of
  // host-ordered runs (run, start) its streams have finished, written by its last stream. Then
  // each rank's arrival word: how many runs on mapped flags its streams have reached.
  static constexpr size_t kOrderedEdges = kMaxOps;
  static constexpr size_t kBarrierWord = kMaxOps + kOrderedEdges;
  static constexpr size_t kDoneWord = kBarrierWord + kMaxRanks;
  static constexpr size_t kArrivalWord = kDoneWord + kMaxRanks;
  static constexpr size_t kWords = kArrivalWord + kMaxRanks;
  static size_t segment_bytes();
  explicit TeamFlags(ipc::ShmSegment seg);
  // Edge slot i, 1 while set (the words are page-aligned for register_host).
  // Word i from kMaxOps on: the stream-ordered runs' words (kOrderedEdges, kBarrierWord, ...).
  std::atomic<uint32_t>& op(size_t i) const;
  uint32_t* op_words() const;
  size_t op_words_bytes() const { return kWords * sizeof(uint32_t); }
  // How many barriers rank r has reached.
  std::atomic<uint64_t>& arrived(int r) const;
  // Exchange: how many messages rank r has posted; message slot (parity, r).
  std::atomic<uint64_t>& posted(int r) const;
  void* info(int parity, int r) const;
  // Removes the segment's name once every rank has mapped it (ipc::ShmSegment::unlink).
  void unlink() { seg_.unlink(); }

 private:
  ipc::ShmSegment seg_;
};

class SliceRunner {
 public:
  // check_peers throws when a rank of the team is gone (called while waiting). check_alive
  // does the same from another thread (coll_watchdog.hpp: it must touch only thread-safe
  // state); empty: the streams' waits are bounded by GPUSTRIPE_TIMEOUT alone.
  SliceRunner(Backend& backend, coll::Reducer& reducer, int rank, int nranks, TeamFlags& flags,
              std::function<void()> check_peers, std::function<void()> check_alive = {});
  ~SliceRunner();
  SliceRunner(const SliceRunner&) = delete;
  SliceRunner& operator=(const SliceRunner&) = delete;

  // Runs this rank's ops of `prog` (program rank == team rank) on streams of `device`
  // and returns once every rank's GPU has finished its part (the done words; the hosts do not
  // meet). Every rank runs the same program at the same point, and the next call's entry
  // exchange orders what follows it: a rank may return before another's host has seen the
  // end. `slots`: coll::cross_slots(prog) where the caller keeps it with a cached program
  // (null: computed here).
  void run(const coll::Program& prog, int device, const coll::CrossSlots* slots = nullptr);
  // Stream-ordered (can_order(prog)): this rank's part starts on the GPUs
  // once `after` (a stream of `device`, e.g. a framework's current stream) has run what was
  // enqueued on it so far and every rank's part has started there; a Barrier op is a barrier of
  // the ranks' GPUs. Returns once enqueued: no host waits for the GPUs or the hosts.
  // Where it runs: on the runner's origin stream of `device` (`after` itself goes on: a caller
  // joins when it needs the results, join_ordered(), as with NCCL's work), or with `on_after`
  // on `after` itself, whose later work then runs once every rank's part is done, with no event
  // or wait between the caller's stream and the run (a caller that would join at once anyway:
  // a blocking call). Successive runs on a rank are ordered (a run on another stream than the
  // one before waits for it), and so are the ranks' (a run's edges carry its number, barriers
  // their count, both only grow): a run's waits cannot be met by an earlier run's writes.
  // `after`: the caller's stream; or null, and `after_event` recorded on it at the point the run
  // starts after (a caller on another thread than the one that enqueues: CallQueue).
  // `entry`: false for a program whose ops touch no rank's buffers that a peer may still be
  // producing or using (a staged call's: each rank writes only its own buffers and slot, which the
  // run before it let go at its exit): no entry barrier, the run starts once the one before it
  // has ended on every rank.
  // `gpus` (with `entry` false): the program's Barrier ops and the exit are barriers of the
  // ranks' GPUs on flags in their own memory (coll::MappedBarrier, the staged calls' slot areas)
  // instead of the stream flags in host memory. Where this rank's part after the last Barrier op
  // is one kernel that can, that kernel runs the last one and the exit, marks the run's end in
  // this rank's barrier word (else a stream write does: follow_tail, tail_done and settle read
  // it), and, for a program of kernel copies, one Barrier op and that kernel (a staged call's),
  // makes the copies before its entry too: the run is one launch. Before it, the stream waits
  // until every rank's stream has reached the run (the arrival words; one driver call): a kernel
  // waiting inside for a peer behind it would hold every SM it runs on meanwhile.
  void run_ordered(const coll::Program& prog, int device, StreamHandle after, const coll::CrossSlots* slots = nullptr,
                   EventHandle after_event = nullptr, bool on_after = false, bool entry = true,
                   coll::MappedBarrier* gpus = nullptr);
  // Work enqueued on `s` (a stream of `device`) from now on runs after every stream-ordered run
  // enqueued on `device` so far: a caller that wants the results on its own stream, with no
  // host wait (nothing where the latest run ran on s itself; else an event of the stream it
  // ran on, waited for by s).
  void join_ordered(int device, StreamHandle s);
  // Whether run_ordered takes prog: its edges fit the words.
  bool can_order(const coll::Program& prog, const coll::CrossSlots& slots) const;
  // Whether runs can be stream-ordered at all (the backend has stream flags).
  bool stream_flags() const { return dev_flags_ != nullptr; }
  // Returns once every stream-ordered run enqueued so far is done on this rank's GPUs (before
  // anything frees or remaps memory they use, and before a host-ordered run). Bounded by
  // GPUSTRIPE_TIMEOUT; a dead peer fails it sooner, and lets this rank's streams past their
  // waits on it.
  void settle();
  // Whether a stream-ordered run may still be running.
  bool unsettled() const { return ordered_device_ >= 0; }
  // Host time spent so far waiting for the GPUs (this rank's streams, and with the done words
  // every rank's part), and in the hosts' barriers (us).
  double drain_us() const { return drain_us_; }
  // When this rank's latest part was enqueued, the write of its done word included (the phase
  // trace's "c_enq").
  std::chrono::steady_clock::time_point enqueued_at() const { return enqueued_at_; }
  // When the host began the latest part's first driver call (a launch, a copy, a stream's flag
  // wait): what comes before it is the runner's own bookkeeping (the phase trace's "coll_launch").
  // Unset where the part had no op on this rank.
  std::chrono::steady_clock::time_point launched_at() const { return launched_at_; }
  // Whether the latest stream-ordered run was enqueued while the run before it had not ended on
  // every rank's GPU yet (its exit barrier's words, read by the host: no driver call): the host's
  // time before it then kept no GPU of the team's collectives waiting.
  bool enqueued_behind() const { return enqueued_behind_; }
  double barrier_us() const { return barrier_us_; }
  // A barrier of the team's hosts.
  void barrier(const char* what);
  // Every rank's `bytes` (<= TeamFlags::kMessageBytes) into all[r * bytes]; a barrier too (no
  // rank returns before every rank has posted). Replaces an MPI allgather per call.
  void exchange(const void* mine, size_t bytes, void* all);

  // The exchange in two halves, for calls that must not wait for the other ranks
  // (nonblocking collectives): post() writes this rank's message and returns the call's
  // number; collect() copies every rank's message once all have posted that call (false
  // until then, waiting for nothing). exchange() is post() and a bounded wait on collect().
  // A message is as long as its sender posted it (the ranks' messages of one call may differ):
  // collect() copies each into its entry all[r * bytes] of `bytes`, at most that much, and leaves
  // the rest of the entry as it was. The slots are shared memory the other ranks' cores read
  // line by line at every call, so a message is best no longer than what the call uses.
  uint64_t post(const void* mine, size_t bytes);
  bool collect(uint64_t call, size_t bytes, void* all) const;

  // run() without waiting (a program without Barrier ops): start() enqueues
  // this rank's part and returns; poll() advances it as far as it goes without waiting
  // and is true once every rank's GPU has finished its part (the done words), this rank's
  // edge flags then reset. One started run at a time. start() is false,
  // enqueueing nothing, for a program that cannot run so: run() it instead.
  // `host_waits`: no stream of this rank waits for another rank. A step that needs another
  // rank's step is enqueued by poll() once this host sees that step's edge flag set (the
  // owners' streams still set the flags, so the other ranks may wait either way). For a call
  // started while another collective of this process is in flight: a GPU-side wait is invisible
  // to CUDA's scheduler, which may queue the other call's work behind it (streams share the
  // hardware queues), and an enqueue that waits for its stream (the emulated reduction) would
  // hold this host inside one call while the other ranks need it to progress the other.
  bool start(const coll::Program& prog, int device, const coll::CrossSlots* slots = nullptr, bool host_waits = false);
  bool poll();
  bool started() const { return inflight_ != nullptr; }
  // Ends a started run that will not complete (a peer died, a wait timed out): lets this
  // rank's streams past every wait on the other ranks and waits for them.
  void abandon();
  // Whether `ready` turns true while this rank's host polls without yielding its core: the
  // first stage of every wait on the other ranks or the GPUs (see spin_).
  template <class Ready>
  bool ready_soon(Ready&& ready) const {
    return ipc::ready_within(spin_, ready);
  }
  // Throws when a rank of the team is gone (check_peers given at construction).
  void check_peers() const {
    if (check_peers_) check_peers_();
  }

 private:
  // Checks `prog` against the team and the flags' capacity, counts the run (and forgets the last
  // one's launched_at), and returns its cross-rank slots: `given`, else computed into `computed`.
  const coll::CrossSlots& checked_slots(const coll::Program& prog, const coll::CrossSlots* given,
                                        coll::CrossSlots& computed);
  Lane& lane(int device, int role);

  Backend& backend_;
  coll::Reducer& reducer_;
  int rank_, nranks_;
  TeamFlags& flags_;
  std::function<void()> check_peers_, check_alive_;
  LaneSet lanes_;
  uint64_t runs_ = 0;      // runs started
  uint64_t barriers_ = 0;  // barriers this rank has reached
  uint64_t exchanges_ = 0;
  uint32_t* dev_flags_ = nullptr;  // the flag words as streams address them (register_host)
  double drain_us_ = 0, barrier_us_ = 0;
  std::chrono::steady_clock::time_point enqueued_at_{}, launched_at_{};
  bool enqueued_behind_ = false;
  struct Inflight;  // the started run (start/poll)
  std::unique_ptr<Inflight> inflight_, spare_;  // spare_: an ended run's, for the next start
  // How long a wait polls before its Waiter, which soon yields the core (ready_soon): a
  // collective's wait lasts about its GPU part, tens of microseconds at the sizes where a
  // call's host path shows, up to a few hundred at 64 MB, and a yield adds a trip through the
  // scheduler to its end. Zero where the node has fewer cores than the team has ranks (the
  // emulated CI node): there a rank that polls holds a core another rank needs.
  std::chrono::steady_clock::duration spin_{};
  const std::string watch_enqueue_, watch_gpu_;  // the watches' names, made once
  const std::function<void()> release_ordered_fn_;  // release_ordered(), for the watches to borrow

  // The hosts' barrier in two halves: arrive() returns the barrier's number, arrived() is
  // true once every rank has reached it.
  uint64_t arrive();
  bool arrived(uint64_t n) const;
  void sync_streams(const std::vector<Lane*>& used);
  // Stream-ordered runs: their number (the value of their words), and per device the origin
  // stream's events (the caller's stream at the call, the fork to the lanes, the end that
  // settle() waits for).
  uint64_t ordered_runs_ = 0, gpu_barriers_ = 0, arrivals_ = 0;
  // `tail`: the stream the device's latest run was enqueued on (null: none yet). Where that is a
  // caller's stream (on_after), nothing is recorded there (an event per call is a driver call of
  // its host time, and the caller may destroy its stream): the run's end is its exit barrier,
  // `tail_count`, which this rank's and the others' barrier words reach once their parts are done.
  // `last`: the origin stream's end, recorded when another stream follows it.
  struct OrderedEvents {
    EventHandle in = nullptr, fork = nullptr, done = nullptr, join = nullptr, last = nullptr;
    StreamHandle tail = nullptr;
    bool tail_is_caller = false;
    uint32_t tail_count = 0;
  };
  std::map<int, OrderedEvents> ordered_events_;
  // Lanes over callers' streams (on_after runs), by (device, stream).
  std::map<std::pair<int, StreamHandle>, std::unique_ptr<Lane>> caller_lanes_;
  // Orders `s` (about to take a run of `device`) after the device's latest run, where that ran
  // on another stream.
  // every_rank: the run after it has no entry barrier, so s waits for every rank's exit.
  void follow_tail(OrderedEvents& ev, int device, StreamHandle s, bool every_rank);
  // Whether every rank's barrier word has reached the exit of the device's latest run (on a
  // caller's stream): every rank's part of it is done.
  bool tail_done(const OrderedEvents& ev) const;
  StreamHandle origin_stream(int device);
  int ordered_device_ = -1;  // the GPU of the runs not yet seen done by settle() (-1: none)
  // The other ranks' barrier words (gpu_barrier) and arrival words (a run on mapped flags).
  std::vector<const uint32_t*> barrier_peers_, arrival_peers_;
  // Lets every stream of this rank past the ordered runs' waits on the peers (a peer died).
  void release_ordered();
  // Enqueues on `s` a barrier of the ranks' GPUs on the words from `first` (one per rank; the
  // others' in `peers`, filled at the first): later work on s waits until every rank's stream
  // has reached its barrier of the same count (++count). gpu_barrier: on the barrier words.
  void flag_barrier(StreamHandle s, size_t first, std::vector<const uint32_t*>& peers, uint64_t& count);
  void gpu_barrier(StreamHandle s) { flag_barrier(s, TeamFlags::kBarrierWord, barrier_peers_, gpu_barriers_); }

  // Whether this rank's ops of [begin, end) are on one program lane.
  bool on_one_lane(const std::vector<coll::Op>& ops, size_t begin, size_t end) const;
  // Whether this rank's ops of [begin, end) are one launch (a reduction, or one batch of kernel
  // copies) that the reducer can run the barrier `fb` inside.
  bool fits(const std::vector<coll::Op>& ops, size_t begin, size_t end, const coll::FusedBarrier* fb) const;
  // A run_ordered on mapped flags: the barrier a kernel runs inside (null: none), and the part
  // [last, stop) that kernel is. Not folded: the program's last part, the kernel running the
  // last Barrier op's barrier and the exit. Folded: the kernel also makes this rank's copies
  // before it and after it, and runs every barrier of the run: the program is copies, a Barrier
  // op, one kernel (a one-shot staged call), and maybe a Barrier op and copies more (two shots).
  struct Fused {
    const coll::FusedBarrier* barrier = nullptr;
    bool folded = false;
    size_t last = 0, stop = 0;
  };
  Fused fuse(const std::vector<coll::Op>& ops, const coll::CrossSlots& slots, coll::MappedBarrier& gpus);
  const coll::FusedBarrier* fused_ = nullptr;  // issue(): the barrier inside its kernel (run_ordered)

  // Enqueues this rank's op i on `l` after its same-rank dependencies and its program lane's
  // previous op (waits on their marks where they ran on other streams).
  void issue(const std::vector<coll::Op>& ops, size_t i, Lane& l, int device, const std::vector<LaneMark>& marks,
             std::map<int, size_t>& last_on_lane, bool batched = false, uint32_t done_value = 0);
  // Stream flags: the edge slots this rank's ops of [begin, end) wait on.
  std::vector<uint32_t> cross_waits(const coll::Program& prog, const coll::CrossSlots& slots, size_t begin,
                                    size_t end) const;
  // Stream flags: enqueues this rank's ops of [begin, end) on lanes of `set` (each lane first
  // waits for `fork` where given: a capture), or all of them on `single` where given; `used`
  // gets the lanes as they are first used. `words`: the edge slots' words as streams address
  // them; an edge is set by writing `value` and waited for as reaching it. `capturing`: inside a
  // graph capture. `part`: the number of the part these ops end, for this rank's last op to
  // announce in its done word itself where it can (announcing_op; not in a capture, nor with a
  // fork); returns whether it does (0: never).
  bool enqueue_streams(const coll::Program& prog, const coll::CrossSlots& slots, size_t begin, size_t end, int device,
                       LaneSet& set, EventHandle fork, bool capturing, uint32_t* words, uint32_t value,
                       std::vector<Lane*>& used, Lane* single = nullptr, uint32_t part = 0);
  // Each of this rank's ops of [begin, end): its stream in `set` (or `single`), and whether a
  // later op of this rank on another stream waits for it (it needs a mark).
  void plan_streams(const std::vector<coll::Op>& ops, size_t begin, size_t end, int device, LaneSet& set,
                    std::vector<Lane*>& stream_of, std::vector<uint8_t>& needs_mark, Lane* single = nullptr);
  // host_waits: enqueues every op of the started run whose inputs are there (the other ranks'
  // edge flags seen set, this rank's inputs enqueued); true once all are.
  bool advance();
  // Stream flags: enqueues (`enqueue` adds the lanes it uses) and drains one part of this
  // rank's work waiting on the edge slots `waits`, watched (coll_watchdog.hpp) from before
  // the first enqueue: a host stuck in a driver call behind a dead peer's flag is released.
  // `enqueue` gets the part's number and returns whether a kernel of the part announces it.
  void run_watched(const std::vector<uint32_t>& waits,
                   const std::function<bool(std::vector<Lane*>&, uint32_t)>& enqueue);
  // Stream flags: the edge slots this rank waited on go back to 0 (its streams are done).
  void reset_edges(const std::vector<uint32_t>& waits);
  // The end of this rank's part: after every stream in `used` (joined into the first one),
  // its stream writes the part's number into this rank's done word (the host does, where the
  // part has no op here; nobody, where `announced`: the part's last kernel wrote it). Returns
  // the number, the same on every rank for the same part.
  uint32_t announce_done(const std::vector<Lane*>& used, bool announced);
  // The number the next part announces, for a kernel that writes it itself (0: none can, the
  // streams having no flags).
  uint32_t next_part() const;
  // The op of this rank's [begin, end) whose launch ends the part and can announce it
  // (Reducer::can_signal, can_signal_copy): this rank's last op, a reduction, or the first op of
  // the kernel-copy batch that holds it; every op of the rank on one stream; no edge flag
  // written after the launch. `end` where there is none.
  size_t announcing_op(const std::vector<coll::Op>& ops, const coll::CrossSlots& slots, size_t begin, size_t end,
                       const std::vector<Lane*>& stream_of) const;
  // Whether every rank's done word has reached part n.
  bool all_done(uint32_t n) const;
  // Waits until all_done(n) (`fired` throws when the watch of the call has fired). On an
  // error the flags in `release` are set here (so that no GPU of this rank waits forever on a
  // dead one) and this rank's streams in `used` run out. Counts the time as the GPUs'.
  void wait_done(uint32_t n, const std::vector<Lane*>& used, const std::function<void()>& release,
                 const std::function<void()>& fired = {});
  uint64_t parts_ = 0;  // parts announced (the done word's value)
};

}  // namespace gpustripe::mpi
