/* The interposer's collectives under mpirun, on any number of ranks (2-4 in CI):
 * MPI_Allreduce, MPI_Reduce, MPI_Reduce_scatter_block, MPI_Alltoall, MPI_Allgather and
 * MPI_Bcast on device buffers, every reduction op on float, double, int, int64 and
 * long, in place and not, counts not divisible by the rank count, every root; each
 * result compared exactly with a host reference (the data are chosen so that float
 * sums and products are exact in any order). The interposer's counter of collectives it
 * served itself must grow where the gpustripe path applies (device buffers, a
 * node-local communicator, a supported type and op) and stay put where the MPI must
 * run them: user ops, a type without a kernel (long double), non-contiguous types, host buffers, ranks mixing
 * host and device buffers, other nodes (GPUSTRIPE_TEST=fake_nodes=2). Also: a
 * sub-communicator, zero counts, a buffer freed and reallocated at the same address. */
#include "mpi_test_util.h"

static int rank, size, ndev, fake_nodes;
static hooks_t hk;
static long (*served_fn)(void);

static int dev_of(int r) { return r % ndev; }
static long served(void) { return served_fn(); }

/* gpustripe must serve a call on the world communicator with device buffers of a supported kind. */
static int expect_served(int device) { return device && fake_nodes == 0; }

enum { K_FLOAT, K_DOUBLE, K_INT, K_INT64, K_LONG, NKINDS };
static const char* kind_name[NKINDS] = {"float", "double", "int", "int64", "long"};
static MPI_Datatype kind_type(int k) {
  switch (k) {
    case K_FLOAT: return MPI_FLOAT;
    case K_DOUBLE: return MPI_DOUBLE;
    case K_INT: return MPI_INT;
    case K_INT64: return MPI_INT64_T;
    default: return MPI_LONG;
  }
}
static size_t kind_size(int k) {
  switch (k) {
    case K_FLOAT: return 4;
    case K_DOUBLE: return 8;
    case K_INT: return 4;
    case K_INT64: return 8;
    default: return sizeof(long);
  }
}
static int is_float(int k) { return k == K_FLOAT || k == K_DOUBLE; }

enum { O_SUM, O_PROD, O_MAX, O_MIN, NOPS };
static const char* op_name[NOPS] = {"sum", "prod", "max", "min"};
static MPI_Op op_of(int o) { return o == O_SUM ? MPI_SUM : o == O_PROD ? MPI_PROD : o == O_MAX ? MPI_MAX : MPI_MIN; }

