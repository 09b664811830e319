/* One-sided communication (MPI RMA) on device windows through the interposer.
 * Every rank keeps a host model of every rank's window and applies to it the same
 * random puts (sizes and displacements from a seed all ranks share); after each epoch
 * the ranks check their own window against the model, then get random ranges of every
 * window and check them too. Every synchronization mode: fence, post/start/complete/wait,
 * lock exclusive and shared, lock_all with flush / flush_local_all, MPI_Rput / MPI_Rget;
 * origin buffers in device and host memory, self targets included. Then: the windows'
 * attributes, out-of-range displacements (MPI_ERR_RMA_RANGE, nothing written), an operation
 * outside an epoch and MPI_Win_free inside one (MPI_ERR_RMA_SYNC), accumulates of every
 * predefined op on the common types from every rank into one target at once (checked
 * against a host reference), MPI_MAXLOC on MPI_2INT, fetch-and-add counters (every fetched
 * value distinct), compare-and-swap (one winner), dynamic windows (attach/detach),
 * MPI_Win_allocate of device memory (info gpustripe_device), host windows left to the MPI, and
 * get epochs completing at unlock by polling their copies while the target makes no MPI call,
 * which GPU runs a put (the origin's, through a mapping in its context, for plain memory), the
 * host's work per operation (no pointer query for an origin in window memory, one completion event
 * per stream per flush), and large puts and gets (split across paths where the model says so).
 * Prints "mpi_rma: all checks passed on N ranks". */
#include "mpi_test_util.h"

static int rank, size, ndev;
static hooks_t hk;
static const size_t W = 192 * 1024; /* bytes of window per rank */

static uint64_t rng_state;
static uint64_t rnd(void) {
  rng_state ^= rng_state << 13;
  rng_state ^= rng_state >> 7;
  rng_state ^= rng_state << 17;
  return rng_state;
}

enum { FENCE, PSCW, LOCK_EXCL, LOCK_SHARED, LOCK_ALL_FLUSH, LOCK_ALL_LOCAL, REQUESTS, NMODES };
static const char* mode_name[] = {"fence", "pscw", "lock exclusive", "lock shared", "lock_all+flush",
                                  "lock_all+flush_local_all", "rput/rget"};

static MPI_Group world_group;

static void open_epoch(int mode, MPI_Win win) {
  if (mode == FENCE) CHECK(MPI_Win_fence(0, win) == MPI_SUCCESS);
  if (mode == PSCW) {
    CHECK(MPI_Win_post(world_group, 0, win) == MPI_SUCCESS);
    CHECK(MPI_Win_start(world_group, 0, win) == MPI_SUCCESS);
  }
  if (mode >= LOCK_ALL_FLUSH) CHECK(MPI_Win_lock_all(0, win) == MPI_SUCCESS);
}

static void close_epoch(int mode, MPI_Win win, int round) {
  if (mode == FENCE) CHECK(MPI_Win_fence(0, win) == MPI_SUCCESS);
  if (mode == PSCW) {
    CHECK(MPI_Win_complete(win) == MPI_SUCCESS);
    if (round % 2) {
      int flag = 0;
      while (!flag) CHECK(MPI_Win_test(win, &flag) == MPI_SUCCESS);
    } else {
      CHECK(MPI_Win_wait(win) == MPI_SUCCESS);
    }
  }
  if (mode == LOCK_ALL_FLUSH) {
    for (int t = 0; t < size; ++t) CHECK(MPI_Win_flush(t, win) == MPI_SUCCESS);
    CHECK(MPI_Win_flush_all(win) == MPI_SUCCESS);
  }
  if (mode == LOCK_ALL_LOCAL) CHECK(MPI_Win_flush_local_all(win) == MPI_SUCCESS);
  if (mode >= LOCK_ALL_FLUSH) CHECK(MPI_Win_unlock_all(win) == MPI_SUCCESS);
  /* Passive target: the targets learn that the data is there from the origins. */
  MPI_Barrier(MPI_COMM_WORLD);
}

/* One put or get to t inside the open epoch of `mode` (the lock modes lock t around it). */
static void op(int mode, int put, void* buf, size_t n, int t, size_t disp, MPI_Win win, MPI_Request* req) {
  if (mode == LOCK_EXCL || mode == LOCK_SHARED)
    CHECK(MPI_Win_lock(mode == LOCK_EXCL ? MPI_LOCK_EXCLUSIVE : MPI_LOCK_SHARED, t, 0, win) == MPI_SUCCESS);
  if (mode == REQUESTS) {
    if (put) CHECK(MPI_Rput(buf, (int)n, MPI_BYTE, t, (MPI_Aint)disp, (int)n, MPI_BYTE, win, req) == MPI_SUCCESS);
    else CHECK(MPI_Rget(buf, (int)n, MPI_BYTE, t, (MPI_Aint)disp, (int)n, MPI_BYTE, win, req) == MPI_SUCCESS);
  } else if (put) {
    CHECK(MPI_Put(buf, (int)n, MPI_BYTE, t, (MPI_Aint)disp, (int)n, MPI_BYTE, win) == MPI_SUCCESS);
  } else {
    CHECK(MPI_Get(buf, (int)n, MPI_BYTE, t, (MPI_Aint)disp, (int)n, MPI_BYTE, win) == MPI_SUCCESS);
  }
  if (mode == LOCK_EXCL || mode == LOCK_SHARED) CHECK(MPI_Win_unlock(t, win) == MPI_SUCCESS);
}

static void check_own(buf_t* mem, unsigned char** model, const char* what) {
  buf_pull(&hk, mem);
  if (memcmp(mem->h, model[rank], W) != 0) {
    size_t i = 0;
    while (mem->h[i] == model[rank][i]) ++i;
    fprintf(stderr, "[rank %d] %s: window byte %zu is %d, expected %d\n", rank, what, i, mem->h[i], model[rank][i]);
    CHECK(0);
  }
}

