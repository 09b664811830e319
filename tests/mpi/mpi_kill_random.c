/* A rank killed at a random point of a collective or of point-to-point traffic:
 *   mpi_kill_random <op> <bytes> <seed>
 * op: allreduce, reduce, bcast, allgather, alltoall, reduce_scatter_block, or p2p (a ring of
 * MPI_Sendrecv). Every rank runs the op on device buffers of <bytes> a few times (the last
 * such call timed), then rank 1 starts a thread that kills it (SIGKILL) after a delay drawn
 * from <seed> within a few calls' time, and every rank keeps calling the op. Each
 * survivor's failing call must return an error naming a dead peer
 * (GPUSTRIPE_ERR_PEER_FAILED) within 10 s: run_kill.sh counts the "dead peer reported in
 * time" lines (run_kill_random.sh). Run under `mpirun --enable-recovery` with MPI_ERRORS_RETURN. */
#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include "mpi_test_util.h"

static double g_delay_s;

static void* killer(void* arg) {
  (void)arg;
  struct timespec t;
  t.tv_sec = (time_t)g_delay_s;
  t.tv_nsec = (long)((g_delay_s - (double)t.tv_sec) * 1e9);
  nanosleep(&t, NULL);
  raise(SIGKILL);
  return NULL;
}

static int run_op(const char* op, void* send, void* recv, size_t bytes, int rank, int size) {
  const int floats = (int)(bytes / sizeof(float));
  const int block = floats / size;
  if (!strcmp(op, "allreduce")) return MPI_Allreduce(send, recv, floats, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
  if (!strcmp(op, "reduce")) return MPI_Reduce(send, recv, floats, MPI_FLOAT, MPI_SUM, 0, MPI_COMM_WORLD);
  if (!strcmp(op, "bcast")) return MPI_Bcast(recv, floats, MPI_FLOAT, 0, MPI_COMM_WORLD);
  if (!strcmp(op, "allgather"))
    return MPI_Allgather(send, block, MPI_FLOAT, recv, block, MPI_FLOAT, MPI_COMM_WORLD);
  if (!strcmp(op, "alltoall")) return MPI_Alltoall(send, block, MPI_FLOAT, recv, block, MPI_FLOAT, MPI_COMM_WORLD);
  if (!strcmp(op, "reduce_scatter_block"))
    return MPI_Reduce_scatter_block(send, recv, block, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
  if (!strcmp(op, "p2p"))
    return MPI_Sendrecv(send, (int)bytes, MPI_BYTE, (rank + 1) % size, 7, recv, (int)bytes, MPI_BYTE,
                        (rank + size - 1) % size, 7, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
  fprintf(stderr, "mpi_kill_random: unknown op %s\n", op);
  MPI_Abort(MPI_COMM_WORLD, 2);
  return 1;
}

int main(int argc, char** argv) {
  int rank, size;
  test_mpi_init(&argc, &argv, &rank, &size);
  CHECK(argc == 4 && size >= 2);
  const char* op = argv[1];
  const size_t bytes = (size_t)strtoull(argv[2], NULL, 10);
  const unsigned seed = (unsigned)strtoul(argv[3], NULL, 10);
  hooks_t hk = hooks();
  /* GPUSTRIPE_TEST_KILL_GPU: sizes meant for GPUs only (a skip elsewhere). */
  const char* gpu_only = getenv("GPUSTRIPE_TEST_KILL_GPU");
  if (gpu_only && *gpu_only == '1' && strcmp(hk.backend(), "cuda") != 0) {
    if (rank == 0) printf("mpi_kill_random: no GPU, skipped\n"); /* mpirun --enable-recovery hides exit codes */
    MPI_Finalize();
    return 77;
  }
  const int dev = rank % hk.device_count();
  void* send = hk.alloc(dev, bytes);
  void* recv = hk.alloc(dev, bytes);
  CHECK(send != NULL && recv != NULL);

  /* Warm-up: the teams, mappings and programs exist; the last call gives the op's time. */
  double took = 0;
  for (int i = 0; i < 3; ++i) {
    double t0 = now();
    CHECK(run_op(op, send, recv, bytes, rank, size) == MPI_SUCCESS);
    took = now() - t0;
  }
  double slowest = 0;
  CHECK(MPI_Allreduce(&took, &slowest, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD) == MPI_SUCCESS);
  if (rank == 1) {
    srand(seed);
    g_delay_s = slowest * 3.0 * (double)rand() / RAND_MAX; /* somewhere in the next ~3 calls */
    fprintf(stderr, "[rank 1] %s of %zu bytes (%.4f s per call): dying after %.4f s (seed %u)\n", op, bytes, slowest,
            g_delay_s, seed);
    pthread_t t;
    CHECK(pthread_create(&t, NULL, killer, NULL) == 0);
  }
  const double start = now();
  for (long calls = 0;; ++calls) {
    double t0 = now();
    int rc = run_op(op, send, recv, bytes, rank, size);
    double call = now() - t0;
    if (rc == MPI_SUCCESS) {
      /* A survivor may finish calls the dead rank had its part of; never endlessly. */
      if (rank != 1 && now() - start > 60.0) {
        fprintf(stderr, "[rank %d] %s kept returning success after rank 1 died (returned although its sender died)\n",
                rank, op);
        _exit(1);
      }
      continue;
    }
    char msg[MPI_MAX_ERROR_STRING];
    int len = 0;
    MPI_Error_string(rc, msg, &len);
    const int in_time = call < 10.0;
    const int named = strstr(msg, "GPUSTRIPE_ERR_PEER_FAILED") != NULL;
    fprintf(stderr, "[rank %d] %s of %zu bytes failed after %.2f s (call %ld): %s\n", rank, op, bytes, call, calls,
            msg);
    if (in_time && named) fprintf(stderr, "[rank %d] mpi_kill: dead peer reported in time\n", rank);
    fflush(stderr);
    /* No MPI_Finalize: it would wait for the dead rank. */
    _exit(in_time && named ? 0 : 1);
  }
}
