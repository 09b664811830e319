/* Nonblocking collectives on device buffers progress without the caller (ctest
 * mpi_coll_overlap_np{2,3}, under mpirun with the interposer preloaded).
 *
 * 1. Starting one does not wait for the other ranks: every rank but 0 starts an
 *    MPI_Iallreduce, then sends rank 0 a token; rank 0 receives every token and only then
 *    starts its own. A start that waits for every rank to enter (a blocking collective
 *    inside MPI_Iallreduce) deadlocks here until GPUSTRIPE_TIMEOUT fails it.
 * 2. It completes while the rank computes: rank 0, the last to start, then makes no MPI
 *    call and reads its receive buffer until the whole result is there (the other ranks
 *    wait in MPI_Wait); a bound on the polls ends a run where it never comes, no timing.
 * 3. Pending calls on two communicators complete whatever order the ranks wait for them in
 *    (every wait progresses every pending collective): rank 0 waits for the one on a
 *    duplicate of the world first, the others for the world's. Then rank 0 makes a blocking
 *    call on the duplicate while its call on the world is pending, which the others wait for
 *    before they make theirs: the blocking call must progress the pending one. Run also with
 *    3 ranks on 2 devices (two ranks share one) and the copy-engine schedules, whose steps wait
 *    for other ranks' steps (mpi_coll_overlap_np3_shared).
 * 4. Persistent collectives (MPIX_*_init, where the MPI has them) started again and again.
 * 5. A nonblocking call makes as many pointer queries as its blocking form (same_host_work).
 * 6. A wait on a collective alone in flight advances that call only, as its blocking form's
 *    wait does, with a full pass over everything pending (every team, every detached request)
 *    only now and then (lean_wait): rank 0 starts late, the others' MPI_Wait polls meanwhile.
 * Results are exact (integer sums), and the interposer's counter shows gpustripe ran them.
 * A communicator's first collective on device buffers sets up its team with every rank, so
 * each part runs one blocking call first. */
#include <sched.h>
#include <unistd.h>

#include "mpi_test_util.h"
#if __has_include(<mpi-ext.h>)
#include <mpi-ext.h>
#endif

static int rank, size, ndev;
static hooks_t hk;
static long (*served)(void);

static int32_t input(int r, size_t i, int salt) { return (int32_t)((r + 1) * 1000 + (int)(i % 977) + salt); }

static int32_t expected(size_t i, int salt) {
  int32_t s = 0;
  for (int r = 0; r < size; ++r) s += input(r, i, salt);
  return s;
}

/* Count of elements of rank's device buffer `p` equal to the expected sum. */
static size_t right(int32_t* host, int32_t* p, size_t n, int salt) {
  CHECK(hk.copy(host, p, n * sizeof(int32_t)) == 0);
  size_t ok = 0;
  for (size_t i = 0; i < n; ++i) ok += host[i] == expected(i, salt);
  return ok;
}

/* n int32 of device memory on this rank's GPU. */
static int32_t* device_ints(size_t n) { return (int32_t*)hk.alloc(rank % ndev, n * sizeof(int32_t)); }

/* A call's buffers: n int32 of host memory (for fills and checks) and a send and a receive
 * buffer on this rank's GPU. */
typedef struct {
  int32_t *h, *s, *r;
} ints_t;

static ints_t ints_new(size_t n) {
  ints_t b = {(int32_t*)malloc(n * sizeof(int32_t)), device_ints(n), device_ints(n)};
  CHECK(b.h && b.s && b.r);
  return b;
}

static void ints_free(ints_t b) {
  hk.free_(b.s);
  hk.free_(b.r);
  free(b.h);
}

static void fill_send(int32_t* host, int32_t* dev, size_t n, int salt) {
  for (size_t i = 0; i < n; ++i) host[i] = input(rank, i, salt);
  CHECK(hk.copy(dev, host, n * sizeof(int32_t)) == 0);
}

static void clear(int32_t* host, int32_t* dev, size_t n) {
  for (size_t i = 0; i < n; ++i) host[i] = -1;
  CHECK(hk.copy(dev, host, n * sizeof(int32_t)) == 0);
}