/* Random puts and gets in every mode. */
static void puts_and_gets(MPI_Win win, buf_t* mem, unsigned char** model) {
  const size_t slice = W / (size_t)size, half = slice / 2;
  buf_t src[2][8], dst[8];
  MPI_Request reqs[64];
  for (int round = 0; round < 2 * NMODES; ++round) {
    int mode = round % NMODES;
    int host_origin = round >= NMODES; /* the second pass: origin buffers in host memory */
    for (int t = 0; t < size; ++t) {
      for (int k = 0; k < 2; ++k) src[k][t] = buf_new(&hk, host_origin ? -1 : rank % ndev, half);
      dst[t] = buf_new(&hk, host_origin ? -1 : rank % ndev, slice);
    }
    int nreq = 0;
    open_epoch(mode, win);
    /* Origin o writes into slice o of every window (self included): two puts, one per half. */
    for (int o = 0; o < size; ++o)
      for (int t = 0; t < size; ++t)
        for (int k = 0; k < 2; ++k) {
          rng_state = 0x9E3779B97F4A7C15ull ^ ((uint64_t)round << 40) ^ ((uint64_t)o << 20) ^ ((uint64_t)t << 8) ^ k;
          rnd();
          size_t off = rnd() % half, len = rnd() % (half - off + 1);
          if (rnd() % 4 == 0) len = len ? 1 : 0; /* single bytes too */
          size_t disp = (size_t)o * slice + (size_t)k * half + off;
          if (o == rank) {
            fill(src[k][t].h, len, o, t * 2 + k, round);
            buf_push(&hk, &src[k][t]);
            op(mode, 1, src[k][t].p, len, t, disp, win, &reqs[nreq]);
            if (mode == REQUESTS) ++nreq;
          }
          fill(model[t] + disp, len, o, t * 2 + k, round);
        }
    if (nreq) CHECK(MPI_Waitall(nreq, reqs, MPI_STATUSES_IGNORE) == MPI_SUCCESS);
    close_epoch(mode, win, round);
    char what[128];
    snprintf(what, sizeof what, "puts (%s, %s origin)", mode_name[mode], host_origin ? "host" : "device");
    check_own(mem, model, what);
    /* Gets of a random range of every window. */
    nreq = 0;
    size_t goff[8], glen[8];
    open_epoch(mode, win);
    for (int t = 0; t < size; ++t) {
      rng_state = 0xC0FFEEull ^ ((uint64_t)round << 32) ^ ((uint64_t)rank << 16) ^ (uint64_t)t;
      rnd();
      goff[t] = rnd() % W;
      glen[t] = rnd() % (W - goff[t] + 1);
      if (glen[t] > slice) glen[t] = slice;
      op(mode, 0, dst[t].p, glen[t], t, goff[t], win, &reqs[nreq]);
      if (mode == REQUESTS) ++nreq;
    }
    if (nreq) CHECK(MPI_Waitall(nreq, reqs, MPI_STATUSES_IGNORE) == MPI_SUCCESS);
    close_epoch(mode, win, round);
    for (int t = 0; t < size; ++t) {
      size_t n = dst[t].n;
      dst[t].n = glen[t];
      buf_pull(&hk, &dst[t]);
      dst[t].n = n;
      if (memcmp(dst[t].h, model[t] + goff[t], glen[t]) != 0) {
        fprintf(stderr, "[rank %d] get of %zu bytes at %zu of rank %d (%s): wrong data\n", rank, glen[t], goff[t], t,
                mode_name[mode]);
        CHECK(0);
      }
    }
    for (int t = 0; t < size; ++t) {
      for (int k = 0; k < 2; ++k) buf_free(&hk, &src[k][t]);
      buf_free(&hk, &dst[t]);
    }
  }
  if (rank == 0) printf("puts and gets: every mode checked\n");
}

/* A rank in MPI_Win_fence keeps its other messages moving: rank 0's large host-memory send to
 * rank 1, which rank 1 receives before it comes to the fence, completes. */
static void progress_in_fence(MPI_Win win) {
  const int n = 4 << 20;
  unsigned char* b = malloc(n);
  MPI_Request req;
  if (rank == 0) {
    fill(b, n, 0, 9, 1);
    CHECK(MPI_Isend(b, n, MPI_BYTE, 1, 9, MPI_COMM_WORLD, &req) == MPI_SUCCESS);
  } else if (rank == 1) {
    CHECK(MPI_Recv(b, n, MPI_BYTE, 0, 9, MPI_COMM_WORLD, MPI_STATUS_IGNORE) == MPI_SUCCESS);
    CHECK(same(b, n, 0, 9, 1));
  }
  CHECK(MPI_Win_fence(0, win) == MPI_SUCCESS);
  if (rank == 0) CHECK(MPI_Wait(&req, MPI_STATUS_IGNORE) == MPI_SUCCESS);
  CHECK(MPI_Win_fence(MPI_MODE_NOSUCCEED, win) == MPI_SUCCESS);
  free(b);
  if (rank == 0) printf("a send completes while its sender waits in MPI_Win_fence\n");
}

/* Passive target: rank 0's lock + get + unlock epochs on rank 1 complete while rank 1 makes no
 * MPI call (it polls its own window memory until rank 0 puts a flag there), and each epoch's
 * unlock sees its get complete by polling the copy: a get of 8 bytes completes in microseconds,
 * so few of the unlocks that had to wait may last until the wait's liveness tick (every few
 * milliseconds; a loaded machine may delay some). When completion was seen only at that tick,
 * every one of them did. (Emulated copies that complete before the unlock leave nothing to
 * check: no unlock waits.) */
static void gets_complete_by_polling(void) {
  if (size < 2) return;
  long long (*counter)(const char*) =
      (long long (*)(const char*))dlsym(RTLD_DEFAULT, "gpustripe_mpi_test_win_counter");
  CHECK(counter);
  const int epochs = 32;
  buf_t mem = buf_new(&hk, rank % ndev, 64), got = buf_new(&hk, rank % ndev, 8);
  fill(mem.h, 56, rank, 21, 0);
  memset(mem.h + 56, 0, 8);
  buf_push(&hk, &mem);
  MPI_Win win;
  CHECK(MPI_Win_create(mem.p, 64, 1, MPI_INFO_NULL, MPI_COMM_WORLD, &win) == MPI_SUCCESS);
  if (rank == 0) {
    const long long waits0 = counter("completion_waits"), ticked0 = counter("completion_ticked");
    CHECK(waits0 >= 0 && ticked0 >= 0);
    unsigned char want[56];
    fill(want, 56, 1, 21, 0);
    for (int i = 0; i < epochs; ++i) {
      const int at = (i % 7) * 8;
      CHECK(MPI_Win_lock(MPI_LOCK_SHARED, 1, 0, win) == MPI_SUCCESS);
      CHECK(MPI_Get(got.p, 8, MPI_BYTE, 1, at, 8, MPI_BYTE, win) == MPI_SUCCESS);
      CHECK(MPI_Win_unlock(1, win) == MPI_SUCCESS);
      buf_pull(&hk, &got);
      CHECK(memcmp(got.h, want + at, 8) == 0);
    }
    const long long waits = counter("completion_waits") - waits0, ticked = counter("completion_ticked") - ticked0;
    printf("get epochs with the target outside MPI: %lld of %d unlocks waited, %lld of them until the liveness "
           "tick\n", waits, epochs, ticked);
    CHECK(waits == 0 || 4 * ticked < 3 * waits);
    memset(got.h, 0xA5, 8);
    buf_push(&hk, &got);
    CHECK(MPI_Win_lock(MPI_LOCK_EXCLUSIVE, 1, 0, win) == MPI_SUCCESS);
    CHECK(MPI_Put(got.p, 8, MPI_BYTE, 1, 56, 8, MPI_BYTE, win) == MPI_SUCCESS);
    CHECK(MPI_Win_unlock(1, win) == MPI_SUCCESS);
  } else if (rank == 1) {
    /* No MPI call until the flag is there; bounded, so a lost flag fails instead of hanging. */
    const double give_up = now() + 120;
    for (;;) {
      buf_pull(&hk, &mem);
      if (mem.h[56] == 0xA5) break;
      CHECK(now() < give_up);
    }
  }
  CHECK(MPI_Win_free(&win) == MPI_SUCCESS);
  buf_free(&hk, &mem);
  buf_free(&hk, &got);
  if (rank == 0) printf("gets complete at unlock by polling, the target outside MPI\n");
}

