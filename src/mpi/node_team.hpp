// A collective team of processes of one node that found each other through an
// ipc::Bootstrap instead of MPI (the PyTorch backend: its process group's store), with
// its own context, node channel and p2p endpoint, and calls by raw device pointers.
//
// Each call runs the same cross-process schedules as the MPI interposer's (coll_team.hpp)
// and returns once every member's part is done (the call ends in a barrier of the
// members). A call returns false on every member, having done nothing, when some
// member's side cannot take it (a host buffer, buffers on different GPUs, a type or
// operator the reduction kernels lack, buffers that overlap in a way the schedules do
// not take): the caller then runs it another way. Members call the same collectives in
// the same order. Buffers are exported once per allocation and mapped once per peer
// (the p2p layer's mapping cache): a framework's caching allocator, which hands back the
// same segments, pays no handle exchange after the first calls.
//
// A stream-ordered call that the team stages (CollTeam::stageable: no meeting of the hosts) runs
// on the caller's thread, queued or not, unless calls queued before it are still the worker's:
// it then goes behind them, as a queued call, rather than wait there for their meetings. Another
// one may be queued (the PyTorch backend's asynchronous calls): the caller's
// thread does only what must be done there -- this rank's checks, the pointer queries, an event
// recorded on its stream (from a pool) -- and hands the call to the team's worker (CallQueue),
// which meets the other ranks and enqueues the call, in call order. The worker then orders the
// team's stream of the call's ends (calls_stream()) after the call by an event. What the caller
// enqueues there is ordered on the host: calls_stream() and join() first wait until the worker
// has enqueued every call posted before them (mark() hands its mark to the worker instead). No
// GPU stream waits for a value that only the worker would write later: the CUDA driver's
// memory-mapping calls (cudaMalloc, cudaFree, cudaIpcOpenMemHandle, cuMemMap, cudaHostRegister:
// the worker's first calls map the peers' buffers) and device synchronizations wait for the
// GPU's streams, so such a stream would stall the very worker it waits for, and with it the
// caller. A queued call cannot fall back once its caller went on: a call the meeting declines
// fails (its error, and every later call's, raised at the caller's next call, join or settle),
// and so does a worker's error (a peer died, a timeout).
#pragma once
#include <atomic>
#include <map>
#include <memory>
#include <mutex>
#include <vector>

#include "coll/types.hpp"
#include "core/context.hpp"
#include "ipc/bootstrap.hpp"
#include "ipc/channel.hpp"
#include "ipc/handle_cache.hpp"
#include "mpi/call_marks.hpp"
#include "mpi/call_queue.hpp"
#include "mpi/coll_team.hpp"
#include "p2p/endpoint.hpp"

namespace gpustripe::mpi {

class NodeTeam {
 public:
  // Collective over the bootstrap's members (each calls it once, at the same point).
  explicit NodeTeam(std::unique_ptr<ipc::Bootstrap> boot);
  ~NodeTeam();
  NodeTeam(const NodeTeam&) = delete;
  NodeTeam& operator=(const NodeTeam&) = delete;

