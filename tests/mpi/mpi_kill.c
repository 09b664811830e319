/* A rank killed in the middle of a transfer: rank 1 announces a large message from
 * host memory to rank 0's device buffer (the protocol where the sender copies, after
 * the receiver's reply) and dies (SIGKILL) before its data moves; rank 2 (if any)
 * waits on any source. The job must end, with an error, within GPUSTRIPE_TIMEOUT:
 * run_kill.sh checks that it ends non-zero and in time. */
#include <signal.h>
#include <unistd.h>

#include "mpi_test_util.h"

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank, size;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  hooks_t hk = hooks();
  size_t n = 8u << 20;
  buf_t b = buf_new(&hk, rank % hk.device_count(), n);
  MPI_Barrier(MPI_COMM_WORLD);
  if (rank == 1) {
    MPI_Request r;
    MPI_Isend(b.h, (int)n, MPI_BYTE, 0, 0, MPI_COMM_WORLD, &r);
    int flag;
    MPI_Test(&r, &flag, MPI_STATUS_IGNORE);
    usleep(100000);
    raise(SIGKILL);
  }
  if (rank == 0) MPI_Recv(b.p, (int)n, MPI_BYTE, 1, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
  if (rank >= 2) MPI_Recv(b.p, (int)n, MPI_BYTE, MPI_ANY_SOURCE, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
  fprintf(stderr, "[rank %d] the receive returned although its sender died\n", rank);
  MPI_Finalize();
  return 0;
}
