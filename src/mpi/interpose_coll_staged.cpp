// The collective the interposer has no gpustripe schedule for: MPI_Alltoallv. The MPI runs
// it; device buffers are staged through pinned host memory when it cannot read them
// (coll_staged.hpp), so an unmodified program using them does not crash a MPI that is
// not CUDA-aware. Buffers of the "v" forms span their largest displacement + count, and
// their receive buffers are copied in too: what lies between the blocks comes back as it was.
#include "mpi/coll_staged.hpp"
#include "mpi/interpose.hpp"

using namespace gpustripe::mpi;

extern "C" {

int MPI_Alltoallv(const void* sendbuf, const int* sendcounts, const int* sdispls, MPI_Datatype sendtype,
                  void* recvbuf, const int* recvcounts, const int* rdispls, MPI_Datatype recvtype, MPI_Comm comm) {
  return staged_collective(comm, "MPI_Alltoallv", [&](StagedBuffers* sb) {
    const int n = comm_size(comm);
    void* s = sendbuf == MPI_IN_PLACE ? const_cast<void*>(sendbuf)
                                      : stage(sb, sendbuf, span_of(sendcounts, sdispls, n), sendtype, true, false);
    void* r = stage(sb, recvbuf, span_of(recvcounts, rdispls, n), recvtype, true, true);
    return PMPI_Alltoallv(s, sendcounts, sdispls, sendtype, r, recvcounts, rdispls, recvtype, comm);
  });
}

}  // extern "C"
