// The collectives of one node-local MPI communicator, on the coll layer's schedules.
//
// A call goes: every rank sizes the schedule's scratch (a build over placeholders),
// grows its own scratch buffer, and exports its send, receive and scratch buffers;
// an exchange through the team's shared segment hands every rank the others' handles and
// whether they can take this path at all (all device buffers, a supported type and
// op); each rank maps the others' buffers through the p2p layer's mapping cache
// (keyed by buffer id: a buffer freed and reallocated at the same address is mapped
// anew, never served stale), builds the same Program with the coll builders over its
// own view of the pointers, and runs its part (coll_slice.hpp). The exchange is the
// entry barrier (no rank writes into a buffer its owner may still be using), the
// slice runner's end is the exit barrier (every rank's GPU announces its part done in the
// team's shared words; the hosts do not meet again).
//
// The host path runs through pinned host memory the ranks' processes share (coll_staging.hpp):
// a 2-rank broadcast takes the planner's host share for the pair. Not across processes: the
// exchanges' and the round-major allreduce's host shares (forced to 0: in one process they
// gained ~1% at 256M per rank) and the hierarchical allreduce.
//
// The team needs no MPI: the processes find each other through an ipc::Bootstrap (the
// interposer's over PMPI, mpi_bootstrap.hpp; the PyTorch backend's over its store).
#pragma once
#include <atomic>
#include <chrono>
#include <cstdint>
#include <exception>
#include <functional>
#include <initializer_list>
#include <map>
#include <optional>
#include <set>
#include <memory>
#include <string>
#include <vector>

#include "backend/backend.hpp"
#include "common/error.hpp"
#include "coll/program.hpp"
#include "coll/reduce.hpp"
#include "coll/schedules.hpp"
#include "coll/scratch.hpp"
#include "coll/select.hpp"
#include "core/context.hpp"
#include "ipc/bootstrap.hpp"
#include "mpi/coll_slice.hpp"
#include "mpi/coll_staging.hpp"
#include "mpi/coll_trials.hpp"
#include "p2p/endpoint.hpp"