/* Who runs a put into another rank's device memory on another GPU: the origin's GPU, pushing
 * through a mapping of the target's memory in its own context, for the direct path alone on
 * memory with legacy (plain) IPC handles; the target's GPU for other kinds of memory and for
 * puts the plan splits across paths (GPUSTRIPE_PLAN forces that above a few KB). Counted by the
 * interposer; every byte checked. */
static void puts_pushed_by_origin(const char* alloc) {
  if (size < 2) return;
  long long (*counter)(const char*) =
      (long long (*)(const char*))dlsym(RTLD_DEFAULT, "gpustripe_mpi_test_win_counter");
  CHECK(counter);
  const size_t L = 256 * 1024;
  const int next = (rank + 1) % size, prev = (rank + size - 1) % size;
  buf_t mem = buf_new(&hk, rank % ndev, L), src = buf_new(&hk, rank % ndev, L);
  memset(mem.h, 0, L);
  buf_push(&hk, &mem);
  MPI_Win win;
  CHECK(MPI_Win_create(mem.p, (MPI_Aint)L, 1, MPI_INFO_NULL, MPI_COMM_WORLD, &win) == MPI_SUCCESS);
  const long long origin0 = counter("puts_from_origin"), target0 = counter("puts_from_target");
  CHECK(origin0 >= 0 && target0 >= 0);
  const size_t sizes[] = {8, 4096, 65536, 128 * 1024};
  const int nput = (int)(sizeof sizes / sizeof sizes[0]);
  size_t at = 0;
  for (int i = 0; i < nput; ++i) {
    fill(src.h + at, sizes[i], rank, 41, i);
    at += sizes[i];
  }
  buf_push(&hk, &src);
  CHECK(MPI_Win_lock(MPI_LOCK_SHARED, next, 0, win) == MPI_SUCCESS);
  at = 0;
  for (int i = 0; i < nput; ++i) {
    CHECK(MPI_Put(src.p + at, (int)sizes[i], MPI_BYTE, next, (MPI_Aint)at, (int)sizes[i], MPI_BYTE, win) ==
          MPI_SUCCESS);
    at += sizes[i];
  }
  CHECK(MPI_Win_unlock(next, win) == MPI_SUCCESS);
  const long long from_origin = counter("puts_from_origin") - origin0, from_target = counter("puts_from_target") - target0;
  MPI_Barrier(MPI_COMM_WORLD);
  buf_pull(&hk, &mem);
  at = 0;
  for (int i = 0; i < nput; ++i) {
    CHECK(same(mem.h + at, sizes[i], prev, 41, i));
    at += sizes[i];
  }
  const int two_gpus = rank % ndev != next % ndev;
  const char* plan = getenv("GPUSTRIPE_PLAN");
  const int split = plan && *plan;
  const int legacy = !alloc || !*alloc || !strcmp(alloc, "plain");
  if (rank == 0)
    printf("puts to a rank on %s GPU (%s memory%s): %lld pushed by the origin's GPU, %lld run by the target's\n",
           two_gpus ? "another" : "the same", legacy ? "plain" : alloc, split ? ", every copy split" : "", from_origin,
           from_target);
  CHECK(from_origin + from_target == nput);
  if (two_gpus && legacy && !split) CHECK(from_origin == nput);
  if (!two_gpus || !legacy) CHECK(from_origin == 0);
  if (split) CHECK(from_target > 0); /* the larger ones at least (the smallest may stay whole) */
  CHECK(MPI_Win_free(&win) == MPI_SUCCESS);
  buf_free(&hk, &mem);
  buf_free(&hk, &src);
}

/* The host's work on an operation's path: puts and gets whose origin lies in the rank's own
 * window memory take no pointer query (an origin elsewhere one each), and a window of puts closed
 * by one flush records one event per stream it used (at most two: the origin's GPU and the
 * target's), not one per put. Each put and get with the same count and type at both ends asks the
 * MPI about the datatype once, and the route of puts into another GPU's memory (the origin GPU's
 * stream and mapping, the direct-alone size) is found at the first put, not per put. Counted by
 * the interposer; every byte checked. The window holds four
 * areas of K: this rank's data, where the previous rank's puts from its window memory land, where
 * its puts from a separate buffer land, and where this rank's gets from the next rank land. */
