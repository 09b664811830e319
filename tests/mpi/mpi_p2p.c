/* The interposer under mpirun, on any number of ranks (2-4 in CI): device and host
 * buffers, all sizes, tags, any source, out-of-order posts, truncation, zero bytes,
 * a derived non-contiguous type, Sendrecv(_replace) (with MPI_PROC_NULL on one side, and
 * the pointer queries it makes), Probe + Get_count, which protocol small device messages take, the
 * wait/test family, communicators, and a receive buffer freed and reallocated at
 * the same address between messages, cancelled receives, persistent requests, buffered sends and a barrier's progress. Run with GPUSTRIPE_TEST=fake_nodes=2 it takes
 * the inter-node (staged) path for half of the pairs. Exit 0 when every check holds. */
#include "mpi_test_util.h"

static int rank, size, ndev;
static hooks_t hk;

static int dev_of(int r) { return r % ndev; }

/* Every rank sends to every other rank: each (size, placement) combination. */
static void all_pairs_all_sizes(void) {
  /* The last size (striped over several paths) only on real GPUs: CI's emulated ones are host memcpy. */
  const size_t sizes[] = {0, 1, 8, 4096, 16384, 16385, 100000, (1u << 20) + 3, 4u << 20, (48u << 20) + 5};
  const int nsizes = sizeof sizes / sizeof sizes[0] - (strcmp(hk.backend(), "cuda") != 0);
  int seq = 0;
  for (int mix = 0; mix < 4; ++mix) {
    int sdev = mix & 1, rdev = (mix >> 1) & 1;
    for (int k = 0; k < nsizes; ++k, ++seq) {
      size_t n = sizes[k];
      MPI_Request* reqs = malloc(sizeof(MPI_Request) * 2 * size);
      buf_t* in = malloc(sizeof(buf_t) * size);
      buf_t out = buf_new(&hk, sdev ? dev_of(rank) : -1, n);
      fill(out.h, n, rank, mix, seq);
      buf_push(&hk, &out);
      int nr = 0;
      for (int p = 0; p < size; ++p) {
        if (p == rank) continue;
        in[p] = buf_new(&hk, rdev ? dev_of(rank) : -1, n + 8);
        MPI_Irecv(in[p].p, (int)n + 8, MPI_BYTE, p, mix, MPI_COMM_WORLD, &reqs[nr++]);
      }
      for (int p = 0; p < size; ++p)
        if (p != rank) MPI_Isend(out.p, (int)n, MPI_BYTE, p, mix, MPI_COMM_WORLD, &reqs[nr++]);
      MPI_Status* st = malloc(sizeof(MPI_Status) * nr);
      CHECK(MPI_Waitall(nr, reqs, st) == MPI_SUCCESS);
      int i = 0;
      for (int p = 0; p < size; ++p) {
        if (p == rank) continue;
        int count = -1;
        MPI_Get_count(&st[i], MPI_BYTE, &count);
        CHECK(count == (int)n && st[i].MPI_SOURCE == p && st[i].MPI_TAG == mix);
        buf_pull(&hk, &in[p]);
        CHECK(same(in[p].h, n, p, mix, seq));
        buf_free(&hk, &in[p]);
        ++i;
      }
      buf_free(&hk, &out);
      free(st);
      free(reqs);
      free(in);
    }
  }
}

/* Rank 1 sends tags 1,1,2,3; rank 0 posts 3, 2, then any-tag twice; per-tag order holds. */
static void out_of_order_and_any(void) {
  size_t big = 300000;
  if (rank == 1) {
    int tags[] = {1, 1, 2, 3};
    for (int i = 0; i < 4; ++i) {
      buf_t b = buf_new(&hk, dev_of(rank), big);
      fill(b.h, big, 1, tags[i], i);
      buf_push(&hk, &b);
      MPI_Send(b.p, (int)(i % 2 ? big : 100), MPI_BYTE, 0, tags[i], MPI_COMM_WORLD);
      buf_free(&hk, &b);
    }
  } else if (rank == 0) {
    buf_t b[4];
    MPI_Request r[4];
    MPI_Status st[4];
    for (int i = 0; i < 4; ++i) b[i] = buf_new(&hk, dev_of(rank), big);
    MPI_Irecv(b[3].p, (int)big, MPI_BYTE, 1, 3, MPI_COMM_WORLD, &r[3]);
    MPI_Irecv(b[2].p, (int)big, MPI_BYTE, MPI_ANY_SOURCE, 2, MPI_COMM_WORLD, &r[2]);
    MPI_Irecv(b[0].p, (int)big, MPI_BYTE, 1, MPI_ANY_TAG, MPI_COMM_WORLD, &r[0]);
    MPI_Irecv(b[1].p, (int)big, MPI_BYTE, MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_WORLD, &r[1]);
    int done = 0;
    while (done < 4) {
      int idx[4], k = 0;
      CHECK(MPI_Waitsome(4, r, &k, idx, st) == MPI_SUCCESS);
      done += k;
    }
    int tags[] = {1, 1, 2, 3};
    for (int i = 0; i < 4; ++i) {
      buf_pull(&hk, &b[i]);
      CHECK(same(b[i].h, i % 2 ? big : 100, 1, tags[i], i));
      buf_free(&hk, &b[i]);
    }
  }
}