namespace gpustripe::mpi {

// One collective call as this rank sees it.
struct CollCall {
  const char* name = "";       // the MPI function, for messages
  coll::CollOp op = coll::CollOp::AllReduce;
  bool eligible = false;        // this rank's side can take the gpustripe path
  int device = -1;              // the GPU of this rank's buffers (its part runs there)
  size_t bytes = 0;             // the size per rank as the schedule choice takes it
  size_t elem_size = 1;
  const void* send = nullptr;   // this rank's buffers (null where the call has none)
  size_t send_bytes = 0;
  void* recv = nullptr;
  size_t recv_bytes = 0;
  // Appends the collective to the program, given every rank's send and receive pointers
  // as this process sees them (null where a rank has none) and the schedule chosen.
  std::function<void(coll::Program&, const coll::Team&, const std::vector<char*>& send, const std::vector<char*>& recv,
                     coll::Scratch&, const coll::Choice&)>
      build;
  // The call's form through the team's staging slots (coll::Staged: CollTeam's staged calls),
  // which needs no meeting of the hosts; empty where the op has none. staged_bytes: what each
  // rank stores into each peer's slot. Set whatever this rank's buffers are (every rank must know alike
  // whether a call is staged: a staged call never declines, it copies odd buffers through the slot).
  std::function<void(coll::Program&, const coll::Staged&)> staged;
  size_t staged_bytes = 0;
  // Everything `build` captures (counts, type, op, root, in place), so that a repeated call
  // reuses its schedule choice, scratch size and, over the same pointers, its Program.
  // Empty: nothing is reused.
  std::string shape;
  // The allocations of this rank's buffers as the caller found them (one pointer query per
  // buffer and call: describe() takes them from here).
  std::vector<p2p::MemLoc> located;
  // Runs once the call has completed on every rank on this path (an in-place result moved
  // to the front of the buffer, a counter); captures by value: a nonblocking call ends
  // after the function that started it has returned.
  std::function<void()> after;
  // The v forms whose layout only the sender knows (MPI_Alltoallv/w), at most kMaxBlocks
  // ranks: where this rank's block for each rank starts in its send buffer and its bytes, and
  // the bytes it receives from each. They travel with the entry exchange; every rank's send
  // pointer reaches `build` at its block for this rank. Where some sender's and receiver's
  // sizes differ, every rank takes the MPI's way (which reports the mismatch).
  static constexpr size_t kMaxBlocks = 32;
  std::vector<uint64_t> send_at, send_len, recv_len;
  // The caller's stream (of `device`), or null. Set: the buffers are ready once the work
  // enqueued on it so far has run; the call is enqueued stream-ordered behind it and returns
  // without waiting (SliceRunner::run_ordered) when the runner has stream flags (the results
  // are there for work enqueued on a stream joined to the calls afterwards: join_calls()), else
  // it waits for the stream first and returns when done. Null: the buffers are ready now and the
  // call returns when done (the MPI interposer's calls).
  StreamHandle stream = nullptr;
  // With `stream`, stream-ordered: the call runs on `stream` itself, whose later work then sees
  // its results (a blocking call's end, with no event or wait between the streams).
  bool on_stream = false;
  // Instead of `stream`: an event the caller recorded on its stream, where the call is enqueued
  // from another thread than the caller's (NodeTeam's queued calls): the call starts after it,
  // as after `stream`. The event may be recorded again once run() has returned.
  EventHandle ready = nullptr;
  // When the caller got the call (its own time before the team: the "lookup" phase of the
  // per-call times a team logs at debug level); unset: not counted.
  std::chrono::steady_clock::time_point entered{};
};

class CollTeam;

// A nonblocking call as its request sees it (CollTeam::start): done once it completed on
// gpustripe's path (served), or the MPI's way (mpi_rc), or failed (error).
struct CollPending {
  // The team it is pending on, while it is (null once it has left the team): a wait on this
  // request alone advances that team only (CollTeam::progress_soon).
  CollTeam* team = nullptr;
  bool done = false;
  bool served = false;
  int mpi_rc = 0;
  std::exception_ptr error;
  // The call in the phase trace (p2p/trace.hpp): this rank, the exchange's call number, its size.
  int rank = -1;
  uint64_t call = 0;
  size_t bytes = 0;
};

// What advances every pending nonblocking call of this process, on every team (the MPI
// interposer's progress_collectives): the waits of a team's calls, and of a team's setup, call
// it, so that no rank waits inside one communicator's call for a peer that first needs another
// communicator's call to advance here. Unset: a team advances its own call only.
void set_collective_progress(void (*progress_all)());
// Nonblocking calls pending on the teams of this process (every team, every communicator).
int pending_collectives();

// What the schedule choice of a team of `nranks` processes on this node depends on (the same on
// every rank: it looks at every GPU of the node, not at the ranks' own). Peer mappings as the
// node has them; before the tests' coll.peer_kernels=no.
coll::TeamResources team_resources(Backend& backend, const Topology& topo, int nranks);

// Test only: this process kills itself (SIGKILL) inside its next collective on the
// gpustripe path, right after the entry exchange.
void test_die_in_next_collective();
// Test only: the next collective team this process sets up fails here (as when out of
// memory), which every rank of its communicator must report.
void test_fail_next_team_setup();
// Test only: the schedules this process's teams ran their timed-choice calls in (the broadcasts
// of host-paced pairs, coll::measured_candidates), comma-separated, oldest first (the first 4 KiB).
std::string test_measured_forms_run();

class CollTeam {
 public:
  // Collective over the bootstrap's members (processes of this node): every member makes
  // it at the same call, whatever its buffers. channel_rank[r]: member r's rank in the
  // endpoint's channel. host_paced: every call's host waits for its end before the next (the
  // MPI interposer's blocking calls, coll::TeamResources::host_paced), so the team times its
  // calls where the forms' order depends on that (FormTrials); NodeTeam's stream-ordered,
  // pipelined calls are not.
  CollTeam(Context& ctx, p2p::Endpoint& ep, std::unique_ptr<ipc::Bootstrap> boot, std::vector<int> channel_rank,
           bool host_paced = false);
  ~CollTeam();
  CollTeam(const CollTeam&) = delete;
  CollTeam& operator=(const CollTeam&) = delete;