static void host_work_per_operation(void) {
  if (size < 2) return;
  long long (*counter)(const char*) =
      (long long (*)(const char*))dlsym(RTLD_DEFAULT, "gpustripe_mpi_test_win_counter");
  CHECK(counter);
  enum { nop = 16, n = 64, K = nop * n };
  const int next = (rank + 1) % size, prev = (rank + size - 1) % size;
  buf_t mem = buf_new(&hk, rank % ndev, 4 * K), src = buf_new(&hk, rank % ndev, K);
  fill(mem.h, K, rank, 51, 0);
  memset(mem.h + K, 0, 3 * K);
  fill(src.h, K, rank, 52, 0);
  buf_push(&hk, &mem);
  buf_push(&hk, &src);
  MPI_Win win;
  CHECK(MPI_Win_create(mem.p, 4 * K, 1, MPI_INFO_NULL, MPI_COMM_WORLD, &win) == MPI_SUCCESS);
  const long long q0 = counter("origin_queries"), m0 = counter("completion_marks");
  const long long t0 = counter("type_queries"), r0 = counter("route_lookups");
  CHECK(q0 >= 0 && m0 >= 0 && t0 >= 0 && r0 >= 0);
  CHECK(MPI_Win_lock(MPI_LOCK_SHARED, next, 0, win) == MPI_SUCCESS);
  for (int i = 0; i < nop; ++i)
    CHECK(MPI_Put(mem.p + i * n, n, MPI_BYTE, next, K + i * n, n, MPI_BYTE, win) == MPI_SUCCESS);
  CHECK(MPI_Win_flush(next, win) == MPI_SUCCESS);
  const long long q1 = counter("origin_queries"), m1 = counter("completion_marks");
  const long long t1 = counter("type_queries"), r1 = counter("route_lookups");
  for (int i = 0; i < nop; ++i)
    CHECK(MPI_Put(src.p + i * n, n, MPI_BYTE, next, 2 * K + i * n, n, MPI_BYTE, win) == MPI_SUCCESS);
  CHECK(MPI_Win_flush(next, win) == MPI_SUCCESS);
  const long long q2 = counter("origin_queries");
  for (int i = 0; i < nop; ++i)
    CHECK(MPI_Get(mem.p + 3 * K + i * n, n, MPI_BYTE, next, i * n, n, MPI_BYTE, win) == MPI_SUCCESS);
  CHECK(MPI_Win_unlock(next, win) == MPI_SUCCESS);
  const long long q3 = counter("origin_queries");
  const long long t3 = counter("type_queries"), r3 = counter("route_lookups");
  const int two_gpus = rank % ndev != next % ndev;
  if (rank == 0)
    printf("host work: %d puts from window memory took %lld pointer queries and %lld completion events; "
           "%d from another buffer %lld queries; %d gets into window memory %lld queries\n",
           nop, q1 - q0, m1 - m0, nop, q2 - q1, nop, q3 - q2);
  if (rank == 0)
    printf("host work: %d puts and gets asked the MPI about %lld datatypes; the puts' route to a rank on %s GPU was "
           "found %lld times (%lld in the first %d puts)\n",
           3 * nop, t3 - t0, two_gpus ? "another" : "the same", r3 - r0, r1 - r0, nop);
  CHECK(t3 - t0 == 3 * nop);
  CHECK(r1 - r0 == (two_gpus ? 1 : 0) && r3 == r1);
  CHECK(q1 - q0 == 0 && q3 - q2 == 0);
  CHECK(q2 - q1 == nop);
  CHECK(m1 - m0 >= 1 && m1 - m0 <= 2);
  MPI_Barrier(MPI_COMM_WORLD);
  buf_pull(&hk, &mem);
  CHECK(same(mem.h, K, rank, 51, 0));
  CHECK(same(mem.h + K, K, prev, 51, 0));
  CHECK(same(mem.h + 2 * K, K, prev, 52, 0));
  CHECK(same(mem.h + 3 * K, K, next, 51, 0));
  CHECK(MPI_Win_free(&win) == MPI_SUCCESS);
  buf_free(&hk, &mem);
  buf_free(&hk, &src);
}

/* Large puts and gets (where the model splits a copy direct + host staging: puts then run the
 * engine's plan from a stream of the target's GPU, gets the mover's copies): every rank puts into
 * the next rank's window and gets from the previous one, at random offsets, every byte checked. */
static void large_puts_and_gets(void) {
  const size_t L = 32u << 20;
  buf_t mem = buf_new(&hk, rank % ndev, L), src = buf_new(&hk, rank % ndev, L), dst = buf_new(&hk, rank % ndev, L);
  memset(mem.h, 0, L);
  buf_push(&hk, &mem);
  MPI_Win win;
  CHECK(MPI_Win_create(mem.p, (MPI_Aint)L, 1, MPI_INFO_NULL, MPI_COMM_WORLD, &win) == MPI_SUCCESS);
  const int next = (rank + 1) % size, prev = (rank + size - 1) % size;
  for (int round = 0; round < 2; ++round) {
    /* Offsets from a seed every rank shares: each knows what its origin wrote into it. */
    size_t off[8];
    for (int r = 0; r < size; ++r) {
      rng_state = 0xB16B00B5ull ^ ((uint64_t)round << 24) ^ (uint64_t)r;
      rnd();
      off[r] = rnd() % (L / 4);
    }
    const size_t n_mine = L - off[rank], n_prev = L - off[prev];
    fill(src.h, n_mine, rank, 31, round);
    buf_push(&hk, &src);
    CHECK(MPI_Win_fence(0, win) == MPI_SUCCESS);
    CHECK(MPI_Put(src.p, (int)n_mine, MPI_BYTE, next, (MPI_Aint)off[rank], (int)n_mine, MPI_BYTE, win) == MPI_SUCCESS);
    CHECK(MPI_Win_fence(MPI_MODE_NOSUCCEED, win) == MPI_SUCCESS);
    buf_pull(&hk, &mem);
    CHECK(same(mem.h + off[prev], n_prev, prev, 31, round));
    /* Get back what this rank put, from the next rank's window. */
    CHECK(MPI_Win_lock(MPI_LOCK_SHARED, next, 0, win) == MPI_SUCCESS);
    CHECK(MPI_Get(dst.p, (int)n_mine, MPI_BYTE, next, (MPI_Aint)off[rank], (int)n_mine, MPI_BYTE, win) == MPI_SUCCESS);
    CHECK(MPI_Win_unlock(next, win) == MPI_SUCCESS);
    buf_pull(&hk, &dst);
    CHECK(same(dst.h, n_mine, rank, 31, round));
  }
  CHECK(MPI_Win_free(&win) == MPI_SUCCESS);
  buf_free(&hk, &mem);
  buf_free(&hk, &src);
  buf_free(&hk, &dst);
  if (rank == 0) printf("large puts and gets: every byte checked\n");
}

static int err_class(int rc) {
  int cls = -1;
  MPI_Error_class(rc, &cls);
  return cls;
}

/* Errors: nothing written, the window still usable. */
static void errors(MPI_Win win, buf_t* mem, unsigned char** model) {
  buf_t b = buf_new(&hk, rank % ndev, 64);
  memset(b.h, 0xAB, 64);
  buf_push(&hk, &b);
  int t = (rank + 1) % size;
  CHECK(MPI_Win_lock(MPI_LOCK_EXCLUSIVE, t, 0, win) == MPI_SUCCESS);
  CHECK(err_class(MPI_Put(b.p, 8, MPI_BYTE, t, (MPI_Aint)W - 4, 8, MPI_BYTE, win)) == MPI_ERR_RMA_RANGE);
  CHECK(err_class(MPI_Put(b.p, 8, MPI_BYTE, t, -1, 8, MPI_BYTE, win)) == MPI_ERR_RMA_RANGE);
  CHECK(err_class(MPI_Get(b.p, 8, MPI_BYTE, t, (MPI_Aint)W, 8, MPI_BYTE, win)) == MPI_ERR_RMA_RANGE);
  CHECK(err_class(MPI_Accumulate(b.p, 2, MPI_INT, t, (MPI_Aint)W - 4, 2, MPI_INT, MPI_SUM, win)) ==
        MPI_ERR_RMA_RANGE);
  /* Free while the lock epoch is open: refused, the window stays. */
  MPI_Win w2 = win;
  CHECK(err_class(MPI_Win_free(&w2)) == MPI_ERR_RMA_SYNC && w2 == win);
  CHECK(MPI_Win_unlock(t, win) == MPI_SUCCESS);
  /* Outside any epoch. */
  CHECK(err_class(MPI_Put(b.p, 8, MPI_BYTE, t, 0, 8, MPI_BYTE, win)) == MPI_ERR_RMA_SYNC);
  CHECK(err_class(MPI_Win_unlock(t, win)) == MPI_ERR_RMA_SYNC);
  MPI_Barrier(MPI_COMM_WORLD);
  check_own(mem, model, "after refused operations");
  buf_free(&hk, &b);
  if (rank == 0) printf("errors: out of range, outside an epoch and free inside one refused, nothing written\n");
}