  int rank() const { return team_->rank(); }
  int size() const { return team_->size(); }
  Context& context() { return *ctx_; }
  // The mapping cache of other members' buffers: a repeated call on the same allocations
  // maps nothing new (misses stay, hits grow).
  ipc::HandleCacheStats mapping_stats() const;
  // Returns once every stream-ordered call made so far (queued ones too) is done on this
  // member's GPUs, with what was enqueued on calls_stream() after them.
  void settle();
  // The stream of `device` that stream-ordered calls end on: work enqueued on it after a call
  // (queued or not) sees its results. The team's own, not the one its runs use. First waits until
  // the worker has enqueued every queued call (as join()): the caller enqueues on it next.
  StreamHandle calls_stream(int device);
  // Work enqueued on `stream` (of `device`) from now on sees the results of every call made so
  // far, with no wait for the GPUs: a blocking call's end on the caller's stream, an
  // asynchronous one's wait. First waits until the worker has enqueued every queued call
  // (bounded by GPUSTRIPE_TIMEOUT), and throws the error of one that failed.
  void join(int device, StreamHandle stream);
  // Marks the end of the calls made so far on `device` (on calls_stream(device)): a caller that
  // holds a call's buffers until the GPUs are past it (CallMarks). Returns how many of the
  // earlier marks, oldest first, are now passed; marks_passed() counts more of them the same way.
  // With calls queued, the worker makes the mark after them (the caller does not wait for it).
  size_t mark(int device);
  size_t marks_passed();
  // The marks not yet seen passed, and the events made for them (CallMarks).
  CallMarks::Stats marks_stats() const;
  // Queued calls so far, and of them those the worker has run.
  uint64_t queued() const { return queued_calls_.load(); }
  uint64_t queue_done() const { return queue_->done(); }
  // The number of the latest job handed to the worker (a queued call's, or a mark's): a caller
  // asks right after a queued call for the one to pass to wait_queued().
  uint64_t queue_posted() const { return queue_->posted(); }
  // How long queued job `job` took from its hand-over to the worker to the end of its run (a queued
  // call: the wait behind the jobs before it, the other ranks' hosts met, the call enqueued), in
  // microseconds; negative where it has not run yet (CallQueue::latency_us).
  double queue_latency_us(uint64_t job) const { return queue_->latency_us(job); }
  // Stream-ordered calls made so far (queued or not): the number of the latest, to ask
  // enqueued_behind() about.
  uint64_t ordered_calls() const { return ordered_calls_.load(); }
  // Whether stream-ordered call `call` (1, 2, ...: ordered_calls() right after it) was enqueued
  // while the team's call before it still ran on some member's GPU (CollTeam::enqueued_behind):
  // 1 then, 0 where it was not, -1 where it has not been enqueued yet (a queued call the worker
  // has not run) or is too old to be kept (kBehindKept calls back).
  int enqueued_behind(uint64_t call) const;
  static constexpr size_t kBehindKept = 1024;
  // Returns once the worker has run jobs 1..`job` (a queued call: enqueued it, calls_stream(device)
  // ordered after it), without waiting for the later ones, and returns calls_stream(device) (the
  // caller enqueues the call's end there next); throws the error of one of them that failed.
  // Bounded by GPUSTRIPE_TIMEOUT. Callable from another thread than the caller's (a completer of
  // futures: a call's future completed off the caller's thread).
  StreamHandle wait_queued(uint64_t job, int device);
  // The most bytes a call's part for one member may have to be staged (CollTeam::stage_limit):
  // an allreduce's input, a reduce-scatter's or allgather's block; 0 where no call is staged.
  size_t stage_limit() const { return team_->stage_limit(); }
  // Whether a stream-ordered call can be queued here (the backend has stream flags).
  bool can_queue() const { return team_->stream_flags(); }
  // Events made so far for queued calls' starts (each reused once the worker has enqueued its call).
  size_t ready_events_created() const {
    std::lock_guard<std::mutex> lock(events_mu_);
    return events_created_;
  }
  // A stream of this member's own on `dev` to order calls on (callers without a framework's
  // streams: tests); made at the first ask, kept until the team ends.
  StreamHandle stream(int dev);
  // Host time per call by phase (CollTeam::phase_times).
  CollTeam::PhaseTimes phase_times(bool reset);

  // Every call takes the caller's stream (CollCall::stream): given, the buffers are ready once
  // its work so far has run, and the call is enqueued on the GPUs behind it without a host
  // wait (stream flags): work enqueued on calls_stream(device) afterwards sees the results;
  // null, the call returns when done. A call made here runs after every queued call before it.
  //
  // `queued` (with a stream, where can_queue()): the call is handed to the team's worker and
  // returns true at once (calls_stream() as above); false where this member's side cannot take
  // it, which never happens for a queued call: it throws instead (every member's call fails, as
  // the other members learn at the meeting). Not queued: false on every member when some
  // member's side cannot take it (nothing done). `joined` (with a stream, not queued): the
  // caller's stream itself runs the call, so work enqueued on it afterwards sees the results, as
  // after join(device, stream), with no event or wait between the streams (a blocking call's end).

  // `staged` (allreduce, reduce_scatter, allgather, alltoall): false, a call that could be staged through
  // the slots (stage_limit()) meets the other members and reads their buffers instead (the same
  // on every member: a form the caller chose for the call's kind).