  int rank() const { return rank_; }
  int size() const { return n_; }
  // Runs the call on every rank when every rank's side is eligible and returns true;
  // returns false on every rank otherwise (the caller then takes the MPI's way). After a
  // call failed (a peer died, a wait timed out) every later call throws the same status.
  bool run(const CollCall& call);
  // Returns once every stream-ordered call made so far is done on this rank's GPUs.
  void settle();
  // Whether `call` runs staged (coll::Staged): stream-ordered, with a staged form whose stores
  // into a peer fit a slot (Tuning::staged_max per rank, shared by its peers), on a team whose
  // staging is not off. The same answer on every rank for
  // the same call: it looks at nothing of this rank's buffers (a staged call never declines; odd
  // buffers go through the slot). Safe from another thread than the one making calls.
  bool stageable(const CollCall& call) const;
  // The most bytes a staged call's part for one peer (CollCall::staged_bytes) may have here: 0
  // where no call is staged (staging off, agreed by every rank, or no stream flags).
  size_t stage_limit() const;
  // The GPU of this rank's staging slot (-1 before the team's first staged call, or without one).
  int staging_device() const { return stage_dev_; }
  // Whether calls with a stream can be enqueued stream-ordered here (the backend has stream flags).
  bool stream_flags() const { return runner_->stream_flags(); }
  // Work enqueued on `s` (a stream of `device`) from now on sees the results of every call made
  // so far (SliceRunner::join_ordered): a blocking call's end on the caller's stream.
  void join_calls(int device, StreamHandle s) { runner_->join_ordered(device, s); }
  // Whether the latest stream-ordered call was enqueued while the team's call before it still ran
  // on some rank's GPU (SliceRunner::enqueued_behind).
  bool enqueued_behind() const { return runner_->enqueued_behind(); }
  // Host time per call served with a cached Program, by phase (us, means over the calls since
  // the last reset; `calls`: how many): the phases the team logs at debug level when it ends.
  struct PhaseTimes {
    uint64_t calls = 0, ordered = 0;  // ordered: of them, enqueued stream-ordered
    uint64_t staged = 0;              // of them, staged (no exchange: its phases are lookup, map, enqueue)
    uint64_t built = 0;               // of them, those whose Program was built anew (not cached)
    double lookup = 0, prepare = 0, exchange = 0, map = 0, enqueue = 0, drain = 0, barrier = 0;
  };
  PhaseTimes phase_times(bool reset);
  // This rank's temporary device buffer on `dev` (in-place inputs), at least `bytes`.
  char* temp(int dev, size_t bytes);

  // Nonblocking collectives. start() enters the call (step 1 and this rank's message of the
  // exchange) and returns; progress() advances it as far as it goes without waiting: once
  // every rank has posted, this rank's part goes to its GPU streams (the last rank to start
  // does that inside start()), and the call completes when the streams are done and every
  // rank has reached the end. Where some rank cannot take this path, every rank learns it at
  // the exchange and runs `mpi` (the MPI's way, blocking) inside progress(). One call at a
  // time per team: a call made while one is pending (start() or run()) first finishes it, as
  // the ranks start a communicator's collectives in the same order. Errors go into the
  // call's CollPending (and fail the team, as run()'s do).
  std::shared_ptr<CollPending> start(CollCall call, std::function<int()> mpi);
  void progress();
  // progress() polled without yielding the core for as long as a blocking call's waits poll
  // (SliceRunner::ready_soon): a wait for this team's call alone, as lean as its blocking form's
  // (no other team, no request table). True once no call is pending on the team.
  bool progress_soon();
  bool pending() const;
  // Waits (bounded by GPUSTRIPE_TIMEOUT, failing when a peer dies) until no call is pending,
  // advancing every pending call of the process meanwhile (`all`; false: this team's only).
  void finish(bool all = true);
  // Throws when a rank of the team is gone.
  void check_peers() const;

