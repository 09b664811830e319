/* A rank killed inside a passive-target epoch of a device window: rank 2 takes rank 0's
 * exclusive lock, puts into it and dies holding it. Rank 1 then asks for the same lock and
 * rank 0 enters MPI_Win_fence: both must fail with the dead peer named
 * (GPUSTRIPE_ERR_PEER_FAILED) within GPUSTRIPE_TIMEOUT, not hang. Run by run_kill.sh with
 * 3 ranks (2 survivors): each survivor prints "mpi_kill: dead peer reported in time". */
#include <signal.h>
#include <unistd.h>

#include "mpi_test_util.h"

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank, size;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  CHECK(size == 3);
  hooks_t hk = hooks();
  buf_t b = buf_new(&hk, rank % hk.device_count(), 1 << 16);
  MPI_Win win;
  CHECK(MPI_Win_create(b.p, 1 << 16, 1, MPI_INFO_NULL, MPI_COMM_WORLD, &win) == MPI_SUCCESS);
  MPI_Win_set_errhandler(win, MPI_ERRORS_RETURN);
  if (rank == 2) {
    CHECK(MPI_Win_lock(MPI_LOCK_EXCLUSIVE, 0, 0, win) == MPI_SUCCESS);
    CHECK(MPI_Put(b.p, 1 << 16, MPI_BYTE, 0, 0, 1 << 16, MPI_BYTE, win) == MPI_SUCCESS);
    CHECK(MPI_Win_flush(0, win) == MPI_SUCCESS);
  }
  MPI_Barrier(MPI_COMM_WORLD);
  if (rank == 2) raise(SIGKILL);
  double t0 = now();
  const char* call = rank == 0 ? "MPI_Win_fence" : "MPI_Win_lock";
  int rc = rank == 0 ? MPI_Win_fence(0, win) : MPI_Win_lock(MPI_LOCK_EXCLUSIVE, 0, 0, win);
  double took = now() - t0;
  if (rc == MPI_SUCCESS) {
    fprintf(stderr, "[rank %d] %s returned although rank 2 died (returned although its sender died)\n", rank, call);
    _exit(1);
  }
  char msg[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(rc, msg, &len);
  const char* limit = getenv("GPUSTRIPE_TIMEOUT");
  int in_time = !limit || took < atof(limit);
  int named = strstr(msg, "GPUSTRIPE_ERR_PEER_FAILED") != NULL;
  fprintf(stderr, "[rank %d] %s failed after %.2f s (GPUSTRIPE_TIMEOUT=%s): %s\n", rank, call, took,
          limit ? limit : "unset", msg);
  if (in_time && named) fprintf(stderr, "[rank %d] mpi_kill: dead peer reported in time\n", rank);
  fflush(stderr);
  /* No MPI_Finalize: it would wait for the dead rank. */
  _exit(in_time && named ? 0 : 1);
}
