// MPI_Barrier with the interposer's progress while it waits. A rank inside the MPI's barrier
// makes no progress of gpustripe's transfers, and some of them need their sender's: a host
// message above the eager limit goes out in fragments as the receiver takes them, and a buffered
// send's copy (interpose_bsend.cpp) runs detached. A program that posts such a send, or a
// buffered one, and then meets its peer at a barrier that the peer enters only once its receive
// completed would otherwise wait forever. So the barrier is the MPI's nonblocking one, tested
// between progress passes, on every rank alike (a blocking and a nonblocking barrier do not
// match each other).
#include <thread>

#include "mpi/interpose.hpp"

using namespace gpustripe::mpi;

extern "C" int MPI_Barrier(MPI_Comm comm) {
  if (!Runtime::get()) return PMPI_Barrier(comm);
  try {
    MPI_Request req = MPI_REQUEST_NULL;
    int rc = PMPI_Ibarrier(comm, &req);
    if (rc != MPI_SUCCESS) return rc;
    // Polls as the MPI's barrier spins; past a while of polls, each gives the core away once (a
    // barrier may wait on a rank that computes for minutes: no timeout here, as in the MPI's).
    constexpr int kSpins = 1000;
    for (int polls = 0;; ++polls) {
      {
        std::lock_guard<std::recursive_mutex> l(lock());
        progress_detached();
        if (Runtime* rt = Runtime::get()) rt->endpoint().progress();
      }
      int done = 0;
      rc = PMPI_Test(&req, &done, MPI_STATUS_IGNORE);
      if (rc != MPI_SUCCESS || done) return rc;
      if (polls >= kSpins) std::this_thread::yield();
    }
  } catch (const std::exception& e) {
    return report(comm, "MPI_Barrier", e);
  }
}
