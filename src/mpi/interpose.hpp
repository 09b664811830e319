// Shared by the interposed MPI functions (interpose_*.cpp): where a message goes,
// and the nonblocking starts and waits the blocking calls are made of.
#pragma once
#include <mpi.h>

#include <functional>
#include <memory>
#include <vector>

#include "mpi/ops.hpp"

namespace gpustripe::mpi {
struct CollPending;  // coll_team.hpp
}

namespace gpustripe::mpi {

enum class Route {
  Mpi,        // the MPI, untouched (host buffers to other nodes, unknown communicators, no runtime)
  Local,      // gpustripe p2p to a rank of this node (`local`, or any)
  Staged,     // the MPI, device buffer staged through pinned host memory
  AnySource,  // any source on a communicator spanning nodes
};

struct Target {
  Route route = Route::Mpi;
  int local = -1;  // channel rank for Local (p2p::kAnySource for any)
  std::shared_ptr<const CommInfo> ci;
};

Target route(MPI_Comm comm, int peer, bool device);

// Where `buf` lives, for a message to or from `peer` (`rt` may be null): nothing is asked for
// MPI_PROC_NULL, whose message the MPI completes without touching the buffer (a halo exchange's
// edge ranks call Sendrecv with it on one side), nor without a runtime; otherwise a pointer query.
p2p::MemLoc locate_for(Runtime* rt, const void* buf, int peer);

// Nonblocking starts; *req is ours (table) or the MPI's. `blocking`: a message the
// MPI carries untouched is sent/received right here with PMPI_Send/Recv (the status
// into `st`) and *req is MPI_REQUEST_NULL, so the caller's wait returns at once; a send of
// ours takes the blocking sends' protocol (local_send).
// `where`: locate_for's answer for the buffer when the caller has it (Sendrecv routes both
// halves first); null: asked here. A pointer query is a driver call of about a microsecond, on
// the latency path of every message.
int isend_impl(const void* buf, int count, MPI_Datatype type, int dest, int tag, MPI_Comm comm, bool sync,
               MPI_Request* req, bool blocking = false, const p2p::MemLoc* where = nullptr);
int irecv_impl(void* buf, int count, MPI_Datatype type, int source, int tag, MPI_Comm comm, MPI_Request* req,
               bool blocking = false, MPI_Status* st = MPI_STATUS_IGNORE, const p2p::MemLoc* where = nullptr);
int wait_impl(MPI_Request* req, MPI_Status* st);
// Waits until every buffered send of the interposer's (interpose_bsend.cpp) has completed: what
// MPI_Buffer_detach and MPI_Finalize do before the MPI's own. Throws ERR_PEER_FAILED / ERR_TIMEOUT
// as the waits do; `call` names the caller in the timeout's message.
void wait_buffered_sends(const char* call);
int waitall_impl(int n, MPI_Request* reqs, MPI_Status* sts);

// Nonblocking collectives (interpose_icoll.cpp). start_collective() runs `call` (the
// blocking interposed collective) so that, on gpustripe's path, it only starts: s.pending is
// then its state on the team, advanced by progress_collectives(); otherwise (the MPI's way)
// it ran to its end and returns its result. s.mpi is the call the MPI's way, for the case
// that some rank cannot take gpustripe's (run through mpi_collective()).
// s.located: the allocations of the call's buffers that the start has located already (it asked
// where they live to choose between this path and the MPI's own nonblocking call): the
// collective takes them as its own (CollCall::located) instead of asking again.
struct NonblockingStart {
  std::function<int()> mpi;
  std::shared_ptr<CollPending> pending;
  std::vector<p2p::MemLoc> located;
};
// Marks the calling thread, for the scope's life, as starting `s` (start_collective).
class StartingCollective {
 public:
  explicit StartingCollective(NonblockingStart& s);
  ~StartingCollective();
  StartingCollective(const StartingCollective&) = delete;
  StartingCollective& operator=(const StartingCollective&) = delete;
};
// Marks the calling thread, for the scope's life, as running collectives straight on the MPI.
class MpiOnlyCollective {
 public:
  MpiOnlyCollective();
  ~MpiOnlyCollective();
  MpiOnlyCollective(const MpiOnlyCollective&) = delete;
  MpiOnlyCollective& operator=(const MpiOnlyCollective&) = delete;
};
// Templates, not std::functions: a nonblocking start wraps its call no more than once (NonblockingStart::mpi).
template <class Call>
int start_collective(NonblockingStart& s, const Call& call) {
  StartingCollective scope(s);
  return call();
}
// Runs `call` (an interposed collective) straight on the MPI (device buffers staged).
template <class Call>
int mpi_collective(const Call& call) {
  MpiOnlyCollective scope;
  return call();
}
// A nonblocking collective completed on gpustripe's path (the served count tests read), counted
// as its request completes.
void collective_served();
// Test counters: full passes over the pending collectives of every team (progress_collectives),
// and polls of MPI_Wait on one request of the interposer's.
uint64_t collective_progress_passes();
uint64_t wait_polls();
// Advances every pending nonblocking collective of this process as far as it goes without
// waiting (errors go into their requests). Called with lock() held by every wait, test and
// nonblocking start (progress_detached), and by anything else that progresses the interposer.
void progress_collectives();
// The peer check of `comm`'s collective team (throws when a member is gone); false when it has none.
bool collective_team_check(MPI_Comm comm);

// Releases the collective team of the communicator with p2p id `ctx` (its shared
// segment, scratch, streams, events), if it has one: called as the communicator is freed.
void release_collective_team(Runtime& rt, uint64_t ctx);

}  // namespace gpustripe::mpi