/* Truncation is an error the program can see under MPI_ERRORS_RETURN. Only
 * between ranks of one node: on the staged (MPI) path, Open MPI 4.1's shared-memory
 * single-copy receive writes a truncated message's full length past the buffer
 * (found by AddressSanitizer here), which no layer above it can prevent. */
static void truncation(void) {
  int k = test_fake_nodes();
  if (k > 0 && (0 * k / size) != (1 * k / size)) return;
  MPI_Comm c;
  MPI_Comm_dup(MPI_COMM_WORLD, &c);
  MPI_Comm_set_errhandler(c, MPI_ERRORS_RETURN);
  size_t sizes[] = {64, 500000};
  for (int k = 0; k < 2; ++k) {
    size_t n = sizes[k];
    if (rank == 1) {
      buf_t b = buf_new(&hk, dev_of(rank), n);
      fill(b.h, n, 1, 77, k);
      buf_push(&hk, &b);
      MPI_Send(b.p, (int)n, MPI_BYTE, 0, 77, c);
      buf_free(&hk, &b);
    } else if (rank == 0) {
      buf_t b = buf_new(&hk, dev_of(rank), n / 2);
      MPI_Status st;
      int rc = MPI_Recv(b.p, (int)(n / 2), MPI_BYTE, 1, 77, c, &st);
      int cls = -1;
      MPI_Error_class(rc, &cls);
      CHECK(cls == MPI_ERR_TRUNCATE);
      buf_pull(&hk, &b);
      CHECK(same(b.h, n / 2, 1, 77, k));
      buf_free(&hk, &b);
    }
  }
  MPI_Comm_free(&c);
}

/* A strided vector (every other double) from device memory, received contiguously. */
static void derived_types(void) {
  int n = 1000;
  MPI_Datatype vec;
  MPI_Type_vector(n, 1, 2, MPI_DOUBLE, &vec);
  MPI_Type_commit(&vec);
  int peer = rank ^ 1;
  if (peer < size) {
    buf_t s = buf_new(&hk, dev_of(rank), 2 * n * sizeof(double));
    double* sh = (double*)s.h;
    for (int i = 0; i < 2 * n; ++i) sh[i] = rank * 1e6 + i;
    buf_push(&hk, &s);
    buf_t r = buf_new(&hk, dev_of(rank), 2 * n * sizeof(double));
    double* rh = (double*)r.h;
    for (int i = 0; i < 2 * n; ++i) rh[i] = -1;
    buf_push(&hk, &r);
    MPI_Status st;
    /* send strided, receive strided into a buffer whose holes must survive */
    MPI_Sendrecv(s.p, 1, vec, peer, 5, r.p, 1, vec, peer, 5, MPI_COMM_WORLD, &st);
    buf_pull(&hk, &r);
    for (int i = 0; i < 2 * n; ++i) CHECK(rh[i] == (i % 2 == 0 ? peer * 1e6 + i : -1));
    int count = -1;
    MPI_Get_count(&st, vec, &count);
    CHECK(count == 1);
    MPI_Get_count(&st, MPI_DOUBLE, &count);
    CHECK(count == n);
    buf_free(&hk, &s);
    buf_free(&hk, &r);
  }
  MPI_Type_free(&vec);
}

