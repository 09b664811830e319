/* A rank killed around a collective on device buffers: every rank runs one MPI_Allreduce
 * (the team and its mappings exist, the result is checked), then rank 1 dies (SIGKILL)
 * either before the next call ("entry": the others wait in the call's entry exchange) or
 * inside it ("inside", a test hook: after the exchange, so the others' GPUs already wait
 * on flags that rank 1's streams would have written). Run under `mpirun --enable-recovery`
 * with MPI_ERRORS_RETURN: each survivor's MPI_Allreduce must return an error naming the
 * dead peer well within GPUSTRIPE_TIMEOUT, not hang. run_kill.sh counts the reports.
 * A second argument "nonblocking": the call is an MPI_Iallreduce completed by MPI_Wait (the
 * survivors wait in MPI_Wait, the pending call's peer check must end it). */
#include <signal.h>
#include <time.h>
#include <unistd.h>

#include "mpi_test_util.h"

int main(int argc, char** argv) {
  int rank, size;
  test_mpi_init(&argc, &argv, &rank, &size);
  const int inside = argc > 1 && strcmp(argv[1], "inside") == 0;
  const int nonblocking = argc > 2 && strcmp(argv[2], "nonblocking") == 0;
  hooks_t hk = hooks();
  void (*die_inside)(void) = (void (*)(void))dlsym(RTLD_DEFAULT, "gpustripe_mpi_test_coll_die_in_next");
  CHECK(die_inside != NULL);
  const int count = 1 << 20; /* 4 MB of floats: the copy-engine schedules, steps across ranks */
  buf_t b = buf_new(&hk, rank % hk.device_count(), (size_t)count * sizeof(float));
  float* h = (float*)b.h;
  for (int i = 0; i < count; ++i) h[i] = (float)(rank + 1);
  buf_push(&hk, &b);
  CHECK(MPI_Allreduce(MPI_IN_PLACE, b.p, count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD) == MPI_SUCCESS);
  buf_pull(&hk, &b);
  CHECK(h[0] == (float)(size * (size + 1) / 2) && h[count - 1] == h[0]);
  MPI_Barrier(MPI_COMM_WORLD);
  if (rank == 1) {
    if (!inside) raise(SIGKILL);
    die_inside();
  }
  double t0 = now();
  int rc;
  if (nonblocking) {
    MPI_Request req;
    rc = MPI_Iallreduce(MPI_IN_PLACE, b.p, count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD, &req);
    if (rc == MPI_SUCCESS) rc = MPI_Wait(&req, MPI_STATUS_IGNORE);
  } else {
    rc = MPI_Allreduce(MPI_IN_PLACE, b.p, count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
  }
  double took = now() - t0;
  if (rc == MPI_SUCCESS) {
    fprintf(stderr, "[rank %d] MPI_Allreduce returned although rank 1 died (returned although its sender died)\n",
            rank);
    _exit(1);
  }
  char msg[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(rc, msg, &len);
  const char* limit = getenv("GPUSTRIPE_TIMEOUT");
  int in_time = !limit || took < atof(limit);
  int named = strstr(msg, "GPUSTRIPE_ERR_PEER_FAILED") != NULL;
  fprintf(stderr, "[rank %d] MPI_Allreduce (%s) failed after %.2f s (GPUSTRIPE_TIMEOUT=%s): %s\n", rank,
          inside ? "inside" : "entry", took, limit ? limit : "unset", msg);
  if (in_time && named) fprintf(stderr, "[rank %d] mpi_kill: dead peer reported in time\n", rank);
  fflush(stderr);
  /* No MPI_Finalize: it would wait for the dead rank. */
  _exit(in_time && named ? 0 : 1);
}