static void overlap(size_t n) {
  const int salt = 11;
  const ints_t io = ints_new(n);
  int32_t *h = io.h, *s = io.s, *r = io.r;
  fill_send(h, s, n, salt);
  clear(h, r, n);
  /* A communicator's first collective on device buffers sets its team up, with every rank. */
  CHECK(MPI_Allreduce(s, r, (int)n, MPI_INT32_T, MPI_SUM, MPI_COMM_WORLD) == MPI_SUCCESS);
  clear(h, r, n);
  MPI_Barrier(MPI_COMM_WORLD);
  const long before = served();
  MPI_Request req;
  int token = 7;
  if (rank != 0) {
    CHECK(MPI_Iallreduce(s, r, (int)n, MPI_INT32_T, MPI_SUM, MPI_COMM_WORLD, &req) == MPI_SUCCESS);
    CHECK(MPI_Send(&token, 1, MPI_INT, 0, 5, MPI_COMM_WORLD) == MPI_SUCCESS);
    CHECK(MPI_Wait(&req, MPI_STATUS_IGNORE) == MPI_SUCCESS);
  } else {
    for (int p = 1; p < size; ++p) {
      token = 0;
      CHECK(MPI_Recv(&token, 1, MPI_INT, p, 5, MPI_COMM_WORLD, MPI_STATUS_IGNORE) == MPI_SUCCESS);
      CHECK(token == 7);
    }
    CHECK(MPI_Iallreduce(s, r, (int)n, MPI_INT32_T, MPI_SUM, MPI_COMM_WORLD, &req) == MPI_SUCCESS);
    /* "Compute": no MPI call until the result has landed. */
    /* A hang guard, not a timing: a start that leaves the work to the wait never gets there. */
    const double limit = now() + 60;
    long polls = 0;
    while (right(h, r, n, salt) != n) {
      ++polls;
      if (now() > limit) {
        fprintf(stderr, "[rank 0] MPI_Iallreduce made no progress while the rank computed (%ld polls)\n", polls);
        CHECK(!"progress while computing");
      }
      sched_yield(); /* 2 cores in CI: leave them to the other ranks and the emulated streams */
    }
    printf("rank 0: the result landed while computing, after %ld polls\n", polls);
    CHECK(MPI_Wait(&req, MPI_STATUS_IGNORE) == MPI_SUCCESS);
  }
  CHECK(req == MPI_REQUEST_NULL);
  CHECK(right(h, r, n, salt) == n);
  CHECK(served() - before == 1);
  ints_free(io);
}

