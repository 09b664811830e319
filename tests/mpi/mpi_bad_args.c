/* Bad arguments to the interposed point-to-point calls get the error classes the MPI
 * itself returns, on host and device buffers, and nothing is sent or left waiting:
 * MPI_DATATYPE_NULL (MPI_ERR_TYPE) for sends and receives, blocking and not;
 * MPI_COMM_NULL (MPI_ERR_COMM); a probe with a negative tag (MPI_ERR_TAG) or a rank
 * outside the communicator (MPI_ERR_RANK). Then a good exchange on the same ranks
 * arrives whole: no bad call left a message or a receive behind. Two ranks. */
#include "mpi_test_util.h"

static int error_class(int rc) {
  int cls = MPI_SUCCESS;
  MPI_Error_class(rc, &cls);
  return cls;
}

#define EXPECT_CLASS(call, want)                                                                  \
  do {                                                                                            \
    int rc_ = (call);                                                                             \
    if (error_class(rc_) != (want)) {                                                             \
      int r_;                                                                                     \
      MPI_Comm_rank(MPI_COMM_WORLD, &r_);                                                         \
      fprintf(stderr, "[rank %d] %s:%d: %s returned class %d, not %s (%d)\n", r_, __FILE__,       \
              __LINE__, #call, error_class(rc_), #want, want);                                    \
    }                                                                                             \
    CHECK(error_class(rc_) == (want));                                                            \
  } while (0)

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  int rank = 0, size = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  CHECK(size == 2);
  hooks_t hk = hooks();
  const int peer = 1 - rank;
  const size_t n = 1 << 20;
  for (int on_device = 0; on_device < 2; ++on_device) {
    buf_t b = buf_new(&hk, on_device ? rank % hk.device_count() : -1, n);
    MPI_Status st;
    MPI_Request req = MPI_REQUEST_NULL;
    /* The datatype: a send would otherwise deliver 0 bytes, a receive wait for them. */
    EXPECT_CLASS(MPI_Send(b.p, 4, MPI_DATATYPE_NULL, peer, 1, MPI_COMM_WORLD), MPI_ERR_TYPE);
    EXPECT_CLASS(MPI_Ssend(b.p, 4, MPI_DATATYPE_NULL, peer, 1, MPI_COMM_WORLD), MPI_ERR_TYPE);
    EXPECT_CLASS(MPI_Isend(b.p, 4, MPI_DATATYPE_NULL, peer, 1, MPI_COMM_WORLD, &req), MPI_ERR_TYPE);
    EXPECT_CLASS(MPI_Recv(b.p, 4, MPI_DATATYPE_NULL, peer, 1, MPI_COMM_WORLD, &st), MPI_ERR_TYPE);
    EXPECT_CLASS(MPI_Irecv(b.p, 4, MPI_DATATYPE_NULL, MPI_ANY_SOURCE, 1, MPI_COMM_WORLD, &req), MPI_ERR_TYPE);
    /* The communicator. */
    EXPECT_CLASS(MPI_Send(b.p, 4, MPI_INT, peer, 1, MPI_COMM_NULL), MPI_ERR_COMM);
    EXPECT_CLASS(MPI_Isend(b.p, 4, MPI_INT, peer, 1, MPI_COMM_NULL, &req), MPI_ERR_COMM);
    EXPECT_CLASS(MPI_Recv(b.p, 4, MPI_INT, peer, 1, MPI_COMM_NULL, &st), MPI_ERR_COMM);
    /* Probes: what a receive refuses. */
    int flag = 0;
    EXPECT_CLASS(MPI_Iprobe(peer, -5, MPI_COMM_WORLD, &flag, &st), MPI_ERR_TAG);
    EXPECT_CLASS(MPI_Iprobe(size + 3, 1, MPI_COMM_WORLD, &flag, &st), MPI_ERR_RANK);
    /* A good exchange after all that: the first message each rank gets is this one. */
    if (rank == 0) {
      fill(b.h, n, 0, 2, on_device);
      buf_push(&hk, &b);
      CHECK(MPI_Send(b.p, (int)n, MPI_BYTE, peer, 2, MPI_COMM_WORLD) == MPI_SUCCESS);
    } else {
      memset(b.h, 0, n);
      buf_push(&hk, &b);
      CHECK(MPI_Recv(b.p, (int)n, MPI_BYTE, MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_WORLD, &st) == MPI_SUCCESS);
      int got = 0;
      MPI_Get_count(&st, MPI_BYTE, &got);
      CHECK(got == (int)n && st.MPI_TAG == 2 && st.MPI_SOURCE == 0);
      buf_pull(&hk, &b);
      CHECK(same(b.h, n, 0, 2, on_device));
    }
    CHECK(MPI_Barrier(MPI_COMM_WORLD) == MPI_SUCCESS);
    buf_free(&hk, &b);
  }
  if (rank == 0) printf("mpi_bad_args: all checks passed on %d ranks\n", size);
  MPI_Finalize();
  return 0;
}
