/* A rank killed in the middle of a transfer: rank 1 announces a large message from
 * host memory to rank 0's device buffer (the protocol where the sender copies, after
 * the receiver's reply) and dies (SIGKILL) before its data moves; ranks >= 2 wait on
 * any source. Run under `mpirun --enable-recovery` (the job outlives the dead rank)
 * with MPI_ERRORS_RETURN: every survivor's receive must return an error that names
 * the dead peer (MPI_Error_string: GPUSTRIPE_ERR_PEER_FAILED), well within
 * GPUSTRIPE_TIMEOUT. run_kill.sh counts the survivors' reports and bounds the job. */
#include <signal.h>
#include <time.h>
#include <unistd.h>

#include "mpi_test_util.h"

int main(int argc, char** argv) {
  int rank, size;
  test_mpi_init(&argc, &argv, &rank, &size);
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
  double t0 = now();
  int rc = rank == 0 ? MPI_Recv(b.p, (int)n, MPI_BYTE, 1, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE)
                     : MPI_Recv(b.p, (int)n, MPI_BYTE, MPI_ANY_SOURCE, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
  double took = now() - t0;
  if (rc == MPI_SUCCESS) {
    fprintf(stderr, "[rank %d] the receive returned although its sender died\n", rank);
    _exit(1);
  }
  char msg[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(rc, msg, &len);
  const char* limit = getenv("GPUSTRIPE_TIMEOUT");
  int in_time = !limit || took < atof(limit);
  int named = strstr(msg, "GPUSTRIPE_ERR_PEER_FAILED") != NULL;
  fprintf(stderr, "[rank %d] receive failed after %.2f s (GPUSTRIPE_TIMEOUT=%s): %s\n", rank, took,
          limit ? limit : "unset", msg);
  if (in_time && named) fprintf(stderr, "[rank %d] mpi_kill: dead peer reported in time\n", rank);
  fflush(stderr);
  /* No MPI_Finalize: it would wait for the dead rank. */
  _exit(in_time && named ? 0 : 1);
}