static void two_comms(size_t n) {
  const int salt_a = 3, salt_b = 5;
  MPI_Comm dup;
  CHECK(MPI_Comm_dup(MPI_COMM_WORLD, &dup) == MPI_SUCCESS);
  int32_t* h = (int32_t*)malloc(n * sizeof(int32_t));
  int32_t* sa = device_ints(n);
  int32_t* ra = device_ints(n);
  int32_t* sb = device_ints(n);
  int32_t* rb = device_ints(n);
  CHECK(h && sa && ra && sb && rb);
  fill_send(h, sa, n, salt_a);
  fill_send(h, sb, n, salt_b);
  clear(h, ra, n);
  clear(h, rb, n);
  const long before = served();
  MPI_Request a, b;
  CHECK(MPI_Iallreduce(sa, ra, (int)n, MPI_INT32_T, MPI_SUM, MPI_COMM_WORLD, &a) == MPI_SUCCESS);
  CHECK(MPI_Iallreduce(sb, rb, (int)n, MPI_INT32_T, MPI_SUM, dup, &b) == MPI_SUCCESS);
  if (rank == 0) {
    CHECK(MPI_Wait(&b, MPI_STATUS_IGNORE) == MPI_SUCCESS);
    CHECK(MPI_Wait(&a, MPI_STATUS_IGNORE) == MPI_SUCCESS);
  } else {
    CHECK(MPI_Wait(&a, MPI_STATUS_IGNORE) == MPI_SUCCESS);
    CHECK(MPI_Wait(&b, MPI_STATUS_IGNORE) == MPI_SUCCESS);
  }
  CHECK(right(h, ra, n, salt_a) == n);
  CHECK(right(h, rb, n, salt_b) == n);
  CHECK(served() - before == 2);
  /* A blocking call while another communicator's is pending, waited for first by the others. */
  clear(h, ra, n);
  clear(h, rb, n);
  CHECK(MPI_Iallreduce(sa, ra, (int)n, MPI_INT32_T, MPI_SUM, MPI_COMM_WORLD, &a) == MPI_SUCCESS);
  if (rank == 0) {
    CHECK(MPI_Allreduce(sb, rb, (int)n, MPI_INT32_T, MPI_SUM, dup) == MPI_SUCCESS);
    CHECK(MPI_Wait(&a, MPI_STATUS_IGNORE) == MPI_SUCCESS);
  } else {
    CHECK(MPI_Wait(&a, MPI_STATUS_IGNORE) == MPI_SUCCESS);
    CHECK(MPI_Allreduce(sb, rb, (int)n, MPI_INT32_T, MPI_SUM, dup) == MPI_SUCCESS);
  }
  CHECK(right(h, ra, n, salt_a) == n);
  CHECK(right(h, rb, n, salt_b) == n);
  CHECK(served() - before == 4);
  hk.free_(sa);
  hk.free_(ra);
  hk.free_(sb);
  hk.free_(rb);
  free(h);
  CHECK(MPI_Comm_free(&dup) == MPI_SUCCESS);
}

#ifdef OMPI_HAVE_MPI_EXT_PCOLLREQ
/* 4. Persistent collectives (Open MPI's MPIX_*_init): one request started again and again on
 * new data, an inactive one completing at once, MPI_Startall of two, MPI_Request_free. */
static void persistent(size_t n) {
  int32_t* h = (int32_t*)malloc(n * sizeof(int32_t));
  int32_t* s = device_ints(n);
  int32_t* r = device_ints(n);
  int32_t* b = device_ints(n);
  CHECK(h && s && r && b);
  MPI_Request req[2];
  CHECK(MPIX_Allreduce_init(s, r, (int)n, MPI_INT32_T, MPI_SUM, MPI_COMM_WORLD, MPI_INFO_NULL, &req[0]) ==
        MPI_SUCCESS);
  CHECK(MPIX_Bcast_init(b, (int)n, MPI_INT32_T, size - 1, MPI_COMM_WORLD, MPI_INFO_NULL, &req[1]) == MPI_SUCCESS);
  CHECK(MPI_Wait(&req[0], MPI_STATUS_IGNORE) == MPI_SUCCESS); /* inactive: at once */
  CHECK(req[0] != MPI_REQUEST_NULL);
  for (int round = 0; round < 3; ++round) {
    const long before = served();
    fill_send(h, s, n, 20 + round);
    clear(h, r, n);
    for (size_t i = 0; i < n; ++i) h[i] = rank == size - 1 ? (int32_t)(i * 3 + round) : -1;
    CHECK(hk.copy(b, h, n * sizeof(int32_t)) == 0);
    if (round == 0) {
      CHECK(MPI_Start(&req[0]) == MPI_SUCCESS);
      CHECK(MPI_Wait(&req[0], MPI_STATUS_IGNORE) == MPI_SUCCESS);
      CHECK(MPI_Start(&req[1]) == MPI_SUCCESS);
      int flag = 0;
      while (!flag) CHECK(MPI_Test(&req[1], &flag, MPI_STATUS_IGNORE) == MPI_SUCCESS);
    } else {
      CHECK(MPI_Startall(2, req) == MPI_SUCCESS);
      CHECK(MPI_Waitall(2, req, MPI_STATUSES_IGNORE) == MPI_SUCCESS);
    }
    CHECK(req[0] != MPI_REQUEST_NULL && req[1] != MPI_REQUEST_NULL);
    CHECK(right(h, r, n, 20 + round) == n);
    CHECK(hk.copy(h, b, n * sizeof(int32_t)) == 0);
    size_t bad = 0;
    for (size_t i = 0; i < n; ++i) bad += h[i] != (int32_t)(i * 3 + round);
    CHECK(bad == 0);
    CHECK(served() - before == 2);
  }
  CHECK(MPI_Request_free(&req[0]) == MPI_SUCCESS);
  CHECK(MPI_Request_free(&req[1]) == MPI_SUCCESS);
  CHECK(req[0] == MPI_REQUEST_NULL && req[1] == MPI_REQUEST_NULL);
  hk.free_(s);
  hk.free_(r);
  hk.free_(b);
  free(h);
}
#endif

