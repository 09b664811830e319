/* Communicator churn: <cycles> (default 1000) rounds of MPI_Comm_dup / a small device
 * MPI_Allreduce on gpustripe / MPI_Comm_free. Each communicator's collective team (shared
 * segment, scratch, streams, events) must go with it: the job's /dev/shm entries, this
 * process's open file descriptors, threads and mappings (/proc/self/maps lines) after the
 * last cycle must match those after cycle 50 within a small tolerance (caches that fill up
 * in the first cycles are not leaks). Then teams whose setup fails on one rank (rank 1, then
 * rank 0; gpustripe_mpi_test_coll_fail_next_setup, as when out of memory there): every
 * rank's MPI_Allreduce must return an error, none may hang, and the next communicator works. */
#include <dirent.h>
#include <unistd.h>

#include "mpi_test_util.h"

typedef struct {
  long shm, fds, threads, maps;
} usage_t;

static long count_dir(const char* path) {
  DIR* d = opendir(path);
  CHECK(d != NULL);
  long n = 0;
  struct dirent* e;
  while ((e = readdir(d)) != NULL)
    if (e->d_name[0] != '.') ++n;
  closedir(d);
  return n;
}

/* /dev/shm entries of this job: names carrying one of its ranks' pids (gpustripe.<pid>.<n>,
 * gpustripe-<tag>-<pid>-<random>); other jobs on the machine do not count. */
static long job_shm(const int* pids, int n) {
  DIR* d = opendir("/dev/shm");
  CHECK(d != NULL);
  long count = 0;
  struct dirent* e;
  while ((e = readdir(d)) != NULL) {
    if (strncmp(e->d_name, "gpustripe", 9) != 0) continue;
    for (int i = 0; i < n; ++i) {
      char a[32], b[32];
      snprintf(a, sizeof a, ".%d.", pids[i]);
      snprintf(b, sizeof b, "-%d-", pids[i]);
      if (strstr(e->d_name, a) || strstr(e->d_name, b)) {
        ++count;
        break;
      }
    }
  }
  closedir(d);
  return count;
}

static long maps_lines(void) {
  FILE* f = fopen("/proc/self/maps", "r");
  CHECK(f != NULL);
  long n = 0;
  int c;
  while ((c = fgetc(f)) != EOF)
    if (c == '\n') ++n;
  fclose(f);
  return n;
}

static usage_t usage(const int* pids, int n) {
  usage_t u;
  u.shm = job_shm(pids, n);
  u.fds = count_dir("/proc/self/fd");
  u.threads = count_dir("/proc/self/task");
  u.maps = maps_lines();
  return u;
}

static void cycle(hooks_t* hk, buf_t* b, int size, int i) {
  MPI_Comm c;
  CHECK(MPI_Comm_dup(MPI_COMM_WORLD, &c) == MPI_SUCCESS);
  const int count = (int)(b->n / sizeof(float));
  float* h = (float*)b->h;
  for (int k = 0; k < count; ++k) h[k] = (float)(i % 7 + 1);
  buf_push(hk, b);
  CHECK(MPI_Allreduce(MPI_IN_PLACE, b->p, count, MPI_FLOAT, MPI_SUM, c) == MPI_SUCCESS);
  buf_pull(hk, b);
  CHECK(h[0] == (float)(size * (i % 7 + 1)) && h[count - 1] == h[0]);
  CHECK(MPI_Comm_free(&c) == MPI_SUCCESS);
  CHECK(c == MPI_COMM_NULL);
}

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank, size;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  hooks_t hk = hooks();
  long (*served)(void) = (long (*)(void))dlsym(RTLD_DEFAULT, "gpustripe_mpi_test_coll_served");
  void (*fail_setup)(void) = (void (*)(void))dlsym(RTLD_DEFAULT, "gpustripe_mpi_test_coll_fail_next_setup");
  CHECK(served != NULL && fail_setup != NULL);
  const int cycles = argc > 1 ? atoi(argv[1]) : 1000;
  const int settle = 50;
  CHECK(cycles > settle);
  int pid = (int)getpid();
  int* pids = (int*)calloc((size_t)size, sizeof(int));
  CHECK(MPI_Allgather(&pid, 1, MPI_INT, pids, 1, MPI_INT, MPI_COMM_WORLD) == MPI_SUCCESS);
  buf_t b = buf_new(&hk, rank % hk.device_count(), 1024); /* 256 floats */

  const long served0 = served();
  usage_t first = {0, 0, 0, 0}, last;
  for (int i = 1; i <= cycles; ++i) {
    cycle(&hk, &b, size, i);
    if (i == settle) {
      MPI_Barrier(MPI_COMM_WORLD); /* every rank past the same cycle: the job's segments counted alike */
      first = usage(pids, size);
      MPI_Barrier(MPI_COMM_WORLD);
    }
  }
  MPI_Barrier(MPI_COMM_WORLD);
  last = usage(pids, size);
  MPI_Barrier(MPI_COMM_WORLD);
  CHECK(served() - served0 == cycles); /* every allreduce ran on gpustripe (a team per communicator) */
  printf("[rank %d] after cycle %d: shm %ld fds %ld threads %ld maps %ld; after cycle %d: shm %ld fds %ld threads %ld "
         "maps %ld\n",
         rank, settle, first.shm, first.fds, first.threads, first.maps, cycles, last.shm, last.fds, last.threads,
         last.maps);
  fflush(stdout);
  CHECK(last.shm <= first.shm + 1);
  CHECK(last.fds <= first.fds + 4);
  CHECK(last.threads <= first.threads + 2);
  CHECK(last.maps <= first.maps + 32);

  /* A setup failing on one rank (rank 1: it opens the segment; rank 0: it creates it) fails
   * the call on every rank; the next communicator's team is set up as usual. */
  for (int failing = 1; failing >= 0; --failing) {
    MPI_Comm c;
    CHECK(MPI_Comm_dup(MPI_COMM_WORLD, &c) == MPI_SUCCESS);
    MPI_Comm_set_errhandler(c, MPI_ERRORS_RETURN);
    if (rank == failing) fail_setup();
    const int count = (int)(b.n / sizeof(float));
    int rc = MPI_Allreduce(MPI_IN_PLACE, b.p, count, MPI_FLOAT, MPI_SUM, c);
    CHECK(rc != MPI_SUCCESS);
    char msg[MPI_MAX_ERROR_STRING];
    int len = 0;
    MPI_Error_string(rc, msg, &len);
    printf("[rank %d] setup failing on rank %d: MPI_Allreduce returned: %s\n", rank, failing, msg);
    CHECK(MPI_Comm_free(&c) == MPI_SUCCESS);
    cycle(&hk, &b, size, 1);
  }

  buf_free(&hk, &b);
  free(pids);
  MPI_Barrier(MPI_COMM_WORLD);
  if (rank == 0) printf("mpi_coll_churn: all checks passed on %d ranks\n", size);
  MPI_Finalize();
  return 0;
}
