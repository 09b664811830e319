/* A repeated collective over the same buffers after the IPC mapping cache closed their
 * mappings (ctest mpi_coll_remap_np2, run with a mapping cache of a few entries): between
 * runs of the same MPI_Allreduce, device messages from other allocations fill the cache, so
 * the peers' buffers of the collective are mapped anew, maybe at other addresses. A call
 * that kept the last call's addresses and Program would read closed mappings; every
 * result is checked exactly, and the map misses say that the churn did close them. */
#include "mpi_test_util.h"

#define N 4096        /* floats per rank */
#define OTHERS 6      /* allocations sent between the runs: more than the cache holds */
#define OTHER_BYTES 65536

static void run_allreduce(hooks_t* hk, float* dx, float* dy, int rank, int size, int salt) {
  float* hx = (float*)malloc(N * sizeof(float));
  float* hy = (float*)malloc(N * sizeof(float));
  for (int i = 0; i < N; ++i) hx[i] = (float)(rank + 1) * (float)((i + salt) % 7);
  CHECK(hk->copy(dx, hx, N * sizeof(float)) == 0);
  CHECK(MPI_Allreduce(dx, dy, N, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD) == MPI_SUCCESS);
  CHECK(hk->copy(hy, dy, N * sizeof(float)) == 0);
  const float ranks = (float)(size * (size + 1) / 2);
  for (int i = 0; i < N; ++i) CHECK(hy[i] == ranks * (float)((i + salt) % 7));
  free(hx);
  free(hy);
}

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, size = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  hooks_t hk = hooks();
  long long (*counter)(const char*) = (long long (*)(const char*))dlsym(RTLD_DEFAULT, "gpustripe_mpi_test_ipc_counter");
  CHECK(counter != NULL);
  const int dev = rank % hk.device_count();
  float* dx = (float*)hk.alloc(dev, N * sizeof(float));
  float* dy = (float*)hk.alloc(dev, N * sizeof(float));
  CHECK(dx && dy);
  unsigned char* other[OTHERS];
  unsigned char* in = (unsigned char*)hk.alloc(dev, OTHER_BYTES);
  CHECK(in != NULL);
  for (int k = 0; k < OTHERS; ++k) CHECK((other[k] = (unsigned char*)hk.alloc(dev, OTHER_BYTES)) != NULL);

  int salt = 0;
  for (int round = 0; round < 3; ++round) {
    for (int i = 0; i < 3; ++i) run_allreduce(&hk, dx, dy, rank, size, ++salt);
    /* Every rank's device messages from OTHERS allocations to the next rank: the receiver
     * maps each sender buffer, which pushes the collective's mappings out of the cache. */
    const long long misses = counter("map_misses");
    const int to = (rank + 1) % size, from = (rank + size - 1) % size;
    for (int k = 0; k < OTHERS; ++k) {
      MPI_Request r[2];
      CHECK(MPI_Irecv(in, OTHER_BYTES, MPI_BYTE, from, k, MPI_COMM_WORLD, &r[0]) == MPI_SUCCESS);
      CHECK(MPI_Isend(other[k], OTHER_BYTES, MPI_BYTE, to, k, MPI_COMM_WORLD, &r[1]) == MPI_SUCCESS);
      CHECK(MPI_Waitall(2, r, MPI_STATUSES_IGNORE) == MPI_SUCCESS);
    }
    CHECK(counter("map_misses") >= misses + OTHERS);
    /* The same call again: its peers' buffers must be mapped anew (misses), not taken from
     * the last call. */
    const long long before = counter("map_misses");
    run_allreduce(&hk, dx, dy, rank, size, ++salt);
    CHECK(counter("map_misses") > before);
  }
  for (int k = 0; k < OTHERS; ++k) hk.free_(other[k]);
  hk.free_(in);
  hk.free_(dx);
  hk.free_(dy);
  MPI_Barrier(MPI_COMM_WORLD);
  if (rank == 0) printf("mpi_coll_remap: all checks passed on %d ranks\n", size);
  MPI_Finalize();
  return 0;
}