/* Accumulates of every predefined op from every rank into rank 0 at once. */
enum { O_SUM, O_PROD, O_MAX, O_MIN, O_LAND, O_LOR, O_LXOR, O_BAND, O_BOR, O_BXOR, O_REPLACE, O_NOOP, NOPS };
static MPI_Op mpi_op(int o) {
  MPI_Op ops[] = {MPI_SUM, MPI_PROD, MPI_MAX, MPI_MIN, MPI_LAND, MPI_LOR,
                  MPI_LXOR, MPI_BAND, MPI_BOR, MPI_BXOR, MPI_REPLACE, MPI_NO_OP};
  return ops[o];
}
#define K 24
#define ACC_TYPE(T, NAME, MPIT, ISINT)                                                                    \
  static int acc_##NAME(MPI_Win win, buf_t* mem, int o) {                                                 \
    if (!(ISINT) && o >= O_LAND && o <= O_BXOR) return 0;                                              \
    T init[K], v[K], e[K];                                                                              \
    for (int i = 0; i < K; ++i) init[i] = (T)(i % 3 + 1);                                               \
    if (rank == 0) {                                                                                    \
      memcpy(mem->h, init, sizeof init);                                                                \
      CHECK(hk.copy(mem->p, mem->h, sizeof init) == 0);                                                 \
    }                                                                                                   \
    MPI_Barrier(MPI_COMM_WORLD);                                                                        \
    for (int i = 0; i < K; ++i) v[i] = (T)((rank * 5 + i) % 4);                                         \
    CHECK(MPI_Win_lock(MPI_LOCK_SHARED, 0, 0, win) == MPI_SUCCESS);                                     \
    CHECK(MPI_Accumulate(v, K, MPIT, 0, 0, K, MPIT, mpi_op(o), win) == MPI_SUCCESS);                   \
    CHECK(MPI_Win_unlock(0, win) == MPI_SUCCESS);                                                       \
    MPI_Barrier(MPI_COMM_WORLD);                                                                        \
    if (rank == 0) {                                                                                    \
      CHECK(hk.copy(mem->h, mem->p, sizeof init) == 0);                                                 \
      T got[K];                                                                                         \
      memcpy(got, mem->h, sizeof got);                                                                  \
      for (int i = 0; i < K; ++i) {                                                                     \
        T a = init[i];                                                                                  \
        int any_replace = 0;                                                                            \
        for (int r = 0; r < size; ++r) {                                                                \
          T b = (T)((r * 5 + i) % 4);                                                                   \
          switch (o) {                                                                                  \
            case O_SUM: a = (T)(a + b); break;                                                          \
            case O_PROD: a = (T)(a * b); break;                                                         \
            case O_MAX: a = a > b ? a : b; break;                                                       \
            case O_MIN: a = a < b ? a : b; break;                                                       \
            case O_LAND: a = (T)(a && b); break;                                                        \
            case O_LOR: a = (T)(a || b); break;                                                         \
            case O_LXOR: a = (T)(!a != !b); break;                                                      \
            case O_BAND: a = (T)ACC_BITS(ISINT, a, &, b); break;                                        \
            case O_BOR: a = (T)ACC_BITS(ISINT, a, |, b); break;                                         \
            case O_BXOR: a = (T)ACC_BITS(ISINT, a, ^, b); break;                                        \
            case O_REPLACE: any_replace |= got[i] == b; break;                                          \
            default: break;                                                                             \
          }                                                                                             \
        }                                                                                               \
        e[i] = a;                                                                                       \
        if (o == O_REPLACE ? !any_replace : got[i] != e[i]) {                                           \
          fprintf(stderr, "accumulate %s op %d element %d: got %g, expected %g\n", #NAME, o, i,          \
                  (double)got[i], (double)e[i]);                                                        \
          CHECK(0);                                                                                     \
        }                                                                                               \
      }                                                                                                 \
    }                                                                                                   \
    MPI_Barrier(MPI_COMM_WORLD);                                                                        \
    return 1;                                                                                           \
  }
#define ACC_BITS(ISINT, a, OP, b) ((long long)(a) OP (long long)(b))
ACC_TYPE(int, int, MPI_INT, 1)
ACC_TYPE(unsigned, unsigned, MPI_UNSIGNED, 1)
ACC_TYPE(long, long, MPI_LONG, 1)
ACC_TYPE(long long, long_long, MPI_LONG_LONG, 1)
ACC_TYPE(unsigned long long, unsigned_long_long, MPI_UNSIGNED_LONG_LONG, 1)
ACC_TYPE(short, short, MPI_SHORT, 1)
ACC_TYPE(signed char, signed_char, MPI_SIGNED_CHAR, 1)
ACC_TYPE(float, float, MPI_FLOAT, 0)
ACC_TYPE(double, double, MPI_DOUBLE, 0)

static void accumulates(MPI_Win win, buf_t* mem) {
  int cases = 0;
  for (int o = 0; o < NOPS; ++o) {
    cases += acc_int(win, mem, o) + acc_unsigned(win, mem, o) + acc_long(win, mem, o) + acc_long_long(win, mem, o);
    cases += acc_unsigned_long_long(win, mem, o) + acc_short(win, mem, o) + acc_signed_char(win, mem, o);
    cases += acc_float(win, mem, o) + acc_double(win, mem, o);
  }
  /* MAXLOC on (value, index) pairs. */
  int init[2 * K], v[2 * K];
  for (int i = 0; i < K; ++i) {
    init[2 * i] = 2;
    init[2 * i + 1] = -1;
    v[2 * i] = (rank * 3 + i) % 5;
    v[2 * i + 1] = rank;
  }
  if (rank == 0) CHECK(hk.copy(mem->p, init, sizeof init) == 0);
  MPI_Barrier(MPI_COMM_WORLD);
  CHECK(MPI_Win_lock(MPI_LOCK_SHARED, 0, 0, win) == MPI_SUCCESS);
  CHECK(MPI_Accumulate(v, K, MPI_2INT, 0, 0, K, MPI_2INT, MPI_MAXLOC, win) == MPI_SUCCESS);
  CHECK(MPI_Win_unlock(0, win) == MPI_SUCCESS);
  MPI_Barrier(MPI_COMM_WORLD);
  if (rank == 0) {
    int got[2 * K];
    CHECK(hk.copy(got, mem->p, sizeof got) == 0);
    for (int i = 0; i < K; ++i) {
      int best = 2, at = -1;
      for (int r = 0; r < size; ++r) {
        int x = (r * 3 + i) % 5;
        if (x > best || (x == best && at >= 0 && r < at)) best = x, at = r;
      }
      CHECK(got[2 * i] == best && got[2 * i + 1] == at);
    }
  }
  MPI_Barrier(MPI_COMM_WORLD);
  if (rank == 0) printf("accumulates: %d op x type cases and MAXLOC from %d ranks at once correct\n", cases + 1, size);
}