static uint64_t mix(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

/* Element i of rank r's input in test `seq`: exact in every type, and so are sums and
 * products of up to 4 of them in any order. */
static double value(int k, int op, int r, int seq, size_t i) {
  uint64_t u = mix(((uint64_t)r << 48) ^ ((uint64_t)seq << 32) ^ i);
  if (op == O_PROD) {
    static const double f[] = {0.5, 1, 2, -1, -0.5, 1, -2, 1};
    static const double n[] = {1, 2, -1, 3, -2, 1, -3, 1};
    return is_float(k) ? f[u % 8] : n[u % 8];
  }
  if (is_float(k)) return ((double)(u % 2001) - 1000.0) / 1024.0;
  return (double)(int64_t)(u % 2000001) - 1000000.0;
}

static void put(void* p, int k, size_t i, double v) {
  switch (k) {
    case K_FLOAT: ((float*)p)[i] = (float)v; break;
    case K_DOUBLE: ((double*)p)[i] = v; break;
    case K_INT: ((int*)p)[i] = (int)v; break;
    case K_INT64: ((int64_t*)p)[i] = (int64_t)v; break;
    default: ((long*)p)[i] = (long)v; break;
  }
}
static double get(const void* p, int k, size_t i) {
  switch (k) {
    case K_FLOAT: return ((const float*)p)[i];
    case K_DOUBLE: return ((const double*)p)[i];
    case K_INT: return ((const int*)p)[i];
    case K_INT64: return (double)((const int64_t*)p)[i];
    default: return (double)((const long*)p)[i];
  }
}
static double apply(int op, double a, double b) {
  switch (op) {
    case O_SUM: return a + b;
    case O_PROD: return a * b;
    case O_MAX: return a > b ? a : b;
    default: return a < b ? a : b;
  }
}
/* The reduction over all ranks of element i (of the element index `at` in each input). */
static double reference(int k, int op, int seq, size_t at) {
  double acc = value(k, op, 0, seq, at);
  for (int r = 1; r < size; ++r) acc = apply(op, acc, value(k, op, r, seq, at));
  return acc;
}

static int seq_no;

/* A buffer of n elements of kind k on this rank's device (or the host). */
static buf_t make(int device, size_t bytes) { return buf_new(&hk, device ? dev_of(rank) : -1, bytes); }

static void check_served(long before, int want, const char* what) {
  long got = served() - before;
  if (got != want) {
    fprintf(stderr, "[rank %d] %s: served by gpustripe %ld times, expected %d\n", rank, what, got, want);
    CHECK(got == want);
  }
}

static void allreduce(int k, int op, size_t n, int in_place, int device) {
  int seq = ++seq_no;
  size_t esz = kind_size(k);
  buf_t s = make(device, n * esz), r = make(device, n * esz);
  buf_t* in = in_place ? &r : &s;
  for (size_t i = 0; i < n; ++i) put(in->h, k, i, value(k, op, rank, seq, i));
  buf_push(&hk, in);
  long before = served();
  CHECK(MPI_Allreduce(in_place ? MPI_IN_PLACE : s.p, r.p, (int)n, kind_type(k), op_of(op), MPI_COMM_WORLD) ==
        MPI_SUCCESS);
  char what[128];
  snprintf(what, sizeof what, "allreduce %s %s n=%zu%s", kind_name[k], op_name[op], n, in_place ? " in place" : "");
  check_served(before, n > 0 && expect_served(device), what);
  buf_pull(&hk, &r);
  for (size_t i = 0; i < n; ++i) {
    double want = reference(k, op, seq, i), got = get(r.h, k, i);
    if (got != want) {
      fprintf(stderr, "[rank %d] %s: element %zu is %g, expected %g\n", rank, what, i, got, want);
      CHECK(got == want);
    }
  }
  buf_free(&hk, &s);
  buf_free(&hk, &r);
}

static void reduce(int k, int op, size_t n, int root, int in_place) {
  int seq = ++seq_no;
  size_t esz = kind_size(k);
  int ip = in_place && rank == root;
  buf_t s = make(1, n * esz), r = make(1, n * esz);
  buf_t* in = ip ? &r : &s;
  for (size_t i = 0; i < n; ++i) put(in->h, k, i, value(k, op, rank, seq, i));
  buf_push(&hk, in);
  memset(r.h, 0x7f, n * esz);
  if (!ip) buf_push(&hk, &r);
  long before = served();
  CHECK(MPI_Reduce(ip ? MPI_IN_PLACE : s.p, r.p, (int)n, kind_type(k), op_of(op), root, MPI_COMM_WORLD) ==
        MPI_SUCCESS);
  char what[128];
  snprintf(what, sizeof what, "reduce %s %s n=%zu root %d%s", kind_name[k], op_name[op], n, root,
           in_place ? " in place" : "");
  check_served(before, expect_served(1), what);
  buf_pull(&hk, &r);
  for (size_t i = 0; i < n; ++i) {
    double got = get(r.h, k, i);
    if (rank == root) {
      double want = reference(k, op, seq, i);
      if (got != want) fprintf(stderr, "[rank %d] %s: element %zu is %g, expected %g\n", rank, what, i, got, want);
      CHECK(got == want);
    } else if (!ip) {
      unsigned char* b = (unsigned char*)r.h + i * esz;  /* not the root: its receive buffer untouched */
      for (size_t j = 0; j < esz; ++j) CHECK(b[j] == 0x7f);
    }
  }
  buf_free(&hk, &s);
  buf_free(&hk, &r);
}

static void reduce_scatter(int k, int op, size_t n, int in_place) {
  int seq = ++seq_no;
  size_t esz = kind_size(k), total = n * size;
  buf_t s = make(1, total * esz), r = make(1, (in_place ? total : n) * esz);
  buf_t* in = in_place ? &r : &s;
  for (size_t i = 0; i < total; ++i) put(in->h, k, i, value(k, op, rank, seq, i));
  buf_push(&hk, in);
  long before = served();
  CHECK(MPI_Reduce_scatter_block(in_place ? MPI_IN_PLACE : s.p, r.p, (int)n, kind_type(k), op_of(op),
                                 MPI_COMM_WORLD) == MPI_SUCCESS);
  char what[128];
  snprintf(what, sizeof what, "reduce_scatter_block %s %s n=%zu%s", kind_name[k], op_name[op], n,
           in_place ? " in place" : "");
  check_served(before, expect_served(1), what);
  buf_pull(&hk, &r);
  for (size_t i = 0; i < n; ++i) {
    double want = reference(k, op, seq, rank * n + i), got = get(r.h, k, i);
    if (got != want) fprintf(stderr, "[rank %d] %s: element %zu is %g, expected %g\n", rank, what, i, got, want);
    CHECK(got == want);
  }
  buf_free(&hk, &s);
  buf_free(&hk, &r);
}

/* Alltoall and allgather move bytes: blocks of `count` elements of `type` (esz bytes). */
static void alltoall(size_t count, MPI_Datatype type, size_t esz, int in_place, int device) {
  int seq = ++seq_no;
  size_t block = count * esz, total = block * size;
  buf_t s = make(device, total), r = make(device, total);
  buf_t* in = in_place ? &r : &s;
  for (int j = 0; j < size; ++j) fill(in->h + j * block, block, rank, j, seq);
  buf_push(&hk, in);
  long before = served();
  CHECK(MPI_Alltoall(in_place ? MPI_IN_PLACE : s.p, (int)count, type, r.p, (int)count, type, MPI_COMM_WORLD) ==
        MPI_SUCCESS);
  check_served(before, count > 0 && expect_served(device), "alltoall");
  buf_pull(&hk, &r);
  for (int i = 0; i < size; ++i) {
    if (!same(r.h + i * block, block, i, rank, seq))
      fprintf(stderr, "[rank %d] alltoall count %zu%s: block from rank %d wrong\n", rank, count,
              in_place ? " in place" : "", i);
    CHECK(same(r.h + i * block, block, i, rank, seq));
  }
  buf_free(&hk, &s);
  buf_free(&hk, &r);
}

static void allgather(size_t count, MPI_Datatype type, size_t esz, int in_place, int device) {
  int seq = ++seq_no;
  size_t block = count * esz, total = block * size;
  buf_t s = make(device, block), r = make(device, total);
  if (in_place) {
    fill(r.h + rank * block, block, rank, 0, seq);
    buf_push(&hk, &r);
  } else {
    fill(s.h, block, rank, 0, seq);
    buf_push(&hk, &s);
  }
  long before = served();
  CHECK(MPI_Allgather(in_place ? MPI_IN_PLACE : s.p, (int)count, type, r.p, (int)count, type, MPI_COMM_WORLD) ==
        MPI_SUCCESS);
  check_served(before, count > 0 && expect_served(device), "allgather");
  buf_pull(&hk, &r);
  for (int i = 0; i < size; ++i) {
    if (!same(r.h + i * block, block, i, 0, seq))
      fprintf(stderr, "[rank %d] allgather count %zu%s: block of rank %d wrong\n", rank, count,
              in_place ? " in place" : "", i);
    CHECK(same(r.h + i * block, block, i, 0, seq));
  }
  buf_free(&hk, &s);
  buf_free(&hk, &r);
}

static void bcast(size_t bytes, int root, int device) {
  int seq = ++seq_no;
  buf_t b = make(device, bytes);
  if (rank == root) fill(b.h, bytes, root, 0, seq);
  buf_push(&hk, &b);
  long before = served();
  CHECK(MPI_Bcast(b.p, (int)bytes, MPI_BYTE, root, MPI_COMM_WORLD) == MPI_SUCCESS);
  check_served(before, bytes > 0 && expect_served(device), "bcast");
  buf_pull(&hk, &b);
  if (!same(b.h, bytes, root, 0, seq)) fprintf(stderr, "[rank %d] bcast %zu from %d wrong\n", rank, bytes, root);
  CHECK(same(b.h, bytes, root, 0, seq));
  buf_free(&hk, &b);
}

static void every_reduction(void) {
  const size_t counts[] = {1, 3, 1000, 4099, 100003};
  const int ncounts = sizeof counts / sizeof counts[0];
  for (int k = 0; k < NKINDS; ++k)
    for (int op = 0; op < NOPS; ++op)
      for (int c = 0; c < ncounts; ++c) {
        size_t n = counts[c];
        allreduce(k, op, n, c % 2, 1);
        reduce(k, op, n, (c + op) % size, c % 2 == 0);
        reduce_scatter(k, op, n, (c + k) % 2);
      }
  /* Large enough for the pipelined copy-engine schedules at the default thresholds. */
  allreduce(K_FLOAT, O_SUM, (1u << 20) + 5, 0, 1);
  allreduce(K_DOUBLE, O_MAX, (1u << 19) + 3, 1, 1);
  reduce_scatter(K_FLOAT, O_SUM, (1u << 18) + 1, 0);
  reduce(K_INT, O_SUM, (1u << 20) + 7, size - 1, 0);
}

static void every_exchange(void) {
  const size_t bytes[] = {1, 7, 4096, 65537, 300000, (1u << 20) + 9};
  const int nb = sizeof bytes / sizeof bytes[0];
  for (int c = 0; c < nb; ++c) {
    for (int ip = 0; ip < 2; ++ip) {
      alltoall(bytes[c], MPI_BYTE, 1, ip, 1);
      allgather(bytes[c], MPI_BYTE, 1, ip, 1);
    }
    bcast(bytes[c], c % size, 1);
  }
  alltoall(1000, MPI_INT, 4, 0, 1);
  allgather(1001, MPI_DOUBLE, 8, 0, 1);
  /* Host buffers: the MPI runs them, untouched. */
  alltoall(5000, MPI_BYTE, 1, 0, 0);
  allgather(5000, MPI_BYTE, 1, 1, 0);
  bcast(5000, 0, 0);
  allreduce(K_DOUBLE, O_SUM, 777, 0, 0);
  /* Zero counts. */
  allreduce(K_FLOAT, O_SUM, 0, 0, 1);
  alltoall(0, MPI_BYTE, 1, 0, 1);
}

static void user_sum(void* in, void* inout, int* len, MPI_Datatype* t) {
  (void)t;
  for (int i = 0; i < *len; ++i) ((float*)inout)[i] += ((float*)in)[i];
}

/* Cases the MPI must run (device buffers staged through the host), still correct. */
static void fallbacks(void) {
  const size_t n = 3001;
  /* A user op, twice (the note that it runs slowly comes once: mpi_coll_notes_np2). */
  for (int rep = 0; rep < 2; ++rep) {
    int seq = ++seq_no;
    buf_t b = make(1, n * 4);
    for (size_t i = 0; i < n; ++i) put(b.h, K_FLOAT, i, value(K_FLOAT, O_SUM, rank, seq, i));
    buf_push(&hk, &b);
    MPI_Op mine;
    MPI_Op_create(user_sum, 1, &mine);
    long before = served();
    CHECK(MPI_Allreduce(MPI_IN_PLACE, b.p, (int)n, MPI_FLOAT, mine, MPI_COMM_WORLD) == MPI_SUCCESS);
    check_served(before, 0, "allreduce with a user op");
    buf_pull(&hk, &b);
    for (size_t i = 0; i < n; ++i) CHECK(get(b.h, K_FLOAT, i) == reference(K_FLOAT, O_SUM, seq, i));
    MPI_Op_free(&mine);
    buf_free(&hk, &b);
  }
  /* A type the kernels do not have (long double: no GPU arithmetic). */
  {
    const size_t ld = sizeof(long double);
    buf_t s = make(1, n * ld), r = make(1, n * ld);
    for (size_t i = 0; i < n; ++i) ((long double*)s.h)[i] = (long double)(rank + i % 100);
    buf_push(&hk, &s);
    long before = served();
    CHECK(MPI_Allreduce(s.p, r.p, (int)n, MPI_LONG_DOUBLE, MPI_SUM, MPI_COMM_WORLD) == MPI_SUCCESS);
    check_served(before, 0, "allreduce of MPI_LONG_DOUBLE");
    buf_pull(&hk, &r);
    for (size_t i = 0; i < n; ++i)
      CHECK(((long double*)r.h)[i] == (long double)(size * (size - 1) / 2 + size * (int)(i % 100)));
    buf_free(&hk, &s);
    buf_free(&hk, &r);
  }
  /* A non-contiguous type: every other float; the gaps stay as they were. */
  {
    MPI_Datatype every_other;
    MPI_Type_vector((int)n, 1, 2, MPI_FLOAT, &every_other);
    MPI_Type_commit(&every_other);
    buf_t b = make(1, 2 * n * 4);
    for (size_t i = 0; i < 2 * n; ++i) ((float*)b.h)[i] = rank == 0 || i % 2 ? (float)(i + 0.5) : -1.0f;
    buf_push(&hk, &b);
    long before = served();
    CHECK(MPI_Bcast(b.p, 1, every_other, 0, MPI_COMM_WORLD) == MPI_SUCCESS);
    check_served(before, 0, "bcast of a vector type");
    buf_pull(&hk, &b);
    for (size_t i = 0; i < 2 * n; ++i) {
      if (((float*)b.h)[i] != (float)(i + 0.5)) fprintf(stderr, "[rank %d] vector bcast: element %zu is %g\n", rank, i, ((float*)b.h)[i]);
      CHECK(((float*)b.h)[i] == (float)(i + 0.5));
    }
    MPI_Type_free(&every_other);
    buf_free(&hk, &b);
  }
  /* Ranks mixing host and device buffers: every rank must take the same way. */
  {
    int seq = ++seq_no;
    buf_t b = make(rank != 0, n * 8);
    for (size_t i = 0; i < n; ++i) put(b.h, K_DOUBLE, i, value(K_DOUBLE, O_MAX, rank, seq, i));
    buf_push(&hk, &b);
    long before = served();
    CHECK(MPI_Allreduce(MPI_IN_PLACE, b.p, (int)n, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD) == MPI_SUCCESS);
    check_served(before, 0, "allreduce with rank 0 on the host");
    buf_pull(&hk, &b);
    for (size_t i = 0; i < n; ++i) CHECK(get(b.h, K_DOUBLE, i) == reference(K_DOUBLE, O_MAX, seq, i));
    buf_free(&hk, &b);
  }
}

/* The "v", rooted and scan forms: gather(v), scatterv, allgatherv, scan, exscan and
 * reduce_scatter with per-rank counts run on gpustripe; a scan in place runs on the MPI, device
 * buffers staged through the host (a non-CUDA-aware MPI would crash on the device pointers). */
static void staged_only(void) {
  const int n = 1001;
  int* counts = malloc(sizeof(int) * size);
  int* displs = malloc(sizeof(int) * size);
  int total = 0;
  for (int r = 0; r < size; ++r) {
    counts[r] = n + r;
    displs[r] = total + 3;  /* gaps between the blocks */
    total += counts[r] + 3;
  }
  long before = served();
  /* Gather to the last rank. */
  {
    int seq = ++seq_no, root = size - 1;
    buf_t s = make(1, n), r = make(1, (size_t)n * size);
    fill(s.h, n, rank, 1, seq);
    buf_push(&hk, &s);
    CHECK(MPI_Gather(s.p, n, MPI_BYTE, r.p, n, MPI_BYTE, root, MPI_COMM_WORLD) == MPI_SUCCESS);
    buf_pull(&hk, &r);
    if (rank == root)
      for (int i = 0; i < size; ++i) CHECK(same(r.h + (size_t)i * n, n, i, 1, seq));
    buf_free(&hk, &s);
    buf_free(&hk, &r);
  }
  check_served(before, expect_served(1), "gather");
  /* Scatterv from rank 0 with gaps, and gatherv of it back to the last rank in place there. */
  before = served();
  {
    int seq = ++seq_no, last = size - 1;
    buf_t s = make(1, total), r = make(1, (size_t)counts[rank]);
    for (int i = 0; i < size; ++i) fill(s.h + displs[i], counts[i], i, 4, seq);
    buf_push(&hk, &s);
    CHECK(MPI_Scatterv(s.p, counts, displs, MPI_BYTE, r.p, counts[rank], MPI_BYTE, 0, MPI_COMM_WORLD) == MPI_SUCCESS);
    buf_pull(&hk, &r);
    CHECK(same(r.h, counts[rank], rank, 4, seq));
    buf_t g = make(1, total);
    memset(g.h, 0xee, total);
    if (rank == last) memcpy(g.h + displs[last], r.h, counts[last]);
    buf_push(&hk, &g);
    const void* in = rank == last ? MPI_IN_PLACE : (const void*)r.p;
    CHECK(MPI_Gatherv(in, counts[rank], MPI_BYTE, g.p, counts, displs, MPI_BYTE, last, MPI_COMM_WORLD) == MPI_SUCCESS);
    buf_pull(&hk, &g);
    if (rank == last)
      for (int i = 0; i < size; ++i) {
        CHECK(same(g.h + displs[i], counts[i], i, 4, seq));
        CHECK(g.h[displs[i] - 1] == 0xee);
      }
    buf_free(&hk, &s);
    buf_free(&hk, &r);
    buf_free(&hk, &g);
  }
  check_served(before, 2 * expect_served(1), "scatterv and gatherv");
  /* Allgatherv with gaps: the gaps keep what they held (gpustripe: each rank pulls its blocks). */
  before = served();
  {
    int seq = ++seq_no;
    buf_t s = make(1, counts[rank]), r = make(1, total);
    fill(s.h, counts[rank], rank, 2, seq);
    buf_push(&hk, &s);
    memset(r.h, 0xee, total);
    buf_push(&hk, &r);
    CHECK(MPI_Allgatherv(s.p, counts[rank], MPI_BYTE, r.p, counts, displs, MPI_BYTE, MPI_COMM_WORLD) == MPI_SUCCESS);
    buf_pull(&hk, &r);
    for (int i = 0; i < size; ++i) {
      CHECK(same(r.h + displs[i], counts[i], i, 2, seq));
      CHECK(r.h[displs[i] - 1] == 0xee);
    }
    buf_free(&hk, &s);
    buf_free(&hk, &r);
  }
  check_served(before, expect_served(1), "allgatherv");
  /* The same in place, with another layout on every rank (displacements are the receiver's own). */
  before = served();
  {
    int seq = ++seq_no;
    int* mine = malloc(sizeof(int) * size);
    int span = 0;
    for (int i = 0; i < size; ++i) {
      mine[i] = (size - 1 - i) * (n + size + 5) + rank;  /* blocks in reverse order, shifted by rank */
      if (mine[i] + counts[i] > span) span = mine[i] + counts[i];
    }
    buf_t r = make(1, (size_t)span);
    memset(r.h, 0xee, (size_t)span);
    fill(r.h + mine[rank], counts[rank], rank, 3, seq);
    buf_push(&hk, &r);
    CHECK(MPI_Allgatherv(MPI_IN_PLACE, 0, MPI_BYTE, r.p, counts, mine, MPI_BYTE, MPI_COMM_WORLD) == MPI_SUCCESS);
    buf_pull(&hk, &r);
    for (int i = 0; i < size; ++i) CHECK(same(r.h + mine[i], counts[i], i, 3, seq));
    if (rank > 0) CHECK(r.h[rank - 1] == 0xee);
    buf_free(&hk, &r);
    free(mine);
  }
  check_served(before, expect_served(1), "allgatherv in place");
  before = served();
  /* Inclusive scan of ints. */
  {
    buf_t s = make(1, n * 4), r = make(1, n * 4);
    for (int i = 0; i < n; ++i) ((int*)s.h)[i] = rank + i;
    buf_push(&hk, &s);
    CHECK(MPI_Scan(s.p, r.p, n, MPI_INT, MPI_SUM, MPI_COMM_WORLD) == MPI_SUCCESS);
    buf_pull(&hk, &r);
    for (int i = 0; i < n; ++i) CHECK(((int*)r.h)[i] == rank * (rank + 1) / 2 + (rank + 1) * i);
    buf_free(&hk, &s);
    buf_free(&hk, &r);
  }
  check_served(before, expect_served(1), "scan");
  /* Exclusive scan of doubles (MAX); rank 0's receive buffer keeps what it held. */
  before = served();
  {
    buf_t s = make(1, n * 8), r = make(1, n * 8);
    for (int i = 0; i < n; ++i) {
      ((double*)s.h)[i] = 0.5 * (rank + i);
      ((double*)r.h)[i] = -7;
    }
    buf_push(&hk, &s);
    buf_push(&hk, &r);
    CHECK(MPI_Exscan(s.p, r.p, n, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD) == MPI_SUCCESS);
    buf_pull(&hk, &r);
    for (int i = 0; i < n; ++i) CHECK(((double*)r.h)[i] == (rank == 0 ? -7 : 0.5 * (rank - 1 + i)));
    buf_free(&hk, &s);
    buf_free(&hk, &r);
  }
  check_served(before, expect_served(1), "exscan");
  /* Scan in place: the MPI's (a rank's result would overwrite an input the later ranks read). */
  before = served();
  {
    buf_t r = make(1, n * 4);
    for (int i = 0; i < n; ++i) ((int*)r.h)[i] = rank + i;
    buf_push(&hk, &r);
    CHECK(MPI_Scan(MPI_IN_PLACE, r.p, n, MPI_INT, MPI_SUM, MPI_COMM_WORLD) == MPI_SUCCESS);
    buf_pull(&hk, &r);
    for (int i = 0; i < n; ++i) CHECK(((int*)r.h)[i] == rank * (rank + 1) / 2 + (rank + 1) * i);
    buf_free(&hk, &r);
  }
  check_served(before, 0, "scan in place");
  /* Reduce_scatter with a count per rank: gpustripe's reduce-scatter over those blocks. */
  before = served();
  {
    int sum = 0;
    for (int r = 0; r < size; ++r) sum += counts[r];
    buf_t s = make(1, (size_t)sum * 8), r = make(1, (size_t)counts[rank] * 8);
    for (int i = 0; i < sum; ++i) ((double*)s.h)[i] = 0.5 * rank + i;
    buf_push(&hk, &s);
    CHECK(MPI_Reduce_scatter(s.p, r.p, counts, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD) == MPI_SUCCESS);
    buf_pull(&hk, &r);
    int off = 0;
    for (int q = 0; q < rank; ++q) off += counts[q];
    for (int i = 0; i < counts[rank]; ++i)
      CHECK(((double*)r.h)[i] == 0.25 * size * (size - 1) + (double)size * (off + i));
    buf_free(&hk, &s);
    buf_free(&hk, &r);
  }
  check_served(before, expect_served(1), "reduce_scatter with a count per rank");
  free(counts);
  free(displs);
}

/* A receive buffer freed and reallocated (often at the same address) between calls:
 * the peers' mappings of the old one must not be used. */
/* Bytes rank i sends rank j in the alltoallv checks: every pair its own size, some empty. */
static int a2a_count(int i, int j, int symmetric) {
  if (symmetric) return 300 + (i + j) * 37;
  return (i + 2 * j) % 4 == 3 ? 0 : 500 + i * 71 + j * 13;
}

/* MPI_Alltoallv / MPI_Alltoallw / MPI_Ialltoallv on device buffers: blocks of every size at
 * displacements with gaps (in reverse order on the send side), checked byte by byte, the gaps
 * keeping what they held; gpustripe serves them (each rank pulls its blocks from where the
 * senders' layouts, carried by the entry exchange, say). */
static void alltoallv_forms(void) {
  int* sc = malloc(sizeof(int) * size);
  int* sd = malloc(sizeof(int) * size);
  int* rc = malloc(sizeof(int) * size);
  int* rd = malloc(sizeof(int) * size);
  MPI_Datatype* types = malloc(sizeof(MPI_Datatype) * size);
  for (int form = 0; form < 4; ++form) { /* 0 v, 1 v in place, 2 w, 3 Ialltoallv */
    const int in_place = form == 1, sym = form == 1;
    int seq = ++seq_no, sspan = 0, rspan = 0;
    for (int j = size - 1; j >= 0; --j) { /* send blocks in reverse rank order, 5-byte gaps */
      sc[j] = a2a_count(rank, j, sym);
      sd[j] = sspan + 5;
      sspan = sd[j] + sc[j];
    }
    for (int i = 0; i < size; ++i) {
      rc[i] = a2a_count(i, rank, sym);
      rd[i] = rspan + 3;
      rspan = rd[i] + rc[i];
      types[i] = MPI_BYTE;
    }
    buf_t s = make(1, (size_t)sspan), r = make(1, (size_t)rspan);
    memset(r.h, 0xee, (size_t)rspan);
    if (in_place) {
      for (int j = 0; j < size; ++j) fill(r.h + rd[j], rc[j], rank, j, seq);
    } else {
      for (int j = 0; j < size; ++j) fill(s.h + sd[j], sc[j], rank, j, seq);
      buf_push(&hk, &s);
    }
    buf_push(&hk, &r);
    long before = served();
    static const char* names[] = {"alltoallv", "alltoallv in place", "alltoallw", "ialltoallv"};
    const char* what = names[form];
    if (form == 0) {
      CHECK(MPI_Alltoallv(s.p, sc, sd, MPI_BYTE, r.p, rc, rd, MPI_BYTE, MPI_COMM_WORLD) == MPI_SUCCESS);
    } else if (form == 1) {
      CHECK(MPI_Alltoallv(MPI_IN_PLACE, NULL, NULL, MPI_BYTE, r.p, rc, rd, MPI_BYTE, MPI_COMM_WORLD) == MPI_SUCCESS);
    } else if (form == 2) {
      CHECK(MPI_Alltoallw(s.p, sc, sd, types, r.p, rc, rd, types, MPI_COMM_WORLD) == MPI_SUCCESS);
    } else {
      MPI_Request req;
      CHECK(MPI_Ialltoallv(s.p, sc, sd, MPI_BYTE, r.p, rc, rd, MPI_BYTE, MPI_COMM_WORLD, &req) == MPI_SUCCESS);
      CHECK(MPI_Wait(&req, MPI_STATUS_IGNORE) == MPI_SUCCESS);
    }
    check_served(before, expect_served(1), what);
    buf_pull(&hk, &r);
    for (int i = 0; i < size; ++i) {
      if (!same(r.h + rd[i], rc[i], i, rank, seq))
        fprintf(stderr, "[rank %d] %s: block from rank %d wrong\n", rank, what, i);
      CHECK(same(r.h + rd[i], rc[i], i, rank, seq));
      CHECK(r.h[rd[i] - 1] == 0xee);
    }
    buf_free(&hk, &s);
    buf_free(&hk, &r);
  }
  free(sc);
  free(sd);
  free(rc);
  free(rd);
  free(types);
}

static void freed_and_reallocated(void) {
  const size_t n = 50000;
  for (int round = 0; round < 4; ++round) {
    int seq = ++seq_no;
    buf_t b = make(1, n * 4);
    for (size_t i = 0; i < n; ++i) put(b.h, K_INT, i, value(K_INT, O_SUM, rank, seq, i));
    buf_push(&hk, &b);
    CHECK(MPI_Allreduce(MPI_IN_PLACE, b.p, (int)n, MPI_INT, MPI_SUM, MPI_COMM_WORLD) == MPI_SUCCESS);
    buf_pull(&hk, &b);
    for (size_t i = 0; i < n; ++i) CHECK(get(b.h, K_INT, i) == reference(K_INT, O_SUM, seq, i));
    buf_free(&hk, &b);
  }
}

/* A sub-communicator: even and odd ranks; each half reduces on its own. */
static void sub_communicator(void) {
  MPI_Comm half;
  MPI_Comm_split(MPI_COMM_WORLD, rank % 2, rank, &half);
  int hr, hs;
  MPI_Comm_rank(half, &hr);
  MPI_Comm_size(half, &hs);
  const size_t n = 20001;
  buf_t b = make(1, n * 8);
  for (size_t i = 0; i < n; ++i) ((double*)b.h)[i] = rank + 0.25 * (double)(i % 7);
  buf_push(&hk, &b);
  CHECK(MPI_Allreduce(MPI_IN_PLACE, b.p, (int)n, MPI_DOUBLE, MPI_SUM, half) == MPI_SUCCESS);
  buf_pull(&hk, &b);
  double ranks = 0;
  for (int r = rank % 2; r < size; r += 2) ranks += r;
  for (size_t i = 0; i < n; ++i) CHECK(((double*)b.h)[i] == ranks + hs * 0.25 * (double)(i % 7));
  (void)hr;
  buf_free(&hk, &b);
  MPI_Comm_free(&half);
}

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  CHECK(size >= 2);
  hk = hooks();
  ndev = hk.device_count();
  CHECK(ndev >= 1);
  served_fn = (long (*)(void))dlsym(RTLD_DEFAULT, "gpustripe_mpi_test_coll_served");
  CHECK(served_fn != NULL);
  fake_nodes = test_fake_nodes();
  every_reduction();
  every_exchange();
  fallbacks();
  staged_only();
  alltoallv_forms();
  freed_and_reallocated();
  sub_communicator();
  MPI_Barrier(MPI_COMM_WORLD);
  if (rank == 0) printf("mpi_coll: all checks passed on %d ranks\n", size);
  MPI_Finalize();
  return 0;
}
