/* A pair's broadcasts through the interposer choose between the copy kernel (sm) and the root's
 * copy engine (direct) by timing their own calls (src/mpi/coll_trials.hpp): ctest
 * mpi_coll_trials_np2_*, with each rank's time of each form given by GPUSTRIPE_TEST's
 * coll.trial_us_FORM (by rank), or GPUSTRIPE_COLL_ALGO forcing a form. Every call's result is
 * checked exactly; then every rank's forms, call by call, must be the expected ones (argv[1],
 * comma-separated; "none": no call timed) and the same on both ranks. argv[2] "ibcast": the calls
 * are MPI_Ibcast and MPI_Wait, timed as the blocking ones are. */
#include "mpi_test_util.h"

#define BYTES ((1 << 20) + 3) /* one size class */
#define CALLS 11

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, size = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  CHECK(argc == 2 || argc == 3);
  const int nonblocking = argc == 3 && strcmp(argv[2], "ibcast") == 0;
  hooks_t hk = hooks();
  long (*forms_run)(char*, size_t) = (long (*)(char*, size_t))dlsym(RTLD_DEFAULT, "gpustripe_mpi_test_coll_forms");
  long (*served)(void) = (long (*)(void))dlsym(RTLD_DEFAULT, "gpustripe_mpi_test_coll_served");
  CHECK(forms_run != NULL && served != NULL);
  const int dev = rank % hk.device_count();
  unsigned char* d = (unsigned char*)hk.alloc(dev, BYTES);
  unsigned char* h = (unsigned char*)malloc(BYTES);
  CHECK(d && h);
  const long served0 = served();
  for (int c = 0; c < CALLS; ++c) {
    for (size_t i = 0; i < BYTES; ++i) h[i] = rank == 0 ? (unsigned char)(i * 7 + c) : 0xEE;
    CHECK(hk.copy(d, h, BYTES) == 0);
    if (nonblocking) {
      MPI_Request req;
      CHECK(MPI_Ibcast(d, BYTES, MPI_BYTE, 0, MPI_COMM_WORLD, &req) == MPI_SUCCESS);
      CHECK(MPI_Wait(&req, MPI_STATUS_IGNORE) == MPI_SUCCESS);
    } else {
      CHECK(MPI_Bcast(d, BYTES, MPI_BYTE, 0, MPI_COMM_WORLD) == MPI_SUCCESS);
    }
    CHECK(hk.copy(h, d, BYTES) == 0);
    for (size_t i = 0; i < BYTES; ++i) CHECK(h[i] == (unsigned char)(i * 7 + c));
  }
  CHECK(served() - served0 == CALLS);
  char forms[1024];
  CHECK(forms_run(forms, sizeof forms) >= 0);
  const char* want = strcmp(argv[1], "none") == 0 ? "" : argv[1];
  printf("[rank %d] forms: %s\n", rank, forms[0] ? forms : "(none)");
  CHECK(strcmp(forms, want) == 0);
  char first[1024];
  memcpy(first, forms, sizeof first);
  CHECK(MPI_Bcast(first, sizeof first, MPI_CHAR, 0, MPI_COMM_WORLD) == MPI_SUCCESS);
  CHECK(strcmp(first, forms) == 0);
  hk.free_(d);
  free(h);
  MPI_Barrier(MPI_COMM_WORLD);
  if (rank == 0) printf("mpi_coll_trials: all checks passed on %d ranks\n", size);
  MPI_Finalize();
  return 0;
}
