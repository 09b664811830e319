/* Device buffers of every allocator kind through the interposer: "plain" (cudaMalloc),
 * "vmm" (cuMemCreate with POSIX-fd handles), "pool" (a cudaMallocAsync pool with POSIX-fd
 * handles), "async" (the device's default pool, which has no IPC handle) and "vmm_multi" (one
 * reservation mapped with several cuMemCreate allocations, as PyTorch's expandable segments:
 * one vmm-multi handle, every piece's descriptor in one message). Emulated in CI: vmm, pool and
 * vmm_multi are memfd memory, async private memory. Even ranks send to the next odd rank:
 * device to device (the receiver maps the sender's buffer), host to device (the sender maps
 * the receiver's), and a send buffer freed and reallocated between messages (typically at the
 * same address: never served from the old mapping). Random data, checked. The IPC counters
 * of the mapping side show which path carried the data: a mapping opened with a file
 * descriptor (vmm, pool), a legacy mapping (plain), or none at all (async: streamed). Then
 * an MPI_Allreduce per kind: the collectives map every rank's buffers (pool and async buffers take
 * the MPI's way: pool imports may not outlive the call).
 * Prints one "KIND ..." line per kind, and "mpi_ipc_kinds: all checks passed on N ranks". */
#include <time.h>

#include "mpi_test_util.h"

static int rank, size, ndev;
static hooks_t hk;
static void* (*alloc_as)(int, size_t, const char*);
static long long (*counter)(const char*);
static long (*coll_served)(void);

static int dev_of(int r) { return r % ndev; }

static unsigned char* dev_buf(const char* kind, size_t n) {
  unsigned char* p = (unsigned char*)alloc_as(dev_of(rank), n, kind);
  CHECK(p != NULL);
  return p;
}

typedef struct {
  long long hits, misses, stale, fd_opens, offered, requested, multi;
} counts_t;

static counts_t counts(void) {
  counts_t c;
  c.hits = counter("map_hits");
  c.misses = counter("map_misses");
  c.stale = counter("map_stale");
  c.fd_opens = counter("fd_opens");
  c.offered = counter("fd_offered");
  c.requested = counter("fd_requested");
  c.multi = counter("multi_opens");
  CHECK(c.hits >= 0 && c.misses >= 0 && c.stale >= 0 && c.fd_opens >= 0);
  return c;
}

/* One kind: `rounds` messages of n bytes from the even rank to the odd one, then `reallocs`
 * with a new send buffer each, then one host -> device message; checks the data and which
 * path carried it (the receiver's counters for the pulls, the sender's for the push). */