 private:
  struct Desc;
  struct RankInfo;
  Desc describe(const void* p, size_t bytes, const std::vector<p2p::MemLoc>& located);
  // This process's address of rank r's buffer d (null if absent), through the IPC mapping cache,
  // mapped for `reader` (this rank's GPU, whose kernels and copies use it).
  char* map(int r, const Desc& d, int reader);
  // Maps rank r's buffers (descs) into out; retries once after dropping r's cached mappings
  // when the driver says the memory is mapped here already.
  void map_all(int r, int reader, std::initializer_list<const Desc*> descs, std::initializer_list<char**> out);
  struct Owned {
    char* p = nullptr;
    size_t bytes = 0;
    int dev = -1;
  };
  void grow(Owned& b, int dev, size_t bytes);
  // form: the measured form (FormTrials) where the call has candidates, else empty.
  coll::Choice choose(const CollCall& call, const std::string& form);
  bool peer_ok(int dev, int peer);  // can_access_peer, asked once per pair
  struct Entry;
  struct Pending;
  // Step 1 of a call and this rank's message into the exchange (MPI exchange: the whole
  // allgather); launch() maps, builds and runs this rank's part (async: starts it where the
  // runner can), false when some rank cannot take this path.
  void enter(const CollCall& call, Entry& e);
  bool launch(const CollCall& call, Entry& e, bool async);
  // Stamps the call's phases up to its enqueue in the phase trace, where it is on.
  void trace_launch(const CollCall& call, const Entry& e, std::chrono::steady_clock::time_point prog,
                    bool nonblocking) const;
  // Ends the pending call with an error and fails the team.
  void abandon(std::exception_ptr why, Status status, const std::string& what);
  // Ends the pending call's time on the team (the process's count of pending calls).
  std::unique_ptr<Pending> take_pending();
  // Keeps an ended call's allocation for the next start (emptied: nothing of the call stays).
  void recycle(std::unique_ptr<Pending> p);
  std::unique_ptr<Pending> pending_, spare_;
  // Runs this rank's part: stream-ordered behind call.stream where `ordered` and the program
  // allows (returns true), else ordered by the hosts (false).
  bool run_part(const CollCall& call, bool ordered, const coll::Program& prog, const coll::CrossSlots& slots);
  // Returns once the caller's work before the call is done (CollCall::ready or stream).
  void wait_ready(const CollCall& call);
  // A timed trial (FormTrials) has ended: this rank's time from its entry to its end, posted
  // with the team's next call. A nonblocking call's end is where progress saw its part done,
  // so a program that computes before it waits lengthens both forms' trials alike.
  void time_trial(const Entry& e);

