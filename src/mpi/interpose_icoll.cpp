// Nonblocking collectives (MPI_Iallreduce, MPI_Ireduce_scatter(_block), MPI_Iallgather(v),
// MPI_Ialltoall(v), MPI_Ibcast, MPI_Ireduce, MPI_Igather(v), MPI_Iscatter(v), MPI_Iscan,
// MPI_Iexscan) on device buffers. The MPI is not CUDA-aware: handed device pointers it
// would read them as host memory. So a call with a device buffer runs as the blocking
// interposed collective (gpustripe's schedules, or staged through host memory) before it
// returns, and its request is already complete: MPI_Wait/MPI_Test (interpose_wait.cpp) find it
// in the interposer's table and return its result. The GPU work is thereby not overlapped
// with what the program computes between the start and the wait, and the call waits for the
// other ranks to enter it, as a blocking collective does (bounded by GPUSTRIPE_TIMEOUT). Calls
// whose buffers are all host memory, and MPI_Ibarrier, go to the MPI unchanged. Every rank of
// a call must pass device buffers, or every rank host buffers: the two routes do not match.
#include <initializer_list>
#include <memory>

#include "mpi/coll_staged.hpp"
#include "mpi/interpose.hpp"

namespace gpustripe::mpi {
namespace {

// A request complete from its start, with the collective's result.
class DoneOp : public Op {
 public:
  DoneOp(MPI_Comm comm, int rc) : Op(comm), rc_(rc) {}
  bool test(MPI_Status* st, int* err) override {
    set_status(st, MPI_ANY_SOURCE, MPI_ANY_TAG, rc_, 0);
    *err = rc_;
    return true;
  }
  bool ready() override { return true; }

 private:
  int rc_;
};

bool on_device(std::initializer_list<const void*> bufs) {
  std::lock_guard<std::recursive_mutex> l(lock());
  Runtime* rt = Runtime::get();
  if (!rt) return false;
  for (const void* b : bufs)
    if (b && b != MPI_IN_PLACE && rt->locate(b).device) return true;
  return false;
}

int done(MPI_Comm comm, int rc, MPI_Request* req) {
  std::lock_guard<std::recursive_mutex> l(lock());
  *req = add_request(std::make_unique<DoneOp>(comm, rc));
  return rc;
}

}  // namespace
}  // namespace gpustripe::mpi

using namespace gpustripe::mpi;