/* 5. A nonblocking call does the host work of its blocking form, no more: MPI_Iallreduce +
 * MPI_Wait asks as many pointer queries (a driver call each on CUDA, on the path between one
 * call's end and the next one's launch) as MPI_Allreduce of the same buffers, in place and
 * not; MPI_Ibcast as many as MPI_Bcast. The start asks where a buffer lives to choose its
 * route, and the collective it starts takes that answer instead of asking again. */
static void same_host_work(size_t n) {
  long long (*queries)(void) = (long long (*)(void))dlsym(RTLD_DEFAULT, "gpustripe_mpi_test_pointer_queries");
  CHECK(queries != NULL);
  const ints_t io = ints_new(n);
  int32_t *h = io.h, *s = io.s, *r = io.r;
  for (int in_place = 0; in_place < 2; ++in_place) {
    const int salt = 30 + in_place;
    const void* send = in_place ? MPI_IN_PLACE : (const void*)s;
    long long blocking = 0, nonblocking = 0;
    for (int form = 0; form < 2; ++form) {
      if (in_place) fill_send(h, r, n, salt);
      else fill_send(h, s, n, salt);
      if (!in_place) clear(h, r, n);
      const long before = served();
      const long long q = queries();
      if (form == 0) {
        CHECK(MPI_Allreduce(send, r, (int)n, MPI_INT32_T, MPI_SUM, MPI_COMM_WORLD) == MPI_SUCCESS);
        blocking = queries() - q;
      } else {
        MPI_Request req;
        CHECK(MPI_Iallreduce(send, r, (int)n, MPI_INT32_T, MPI_SUM, MPI_COMM_WORLD, &req) == MPI_SUCCESS);
        CHECK(MPI_Wait(&req, MPI_STATUS_IGNORE) == MPI_SUCCESS);
        nonblocking = queries() - q;
      }
      CHECK(served() - before == 1);
      CHECK(right(h, r, n, salt) == n);
    }
    /* The collective's own queries are counted: once per allocation. */
    CHECK(blocking == (in_place ? 1 : 2));
    if (nonblocking != blocking)
      fprintf(stderr, "[rank %d] MPI_Iallreduce%s: %lld pointer queries, MPI_Allreduce %lld\n", rank,
              in_place ? " in place" : "", nonblocking, blocking);
    CHECK(nonblocking == blocking);
  }
  long long q = queries();
  CHECK(MPI_Bcast(r, (int)n, MPI_INT32_T, 0, MPI_COMM_WORLD) == MPI_SUCCESS);
  const long long blocking = queries() - q;
  MPI_Request req;
  q = queries();
  CHECK(MPI_Ibcast(r, (int)n, MPI_INT32_T, 0, MPI_COMM_WORLD, &req) == MPI_SUCCESS);
  CHECK(MPI_Wait(&req, MPI_STATUS_IGNORE) == MPI_SUCCESS);
  CHECK(blocking == 1 && queries() - q == blocking);
  ints_free(io);
}

/* 6. The others wait for rank 0, which starts its MPI_Iallreduce some 30 ms after them: their
 * MPI_Wait polls thousands of times, each poll (but one in 64) advancing the team's call alone.
 * A full pass per poll (every team, every detached request, and again in the request's test)
 * breaks the bound. Then back-to-back calls, blocking and nonblocking: the host time per call of
 * each is printed (not checked: the emulated node is oversubscribed), and the full passes. */