  Context& ctx_;
  p2p::Endpoint& ep_;
  Backend& backend_;
  std::unique_ptr<ipc::Bootstrap> boot_;
  int rank_ = 0, n_ = 0;
  std::vector<int> channel_rank_;  // comm rank -> rank of the node channel (mapping cache key)
  coll::TeamResources res_;
  coll::Tuning tuning_;  // default, or GPUSTRIPE_TEST's coll.NAME items
  std::unique_ptr<TeamFlags> flags_;
  std::unique_ptr<coll::Reducer> reducer_;
  std::unique_ptr<SliceRunner> runner_;
  std::unique_ptr<TeamStaging> staging_;  // the host path's pinned memory, shared by the ranks
  std::vector<int> node_gpus_;            // every GPU of the node (the choice looks at all of them)
  // What a broadcast of a size asks once, not at every call: the planner's host path for a pair,
  // and whether the size's form is timed (coll::measured_candidates).
  struct BcastSize {
    std::optional<coll::PlannedHost> planned;
    std::optional<bool> timed;
  };
  BcastSize& bcast_size(size_t bytes);
  std::map<size_t, BcastSize> bcast_sizes_;
  // A host-paced pair's broadcasts, copy kernel or the root's copy engine, timed per size class.
  FormTrials bcast_trials_{{"sm", "direct"}, "2-rank broadcast"};
  // Test only (GPUSTRIPE_TEST coll.trial_us_FORM=US[:US...], by rank): this rank's time of every
  // trial call of FORM, instead of its clock's.
  std::map<std::string, double> trial_us_;
  Owned scratch_, temp_;
  std::unique_ptr<Desc> scratch_desc_;  // scratch_ as the other ranks map it (reset by grow)
  std::map<uintptr_t, Backend::IpcMemHandle> exports_;
  std::map<std::pair<int, int>, bool> peer_ok_;  // this rank's buffers exported, by allocation base
  uint64_t calls_ = 0;
  Status failed_ = GPUSTRIPE_SUCCESS;  // the status of the call that broke the team
  std::string failure_;
  // Repeated calls (CollCall::shape): the choice and this rank's scratch size by shape; the
  // Program by shape and every rank's pointers as this process sees them (pointers, not
  // buffer ids: a Program holds nothing else, so equal pointers give an equal Program).
  struct Shape {
    coll::Choice choice;
    size_t scratch = 0;
    size_t host = 0;  // of the shared host staging
  };
  std::map<std::string, Shape> shapes_;
  struct Cached {
    coll::Program prog;
    coll::CrossSlots slots;  // its dependencies between ranks (the flags' numbering)
  };
  std::map<std::string, Cached> programs_;
  // The last call's Program (launch's shortcut for a call like it): what it was resolved from.
  struct Last {
    const Cached* cached = nullptr;  // in programs_ (reset whenever programs_ is cleared)
    std::string shape_key;
    std::vector<RankInfo> all;       // every rank's message
    uint64_t closed = 0;             // the mapping cache's closed() then
    const char* scratch = nullptr;   // this rank's scratch then
    size_t scratch_bytes = 0;
  } last_;
  // The mappings and the Program of a call whose messages are in e.all (mapped and built, or
  // found in programs_); null for a call without a shape, whose Program is then in `built`.
  const Cached* resolve(const CollCall& call, Entry& e, coll::Program& built, bool* build_now);
  static bool same_messages(const std::vector<RankInfo>& a, const std::vector<RankInfo>& b);
  // The bytes of `m` this rank posts in the entry exchange.
  static size_t message_bytes(const RankInfo& m);
  struct Times {  // host time of the calls served with a cached Program (us, summed)
    uint64_t calls = 0, ordered = 0, built = 0, staged = 0;
    double lookup = 0, prepare = 0, exchange = 0, map = 0, run = 0;
    double drain0 = 0, barrier0 = 0;  // the runner's totals when these were last reset
  } times_;
  // Staged calls (coll::Staged). The slots are set up at the team's first stageable call, on
  // every rank at once (an exchange of their handles); off for good where some rank cannot
  // (its first such call's buffers on no GPU, no memory, GPUs that do not map each other).
  enum StageState : int { kStageUnset, kStageOn, kStageOff };
  std::atomic<int> stage_state_{kStageUnset};
  Owned stage_;                    // this rank's area: the GPUs' barrier words, then a slot per peer
  size_t stage_head_ = 0;          // the barrier words' bytes, where the slots begin
  std::vector<char*> stage_slots_; // every rank's area, as this process addresses them (mapped once)
  std::unique_ptr<coll::MappedBarrier> stage_barrier_;  // on the areas' words (null: the stream flags')
  std::vector<int> stage_devs_;
  int stage_dev_ = -1;
  std::map<std::string, Cached> staged_programs_;  // by shape and this rank's pointers
  void setup_staging(const CollCall& call);
  bool run_staged(const CollCall& call);
  void close_staging();
  // The other ranks' allocations (handles) mapped here by earlier calls: a call naming only
  // these maps nothing new, so no mapping a stream-ordered call may still use is closed.
  std::set<std::string> mapped_sets_;
};

}  // namespace gpustripe::mpi