extern "C" {

int MPI_Iallreduce(const void* sendbuf, void* recvbuf, int count, MPI_Datatype type, MPI_Op op, MPI_Comm comm,
                   MPI_Request* req) {
  if (!on_device({sendbuf, recvbuf})) return PMPI_Iallreduce(sendbuf, recvbuf, count, type, op, comm, req);
  return done(comm, MPI_Allreduce(sendbuf, recvbuf, count, type, op, comm), req);
}

int MPI_Ireduce(const void* sendbuf, void* recvbuf, int count, MPI_Datatype type, MPI_Op op, int root,
                MPI_Comm comm, MPI_Request* req) {
  const bool is_root = comm_rank(comm) == root;
  if (!on_device({sendbuf, is_root ? recvbuf : nullptr}))
    return PMPI_Ireduce(sendbuf, recvbuf, count, type, op, root, comm, req);
  return done(comm, MPI_Reduce(sendbuf, recvbuf, count, type, op, root, comm), req);
}

int MPI_Ireduce_scatter_block(const void* sendbuf, void* recvbuf, int recvcount, MPI_Datatype type, MPI_Op op,
                              MPI_Comm comm, MPI_Request* req) {
  if (!on_device({sendbuf, recvbuf}))
    return PMPI_Ireduce_scatter_block(sendbuf, recvbuf, recvcount, type, op, comm, req);
  return done(comm, MPI_Reduce_scatter_block(sendbuf, recvbuf, recvcount, type, op, comm), req);
}

int MPI_Ireduce_scatter(const void* sendbuf, void* recvbuf, const int* recvcounts, MPI_Datatype type, MPI_Op op,
                        MPI_Comm comm, MPI_Request* req) {
  if (!on_device({sendbuf, recvbuf})) return PMPI_Ireduce_scatter(sendbuf, recvbuf, recvcounts, type, op, comm, req);
  return done(comm, MPI_Reduce_scatter(sendbuf, recvbuf, recvcounts, type, op, comm), req);
}

int MPI_Iallgather(const void* sendbuf, int sendcount, MPI_Datatype sendtype, void* recvbuf, int recvcount,
                   MPI_Datatype recvtype, MPI_Comm comm, MPI_Request* req) {
  if (!on_device({sendbuf, recvbuf}))
    return PMPI_Iallgather(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, comm, req);
  return done(comm, MPI_Allgather(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, comm), req);
}

int MPI_Iallgatherv(const void* sendbuf, int sendcount, MPI_Datatype sendtype, void* recvbuf, const int* recvcounts,
                    const int* displs, MPI_Datatype recvtype, MPI_Comm comm, MPI_Request* req) {
  if (!on_device({sendbuf, recvbuf}))
    return PMPI_Iallgatherv(sendbuf, sendcount, sendtype, recvbuf, recvcounts, displs, recvtype, comm, req);
  return done(comm, MPI_Allgatherv(sendbuf, sendcount, sendtype, recvbuf, recvcounts, displs, recvtype, comm), req);
}

int MPI_Ialltoall(const void* sendbuf, int sendcount, MPI_Datatype sendtype, void* recvbuf, int recvcount,
                  MPI_Datatype recvtype, MPI_Comm comm, MPI_Request* req) {
  if (!on_device({sendbuf, recvbuf}))
    return PMPI_Ialltoall(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, comm, req);
  return done(comm, MPI_Alltoall(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, comm), req);
}

int MPI_Ialltoallv(const void* sendbuf, const int* sendcounts, const int* sdispls, MPI_Datatype sendtype,
                   void* recvbuf, const int* recvcounts, const int* rdispls, MPI_Datatype recvtype, MPI_Comm comm,
                   MPI_Request* req) {
  if (!on_device({sendbuf, recvbuf}))
    return PMPI_Ialltoallv(sendbuf, sendcounts, sdispls, sendtype, recvbuf, recvcounts, rdispls, recvtype, comm, req);
  return done(comm,
              MPI_Alltoallv(sendbuf, sendcounts, sdispls, sendtype, recvbuf, recvcounts, rdispls, recvtype, comm), req);
}

int MPI_Ibcast(void* buffer, int count, MPI_Datatype type, int root, MPI_Comm comm, MPI_Request* req) {
  if (!on_device({buffer})) return PMPI_Ibcast(buffer, count, type, root, comm, req);
  return done(comm, MPI_Bcast(buffer, count, type, root, comm), req);
}

int MPI_Igather(const void* sendbuf, int sendcount, MPI_Datatype sendtype, void* recvbuf, int recvcount,
                MPI_Datatype recvtype, int root, MPI_Comm comm, MPI_Request* req) {
  const bool is_root = comm_rank(comm) == root;
  if (!on_device({sendbuf, is_root ? recvbuf : nullptr}))
    return PMPI_Igather(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, root, comm, req);
  return done(comm, MPI_Gather(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, root, comm), req);
}

int MPI_Igatherv(const void* sendbuf, int sendcount, MPI_Datatype sendtype, void* recvbuf, const int* recvcounts,
                 const int* displs, MPI_Datatype recvtype, int root, MPI_Comm comm, MPI_Request* req) {
  const bool is_root = comm_rank(comm) == root;
  if (!on_device({sendbuf, is_root ? recvbuf : nullptr}))
    return PMPI_Igatherv(sendbuf, sendcount, sendtype, recvbuf, recvcounts, displs, recvtype, root, comm, req);
  return done(comm, MPI_Gatherv(sendbuf, sendcount, sendtype, recvbuf, recvcounts, displs, recvtype, root, comm),
              req);
}

int MPI_Iscatter(const void* sendbuf, int sendcount, MPI_Datatype sendtype, void* recvbuf, int recvcount,
                 MPI_Datatype recvtype, int root, MPI_Comm comm, MPI_Request* req) {
  const bool is_root = comm_rank(comm) == root;
  if (!on_device({is_root ? sendbuf : nullptr, recvbuf}))
    return PMPI_Iscatter(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, root, comm, req);
  return done(comm, MPI_Scatter(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, root, comm), req);
}

int MPI_Iscatterv(const void* sendbuf, const int* sendcounts, const int* displs, MPI_Datatype sendtype, void* recvbuf,
                  int recvcount, MPI_Datatype recvtype, int root, MPI_Comm comm, MPI_Request* req) {
  const bool is_root = comm_rank(comm) == root;
  if (!on_device({is_root ? sendbuf : nullptr, recvbuf}))
    return PMPI_Iscatterv(sendbuf, sendcounts, displs, sendtype, recvbuf, recvcount, recvtype, root, comm, req);
  return done(comm, MPI_Scatterv(sendbuf, sendcounts, displs, sendtype, recvbuf, recvcount, recvtype, root, comm),
              req);
}

int MPI_Iscan(const void* sendbuf, void* recvbuf, int count, MPI_Datatype type, MPI_Op op, MPI_Comm comm,
              MPI_Request* req) {
  if (!on_device({sendbuf, recvbuf})) return PMPI_Iscan(sendbuf, recvbuf, count, type, op, comm, req);
  return done(comm, MPI_Scan(sendbuf, recvbuf, count, type, op, comm), req);
}

int MPI_Iexscan(const void* sendbuf, void* recvbuf, int count, MPI_Datatype type, MPI_Op op, MPI_Comm comm,
                MPI_Request* req) {
  if (!on_device({sendbuf, recvbuf})) return PMPI_Iexscan(sendbuf, recvbuf, count, type, op, comm, req);
  return done(comm, MPI_Exscan(sendbuf, recvbuf, count, type, op, comm), req);
}

}  // extern "C"