static void lean_wait(size_t n) {
  long long (*counter)(const char*) = (long long (*)(const char*))dlsym(RTLD_DEFAULT, "gpustripe_mpi_test_coll_counter");
  CHECK(counter != NULL);
  const int salt = 41;
  const ints_t io = ints_new(n);
  int32_t *h = io.h, *s = io.s, *r = io.r;
  fill_send(h, s, n, salt);
  clear(h, r, n);
  MPI_Barrier(MPI_COMM_WORLD);
  const long before = served();
  const long long passes0 = counter("progress_passes"), polls0 = counter("wait_polls");
  CHECK(passes0 >= 0 && polls0 >= 0);
  if (rank == 0) usleep(30 * 1000);
  MPI_Request req;
  CHECK(MPI_Iallreduce(s, r, (int)n, MPI_INT32_T, MPI_SUM, MPI_COMM_WORLD, &req) == MPI_SUCCESS);
  CHECK(MPI_Wait(&req, MPI_STATUS_IGNORE) == MPI_SUCCESS);
  const long long passes = counter("progress_passes") - passes0, polls = counter("wait_polls") - polls0;
  CHECK(served() - before == 1);
  CHECK(right(h, r, n, salt) == n);
  if (polls > 1) printf("[rank %d] lean_wait %zu: %lld polls, %lld full passes\n", rank, n, polls, passes);
  if (passes > 2 + polls / 32)
    fprintf(stderr, "[rank %d] MPI_Wait of a collective alone: %lld full progress passes in %lld polls\n", rank,
            passes, polls);
  CHECK(passes <= 2 + polls / 32);

  const int calls = 100;
  double us[2] = {0, 0};
  long long full[2] = {0, 0};
  for (int form = 0; form < 2; ++form) {
    MPI_Barrier(MPI_COMM_WORLD);
    const long long p0 = counter("progress_passes");
    const double t0 = MPI_Wtime();
    for (int i = 0; i < calls; ++i) {
      if (form == 0) {
        CHECK(MPI_Allreduce(s, r, (int)n, MPI_INT32_T, MPI_SUM, MPI_COMM_WORLD) == MPI_SUCCESS);
      } else {
        CHECK(MPI_Iallreduce(s, r, (int)n, MPI_INT32_T, MPI_SUM, MPI_COMM_WORLD, &req) == MPI_SUCCESS);
        CHECK(MPI_Wait(&req, MPI_STATUS_IGNORE) == MPI_SUCCESS);
      }
    }
    us[form] = (MPI_Wtime() - t0) / calls * 1e6;
    full[form] = counter("progress_passes") - p0;
  }
  CHECK(right(h, r, n, salt) == n);
  printf("[rank %d] %zu B allreduce, us per call: blocking %.1f, nonblocking %.1f; full progress passes per call: "
         "blocking %.2f, nonblocking %.2f\n",
         rank, n * sizeof(int32_t), us[0], us[1], (double)full[0] / calls, (double)full[1] / calls);
  ints_free(io);
}

int main(int argc, char** argv) {
  test_mpi_init(&argc, &argv, &rank, &size);
  hk = hooks();
  ndev = hk.device_count();
  CHECK(ndev > 0);
  served = (long (*)(void))dlsym(RTLD_DEFAULT, "gpustripe_mpi_test_coll_served");
  CHECK(served != NULL);
  const size_t sizes[] = {1, 4096, 1 << 20};
  for (int k = 0; k < 3; ++k) {
    overlap(sizes[k]);
    two_comms(sizes[k]);
#ifdef OMPI_HAVE_MPI_EXT_PCOLLREQ
    persistent(sizes[k]);
#endif
    same_host_work(sizes[k]);
    lean_wait(sizes[k]);
  }
  MPI_Barrier(MPI_COMM_WORLD);
  if (rank == 0) printf("mpi_coll_overlap: all checks passed on %d ranks\n", size);
  MPI_Finalize();
  return 0;
}
