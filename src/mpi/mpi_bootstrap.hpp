// The interposer's ipc::Bootstrap: PMPI collectives over a communicator, and the
// collective team of a node-local communicator built on it.
//
// Every operation is a nonblocking PMPI call polled through an ipc::Waiter with the
// peer check (Bootstrap::watch_peers): bounded by GPUSTRIPE_TIMEOUT and ended by a dead
// peer, where a blocking PMPI call would wait for it forever.
#pragma once
#include <mpi.h>

#include <functional>
#include <memory>

#include "ipc/bootstrap.hpp"
#include "mpi/coll_team.hpp"
#include "mpi/runtime.hpp"

namespace gpustripe::mpi {

class MpiBootstrap : public ipc::Bootstrap {
 public:
  explicit MpiBootstrap(MPI_Comm comm);
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  void allgather(const void* mine, size_t bytes, void* all) override;
  void barrier() override;
  void bcast(void* buf, size_t bytes, int root) override;
  void allreduce_max(int* vals, size_t n) override;

 private:
  // Runs the nonblocking collective that `start` begins on heap copies of the caller's
  // bytes (the send part: in_bytes of `in`; the receive part: out_bytes, copied to `out`
  // when done; in place where in == out: one part holding `in`), waiting as the header
  // says. A wait that gives up leaves the copies allocated: the MPI may still write into
  // them for a request that never completes.
  void run(const char* what, const void* in, size_t in_bytes, void* out, size_t out_bytes,
           const std::function<int(char* send, char* recv, MPI_Request* req)>& start);

  MPI_Comm comm_;
  int rank_ = 0, size_ = 0;
};

// The collectives of `comm` (a node-local communicator the runtime knows): every rank
// makes it at the same call.
std::unique_ptr<CollTeam> make_coll_team(Runtime& rt, MPI_Comm comm, const CommInfo& ci);

}  // namespace gpustripe::mpi
