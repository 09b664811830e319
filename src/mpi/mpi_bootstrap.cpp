#include "mpi/mpi_bootstrap.hpp"

#include <climits>
#include <cstring>
#include <vector>

#include "common/error.hpp"
#include "ipc/wait.hpp"

namespace gpustripe::mpi {
namespace {

int count_of(size_t bytes) {
  GS_REQUIRE(bytes <= static_cast<size_t>(INT_MAX), GPUSTRIPE_ERR_INVALID_ARGUMENT,
             "bootstrap message of %zu bytes: more than an MPI count", bytes);
  return static_cast<int>(bytes);
}

// Waits for a nonblocking MPI collective like every other wait on the peers: bounded by
// GPUSTRIPE_TIMEOUT, failing early when check_peers throws.
void bounded_collective(const char* what, const std::function<void()>& check_peers, MPI_Request& req) {
  ipc::Waiter w(format("%s: waiting for the other ranks", what), check_peers);
  for (;;) {
    int done = 0;
    check_mpi(PMPI_Test(&req, &done, MPI_STATUS_IGNORE), what);
    if (done) return;
    w.pause();
  }
}

}  // namespace

MpiBootstrap::MpiBootstrap(MPI_Comm comm) : comm_(comm) {
  check_mpi(PMPI_Comm_rank(comm, &rank_), "MPI_Comm_rank");
  check_mpi(PMPI_Comm_size(comm, &size_), "MPI_Comm_size");
}

void MpiBootstrap::run(const char* what, const void* in, size_t in_bytes, void* out, size_t out_bytes,
                       const std::function<int(char* send, char* recv, MPI_Request* req)>& start) {
  const bool in_place = in == out;
  auto buf = std::make_unique<char[]>(out_bytes + (in_place ? 0 : in_bytes) + 1);
  char* recv = buf.get();
  char* send = in_place ? recv : recv + out_bytes;
  if (in_bytes) std::memcpy(send, in, in_bytes);
  MPI_Request req = MPI_REQUEST_NULL;
  try {
    check_mpi(start(send, recv, &req), what);
    bounded_collective(what, check_peers_, req);
  } catch (...) {
    if (req != MPI_REQUEST_NULL) (void)buf.release();  // a request still pending may write into it
    throw;
  }
  if (out_bytes) std::memcpy(out, recv, out_bytes);
}

void MpiBootstrap::allgather(const void* mine, size_t bytes, void* all) {
  const int n = count_of(bytes);
  const size_t total = bytes * static_cast<size_t>(size_);
  run("MPI_Iallgather (bootstrap)", mine, bytes, all, total, [&](char* send, char* recv, MPI_Request* req) {
    return PMPI_Iallgather(send, n, MPI_BYTE, recv, n, MPI_BYTE, comm_, req);
  });
}

void MpiBootstrap::barrier() {
  run("MPI_Ibarrier (bootstrap)", nullptr, 0, nullptr, 0,
      [&](char*, char*, MPI_Request* req) { return PMPI_Ibarrier(comm_, req); });
}

void MpiBootstrap::bcast(void* buf, size_t bytes, int root) {
  const int n = count_of(bytes);
  run("MPI_Ibcast (bootstrap)", buf, bytes, buf, bytes,
      [&](char* b, char*, MPI_Request* req) { return PMPI_Ibcast(b, n, MPI_BYTE, root, comm_, req); });
}

void MpiBootstrap::allreduce_max(int* vals, size_t n) {
  const int count = count_of(n);
  const size_t bytes = n * sizeof(int);
  // Not in place: MPI_IN_PLACE would need the send part to be the receive part.
  std::vector<int> mine(vals, vals + n);
  run("MPI_Iallreduce (bootstrap)", mine.data(), bytes, vals, bytes, [&](char* send, char* recv, MPI_Request* req) {
    return PMPI_Iallreduce(send, recv, count, MPI_INT, MPI_MAX, comm_, req);
  });
}

std::unique_ptr<CollTeam> make_coll_team(Runtime& rt, MPI_Comm comm, const CommInfo& ci) {
  std::vector<int> channel_rank;
  for (int w : ci.world_of) channel_rank.push_back(rt.local_of(w));
  // The MPI's collectives are blocking (the host waits for each call's end): the team times
  // the forms whose order depends on that (CollTeam's host_paced).
  return std::make_unique<CollTeam>(rt.context(), rt.endpoint(), std::make_unique<MpiBootstrap>(comm),
                                    std::move(channel_rank), /*host_paced=*/true);
}

}  // namespace gpustripe::mpi
