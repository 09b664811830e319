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
#pragma once
#include <map>
#include <memory>
#include <vector>

#include "coll/types.hpp"
#include "core/context.hpp"
#include "ipc/bootstrap.hpp"
#include "ipc/channel.hpp"
#include "ipc/handle_cache.hpp"
#include "mpi/call_marks.hpp"
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
  // Returns once every stream-ordered call made so far is done on this member's GPUs.
  void settle() { team_->settle(); }
  // The stream of `device` that stream-ordered calls end on (CollTeam::ordered_stream).
  StreamHandle calls_stream(int device) { return team_->ordered_stream(device); }
  // Work enqueued on `stream` (of `device`) from now on sees the results of every call made so
  // far, with no host wait (CollTeam::join_calls): a blocking call's end on the caller's stream.
  void join(int device, StreamHandle stream) { team_->join_calls(device, stream); }
  // Marks the end of the calls made so far on `device` (on calls_stream(device)): a caller that
  // holds a call's buffers until the GPUs are past it (CallMarks). Returns how many of the
  // earlier marks, oldest first, are now passed; marks_passed() counts more of them the same way.
  size_t mark(int device) { return marks_->mark(device, calls_stream(device)); }
  size_t marks_passed() { return marks_->passed(); }
  const CallMarks& marks() const { return *marks_; }
  // A stream of this member's own on `dev` to order calls on (callers without a framework's
  // streams: tests); made at the first ask, kept until the team ends.
  StreamHandle stream(int dev);
  // Host time per call by phase (CollTeam::phase_times).
  CollTeam::PhaseTimes phase_times(bool reset) { return team_->phase_times(reset); }

  // Every call takes the caller's stream (CollCall::stream): given, the buffers are ready once
  // its work so far has run, and the call is enqueued on the GPUs behind it without a host
  // wait (stream flags): work enqueued on calls_stream(device) afterwards sees the results;
  // null, the call returns when done.

  // recv[i] = op over members of send[i], count elements of dt (send == recv: in place).
  bool allreduce(const void* send, void* recv, size_t count, coll::DataType dt, coll::RedOp op, StreamHandle stream = nullptr);
  // recv = op over members of block `rank` of send (size() blocks of count elements);
  // recv == send + rank * block: in place.
  bool reduce_scatter(const void* send, void* recv, size_t count, coll::DataType dt, coll::RedOp op, StreamHandle stream = nullptr);
  // recv = every member's block of `block` bytes in rank order (send == recv + rank * block: in place).
  bool allgather(const void* send, void* recv, size_t block, StreamHandle stream = nullptr);
  // Block j of send to member j, block i of recv from member i (`block` bytes each; no overlap).
  bool alltoall(const void* send, void* recv, size_t block, StreamHandle stream = nullptr);
  // root's `bytes` at buf into every member's buf.
  bool bcast(void* buf, size_t bytes, int root, StreamHandle stream = nullptr);
  // recv (root only: null elsewhere) = op over members of send (send == recv at the root: in place).
  bool reduce(const void* send, void* recv, size_t count, coll::DataType dt, coll::RedOp op, int root, StreamHandle stream = nullptr);

 private:
  // Fills the call's device from its buffers (all device memory of one GPU, else -1).
  int device_of(CollCall& c, std::initializer_list<const void*> bufs);
  bool run(CollCall& c);

  std::unique_ptr<Context> ctx_;
  std::unique_ptr<ipc::Channel> ch_;
  std::unique_ptr<p2p::Endpoint> ep_;
  std::unique_ptr<CollTeam> team_;
  std::unique_ptr<CallMarks> marks_;
  std::map<int, StreamHandle> streams_;
};

}  // namespace gpustripe::mpi
