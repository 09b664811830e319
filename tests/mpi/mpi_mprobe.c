/* Matched probes through the interposer (MPI_Mprobe/Improbe + MPI_Mrecv/Imrecv: mpi4py's
 * pickled recv uses them): between ranks of one node the messages travel by gpustripe, which
 * the MPI's own matched probe never sees (it waited forever). Even ranks send to the next odd
 * rank: host messages of two tags (probed with any tag, received in order), one probed with
 * any source, a device buffer (probed, then received into device memory), and an Improbe loop
 * with Imrecv. Sizes from Get_count on the probe's status; random data checked. Run with
 * GPUSTRIPE_TEST=fake_nodes=2 the pairs also cross "nodes" (the MPI's own handles).
 * Prints "mpi_mprobe: all checks passed on N ranks". */
#include "mpi_test_util.h"

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank, size;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  hooks_t hk = hooks();
  int ndev = hk.device_count();
  CHECK(ndev > 0);
  int peer = rank % 2 == 0 ? rank + 1 : rank - 1;
  const size_t sizes[] = {40, 70000, (1u << 20) + 3};
  if (peer < size) {
    for (int k = 0; k < 3; ++k) {
      size_t n = sizes[k];
      unsigned char* h = (unsigned char*)malloc(n);
      unsigned char* d = (unsigned char*)hk.alloc(rank % ndev, n);
      CHECK(d != NULL);
      if (rank % 2 == 0) {
        for (int tag = 1; tag <= 4; ++tag) {
          fill(h, n, rank, tag, k);
          if (tag == 3) {
            CHECK(hk.copy(d, h, n) == 0);
            MPI_Send(d, (int)n, MPI_BYTE, peer, tag, MPI_COMM_WORLD);
          } else {
            MPI_Send(h, (int)n, MPI_BYTE, peer, tag, MPI_COMM_WORLD);
          }
        }
      } else {
        for (int tag = 1; tag <= 4; ++tag) {
          MPI_Message m;
          MPI_Status st;
          int count = -1;
          if (tag == 4) { /* nonblocking: Improbe until it is there, then Imrecv */
            int flag = 0;
            while (!flag) CHECK(MPI_Improbe(peer, MPI_ANY_TAG, MPI_COMM_WORLD, &flag, &m, &st) == MPI_SUCCESS);
          } else {
            CHECK(MPI_Mprobe(tag == 2 ? MPI_ANY_SOURCE : peer, MPI_ANY_TAG, MPI_COMM_WORLD, &m, &st) == MPI_SUCCESS);
          }
          CHECK(st.MPI_TAG == tag && st.MPI_SOURCE == peer); /* in order, from the peer */
          MPI_Get_count(&st, MPI_BYTE, &count);
          CHECK(count == (int)n);
          memset(h, 0, n);
          if (tag == 3) { /* into device memory */
            CHECK(MPI_Mrecv(d, count, MPI_BYTE, &m, &st) == MPI_SUCCESS);
            CHECK(hk.copy(h, d, n) == 0);
          } else if (tag == 4) {
            MPI_Request r;
            CHECK(MPI_Imrecv(h, count, MPI_BYTE, &m, &r) == MPI_SUCCESS);
            CHECK(MPI_Wait(&r, &st) == MPI_SUCCESS);
          } else {
            CHECK(MPI_Mrecv(h, count, MPI_BYTE, &m, &st) == MPI_SUCCESS);
          }
          CHECK(m == MPI_MESSAGE_NULL);
          CHECK(st.MPI_TAG == tag && same(h, n, peer, tag, k));
        }
      }
      hk.free_(d);
      free(h);
    }
  }
  /* MPI_PROC_NULL: the MPI's no-process message, received as nothing. */
  MPI_Message m;
  MPI_Status st;
  CHECK(MPI_Mprobe(MPI_PROC_NULL, 0, MPI_COMM_WORLD, &m, &st) == MPI_SUCCESS && m == MPI_MESSAGE_NO_PROC);
  CHECK(MPI_Mrecv(NULL, 0, MPI_BYTE, &m, &st) == MPI_SUCCESS);
  MPI_Barrier(MPI_COMM_WORLD);
  if (rank == 0) printf("mpi_mprobe: all checks passed on %d ranks\n", size);
  MPI_Finalize();
  return 0;
}