static void run_kind(const char* kind, size_t n, int rounds, int reallocs, int seq0) {
  int peer = rank % 2 == 0 ? rank + 1 : rank - 1;
  if (peer >= size) {  /* an odd rank count: the last rank sits this out */
    MPI_Barrier(MPI_COMM_WORLD);
    MPI_Barrier(MPI_COMM_WORLD);
    return;
  }
  int sender = rank % 2 == 0;
  unsigned char* host = (unsigned char*)malloc(n);
  unsigned char* buf = dev_buf(kind, n);
  counts_t before = counts();
  MPI_Barrier(MPI_COMM_WORLD);
  double t_best = 1e30;
  for (int i = 0; i < rounds + reallocs; ++i) {
    int seq = seq0 + i;
    if (i >= rounds && sender) { /* a new send buffer: the old one is freed first */
      hk.free_(buf);
      buf = dev_buf(kind, n);
    }
    if (sender) {
      fill(host, n, rank, 7, seq);
      CHECK(hk.copy(buf, host, n) == 0);
      MPI_Send(buf, (int)n, MPI_BYTE, peer, 7, MPI_COMM_WORLD);
    } else {
      memset(host, 0, n);
      CHECK(hk.copy(buf, host, n) == 0);
      double t0 = now();
      MPI_Status st;
      CHECK(MPI_Recv(buf, (int)n, MPI_BYTE, peer, 7, MPI_COMM_WORLD, &st) == MPI_SUCCESS);
      double t = now() - t0;
      if (t < t_best) t_best = t;
      int count = -1;
      MPI_Get_count(&st, MPI_BYTE, &count);
      CHECK(count == (int)n);
      CHECK(hk.copy(host, buf, n) == 0);
      CHECK(same(host, n, peer, 7, seq));
    }
  }
  counts_t pulled = counts();
  /* Host -> device: the sender maps the receiver's buffer of this kind. */
  int seq = seq0 + rounds + reallocs;
  if (sender) {
    fill(host, n, rank, 8, seq);
    MPI_Send(host, (int)n, MPI_BYTE, peer, 8, MPI_COMM_WORLD);
  } else {
    CHECK(MPI_Recv(buf, (int)n, MPI_BYTE, peer, 8, MPI_COMM_WORLD, MPI_STATUS_IGNORE) == MPI_SUCCESS);
    CHECK(hk.copy(host, buf, n) == 0);
    CHECK(same(host, n, peer, 8, seq));
  }
  counts_t after = counts();
  MPI_Barrier(MPI_COMM_WORLD);

  /* The receiver's counters of the pulls, the sender's of the push. */
  long long maps = pulled.misses + pulled.stale + pulled.hits - (before.misses + before.stale + before.hits);
  long long fresh = pulled.misses + pulled.stale - (before.misses + before.stale);
  long long fd = pulled.fd_opens - before.fd_opens;
  long long push_maps = after.misses + after.stale + after.hits - (pulled.misses + pulled.stale + pulled.hits);
  long long push_fd = after.fd_opens - pulled.fd_opens;
  long long multi = pulled.multi - before.multi, push_multi = after.multi - pulled.multi;
  int mapped_kind = strcmp(kind, "async") != 0;
  int is_multi = strcmp(kind, "vmm_multi") == 0;
  int one_fd_per_buffer = strcmp(kind, "vmm") == 0 || is_multi;
  int fd_kind = one_fd_per_buffer || strcmp(kind, "pool") == 0;
  if (!sender) {
    if (mapped_kind) {
      CHECK(maps == rounds + reallocs);        /* every message went through a mapping */
      /* Each new send buffer mapped anew, never a stale hit; pool imports are leased per
       * message (closed before the sender hears the copy is done), so every message maps. */
      CHECK(fresh == (strcmp(kind, "pool") == 0 ? rounds + reallocs : 1 + reallocs));
      /* By descriptor: one per VMM allocation; a pool's only the first time this process met
       * the pool on CUDA (emulated pools are memfd memory, one descriptor per buffer). */
      if (one_fd_per_buffer) CHECK(fd == 1 + reallocs);
      else if (fd_kind) CHECK(fd <= 1 + reallocs);
      else CHECK(fd == 0);
      /* A buffer over several VMM allocations: every mapping of it is one vmm-multi mapping. */
      CHECK(multi == (is_multi ? 1 + reallocs : 0));
    } else {
      CHECK(maps == 0 && fd == 0);             /* no handle: streamed */
    }
    printf("KIND %s bytes=%zu path=%s maps=%lld fresh=%lld fd_opens=%lld multi_opens=%lld best_us=%.1f gbps=%.2f\n",
           kind, n, mapped_kind ? (is_multi ? "mapped-multi" : fd_kind ? "mapped-fd" : "mapped-legacy") : "stream",
           maps, fresh, fd, multi, t_best * 1e6, n / t_best / 1e9);
    fflush(stdout);
  } else {
    CHECK(push_maps == (mapped_kind ? 1 : 0));
    CHECK(one_fd_per_buffer ? push_fd == 1 : fd_kind ? push_fd <= 1 : push_fd == 0);
    CHECK(push_multi == is_multi);
  }
  hk.free_(buf);
  free(host);
}

/* MPI_Allreduce over buffers of one kind: the collectives map every rank's buffers
 * (descriptors offered to all ranks first); buffers without a handle make every rank take
 * the MPI's way (staged through host memory). The sums are checked either way. */
