/* A nonblocking collective makes no heap allocation that its blocking form does not (ctest
 * mpi_coll_allocs_np{2,3}, under mpirun with the interposer preloaded).
 *
 * This program counts the heap allocations of the calling thread (its own malloc family,
 * forwarding to glibc's) across each call, after warm-up calls of the same shape: MPI_Allreduce
 * against MPI_Iallreduce + MPI_Wait, and MPI_Bcast against MPI_Ibcast + MPI_Wait, each the
 * fewest over many calls. The nonblocking call adds a request and its state, and must save as
 * much on its path: a start that copies its call into std::functions, a team that allocates each
 * call's state anew, a wrapper around the call's completion, all break the bound. One allowance:
 * a wait that outlasts its first polls builds its bounded waiter (its message, its settings:
 * kWaiterAllocs), and on an oversubscribed node every one of a form's calls may -- the
 * nonblocking call's single wait where the blocking call's waits did not. The results are
 * checked too (integer sums). */
#include "mpi_test_util.h"

extern void* __libc_malloc(size_t);
extern void* __libc_calloc(size_t, size_t);
extern void* __libc_realloc(void*, size_t);
extern void* __libc_memalign(size_t, size_t);
extern void __libc_free(void*);

static __thread int counting; /* the main thread only: the backend's own threads allocate too */
static long allocs;

static void count(void) {
  if (counting) ++allocs;
}
void* malloc(size_t n) {
  count();
  return __libc_malloc(n);
}
void* calloc(size_t a, size_t b) {
  count();
  return __libc_calloc(a, b);
}
void* realloc(void* p, size_t n) {
  count();
  return __libc_realloc(p, n);
}
void free(void* p) { __libc_free(p); }
void* memalign(size_t a, size_t n) {
  count();
  return __libc_memalign(a, n);
}
void* aligned_alloc(size_t a, size_t n) {
  count();
  return __libc_memalign(a, n);
}
int posix_memalign(void** p, size_t a, size_t n) {
  count();
  *p = __libc_memalign(a, n);
  return *p ? 0 : 12;
}

static const long kWaiterAllocs = 4; /* ipc::Waiter's message and settings */
static int rank, size;
static hooks_t hk;

/* The fewest allocations of one call over `calls` calls of `form` (0 blocking, 1 nonblocking). */
static long fewest(int bcast, int form, int32_t* s, int32_t* r, int n, int calls) {
  long least = -1;
  for (int i = 0; i < calls; ++i) {
    MPI_Request req;
    counting = 1;
    const long a0 = allocs;
    if (!bcast && form == 0) {
      CHECK(MPI_Allreduce(s, r, n, MPI_INT32_T, MPI_SUM, MPI_COMM_WORLD) == MPI_SUCCESS);
    } else if (!bcast) {
      CHECK(MPI_Iallreduce(s, r, n, MPI_INT32_T, MPI_SUM, MPI_COMM_WORLD, &req) == MPI_SUCCESS);
      CHECK(MPI_Wait(&req, MPI_STATUS_IGNORE) == MPI_SUCCESS);
    } else if (form == 0) {
      CHECK(MPI_Bcast(r, n, MPI_INT32_T, 0, MPI_COMM_WORLD) == MPI_SUCCESS);
    } else {
      CHECK(MPI_Ibcast(r, n, MPI_INT32_T, 0, MPI_COMM_WORLD, &req) == MPI_SUCCESS);
      CHECK(MPI_Wait(&req, MPI_STATUS_IGNORE) == MPI_SUCCESS);
    }
    const long made = allocs - a0;
    counting = 0;
    if (least < 0 || made < least) least = made;
  }
  return least;
}

int main(int argc, char** argv) {
  test_mpi_init(&argc, &argv, &rank, &size);
  hk = hooks();
  const int ndev = hk.device_count();
  CHECK(ndev > 0);
  const int n = 4096, dev = rank % ndev, calls = 100;
  int32_t* h = (int32_t*)malloc(n * sizeof(int32_t));
  int32_t* s = (int32_t*)hk.alloc(dev, n * sizeof(int32_t));
  int32_t* r = (int32_t*)hk.alloc(dev, n * sizeof(int32_t));
  CHECK(h && s && r);
  for (int i = 0; i < n; ++i) h[i] = rank + i;
  CHECK(hk.copy(s, h, n * sizeof(int32_t)) == 0);
  for (int bcast = 0; bcast < 2; ++bcast) {
    /* Warm-up: the team, the shape's schedule and Program, the mappings, the request table. */
    fewest(bcast, 0, s, r, n, 3);
    fewest(bcast, 1, s, r, n, 3);
    const long blocking = fewest(bcast, 0, s, r, n, calls), nonblocking = fewest(bcast, 1, s, r, n, calls);
    printf("[rank %d] %s: heap allocations per call: blocking %ld, nonblocking %ld\n", rank,
           bcast ? "bcast" : "allreduce", blocking, nonblocking);
    CHECK(blocking >= 0 && nonblocking >= 0);
    CHECK(nonblocking <= blocking + kWaiterAllocs);
  }
  /* The last call was a broadcast of the allreduce's result. */
  CHECK(hk.copy(h, r, n * sizeof(int32_t)) == 0);
  size_t bad = 0;
  for (int i = 0; i < n; ++i) bad += h[i] != size * (size - 1) / 2 + size * i;
  CHECK(bad == 0);
  hk.free_(s);
  hk.free_(r);
  free(h);
  MPI_Barrier(MPI_COMM_WORLD);
  if (rank == 0) printf("mpi_coll_allocs: all checks passed on %d ranks\n", size);
  MPI_Finalize();
  return 0;
}
