#include "mpi/mpi_bootstrap.hpp"

#include <climits>

#include "common/error.hpp"

namespace gpustripe::mpi {
namespace {

int count_of(size_t bytes) {
  GS_REQUIRE(bytes <= static_cast<size_t>(INT_MAX), GPUSTRIPE_ERR_INVALID_ARGUMENT,
             "bootstrap message of %zu bytes: more than an MPI count", bytes);
  return static_cast<int>(bytes);
}

}  // namespace

MpiBootstrap::MpiBootstrap(MPI_Comm comm) : comm_(comm) {
  check_mpi(PMPI_Comm_rank(comm, &rank_), "MPI_Comm_rank");
  check_mpi(PMPI_Comm_size(comm, &size_), "MPI_Comm_size");
}

void MpiBootstrap::allgather(const void* mine, size_t bytes, void* all) {
  const int n = count_of(bytes);
  check_mpi(PMPI_Allgather(mine, n, MPI_BYTE, all, n, MPI_BYTE, comm_), "MPI_Allgather (bootstrap)");
}

void MpiBootstrap::barrier() { check_mpi(PMPI_Barrier(comm_), "MPI_Barrier (bootstrap)"); }

void MpiBootstrap::bcast(void* buf, size_t bytes, int root) {
  check_mpi(PMPI_Bcast(buf, count_of(bytes), MPI_BYTE, root, comm_), "MPI_Bcast (bootstrap)");
}

std::unique_ptr<CollTeam> make_coll_team(Runtime& rt, MPI_Comm comm, const CommInfo& ci) {
  std::vector<int> channel_rank;
  for (int w : ci.world_of) channel_rank.push_back(rt.local_of(w));
  return std::make_unique<CollTeam>(rt.context(), rt.endpoint(), std::make_unique<MpiBootstrap>(comm),
                                    std::move(channel_rank));
}

}  // namespace gpustripe::mpi
