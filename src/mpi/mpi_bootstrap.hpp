// The interposer's ipc::Bootstrap: PMPI collectives over a communicator, and the
// collective team of a node-local communicator built on it.
#pragma once
#include <mpi.h>

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

 private:
  MPI_Comm comm_;
  int rank_ = 0, size_ = 0;
};

// The collectives of `comm` (a node-local communicator the runtime knows): every rank
// makes it at the same call.
std::unique_ptr<CollTeam> make_coll_team(Runtime& rt, MPI_Comm comm, const CommInfo& ci);

}  // namespace gpustripe::mpi