/* Fetch-and-add on one counter from every rank at once: every fetched value distinct. */
static void atomics(MPI_Win win, buf_t* mem) {
  enum { R = 40 };
  long long zero = 0, one = 1, got[R];
  int last = size - 1;
  if (rank == last) CHECK(hk.copy(mem->p, &zero, sizeof zero) == 0);
  MPI_Barrier(MPI_COMM_WORLD);
  CHECK(MPI_Win_lock_all(0, win) == MPI_SUCCESS);
  for (int i = 0; i < R; ++i)
    CHECK(MPI_Fetch_and_op(&one, &got[i], MPI_LONG_LONG, last, 0, MPI_SUM, win) == MPI_SUCCESS);
  long long now_ = -1;
  CHECK(MPI_Fetch_and_op(NULL, &now_, MPI_LONG_LONG, last, 0, MPI_NO_OP, win) == MPI_SUCCESS);
  CHECK(now_ >= R && now_ <= (long long)R * size);
  CHECK(MPI_Win_unlock_all(win) == MPI_SUCCESS);
  long long* all = malloc(sizeof(long long) * R * size);
  MPI_Allgather(got, R, MPI_LONG_LONG, all, R, MPI_LONG_LONG, MPI_COMM_WORLD);
  char* seen = calloc((size_t)R * size, 1);
  for (int i = 0; i < R * size; ++i) {
    CHECK(all[i] >= 0 && all[i] < (long long)R * size && !seen[all[i]]);
    seen[all[i]] = 1;
  }
  free(all);
  free(seen);
  /* Compare-and-swap: one rank claims the slot. */
  int minus1 = -1, mine = rank, old = 0;
  if (rank == last) CHECK(hk.copy((char*)mem->p + 64, &minus1, sizeof minus1) == 0);
  MPI_Barrier(MPI_COMM_WORLD);
  CHECK(MPI_Win_lock(MPI_LOCK_SHARED, last, 0, win) == MPI_SUCCESS);
  CHECK(MPI_Compare_and_swap(&mine, &minus1, &old, MPI_INT, last, 64, win) == MPI_SUCCESS);
  CHECK(MPI_Win_unlock(last, win) == MPI_SUCCESS);
  int won = old == -1, winners = 0;
  MPI_Allreduce(&won, &winners, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  CHECK(winners == 1);
  int slot = -2;
  CHECK(MPI_Win_lock(MPI_LOCK_SHARED, last, 0, win) == MPI_SUCCESS);
  CHECK(MPI_Get_accumulate(NULL, 0, MPI_INT, &slot, 1, MPI_INT, last, 64, 1, MPI_INT, MPI_NO_OP, win) ==
        MPI_SUCCESS);
  CHECK(MPI_Win_unlock(last, win) == MPI_SUCCESS);
  int winner = won ? rank : -1, w_all = -1;
  MPI_Allreduce(&winner, &w_all, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  CHECK(slot == w_all);
  MPI_Barrier(MPI_COMM_WORLD);
  /* Fetch-and-add on 4 neighbouring 1-byte counters (one 4-byte word) from every rank at once:
   * each counter's fetched values distinct, none lost. */
  unsigned char zeros[4] = {0}, b_one = 1, b_got[R];
  if (rank == last) CHECK(hk.copy((char*)mem->p + 128, zeros, sizeof zeros) == 0);
  MPI_Barrier(MPI_COMM_WORLD);
  CHECK(MPI_Win_lock_all(0, win) == MPI_SUCCESS);
  for (int i = 0; i < R; ++i)
    CHECK(MPI_Fetch_and_op(&b_one, &b_got[i], MPI_UNSIGNED_CHAR, last, 128 + (i + rank) % 4, MPI_SUM, win) ==
          MPI_SUCCESS);
  CHECK(MPI_Win_unlock_all(win) == MPI_SUCCESS);
  unsigned char* b_all = malloc((size_t)R * size);
  MPI_Allgather(b_got, R, MPI_UNSIGNED_CHAR, b_all, R, MPI_UNSIGNED_CHAR, MPI_COMM_WORLD);
  char* b_seen = calloc((size_t)4 * 256, 1);
  for (int r = 0; r < size; ++r)
    for (int i = 0; i < R; ++i) {
      const int c = (i + r) % 4, v = b_all[r * R + i];
      CHECK(v < R * size / 4 && !b_seen[c * 256 + v]);
      b_seen[c * 256 + v] = 1;
    }
  unsigned char counters[4];
  MPI_Barrier(MPI_COMM_WORLD);
  if (rank == last) {
    CHECK(hk.copy(counters, (char*)mem->p + 128, sizeof counters) == 0);
    for (int c = 0; c < 4; ++c) CHECK(counters[c] == R * size / 4);
  }
  free(b_all);
  free(b_seen);
  /* Sums of double complex numbers (16-byte elements: the locked way) from every rank at once. */
  double z_init[2] = {1.0, 2.0}, z_mine[2] = {(double)rank, 1.0}, z_got[2];
  if (rank == last) CHECK(hk.copy((char*)mem->p + 192, z_init, sizeof z_init) == 0);
  MPI_Barrier(MPI_COMM_WORLD);
  CHECK(MPI_Win_lock(MPI_LOCK_SHARED, last, 0, win) == MPI_SUCCESS);
  CHECK(MPI_Accumulate(z_mine, 1, MPI_C_DOUBLE_COMPLEX, last, 192, 1, MPI_C_DOUBLE_COMPLEX, MPI_SUM, win) ==
        MPI_SUCCESS);
  CHECK(MPI_Win_unlock(last, win) == MPI_SUCCESS);
  MPI_Barrier(MPI_COMM_WORLD);
  if (rank == last) {
    CHECK(hk.copy(z_got, (char*)mem->p + 192, sizeof z_got) == 0);
    CHECK(z_got[0] == 1.0 + size * (size - 1) / 2 && z_got[1] == 2.0 + size);
  }
  MPI_Barrier(MPI_COMM_WORLD);
  if (rank == 0)
    printf("atomics: %d fetch-and-adds distinct (8-byte and 1-byte counters), one compare-and-swap winner, "
           "double complex sums\n", R * size);
}

static void attributes(MPI_Win win, void* base, MPI_Aint bytes, int unit, int flavor) {
  void* b = NULL;
  MPI_Aint* s = NULL;
  int *u = NULL, *f = NULL, flag = 0;
  CHECK(MPI_Win_get_attr(win, MPI_WIN_BASE, &b, &flag) == MPI_SUCCESS && flag && b == base);
  CHECK(MPI_Win_get_attr(win, MPI_WIN_SIZE, &s, &flag) == MPI_SUCCESS && flag && *s == bytes);
  CHECK(MPI_Win_get_attr(win, MPI_WIN_DISP_UNIT, &u, &flag) == MPI_SUCCESS && flag && *u == unit);
  CHECK(MPI_Win_get_attr(win, MPI_WIN_CREATE_FLAVOR, &f, &flag) == MPI_SUCCESS && flag && *f == flavor);
}

/* MPI_Win_allocate of device memory (int elements: displacement unit 4), then a host one (the MPI's). */
static void allocated(void) {
  MPI_Info info;
  MPI_Info_create(&info);
  MPI_Info_set(info, "gpustripe_device", "true");
  const int n = 1000;
  int* base = NULL;
  MPI_Win win;
  CHECK(MPI_Win_allocate((MPI_Aint)n * 4, 4, info, MPI_COMM_WORLD, &base, &win) == MPI_SUCCESS);
  MPI_Info_free(&info);
  attributes(win, base, (MPI_Aint)n * 4, 4, MPI_WIN_FLAVOR_ALLOCATE);
  int vals[10];
  for (int i = 0; i < 10; ++i) vals[i] = rank * 100 + i;
  int t = (rank + 1) % size;
  CHECK(MPI_Win_fence(0, win) == MPI_SUCCESS);
  CHECK(MPI_Put(vals, 10, MPI_INT, t, 500 + rank, 10, MPI_INT, win) == MPI_SUCCESS);
  CHECK(MPI_Win_fence(MPI_MODE_NOSUCCEED, win) == MPI_SUCCESS);
  int got[10];
  CHECK(hk.copy(got, base + 500 + (rank + size - 1) % size, sizeof got) == 0);
  for (int i = 0; i < 10; ++i) CHECK(got[i] == ((rank + size - 1) % size) * 100 + i);
  CHECK(MPI_Win_free(&win) == MPI_SUCCESS && win == MPI_WIN_NULL);

  /* Without the key: host memory, the MPI's window. */
  int* hbase = NULL;
  CHECK(MPI_Win_allocate(64, 4, MPI_INFO_NULL, MPI_COMM_WORLD, &hbase, &win) == MPI_SUCCESS);
  hbase[0] = -1;
  CHECK(MPI_Win_fence(0, win) == MPI_SUCCESS);
  CHECK(MPI_Put(&rank, 1, MPI_INT, t, 0, 1, MPI_INT, win) == MPI_SUCCESS);
  CHECK(MPI_Win_fence(0, win) == MPI_SUCCESS);
  CHECK(hbase[0] == (rank + size - 1) % size);
  CHECK(MPI_Win_free(&win) == MPI_SUCCESS);
  if (rank == 0) printf("MPI_Win_allocate: device memory with the info key, host memory (the MPI's) without\n");
}

/* Dynamic window: device memory attached, addresses exchanged, puts into it; out of range after detach. */
static void dynamic(void) {
  MPI_Info info;
  MPI_Info_create(&info);
  MPI_Info_set(info, "gpustripe_device", "true");
  MPI_Win win;
  CHECK(MPI_Win_create_dynamic(info, MPI_COMM_WORLD, &win) == MPI_SUCCESS);
  MPI_Info_free(&info);
  MPI_Win_set_errhandler(win, MPI_ERRORS_RETURN);
  for (int rep = 0; rep < 3; ++rep) {
    buf_t mem = buf_new(&hk, rank % ndev, 4096 + rep * 1000);
    memset(mem.h, 0, mem.n);
    buf_push(&hk, &mem);
    char alloc[16];
    if (test_hook("alloc", alloc, sizeof alloc) && !strcmp(alloc, "pool")) {
      /* Pool memory: refused (its imports cannot outlive a detach the others do not see). */
      CHECK(MPI_Win_attach(win, mem.p, (MPI_Aint)mem.n) != MPI_SUCCESS);
      buf_free(&hk, &mem);
      break;
    }
    CHECK(MPI_Win_attach(win, mem.p, (MPI_Aint)mem.n) == MPI_SUCCESS);
    MPI_Aint mine, *addr = malloc(sizeof(MPI_Aint) * size);
    MPI_Get_address(mem.p, &mine);
    MPI_Allgather(&mine, 1, MPI_AINT, addr, 1, MPI_AINT, MPI_COMM_WORLD);
    int t = (rank + 1) % size, from = (rank + size - 1) % size;
    unsigned char msg[100];
    fill(msg, sizeof msg, rank, 7, rep);
    CHECK(MPI_Win_lock(MPI_LOCK_EXCLUSIVE, t, 0, win) == MPI_SUCCESS);
    CHECK(MPI_Put(msg, sizeof msg, MPI_BYTE, t, addr[t] + 1000, sizeof msg, MPI_BYTE, win) == MPI_SUCCESS);
    CHECK(err_class(MPI_Put(msg, sizeof msg, MPI_BYTE, t, addr[t] + (MPI_Aint)mem.n - 10, sizeof msg, MPI_BYTE,
                            win)) == MPI_ERR_RMA_RANGE);
    CHECK(MPI_Win_unlock(t, win) == MPI_SUCCESS);
    MPI_Barrier(MPI_COMM_WORLD);
    buf_pull(&hk, &mem);
    CHECK(same(mem.h + 1000, sizeof msg, from, 7, rep));
    /* Back into this rank's attached memory: an origin there takes no pointer query. */
    long long (*counter)(const char*) =
        (long long (*)(const char*))dlsym(RTLD_DEFAULT, "gpustripe_mpi_test_win_counter");
    CHECK(counter);
    const long long q0 = counter("origin_queries");
    CHECK(MPI_Win_lock(MPI_LOCK_SHARED, t, 0, win) == MPI_SUCCESS);
    CHECK(MPI_Get(mem.p + 2000, sizeof msg, MPI_BYTE, t, addr[t] + 1000, sizeof msg, MPI_BYTE, win) == MPI_SUCCESS);
    CHECK(MPI_Win_unlock(t, win) == MPI_SUCCESS);
    CHECK(q0 >= 0 && counter("origin_queries") == q0);
    buf_pull(&hk, &mem);
    CHECK(same(mem.h + 2000, sizeof msg, rank, 7, rep));
    MPI_Barrier(MPI_COMM_WORLD);
    CHECK(MPI_Win_detach(win, mem.p) == MPI_SUCCESS);
    MPI_Barrier(MPI_COMM_WORLD);
    CHECK(MPI_Win_lock(MPI_LOCK_SHARED, t, 0, win) == MPI_SUCCESS);
    CHECK(err_class(MPI_Put(msg, 1, MPI_BYTE, t, addr[t], 1, MPI_BYTE, win)) == MPI_ERR_RMA_RANGE);
    CHECK(MPI_Win_unlock(t, win) == MPI_SUCCESS);
    MPI_Barrier(MPI_COMM_WORLD);
    free(addr);
    buf_free(&hk, &mem); /* freed and allocated again, maybe at the same address: mapped anew */
  }
  CHECK(MPI_Win_free(&win) == MPI_SUCCESS);
  if (rank == 0) printf("dynamic windows: attach, puts, gets into attached memory, out of range, detach, reattach checked\n");
}

/* Whether the MPI itself (PMPI, past the interposer) makes a window over host memory on every rank.
 * Open MPI cannot on a node without a one-sided transport for it: osc rdma without a single-copy
 * mechanism (CMA refused), osc pt2pt and ucx turned off (Debian's openmpi-mca-params.conf). */
static int mpi_makes_host_windows(void) {
  int mem[4], ok = 0, all = 0;
  MPI_Comm c;
  MPI_Win win;
  CHECK(PMPI_Comm_dup(MPI_COMM_WORLD, &c) == MPI_SUCCESS);
  PMPI_Comm_set_errhandler(c, MPI_ERRORS_RETURN);
  ok = PMPI_Win_create(mem, sizeof mem, sizeof(int), MPI_INFO_NULL, c, &win) == MPI_SUCCESS;
  if (ok) CHECK(PMPI_Win_free(&win) == MPI_SUCCESS);
  CHECK(PMPI_Allreduce(&ok, &all, 1, MPI_INT, MPI_MIN, c) == MPI_SUCCESS);
  PMPI_Comm_free(&c);
  return all;
}

/* A window over host memory is the MPI's: it works where the MPI's own does, and where the MPI's
 * own fails, its error comes back through the interposer. */
static void host_window(void) {
  int mem[4] = {-1, -1, -1, -1};
  MPI_Win win;
  if (!mpi_makes_host_windows()) {
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    CHECK(MPI_Win_create(mem, sizeof mem, sizeof(int), MPI_INFO_NULL, MPI_COMM_WORLD, &win) != MPI_SUCCESS);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_ARE_FATAL);
    if (rank == 0) printf("host window: the MPI makes none over host memory on this node; its error came back\n");
    return;
  }
  CHECK(MPI_Win_create(mem, sizeof mem, sizeof(int), MPI_INFO_NULL, MPI_COMM_WORLD, &win) == MPI_SUCCESS);
  CHECK(MPI_Win_fence(0, win) == MPI_SUCCESS);
  CHECK(MPI_Put(&rank, 1, MPI_INT, (rank + 1) % size, 2, 1, MPI_INT, win) == MPI_SUCCESS);
  CHECK(MPI_Win_fence(0, win) == MPI_SUCCESS);
  CHECK(mem[2] == (rank + size - 1) % size && mem[0] == -1);
  CHECK(MPI_Win_free(&win) == MPI_SUCCESS);
}

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  hk = hooks();
  ndev = hk.device_count();
  CHECK(ndev > 0 && size <= 8);
  MPI_Comm_group(MPI_COMM_WORLD, &world_group);

  buf_t mem = buf_new(&hk, rank % ndev, W);
  memset(mem.h, 0, W);
  buf_push(&hk, &mem);
  char alloc_word[16];
  const char* alloc = test_hook("alloc", alloc_word, sizeof alloc_word);
  if (test_fake_nodes() > 1) {
    /* Ranks on several nodes: device windows refused on every rank (MPI_ERR_WIN), host windows the MPI's. */
    MPI_Win win;
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    CHECK(err_class(MPI_Win_create(mem.p, (MPI_Aint)W, 1, MPI_INFO_NULL, MPI_COMM_WORLD, &win)) == MPI_ERR_WIN);
    MPI_Info info;
    MPI_Info_create(&info);
    MPI_Info_set(info, "gpustripe_device", "true");
    void* base = NULL;
    CHECK(MPI_Win_allocate(64, 1, info, MPI_COMM_WORLD, &base, &win) != MPI_SUCCESS);
    MPI_Info_free(&info);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_ARE_FATAL);
    host_window();
    buf_free(&hk, &mem);
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank == 0) printf("mpi_rma: all checks passed on %d ranks (%d nodes: device windows refused)\n", size, test_fake_nodes());
    MPI_Finalize();
    return 0;
  }
  if (alloc && !strcmp(alloc, "async")) {
    /* The default pool's memory has no IPC handle: the creation fails on every rank, none hangs. */
    MPI_Win win;
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    CHECK(MPI_Win_create(mem.p, (MPI_Aint)W, 1, MPI_INFO_NULL, MPI_COMM_WORLD, &win) != MPI_SUCCESS);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_ARE_FATAL);
    buf_free(&hk, &mem);
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank == 0) printf("mpi_rma: all checks passed on %d ranks (memory without IPC handle refused)\n", size);
    MPI_Finalize();
    return 0;
  }
  unsigned char** model = malloc(sizeof(unsigned char*) * size);
  for (int r = 0; r < size; ++r) model[r] = calloc(W, 1);
  MPI_Win win;
  CHECK(MPI_Win_create(mem.p, (MPI_Aint)W, 1, MPI_INFO_NULL, MPI_COMM_WORLD, &win) == MPI_SUCCESS);
  MPI_Win_set_errhandler(win, MPI_ERRORS_RETURN);
  attributes(win, mem.p, (MPI_Aint)W, 1, MPI_WIN_FLAVOR_CREATE);

  puts_and_gets(win, &mem, model);
  progress_in_fence(win);
  gets_complete_by_polling();
  puts_pushed_by_origin(alloc);
  host_work_per_operation();
  large_puts_and_gets();
  errors(win, &mem, model);
  accumulates(win, &mem);
  atomics(win, &mem);
  CHECK(MPI_Win_free(&win) == MPI_SUCCESS);
  buf_free(&hk, &mem);

  allocated();
  dynamic();
  host_window();
  for (int r = 0; r < size; ++r) free(model[r]);
  free(model);
  MPI_Group_free(&world_group);
  MPI_Barrier(MPI_COMM_WORLD);
  if (rank == 0) printf("mpi_rma: all checks passed on %d ranks\n", size);
  MPI_Finalize();
  return 0;
}