static void allreduce_kind(const char* kind, int count) {
  size_t n = (size_t)count * sizeof(float);
  float* h = (float*)malloc(n);
  float* sbuf = (float*)dev_buf(kind, n);
  float* rbuf = (float*)dev_buf(kind, n);
  for (int i = 0; i < count; ++i) h[i] = (float)((rank + 1) * (i % 13));
  CHECK(hk.copy(sbuf, h, n) == 0);
  long served = coll_served();
  long long offered = counter("fd_offered");
  CHECK(MPI_Allreduce(sbuf, rbuf, count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD) == MPI_SUCCESS);
  CHECK(hk.copy(h, rbuf, n) == 0);
  float ranks_sum = (float)(size * (size + 1) / 2);
  for (int i = 0; i < count; ++i) CHECK(h[i] == ranks_sum * (float)(i % 13));
  int gs = coll_served() > served;
  long long off = counter("fd_offered") - offered;
  /* No handle (async), or pool pointers whose imports could outlive the call: the MPI's way,
   * on every rank. The others are mapped by every rank. */
  if (strcmp(kind, "async") == 0 || strcmp(kind, "pool") == 0) CHECK(!gs && off == 0);
  else CHECK(gs);
  if (strcmp(kind, "vmm") == 0 || strcmp(kind, "vmm_multi") == 0) CHECK(off >= size - 1); /* to every other rank */
  if (rank == 0) {
    printf("ALLREDUCE %s bytes=%zu path=%s fd_offered=%lld\n", kind, n, gs ? "gpustripe" : "mpi-staged", off);
    fflush(stdout);
  }
  /* The same buffers through point-to-point, then both again: the p2p layer maps a peer's
   * buffer for the owner's GPU, the collectives for this rank's own GPU, so a legacy handle is
   * mapped twice in one process (a mapping per context), and each must keep working. */
  int peer = rank ^ 1;
  for (int round = 0; round < 2; ++round) {  /* round 1 sends round 0's sums, the same as the first call's */
    if (peer < size) {
      if (rank % 2 == 0) {
        MPI_Send(rbuf, count, MPI_FLOAT, peer, 9, MPI_COMM_WORLD);
      } else {
        CHECK(MPI_Recv(sbuf, count, MPI_FLOAT, peer, 9, MPI_COMM_WORLD, MPI_STATUS_IGNORE) == MPI_SUCCESS);
        CHECK(hk.copy(h, sbuf, n) == 0);
        for (int i = 0; i < count; ++i) CHECK(h[i] == ranks_sum * (float)(i % 13));
      }
    }
    for (int i = 0; i < count; ++i) h[i] = (float)((rank + 1) * (i % 13) + round);
    CHECK(hk.copy(sbuf, h, n) == 0);
    CHECK(MPI_Allreduce(sbuf, rbuf, count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD) == MPI_SUCCESS);
    CHECK(hk.copy(h, rbuf, n) == 0);
    for (int i = 0; i < count; ++i) CHECK(h[i] == ranks_sum * (float)(i % 13) + (float)(size * round));
  }
  hk.free_(sbuf);
  hk.free_(rbuf);
  free(h);
}

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  hk = hooks();
  alloc_as = (void* (*)(int, size_t, const char*))dlsym(RTLD_DEFAULT, "gpustripe_mpi_test_alloc_as");
  counter = (long long (*)(const char*))dlsym(RTLD_DEFAULT, "gpustripe_mpi_test_ipc_counter");
  coll_served = (long (*)(void))dlsym(RTLD_DEFAULT, "gpustripe_mpi_test_coll_served");
  CHECK(alloc_as && counter && coll_served);
  ndev = hk.device_count();
  CHECK(ndev > 0);
  int cuda = strcmp(hk.backend(), "cuda") == 0;
  const char* kinds[] = {"plain", "vmm", "pool", "async", "vmm_multi"};
  size_t sizes[] = {(1u << 20) + 3, cuda ? (64u << 20) : (8u << 20) + 5};
  /* vmm_multi: several pieces at both sizes (CUDA: 2 MiB pieces up to 20 MiB, then 20 MiB;
   * emulated: 64 KiB pieces, at most 64 per handle). */
  size_t multi_sizes[] = {cuda ? (4u << 20) + 3 : (1u << 20) + 3, cuda ? (64u << 20) : (3u << 20) + 5};
  int seq = 0;
  for (int s = 0; s < 2; ++s)
    for (int k = 0; k < 5; ++k) {
      run_kind(kinds[k], k == 4 ? multi_sizes[s] : sizes[s], 3, 2, seq);
      seq += 10;
    }
  for (int k = 0; k < 4; ++k) allreduce_kind(kinds[k], (1 << 18) + 3);
  allreduce_kind("vmm_multi", cuda ? (1 << 22) + 3 : (1 << 18) + 3);  /* 9 pieces / 17 pieces */
  MPI_Barrier(MPI_COMM_WORLD);
  if (rank == 0) printf("mpi_ipc_kinds: all checks passed on %d ranks\n", size);
  MPI_Finalize();
  return 0;
}