/* Ring exchange in place; probe for the size first. */
static void sendrecv_replace_and_probe(void) {
  size_t n = 200000;
  buf_t b = buf_new(&hk, dev_of(rank), n);
  fill(b.h, n, rank, 9, 0);
  buf_push(&hk, &b);
  int right = (rank + 1) % size, left = (rank + size - 1) % size;
  MPI_Status st;
  MPI_Sendrecv_replace(b.p, (int)n, MPI_BYTE, right, 9, left, 9, MPI_COMM_WORLD, &st);
  buf_pull(&hk, &b);
  CHECK(st.MPI_SOURCE == left && same(b.h, n, left, 9, 0));

  MPI_Send(b.p, 1234, MPI_BYTE, right, 10, MPI_COMM_WORLD);
  MPI_Probe(MPI_ANY_SOURCE, 10, MPI_COMM_WORLD, &st);
  int count = 0;
  MPI_Get_count(&st, MPI_BYTE, &count);
  CHECK(count == 1234 && st.MPI_SOURCE == left);
  MPI_Recv(b.p, count, MPI_BYTE, st.MPI_SOURCE, 10, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
  int flag = 1;
  MPI_Iprobe(MPI_ANY_SOURCE, 10, MPI_COMM_WORLD, &flag, &st);
  CHECK(!flag);
  buf_free(&hk, &b);
}

/* Split into halves and pairs, dup; messages stay within their communicator. */
static void communicators(void) {
  MPI_Comm half, dup;
  MPI_Comm_split(MPI_COMM_WORLD, rank % 2, -rank, &half); /* reversed order inside */
  MPI_Comm_dup(half, &dup);
  int hr, hs;
  MPI_Comm_rank(half, &hr);
  MPI_Comm_size(half, &hs);
  if (hs > 1) {
    int peer = (hr + 1) % hs, from = (hr + hs - 1) % hs;
    int a = rank, b = -1, c = -1;
    MPI_Request r[3];
    MPI_Irecv(&b, 1, MPI_INT, from, 0, half, &r[0]);
    MPI_Irecv(&c, 1, MPI_INT, from, 0, dup, &r[1]);
    MPI_Isend(&a, 1, MPI_INT, peer, 0, dup, &r[2]);
    int x = 1000 + rank;
    MPI_Send(&x, 1, MPI_INT, peer, 0, half);
    int idx;
    for (int k = 0; k < 3; ++k) MPI_Waitany(3, r, &idx, MPI_STATUS_IGNORE);
    MPI_Waitany(3, r, &idx, MPI_STATUS_IGNORE);
    CHECK(idx == MPI_UNDEFINED);
    /* world rank of `from` in half: translate */
    MPI_Group g, w;
    int wr;
    MPI_Comm_group(half, &g);
    MPI_Comm_group(MPI_COMM_WORLD, &w);
    MPI_Group_translate_ranks(g, 1, &from, w, &wr);
    CHECK(b == 1000 + wr && c == wr);
    MPI_Group_free(&g);
    MPI_Group_free(&w);
  }
  MPI_Comm_free(&dup);
  MPI_Comm_free(&half);
}

/* The receiver frees its buffer and allocates a new one (same address, typically)
 * between messages: the sender must never write through a stale mapping. */
static void freed_and_reallocated(void) {
  size_t n = 3u << 20;
  if (rank == 0) {
    buf_t s = buf_new(&hk, dev_of(0), n);
    for (int i = 0; i < 4; ++i) {
      fill(s.h, n, 0, 21, i);
      buf_push(&hk, &s);
      MPI_Send(s.p, (int)n, MPI_BYTE, 1, 21, MPI_COMM_WORLD);
    }
    buf_free(&hk, &s);
  } else if (rank == 1) {
    void* prev = NULL;
    int reused = 0;
    for (int i = 0; i < 4; ++i) {
      buf_t r = buf_new(&hk, dev_of(1), n);
      if (r.p == prev) ++reused;
      buf_push(&hk, &r); /* zeros */
      MPI_Recv(r.p, (int)n, MPI_BYTE, 0, 21, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
      buf_pull(&hk, &r);
      CHECK(same(r.h, n, 0, 21, i));
      prev = r.p;
      buf_free(&hk, &r);
    }
    printf("freed_and_reallocated: address reused %d of 3 times\n", reused);
  }
}

/* MPI_Sendrecv asks where each buffer lives once, and not at all for a side that is
 * MPI_PROC_NULL (a halo exchange's edge ranks): each pointer query is a driver call on the
 * message's latency path. One way first (the even rank of each pair receives, the odd one sends,
 * the other side of each call MPI_PROC_NULL), then both ways; a halo row's size (pulled). */
static void sendrecv_pointer_queries(void) {
  long long (*queries)(void) = (long long (*)(void))dlsym(RTLD_DEFAULT, "gpustripe_mpi_test_pointer_queries");
  CHECK(queries != NULL);
  const int peer = (rank ^ 1) < size ? (rank ^ 1) : MPI_PROC_NULL;
  const int even = rank % 2 == 0;
  const size_t n = 32768;
  buf_t out = buf_new(&hk, dev_of(rank), n), in = buf_new(&hk, dev_of(rank), n);
  fill(out.h, n, rank, 41, 0);
  buf_push(&hk, &out);
  MPI_Status st;
  int count = -1;
  long long before = queries();
  CHECK(MPI_Sendrecv(out.p, (int)n, MPI_BYTE, even ? MPI_PROC_NULL : peer, 41, in.p, (int)n, MPI_BYTE,
                     even ? peer : MPI_PROC_NULL, 41, MPI_COMM_WORLD, &st) == MPI_SUCCESS);
  CHECK(queries() - before == (peer == MPI_PROC_NULL ? 0 : 1));
  MPI_Get_count(&st, MPI_BYTE, &count);
  if (even && peer != MPI_PROC_NULL) {
    CHECK(st.MPI_SOURCE == peer && count == (int)n);
    buf_pull(&hk, &in);
    CHECK(same(in.h, n, peer, 41, 0));
  } else {
    CHECK(st.MPI_SOURCE == MPI_PROC_NULL && count == 0);
  }
  before = queries();
  CHECK(MPI_Sendrecv(out.p, (int)n, MPI_BYTE, peer, 42, in.p, (int)n, MPI_BYTE, peer, 42, MPI_COMM_WORLD, &st) ==
        MPI_SUCCESS);
  CHECK(queries() - before == (peer == MPI_PROC_NULL ? 0 : 2));
  if (peer != MPI_PROC_NULL) {
    buf_pull(&hk, &in);
    CHECK(same(in.h, n, peer, 41, 0));
  }
  buf_free(&hk, &out);
  buf_free(&hk, &in);
}

/* A message of a stack variable or a small heap buffer makes no pointer query on real GPUs
 * (host memory for certain: common/host_ranges.hpp); on the emulated backend, whose devices live
 * in host memory, each side asks once. The data arrives either way. */
static void host_scalars_skip_pointer_queries(void) {
  long long (*queries)(void) = (long long (*)(void))dlsym(RTLD_DEFAULT, "gpustripe_mpi_test_pointer_queries");
  const char* (*backend)(void) = (const char* (*)(void))dlsym(RTLD_DEFAULT, "gpustripe_mpi_test_backend");
  CHECK(queries != NULL && backend != NULL);
  const int peer = rank ^ 1;
  if (peer >= size) return;
  const int expect = strcmp(backend(), "cuda") == 0 ? 0 : 1;
  int value = rank * 1000 + 7, got = -1;
  int* heap = (int*)malloc(4 * sizeof(int));
  CHECK(heap != NULL);
  long long before = queries();
  if (rank % 2 == 0) {
    CHECK(MPI_Send(&value, 1, MPI_INT, peer, 61, MPI_COMM_WORLD) == MPI_SUCCESS);
    CHECK(MPI_Recv(heap, 4, MPI_INT, peer, 62, MPI_COMM_WORLD, MPI_STATUS_IGNORE) == MPI_SUCCESS);
    CHECK(heap[0] == peer * 1000 + 7 && heap[3] == peer);
  } else {
    CHECK(MPI_Recv(&got, 1, MPI_INT, peer, 61, MPI_COMM_WORLD, MPI_STATUS_IGNORE) == MPI_SUCCESS);
    CHECK(got == peer * 1000 + 7);
    heap[0] = value;
    heap[1] = heap[2] = 0;
    heap[3] = rank;
    CHECK(MPI_Send(heap, 4, MPI_INT, peer, 62, MPI_COMM_WORLD) == MPI_SUCCESS);
  }
  CHECK(queries() - before == 2 * expect);
  free(heap);
}

/* Which protocol a small device message takes (pairs r <-> r^1 on one node): a nonblocking send
 * (MPI_Isend, MPI_Issend, a Sendrecv's send) is pulled by the receiver, which maps the sender's
 * buffer, as UCX's are, or pushed into the receive where the receiver offered it (posted first,
 * the only one for that sender); a blocking standard send (MPI_Send) goes through an eager slot, completing
 * without the receiver, and MPI_Ssend is pulled (it waits for the receiver anyway). Memory with no
 * IPC handle (alloc=async) cannot be pulled: every one of them then takes a slot. */
static void small_device_protocols(void) {
  long long (*counter)(const char*) = (long long (*)(const char*))dlsym(RTLD_DEFAULT, "gpustripe_mpi_test_ipc_counter");
  CHECK(counter != NULL);
  const int peer = rank ^ 1, k = test_fake_nodes();
  if (peer >= size || (k > 0 && rank * k / size != peer * k / size)) return;
  char alloc[16];
  const int pullable = !test_hook("alloc", alloc, sizeof alloc) || strcmp(alloc, "async") != 0;
  const int sender = rank % 2 == 0;
  const size_t sizes[] = {1, 100, 4096};
  for (int i = 0; i < 3; ++i) {
    const size_t n = sizes[i];
    buf_t out = buf_new(&hk, dev_of(rank), n), in = buf_new(&hk, dev_of(rank), n);
    long long slots = counter("eager_slots_taken");
    long long maps = counter("map_hits") + counter("map_misses") + counter("map_stale");
    for (int way = 0; way < 3; ++way) { /* MPI_Isend + MPI_Wait, MPI_Send, MPI_Ssend */
      if (sender) {
        fill(out.h, n, rank, 50 + way, i);
        buf_push(&hk, &out);
        if (way == 0) {
          MPI_Request r;
          MPI_Isend(out.p, (int)n, MPI_BYTE, peer, 50, MPI_COMM_WORLD, &r);
          MPI_Wait(&r, MPI_STATUS_IGNORE);
        } else if (way == 1) {
          MPI_Send(out.p, (int)n, MPI_BYTE, peer, 51, MPI_COMM_WORLD);
        } else {
          MPI_Ssend(out.p, (int)n, MPI_BYTE, peer, 52, MPI_COMM_WORLD);
        }
      } else {
        MPI_Recv(in.p, (int)n, MPI_BYTE, peer, 50 + way, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        buf_pull(&hk, &in);
        CHECK(same(in.h, n, peer, 50 + way, i));
      }
    }
    /* both ways at once: each side's send half is nonblocking */
    fill(out.h, n, rank, 53, i);
    buf_push(&hk, &out);
    MPI_Sendrecv(out.p, (int)n, MPI_BYTE, peer, 53, in.p, (int)n, MPI_BYTE, peer, 53, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    buf_pull(&hk, &in);
    CHECK(same(in.h, n, peer, 53, i));
    slots = counter("eager_slots_taken") - slots;
    maps = counter("map_hits") + counter("map_misses") + counter("map_stale") - maps;
    /* Each of the five device messages (Isend, Send, Ssend, both halves of the Sendrecv) takes one
     * way: MPI_Send's a slot unless its receive was offered, the others a pull (the receiver maps
     * the sender's buffer) or a push into an offered receive (the sender maps the receiver's), so
     * the pair's slots and maps add up to five. Without handles (async) nothing is offered or
     * mapped: the sender's four and the receiver's Sendrecv half through slots. */
    long long mine[2] = {slots, maps}, theirs[2] = {0, 0};
    MPI_Sendrecv(mine, 2, MPI_LONG_LONG, peer, 54, theirs, 2, MPI_LONG_LONG, peer, 54, MPI_COMM_WORLD,
                 MPI_STATUS_IGNORE);
    if (pullable) CHECK(slots + theirs[0] + maps + theirs[1] == 5 && slots + theirs[0] <= 1);
    else CHECK(slots == (sender ? 4 : 1) && maps == 0);
    buf_free(&hk, &out);
    buf_free(&hk, &in);
  }
}

/* MPI_Cancel of receives, host and device (a device receive for one source is offered to it, so
 * its cancel waits for the source to drop the offer): one no message takes completes cancelled,
 * its buffer untouched, and the message sent after the cancel goes to the next receive; one its
 * message already took completes with it, not cancelled; one for any source is cancelled too. */
static void cancelled_receives(void) {
  const int peer = rank ^ 1;
  const size_t n = 64;
  for (int dev = 0; dev < 2 && peer < size; ++dev) {
    buf_t gone = buf_new(&hk, dev ? dev_of(rank) : -1, n), in = buf_new(&hk, dev ? dev_of(rank) : -1, n);
    buf_t out = buf_new(&hk, dev ? dev_of(rank) : -1, n);
    memset(gone.h, 0x5a, n);
    buf_push(&hk, &gone);
    MPI_Request r;
    MPI_Status st;
    int flag = -1;
    MPI_Irecv(gone.p, (int)n, MPI_BYTE, peer, 60, MPI_COMM_WORLD, &r);
    CHECK(MPI_Cancel(&r) == MPI_SUCCESS);
    CHECK(MPI_Wait(&r, &st) == MPI_SUCCESS);
    MPI_Test_cancelled(&st, &flag);
    CHECK(flag == 1);
    /* The message with that tag, sent once both cancels are over, goes to the next receive. */
    MPI_Sendrecv(NULL, 0, MPI_BYTE, peer, 63, NULL, 0, MPI_BYTE, peer, 63, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    fill(out.h, n, rank, 60, dev);
    buf_push(&hk, &out);
    MPI_Sendrecv(out.p, (int)n, MPI_BYTE, peer, 60, in.p, (int)n, MPI_BYTE, peer, 60, MPI_COMM_WORLD, &st);
    MPI_Test_cancelled(&st, &flag);
    CHECK(flag == 0);
    buf_pull(&hk, &in);
    CHECK(same(in.h, n, peer, 60, dev));
    buf_pull(&hk, &gone);
    for (size_t i = 0; i < n; ++i) CHECK(gone.h[i] == 0x5a);

    /* A receive its message already took: the cancel fails, the message is there. */
    fill(out.h, n, rank, 61, dev);
    buf_push(&hk, &out);
    MPI_Request s;
    MPI_Isend(out.p, (int)n, MPI_BYTE, peer, 61, MPI_COMM_WORLD, &s);
    MPI_Probe(peer, 61, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    MPI_Irecv(in.p, (int)n, MPI_BYTE, peer, 61, MPI_COMM_WORLD, &r);
    CHECK(MPI_Cancel(&r) == MPI_SUCCESS);
    CHECK(MPI_Wait(&r, &st) == MPI_SUCCESS);
    MPI_Test_cancelled(&st, &flag);
    CHECK(flag == 0);
    MPI_Wait(&s, MPI_STATUS_IGNORE);
    buf_pull(&hk, &in);
    CHECK(same(in.h, n, peer, 61, dev));

    /* Any source, nothing sent. */
    MPI_Irecv(gone.p, (int)n, MPI_BYTE, MPI_ANY_SOURCE, 62, MPI_COMM_WORLD, &r);
    CHECK(MPI_Cancel(&r) == MPI_SUCCESS);
    CHECK(MPI_Wait(&r, &st) == MPI_SUCCESS);
    MPI_Test_cancelled(&st, &flag);
    CHECK(flag == 1);
    buf_free(&hk, &gone);
    buf_free(&hk, &in);
    buf_free(&hk, &out);
  }
  MPI_Barrier(MPI_COMM_WORLD);
}

/* n bytes as MPI_BYTE, or (strided) every other 8 of them as one vector (committed: the caller frees it). */
static MPI_Datatype message_type(size_t n, int strided, int* count) {
  MPI_Datatype type = MPI_BYTE;
  *count = (int)n;
  if (strided) {
    MPI_Type_vector((int)(n / 16), 8, 16, MPI_BYTE, &type);
    MPI_Type_commit(&type);
    *count = 1;
  }
  return type;
}

/* Persistent requests (MPI_Send_init / MPI_Recv_init, MPI_Startall), host and device, contiguous
 * and a strided type freed right after the inits (the requests keep their own): each start moves
 * the round's data as MPI_Isend/MPI_Irecv would -- by the interposer, which makes one request of
 * its own per start of a device buffer's -- a wait on an inactive one returns at once, empty. */
static void persistent_requests(void) {
  long long (*counter)(const char*) = (long long (*)(const char*))dlsym(RTLD_DEFAULT, "gpustripe_mpi_test_ipc_counter");
  CHECK(counter != NULL);
  const int peer = rank ^ 1, rounds = 3;
  const size_t n = 100000;
  for (int mix = 0; mix < 4 && peer < size; ++mix) {
    const int dev = mix & 1, strided = mix >> 1;
    buf_t out = buf_new(&hk, dev ? dev_of(rank) : -1, n), in = buf_new(&hk, dev ? dev_of(rank) : -1, n);
    int count;
    MPI_Datatype type = message_type(n, strided, &count);
    MPI_Request r[2];
    const long long made = counter("requests_made");
    MPI_Recv_init(in.p, count, type, peer, 70 + mix, MPI_COMM_WORLD, &r[0]);
    MPI_Send_init(out.p, count, type, peer, 70 + mix, MPI_COMM_WORLD, &r[1]);
    if (strided) MPI_Type_free(&type);
    for (int round = 0; round < rounds; ++round) {
      fill(out.h, n, rank, 70 + mix, round);
      buf_push(&hk, &out);
      memset(in.h, 0, n);
      buf_push(&hk, &in);
      CHECK(MPI_Startall(2, r) == MPI_SUCCESS);
      CHECK(MPI_Waitall(2, r, MPI_STATUSES_IGNORE) == MPI_SUCCESS);
      CHECK(r[0] != MPI_REQUEST_NULL && r[1] != MPI_REQUEST_NULL); /* persistent: they stay */
      buf_pull(&hk, &in);
      unsigned char* want = malloc(n);
      fill(want, n, peer, 70 + mix, round);
      for (size_t i = 0; i < n; ++i) CHECK(in.h[i] == (!strided || i % 16 < 8 ? want[i] : 0));
      free(want);
    }
    if (dev) CHECK(counter("requests_made") - made == 2 + 2 * rounds);
    MPI_Status st;
    int got = -1;
    CHECK(MPI_Wait(&r[0], &st) == MPI_SUCCESS); /* inactive */
    MPI_Get_count(&st, MPI_BYTE, &got);
    CHECK(st.MPI_SOURCE == MPI_ANY_SOURCE && st.MPI_TAG == MPI_ANY_TAG && got == 0);
    MPI_Request_free(&r[0]);
    MPI_Request_free(&r[1]);
    CHECK(r[0] == MPI_REQUEST_NULL && r[1] == MPI_REQUEST_NULL);
    buf_free(&hk, &out);
    buf_free(&hk, &in);
  }
  MPI_Barrier(MPI_COMM_WORLD);
}

/* A nonblocking send of host memory above the eager limit goes out in fragments as its receiver
 * takes them, which needs its sender's progress: the sender waits in MPI_Barrier, which its peer
 * enters only once the receive has completed. The barrier progresses the send. */
static void barrier_progresses_sends(void) {
  const int peer = rank ^ 1;
  const size_t n = 300000;
  if (peer < size) {
    buf_t b = buf_new(&hk, -1, n);
    if (rank % 2 == 0) {
      fill(b.h, n, rank, 120, 0);
      MPI_Request r;
      CHECK(MPI_Isend(b.p, (int)n, MPI_BYTE, peer, 120, MPI_COMM_WORLD, &r) == MPI_SUCCESS);
      CHECK(MPI_Barrier(MPI_COMM_WORLD) == MPI_SUCCESS);
      CHECK(MPI_Wait(&r, MPI_STATUS_IGNORE) == MPI_SUCCESS);
    } else {
      CHECK(MPI_Recv(b.p, (int)n, MPI_BYTE, peer, 120, MPI_COMM_WORLD, MPI_STATUS_IGNORE) == MPI_SUCCESS);
      CHECK(same(b.h, n, peer, 120, 0));
      CHECK(MPI_Barrier(MPI_COMM_WORLD) == MPI_SUCCESS);
    }
    buf_free(&hk, &b);
  } else {
    CHECK(MPI_Barrier(MPI_COMM_WORLD) == MPI_SUCCESS);
  }
  MPI_Barrier(MPI_COMM_WORLD);
}

/* Buffered sends (MPI_Bsend, MPI_Ibsend, MPI_Bsend_init) of device and host buffers, contiguous and
 * strided: each rank sends before it receives, so only a send that completes on its own (the
 * attached buffer's) lets the exchange finish; every byte arrives. A device send past the attached
 * buffer fails with MPI_ERR_BUFFER (errors returned) and sends nothing; MPI_Buffer_detach returns
 * once the buffered sends have gone, with the buffer attached. */
static void buffered_sends(void) {
  const int peer = rank ^ 1, paired = peer < size; /* a rank without a pair meets the others' barriers */
  const size_t n = 300000;
  const int attach = 4 * (int)(n + MPI_BSEND_OVERHEAD);
  char* pool = malloc((size_t)attach);
  CHECK(MPI_Buffer_attach(pool, attach) == MPI_SUCCESS);
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  for (int mix = 0; mix < 4; ++mix) {
    if (!paired) {
      MPI_Barrier(MPI_COMM_WORLD);
      continue;
    }
    const int dev = mix & 1, strided = mix >> 1;
    buf_t out = buf_new(&hk, dev ? dev_of(rank) : -1, n), in[3];
    int count;
    MPI_Datatype type = message_type(n, strided, &count);
    for (int k = 0; k < 3; ++k) {
      in[k] = buf_new(&hk, dev ? dev_of(rank) : -1, n);
      memset(in[k].h, 0, n);
      buf_push(&hk, &in[k]);
    }
    fill(out.h, n, rank, 80 + mix, 0);
    buf_push(&hk, &out);
    MPI_Request r, p;
    CHECK(MPI_Bsend(out.p, count, type, peer, 80 + mix, MPI_COMM_WORLD) == MPI_SUCCESS);
    CHECK(MPI_Ibsend(out.p, count, type, peer, 90 + mix, MPI_COMM_WORLD, &r) == MPI_SUCCESS);
    CHECK(MPI_Wait(&r, MPI_STATUS_IGNORE) == MPI_SUCCESS && r == MPI_REQUEST_NULL);
    CHECK(MPI_Bsend_init(out.p, count, type, peer, 100 + mix, MPI_COMM_WORLD, &p) == MPI_SUCCESS);
    CHECK(MPI_Start(&p) == MPI_SUCCESS);
    CHECK(MPI_Wait(&p, MPI_STATUS_IGNORE) == MPI_SUCCESS);
    MPI_Request_free(&p);
    /* A message longer than the whole attached buffer does not fit: refused, nothing sent. Device
     * buffers only: host data to another (fake) node is the MPI's, and Open MPI 4.1's refused
     * buffered send holds back every later message to that peer (the barrier's too). */
    if (dev) {
      buf_t big = buf_new(&hk, dev_of(rank), (size_t)attach);
      CHECK(MPI_Bsend(big.p, attach, MPI_BYTE, peer, 110 + mix, MPI_COMM_WORLD) == MPI_ERR_BUFFER);
      buf_free(&hk, &big);
    }
    memset(out.h, 0xee, n); /* the sends' data is out of the buffer: overwriting it changes nothing */
    buf_push(&hk, &out);
    for (int k = 0; k < 3; ++k) CHECK(MPI_Recv(in[k].p, count, type, peer, 80 + 10 * k + mix, MPI_COMM_WORLD, MPI_STATUS_IGNORE) == MPI_SUCCESS);
    unsigned char* want = malloc(n);
    fill(want, n, peer, 80 + mix, 0);
    for (int k = 0; k < 3; ++k) {
      buf_pull(&hk, &in[k]);
      for (size_t i = 0; i < n; ++i) CHECK(in[k].h[i] == (!strided || i % 16 < 8 ? want[i] : 0));
      buf_free(&hk, &in[k]);
    }
    free(want);
    if (strided) MPI_Type_free(&type);
    buf_free(&hk, &out);
    MPI_Barrier(MPI_COMM_WORLD);
  }
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_ARE_FATAL);
  void* back = NULL;
  int back_size = 0;
  CHECK(MPI_Buffer_detach(&back, &back_size) == MPI_SUCCESS);
  CHECK(back == pool && back_size == attach);
  free(pool);
  MPI_Barrier(MPI_COMM_WORLD);
}

/* A blocking send of a few host bytes to a rank of this node (the acknowledgement of osu_bw's
 * windows) is over once its record is in the ring: it makes no MPI request of the interposer and
 * no progress pass, however many are sent, and asks the MPI nothing about its predefined type
 * after the first time. A blocking receive of a message already here (read by an earlier pass:
 * the probe's) makes no request either; every one arrives, in order. */
static void host_acks_take_no_request_nor_pass(void) {
  long long (*counter)(const char*) = (long long (*)(const char*))dlsym(RTLD_DEFAULT, "gpustripe_mpi_test_ipc_counter");
  CHECK(counter != NULL);
  const int peer = rank ^ 1, k = test_fake_nodes();
  if (peer >= size || (k > 0 && rank * k / size != peer * k / size)) return;
  enum { kAcks = 8 };
  char first = 1, last = 0;
  if (rank % 2 == 0) {
    CHECK(MPI_Send(&first, 1, MPI_CHAR, peer, 63, MPI_COMM_WORLD) == MPI_SUCCESS);
    const long long requests = counter("requests_made"), passes = counter("progress_passes");
    const long long types = counter("type_queries");
    for (int i = 1; i < kAcks; ++i) {
      char ack = (char)(i + 1);
      CHECK(MPI_Send(&ack, 1, MPI_CHAR, peer, 63, MPI_COMM_WORLD) == MPI_SUCCESS);
    }
    CHECK(MPI_Send(&last, 1, MPI_CHAR, peer, 64, MPI_COMM_WORLD) == MPI_SUCCESS);
    CHECK(requests >= 0 && passes >= 0 && types >= 0);
    CHECK(counter("requests_made") == requests && counter("progress_passes") == passes);
    CHECK(counter("type_queries") == types);
    /* A blocking receive posted before its message arrives (a ping-pong's other half) waits on
     * the ring itself: no request and no pass either. */
    MPI_Status st;
    char reply = 0;
    CHECK(MPI_Recv(&reply, 1, MPI_CHAR, peer, 65, MPI_COMM_WORLD, &st) == MPI_SUCCESS);
    CHECK(reply == 42 && st.MPI_SOURCE == peer && st.MPI_TAG == 65);
    CHECK(counter("requests_made") == requests && counter("progress_passes") == passes);
  } else {
    MPI_Status st;
    CHECK(MPI_Probe(peer, 64, MPI_COMM_WORLD, &st) == MPI_SUCCESS);  /* every ack read before it */
    const long long requests = counter("requests_made");
    for (int i = 0; i < kAcks; ++i) {
      char ack = 0;
      int count = -1;
      CHECK(MPI_Recv(&ack, 1, MPI_CHAR, peer, 63, MPI_COMM_WORLD, &st) == MPI_SUCCESS);
      MPI_Get_count(&st, MPI_CHAR, &count);
      CHECK(ack == (char)(i + 1) && st.MPI_SOURCE == peer && st.MPI_TAG == 63 && count == 1);
    }
    CHECK(MPI_Recv(&last, 1, MPI_CHAR, peer, 64, MPI_COMM_WORLD, MPI_STATUS_IGNORE) == MPI_SUCCESS);
    CHECK(requests >= 0 && counter("requests_made") == requests);
    usleep(2000);  /* the peer's receive is posted and waiting by then */
    char reply = 42;
    CHECK(MPI_Send(&reply, 1, MPI_CHAR, peer, 65, MPI_COMM_WORLD) == MPI_SUCCESS);
  }
}

/* Test/Testall/Testany polling and synchronous sends. */
static void test_family(void) {
  int peer = rank ^ 1;
  if (peer >= size) return;
  int v = rank, got[2] = {-1, -1};
  MPI_Request r[3];
  MPI_Irecv(&got[0], 1, MPI_INT, peer, 31, MPI_COMM_WORLD, &r[0]);
  MPI_Irecv(&got[1], 1, MPI_INT, peer, 32, MPI_COMM_WORLD, &r[1]);
  MPI_Issend(&v, 1, MPI_INT, peer, 32, MPI_COMM_WORLD, &r[2]);
  MPI_Ssend(&v, 1, MPI_INT, peer, 31, MPI_COMM_WORLD);
  int flag = 0;
  while (!flag) MPI_Testall(3, r, &flag, MPI_STATUSES_IGNORE);
  CHECK(got[0] == peer && got[1] == peer);
  for (int k = 0; k < 3; ++k) CHECK(r[k] == MPI_REQUEST_NULL);
  int idx = 0;
  MPI_Testany(3, r, &idx, &flag, MPI_STATUS_IGNORE);
  CHECK(flag && idx == MPI_UNDEFINED);
  MPI_Request one;
  MPI_Irecv(&got[0], 1, MPI_INT, peer, 33, MPI_COMM_WORLD, &one);
  MPI_Test(&one, &flag, MPI_STATUS_IGNORE);
  MPI_Send(&v, 1, MPI_INT, peer, 33, MPI_COMM_WORLD);
  while (!flag) MPI_Test(&one, &flag, MPI_STATUS_IGNORE);
  MPI_Request fire;
  MPI_Isend(&v, 1, MPI_INT, peer, 34, MPI_COMM_WORLD, &fire);
  MPI_Request_free(&fire);
  MPI_Recv(&got[1], 1, MPI_INT, peer, 34, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
  CHECK(got[1] == peer);
  /* MPI_Request_get_status leaves the request, complete or not; the wait that frees it gets the
   * same status. Ready sends (MPI_Rsend, MPI_Irsend) to receives posted first. */
  got[0] = got[1] = -1;
  MPI_Irecv(&got[0], 1, MPI_INT, peer, 35, MPI_COMM_WORLD, &one);
  MPI_Irecv(&got[1], 1, MPI_INT, peer, 36, MPI_COMM_WORLD, &r[0]);
  MPI_Sendrecv(NULL, 0, MPI_BYTE, peer, 37, NULL, 0, MPI_BYTE, peer, 37, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
  MPI_Rsend(&v, 1, MPI_INT, peer, 35, MPI_COMM_WORLD);
  MPI_Irsend(&v, 1, MPI_INT, peer, 36, MPI_COMM_WORLD, &r[1]);
  MPI_Status st, st2;
  flag = 0;
  while (!flag) CHECK(MPI_Request_get_status(one, &flag, &st) == MPI_SUCCESS);
  CHECK(one != MPI_REQUEST_NULL && st.MPI_SOURCE == peer && st.MPI_TAG == 35 && got[0] == peer);
  MPI_Request_get_status(one, &flag, &st2);
  CHECK(flag && st2.MPI_TAG == 35);
  CHECK(MPI_Wait(&one, &st2) == MPI_SUCCESS && one == MPI_REQUEST_NULL && st2.MPI_SOURCE == peer && st2.MPI_TAG == 35);
  CHECK(MPI_Waitall(2, r, MPI_STATUSES_IGNORE) == MPI_SUCCESS && got[1] == peer);
}

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  CHECK(size >= 2);
  hk = hooks();
  ndev = hk.device_count();
  CHECK(ndev >= 1);
  all_pairs_all_sizes();
  out_of_order_and_any();
  truncation();
  derived_types();
  sendrecv_replace_and_probe();
  communicators();
  freed_and_reallocated();
  test_family();
  sendrecv_pointer_queries();
  host_scalars_skip_pointer_queries();
  small_device_protocols();
  cancelled_receives();
  persistent_requests();
  barrier_progresses_sends();
  buffered_sends();
  host_acks_take_no_request_nor_pass();
  MPI_Barrier(MPI_COMM_WORLD);
  if (rank == 0) printf("mpi_p2p: all checks passed on %d ranks\n", size);
  MPI_Finalize();
  return 0;
}
