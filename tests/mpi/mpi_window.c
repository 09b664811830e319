/* Windows of large device messages between pairs of ranks (r <-> r^1), shaped like
 * `gpustripe bench mpi`'s osu_bw loop: for each size a window of W receives, then W
 * sends, Waitall, then the receiver's acknowledgement; buffers allocated per size and
 * freed after it (a window of large messages shares one buffer per direction, as osu_bw
 * does, else one per slot); windows 1, 16 and 64, one-way and both ways, sizes from 64K
 * (copies of one plain copy and split ones, as the tests' plans make them), repeated.
 * Every received message is checked. Exit 0 when every check holds.
 * Arguments: [reps] [max bytes] [min bytes] [windows] [gpu] (defaults 3, 8M, 64K, "1,16,64", both ways;
 * "gpu" as the fifth: one way only, and skipped (exit 77) unless the backend is CUDA: sizes such as the
 * bench's 512M windows of 64 take too long on emulated GPUs). */
#include "mpi_test_util.h"

static int rank, size, ndev;
static hooks_t hk;

/* osu_loop.hpp's rule: one buffer per direction when a window's buffers would pass the
 * limit (2 GB there; scaled to the sizes here so both forms run). */
static size_t share_limit = 64u << 20;

static void one_size(size_t n, int window, int bidir, int reps, int seq0) {
  int peer = rank ^ 1;
  if (peer >= size) return;
  int first = rank % 2 == 0;
  int share = n * (size_t)window > share_limit;
  int nbuf = share ? 1 : window;
  int dev = rank % ndev;
  buf_t* out = malloc(sizeof(buf_t) * nbuf);
  buf_t* in = malloc(sizeof(buf_t) * nbuf);
  for (int i = 0; i < nbuf; ++i) {
    out[i] = buf_new(&hk, dev, n);
    in[i] = buf_new(&hk, dev, n);
  }
  MPI_Request* reqs = malloc(sizeof(MPI_Request) * 2 * window);
  for (int it = 0; it < reps; ++it) {
    int seq = seq0 + it;
    int sends = bidir || first, recvs = bidir || !first;
    if (sends)
      for (int i = 0; i < nbuf; ++i) {
        fill(out[i].h, n, rank, i, seq);
        buf_push(&hk, &out[i]);
      }
    if (recvs)
      for (int i = 0; i < nbuf; ++i) {
        memset(in[i].h, 0, n);
        buf_push(&hk, &in[i]);
      }
    MPI_Barrier(MPI_COMM_WORLD);
    int nr = 0;
    if (recvs)
      for (int w = 0; w < window; ++w)
        MPI_Irecv(in[share ? 0 : w].p, (int)n, MPI_BYTE, peer, 100, MPI_COMM_WORLD, &reqs[nr++]);
    if (sends)
      for (int w = 0; w < window; ++w)
        MPI_Isend(out[share ? 0 : w].p, (int)n, MPI_BYTE, peer, 100, MPI_COMM_WORLD, &reqs[nr++]);
    MPI_Status* st = malloc(sizeof(MPI_Status) * (nr ? nr : 1));
    CHECK(MPI_Waitall(nr, reqs, st) == MPI_SUCCESS);
    char ack = 0;
    if (first) MPI_Recv(&ack, 1, MPI_BYTE, peer, 101, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    else MPI_Send(&ack, 1, MPI_BYTE, peer, 101, MPI_COMM_WORLD);
    if (recvs) {
      for (int w = 0; w < window; ++w) {
        int count = -1;
        MPI_Get_count(&st[w], MPI_BYTE, &count);
        CHECK(count == (int)n && st[w].MPI_SOURCE == peer);
      }
      for (int i = 0; i < nbuf; ++i) {
        buf_pull(&hk, &in[i]);
        if (!same(in[i].h, n, peer, i, seq)) {
          fprintf(stderr, "[rank %d] %zu bytes, window %d%s, buffer %d, repetition %d: wrong data\n", rank, n,
                  window, bidir ? " both ways" : "", i, it);
          CHECK(0);
        }
      }
    }
    free(st);
  }
  for (int i = 0; i < nbuf; ++i) {
    buf_free(&hk, &out[i]);
    buf_free(&hk, &in[i]);
  }
  free(reqs);
  free(out);
  free(in);
}

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  CHECK(size >= 2);
  hk = hooks();
  ndev = hk.device_count();
  CHECK(ndev >= 1);
  int reps = argc > 1 ? atoi(argv[1]) : 3;
  size_t max = argc > 2 ? (size_t)strtoull(argv[2], NULL, 0) : (8u << 20);
  size_t min = argc > 3 ? (size_t)strtoull(argv[3], NULL, 0) : (64u << 10);
  const char* wins = argc > 4 ? argv[4] : "1,16,64";
  int gpu_only = argc > 5 && strcmp(argv[5], "gpu") == 0;
  CHECK(reps >= 1 && min >= (64u << 10) && max >= min);
  if (gpu_only && strcmp(hk.backend(), "cuda") != 0) {
    if (rank == 0) printf("mpi_window: skipped (large sizes need GPUs; backend %s)\n", hk.backend());
    MPI_Finalize();
    return 77;
  }
  if (gpu_only) share_limit = (size_t)2 << 30; /* the bench's limit */
  int windows[16], nwin = 0;
  for (const char* c = wins; *c && nwin < 16; c = strchr(c, ',') ? strchr(c, ',') + 1 : c + strlen(c)) windows[nwin++] = atoi(c);
  int seq = 0;
  for (int bidir = 0; bidir < (gpu_only ? 1 : 2); ++bidir)
    for (int k = 0; k < nwin; ++k) {
      CHECK(windows[k] >= 1);
      for (size_t n = min; n <= max; n *= 2, seq += reps) one_size(n, windows[k], bidir, reps, seq);
      /* An odd size: chunks and pieces that do not divide evenly. */
      one_size(max / 2 + 4099, windows[k], bidir, reps, seq);
      seq += reps;
      if (rank == 0) printf("window %d%s: done\n", windows[k], bidir ? " both ways" : "");
      fflush(stdout);
    }
  MPI_Barrier(MPI_COMM_WORLD);
  if (rank == 0) printf("mpi_window: all checks passed on %d ranks\n", size);
  MPI_Finalize();
  return 0;
}
