// Shared by the interposed MPI functions (interpose_*.cpp): where a message goes,
// and the nonblocking starts and waits the blocking calls are made of.
#pragma once
#include <mpi.h>

#include <memory>

#include "mpi/ops.hpp"

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

// Nonblocking starts; *req is ours (table) or the MPI's. `blocking`: a message the
// MPI carries untouched is sent/received right here with PMPI_Send/Recv (the status
// into `st`) and *req is MPI_REQUEST_NULL, so the caller's wait returns at once.
int isend_impl(const void* buf, int count, MPI_Datatype type, int dest, int tag, MPI_Comm comm, bool sync,
               MPI_Request* req, bool blocking = false);
int irecv_impl(void* buf, int count, MPI_Datatype type, int source, int tag, MPI_Comm comm, MPI_Request* req,
               bool blocking = false, MPI_Status* st = MPI_STATUS_IGNORE);
int wait_impl(MPI_Request* req, MPI_Status* st);
int waitall_impl(int n, MPI_Request* reqs, MPI_Status* sts);

// Releases the collective team of the communicator with p2p id `ctx` (its shared
// segment, scratch, streams, events), if it has one: called as the communicator is freed.
void release_collective_team(Runtime& rt, uint64_t ctx);

}  // namespace gpustripe::mpi