  // recv[i] = op over members of send[i], count elements of dt (send == recv: in place).
  bool allreduce(const void* send, void* recv, size_t count, coll::DataType dt, coll::RedOp op,
                 StreamHandle stream = nullptr, bool queued = false, bool joined = false, bool staged = true);
  // recv = op over members of block `rank` of send (size() blocks of count elements);
  // recv == send + rank * block: in place.
  bool reduce_scatter(const void* send, void* recv, size_t count, coll::DataType dt, coll::RedOp op,
                      StreamHandle stream = nullptr, bool queued = false, bool joined = false, bool staged = true);
  // recv = every member's block of `block` bytes in rank order (send == recv + rank * block: in place).
  bool allgather(const void* send, void* recv, size_t block, StreamHandle stream = nullptr, bool queued = false,
                 bool joined = false, bool staged = true);
  // Block j of send to member j, block i of recv from member i (`block` bytes each; no overlap).
  bool alltoall(const void* send, void* recv, size_t block, StreamHandle stream = nullptr, bool queued = false,
                bool joined = false, bool staged = true);
  // Uneven blocks: send_len[j] bytes at send + send_at[j] to member j, member i's block into
  // recv + recv_at[i] (recv_len[i] bytes), one entry per member each (at most
  // CollCall::kMaxBlocks members). Always the met form: each member's copy engines pull its
  // blocks from the senders' buffers. A side with no bytes is not looked at (a member that
  // sends or receives nothing: its pointer may be null); `device`: this member's GPU where it
  // neither sends nor receives anything. Declined on every member where a sender's and its
  // receiver's sizes differ, or send and recv overlap.
  bool alltoallv(const void* send, void* recv, const std::vector<size_t>& send_at, const std::vector<size_t>& send_len,
                 const std::vector<size_t>& recv_at, const std::vector<size_t>& recv_len,
                 StreamHandle stream = nullptr, bool queued = false, bool joined = false, int device = -1);
  // root's `bytes` at buf into every member's buf.
  bool bcast(void* buf, size_t bytes, int root, StreamHandle stream = nullptr, bool queued = false, bool joined = false);
  // recv (root only: null elsewhere) = op over members of send (send == recv at the root: in place).
  bool reduce(const void* send, void* recv, size_t count, coll::DataType dt, coll::RedOp op, int root, StreamHandle stream = nullptr, bool queued = false, bool joined = false);

 private:
  // Fills the call's device from its buffers (all device memory of one GPU, else -1).
  int device_of(CollCall& c, std::initializer_list<const void*> bufs);
  // Runs the call here (after the queued ones) or queues it (`queued`).
  bool submit(CollCall& c, bool queued, bool joined);
  // The worker's part of a queued call: runs it, then orders `end` (its ends' stream) after it.
  void run_queued(CollCall& c, StreamHandle end, uint64_t call);
  // Keeps enqueued_behind()'s answer for stream-ordered call `call`, just run (team_mu_ held).
  void note_behind(uint64_t call);
  EventHandle take_event(int device);
  void give_event(int device, EventHandle e);
  struct Ends {
    StreamHandle stream = nullptr;
    EventHandle join = nullptr;
    bool behind = false;  // a joined call ran since the stream last followed the team's calls (team_mu_)
  };
  Ends& ends(int device);
  // The ends' stream of `device`, ordered after every call made so far (team_mu_ held): a joined
  // call leaves it behind until someone enqueues there.
  StreamHandle ends_current(int device);

  std::unique_ptr<Context> ctx_;
  std::unique_ptr<ipc::Channel> ch_;
  std::unique_ptr<p2p::Endpoint> ep_;
  std::unique_ptr<CollTeam> team_;
  std::unique_ptr<CallMarks> marks_;
  std::map<int, StreamHandle> streams_;
  std::map<int, Ends> ends_;  // by device: the caller's side of the calls' ends
  std::mutex ends_mu_;        // ends_'s entries: made by the caller, also looked up by wait_queued()
  std::atomic<uint64_t> queued_calls_{0};  // collectives handed to the worker (its other jobs, marks, not counted)
  std::atomic<uint64_t> ordered_calls_{0};  // stream-ordered calls made (queued or not)
  // Per stream-ordered call, at index call % kBehindKept: (call << 1) | enqueued behind (note_behind).
  std::vector<std::atomic<uint64_t>> behind_ = std::vector<std::atomic<uint64_t>>(kBehindKept);
  mutable std::mutex team_mu_;         // the team runs one call at a time: the worker's, or the caller's
  mutable std::mutex events_mu_;
  mutable std::mutex marks_mu_;        // marks_: the caller's marks and passed(), the worker's queued marks
  std::map<int, std::vector<EventHandle>> free_events_;  // the callers' stream events, by device
  size_t events_created_ = 0;
  std::unique_ptr<CallQueue> queue_;   // last: ends (running what is queued) before the rest
};

}  // namespace gpustripe::mpi
