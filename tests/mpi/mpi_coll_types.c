/* Every reduction form x predefined op x type through the interposer, on device buffers:
 * MPI_Allreduce, MPI_Reduce, MPI_Reduce_scatter_block and MPI_Reduce_scatter (per-rank
 * counts, one of them 0), in place and not, MPI_Scan and MPI_Exscan; the signed and unsigned integer types of every
 * width (MPI_CHAR and MPI_BYTE included), float, double, C bool, the MINLOC/MAXLOC pair
 * types, a complex type (SUM) and a contiguous derived type. Each result is compared exactly
 * with a host reference computed here from every rank's input (the data make float sums and
 * products exact in any order); at the smallest count the reference is checked once against
 * the MPI's own result on host buffers, so the reference means what the MPI means (char's
 * sign, logical results, MINLOC ties). Every (op, type) the MPI rejects must fail on device
 * buffers with the MPI's error class too. The interposer's counter of collectives it served
 * must grow by one for every call the GPU kernels take (all of the above but complex
 * products) and stay put otherwise (errors, a user op).
 *
 *   mpi_coll_types [--counts 1,5,1000] [--bytes 1M,256M] [--types a,b] [--ops a,b]
 * --bytes gives per-rank message sizes instead of element counts. Prints
 * "mpi_coll_types: all checks passed on N ranks" and one "ROW {json}" per (type, op, count). */
#include "mpi_test_util.h"

#include <complex.h>
#include <limits.h>
#include <stdbool.h>

static int rank, size, ndev, fake_nodes;
static hooks_t hk;
static long (*served_fn)(void);

enum { KI, KF, KB, KP, KC };
typedef struct {
  const char* name;
  MPI_Datatype t;     /* MPI_DATATYPE_NULL: made at start (derived) */
  int kind;
  int width;          /* bytes of an integer / float value (pairs: of the value) */
  int is_signed;
  size_t extent;      /* bytes per element */
  int vkind;          /* pairs: KI or KF value */
  int per;            /* base elements per element (derived: 3) */
} type_t;

static type_t types[] = {
    {"char", 0, KI, 1, CHAR_MIN < 0, 1, 0, 1},
    {"signed_char", 0, KI, 1, 1, 1, 0, 1},
    {"unsigned_char", 0, KI, 1, 0, 1, 0, 1},
    {"byte", 0, KI, 1, 0, 1, 0, 1},
    {"short", 0, KI, sizeof(short), 1, sizeof(short), 0, 1},
    {"unsigned_short", 0, KI, sizeof(short), 0, sizeof(short), 0, 1},
    {"int", 0, KI, sizeof(int), 1, sizeof(int), 0, 1},
    {"unsigned", 0, KI, sizeof(int), 0, sizeof(int), 0, 1},
    {"long", 0, KI, sizeof(long), 1, sizeof(long), 0, 1},
    {"unsigned_long", 0, KI, sizeof(long), 0, sizeof(long), 0, 1},
    {"long_long", 0, KI, sizeof(long long), 1, sizeof(long long), 0, 1},
    {"unsigned_long_long", 0, KI, sizeof(long long), 0, sizeof(long long), 0, 1},
    {"int8", 0, KI, 1, 1, 1, 0, 1},
    {"uint8", 0, KI, 1, 0, 1, 0, 1},
    {"int16", 0, KI, 2, 1, 2, 0, 1},
    {"uint16", 0, KI, 2, 0, 2, 0, 1},
    {"int32", 0, KI, 4, 1, 4, 0, 1},
    {"uint32", 0, KI, 4, 0, 4, 0, 1},
    {"int64", 0, KI, 8, 1, 8, 0, 1},
    {"uint64", 0, KI, 8, 0, 8, 0, 1},
    {"float", 0, KF, 4, 1, 4, 0, 1},
    {"double", 0, KF, 8, 1, 8, 0, 1},
    {"c_bool", 0, KB, 1, 0, 1, 0, 1},
    {"float_int", 0, KP, 4, 1, 8, KF, 1},
    {"double_int", 0, KP, 8, 1, 16, KF, 1},
    {"long_int", 0, KP, sizeof(long), 1, 16, KI, 1},
    {"2int", 0, KP, 4, 1, 8, KI, 1},
    {"short_int", 0, KP, 2, 1, 8, KI, 1},
    {"float_complex", 0, KC, 4, 1, 8, 0, 1},
    {"contig3_float", 0, KF, 4, 1, 12, 0, 3},
};
enum { NTYPES = sizeof types / sizeof *types };

static void init_types(void) {
  MPI_Datatype t[NTYPES] = {MPI_CHAR,      MPI_SIGNED_CHAR,    MPI_UNSIGNED_CHAR, MPI_BYTE,
                            MPI_SHORT,     MPI_UNSIGNED_SHORT, MPI_INT,           MPI_UNSIGNED,
                            MPI_LONG,      MPI_UNSIGNED_LONG,  MPI_LONG_LONG,     MPI_UNSIGNED_LONG_LONG,
                            MPI_INT8_T,    MPI_UINT8_T,        MPI_INT16_T,       MPI_UINT16_T,
                            MPI_INT32_T,   MPI_UINT32_T,       MPI_INT64_T,       MPI_UINT64_T,
                            MPI_FLOAT,     MPI_DOUBLE,         MPI_C_BOOL,        MPI_FLOAT_INT,
                            MPI_DOUBLE_INT, MPI_LONG_INT,      MPI_2INT,          MPI_SHORT_INT,
                            MPI_C_FLOAT_COMPLEX, MPI_DATATYPE_NULL};
  for (int i = 0; i < NTYPES; ++i) types[i].t = t[i];
  MPI_Type_contiguous(3, MPI_FLOAT, &types[NTYPES - 1].t);
  MPI_Type_commit(&types[NTYPES - 1].t);
}

enum { O_SUM, O_PROD, O_MAX, O_MIN, O_LAND, O_LOR, O_LXOR, O_BAND, O_BOR, O_BXOR, O_MINLOC, O_MAXLOC, NOPS };
static const char* op_names[NOPS] = {"sum", "prod", "max", "min", "land", "lor",
                                     "lxor", "band", "bor", "bxor", "minloc", "maxloc"};
static MPI_Op mpi_op(int o) {
  static MPI_Op ops[NOPS];
  if (!ops[0]) {
    MPI_Op v[NOPS] = {MPI_SUM, MPI_PROD, MPI_MAX, MPI_MIN, MPI_LAND, MPI_LOR,
                      MPI_LXOR, MPI_BAND, MPI_BOR, MPI_BXOR, MPI_MINLOC, MPI_MAXLOC};
    memcpy(ops, v, sizeof v);
  }
  return ops[o];
}

/* Whether the MPI accepts op o on type t (Open MPI's table: integer types, MPI_CHAR and
 * MPI_BYTE included, take every non-pair op; floats the arithmetic ones; C bool the logical
 * ones; pairs MINLOC/MAXLOC; complex SUM and PROD). The derived type is taken as its base
 * here: the interposer accepts it, and its reference is the base type's. */
static int valid(const type_t* t, int o) {
  switch (t->kind) {
    case KI: return o < O_MINLOC;
    case KF: return o <= O_MIN;
    case KB: return o == O_LAND || o == O_LOR || o == O_LXOR;
    case KP: return o == O_MINLOC || o == O_MAXLOC;
    default: return o == O_SUM || o == O_PROD;
  }
}
/* Whether the GPU kernels take it (the interposer's served counter must grow). */
static int on_gpu(const type_t* t, int o) { return valid(t, o) && !(t->kind == KC && o == O_PROD); }

static uint64_t mix(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

/* ------------------------------------------------------------------ values */
/* Integers travel as int64 (sign- or zero-extended from their width). */
static int64_t load_int(const unsigned char* p, int w, int is_signed) {
  switch (w) {
    case 1: return is_signed ? (int64_t) * (const int8_t*)p : (int64_t) * (const uint8_t*)p;
    case 2: return is_signed ? (int64_t) * (const int16_t*)p : (int64_t) * (const uint16_t*)p;
    case 4: return is_signed ? (int64_t) * (const int32_t*)p : (int64_t) * (const uint32_t*)p;
    default: return *(const int64_t*)p;
  }
}
static void store_int(unsigned char* p, int w, int64_t v) {
  switch (w) {
    case 1: *(uint8_t*)p = (uint8_t)v; break;
    case 2: *(uint16_t*)p = (uint16_t)v; break;
    case 4: *(uint32_t*)p = (uint32_t)v; break;
    default: *(int64_t*)p = v; break;
  }
}
static double load_float(const unsigned char* p, int w) { return w == 4 ? *(const float*)p : *(const double*)p; }
static void store_float(unsigned char* p, int w, double v) {
  if (w == 4) *(float*)p = (float)v;
  else *(double*)p = v;
}
static size_t idx_offset(const type_t* t) { return t->width == 8 ? 8 : 4; } /* pairs: where the int index sits */

/* An integer input for op o: small enough that sums and products of a few stay exact in every width. */
static int64_t int_input(int o, uint64_t u, int w, int is_signed) {
  int64_t range = w == 1 ? 30 : 1000;
  switch (o) {
    case O_PROD: { static const int64_t f[] = {1, 2, -1, 3, -2, 1, 1, -1}; int64_t v = f[u % 8]; return is_signed ? v : (v < 0 ? -v : v); }
    case O_LAND: case O_LOR: case O_LXOR: { static const int64_t f[] = {0, 1, 7, -3, 1, 0, 1, 2}; int64_t v = f[u % 8]; return is_signed ? v : (v < 0 ? -v : v); }
    case O_BAND: case O_BOR: case O_BXOR: return (int64_t)(u >> 8);
    default: return is_signed ? (int64_t)(u % (2 * range + 1)) - range : (int64_t)(u % (2 * range + 1));
  }
}
static double float_input(int o, uint64_t u) {
  if (o == O_PROD) {
    static const double f[] = {0.5, 1, 2, -1, -0.5, 1, -2, 1};
    return f[u % 8];
  }
  return ((double)(u % 2001) - 1000.0) / 4.0;
}

/* Element i of rank r's input for (type, op), written at p. */
static void input(const type_t* t, int o, int r, int seq, size_t i, unsigned char* p) {
  memset(p, 0, t->extent);
  for (int b = 0; b < t->per; ++b) {
    uint64_t u = mix(((uint64_t)r << 48) ^ ((uint64_t)seq << 32) ^ (i * t->per + b));
    unsigned char* q = p + b * (t->extent / t->per);
    switch (t->kind) {
      case KI: store_int(q, t->width, int_input(o, u, t->width, t->is_signed)); break;
      case KF: store_float(q, t->width, float_input(o, u)); break;
      case KB: *(bool*)q = (o == O_LAND ? u % 4 != 0 : u % 3 == 0); break;
      case KP:
        /* Few distinct values: ties, where MINLOC/MAXLOC take the smaller index. */
        if (t->vkind == KF) store_float(q, t->width, (double)(u % 4));
        else store_int(q, t->width, (int64_t)(u % 4) - 1);
        *(int32_t*)(q + idx_offset(t)) = (int32_t)((u >> 8) % 16);
        break;
      default:
        store_float(q, 4, float_input(o, u));
        store_float(q + 4, 4, float_input(o, u >> 16));
        break;
    }
  }
}

static int64_t int_op(int o, int64_t a, int64_t b, int is_signed) {
  switch (o) {
    case O_SUM: return (int64_t)((uint64_t)a + (uint64_t)b);
    case O_PROD: return (int64_t)((uint64_t)a * (uint64_t)b);
    case O_MAX: return is_signed ? (a > b ? a : b) : ((uint64_t)a > (uint64_t)b ? a : b);
    case O_MIN: return is_signed ? (a < b ? a : b) : ((uint64_t)a < (uint64_t)b ? a : b);
    case O_LAND: return (a != 0) && (b != 0);
    case O_LOR: return (a != 0) || (b != 0);
    case O_LXOR: return (a != 0) != (b != 0);
    case O_BAND: return a & b;
    case O_BOR: return a | b;
    default: return a ^ b;
  }
}
static double float_op(int o, double a, double b) {
  switch (o) {
    case O_SUM: return a + b;
    case O_PROD: return a * b;
    case O_MAX: return a > b ? a : b;
    default: return a < b ? a : b;
  }
}

/* acc = op(acc, x) for one element; the value arithmetic the MPI does. */
static void fold(const type_t* t, int o, unsigned char* acc, const unsigned char* x) {
  for (int b = 0; b < t->per; ++b) {
    size_t at = b * (t->extent / t->per);
    unsigned char* a = acc + at;
    const unsigned char* y = x + at;
    switch (t->kind) {
      case KI: {
        int64_t v = int_op(o, load_int(a, t->width, t->is_signed), load_int(y, t->width, t->is_signed), t->is_signed);
        store_int(a, t->width, v);
        break;
      }
      case KF: store_float(a, t->width, float_op(o, load_float(a, t->width), load_float(y, t->width))); break;
      case KB: *(bool*)a = (bool)int_op(o, *(bool*)a, *(const bool*)y, 0); break;
      case KP: {
        double va = t->vkind == KF ? load_float(a, t->width) : (double)load_int(a, t->width, 1);
        double vb = t->vkind == KF ? load_float(y, t->width) : (double)load_int(y, t->width, 1);
        int32_t ia = *(int32_t*)(a + idx_offset(t)), ib = *(const int32_t*)(y + idx_offset(t));
        int b_wins = o == O_MINLOC ? vb < va : vb > va;
        if (b_wins) memcpy(a, y, t->extent);
        else if (va == vb && ib < ia) *(int32_t*)(a + idx_offset(t)) = ib;
        break;
      }
      default: {
        float complex ca = *(float complex*)a, cb = *(const float complex*)y;
        *(float complex*)a = o == O_SUM ? ca + cb : ca * cb;
        break;
      }
    }
  }
}

/* Whether two elements mean the same (pairs: value and index; their padding is not data). */
static int same_elem(const type_t* t, const unsigned char* a, const unsigned char* b) {
  if (t->kind != KP) return memcmp(a, b, t->extent) == 0;
  return memcmp(a, b, t->width) == 0 && memcmp(a + idx_offset(t), b + idx_offset(t), 4) == 0;
}

/* ------------------------------------------------------------------ forms */
static long served(void) { return served_fn(); }
static int seq_no;
static int failures;

/* The reduction over ranks 0..last of input element `at` into out. */
static void reference_upto(const type_t* t, int o, int seq, size_t at, int last, unsigned char* out) {
  unsigned char x[64];
  input(t, o, 0, seq, at, out);
  for (int r = 1; r <= last; ++r) {
    input(t, o, r, seq, at, x);
    fold(t, o, out, x);
  }
}
static int ref_last; /* the last rank the reference reduces (every rank but in a scan) */
static void reference(const type_t* t, int o, int seq, size_t at, unsigned char* out) {
  reference_upto(t, o, seq, at, ref_last, out);
}

static void fill_input(const type_t* t, int o, int seq, unsigned char* p, size_t n) {
  for (size_t i = 0; i < n; ++i) input(t, o, rank, seq, i, p + i * t->extent);
}

/* Compares n elements of got (element k is reduced input element first + k) with the reference. */
static int compare(const type_t* t, int o, int seq, const unsigned char* got, size_t first, size_t n,
                   const char* what) {
  unsigned char want[64];
  size_t bad = 0;
  for (size_t k = 0; k < n; ++k) {
    reference(t, o, seq, first + k, want);
    if (!same_elem(t, got + k * t->extent, want)) {
      if (bad++ < 3)
        fprintf(stderr, "[rank %d] %s %s %s: element %zu of %zu wrong\n", rank, what, t->name, op_names[o], k, n);
    }
  }
  if (bad) ++failures;
  return bad == 0;
}

static buf_t dev_buf(size_t bytes) { return buf_new(&hk, rank % ndev, bytes); }

static void check_served(long before, int want, const char* what, const type_t* t, int o) {
  long got = served() - before;
  int expect = want && fake_nodes == 0;
  if (got != expect) {
    fprintf(stderr, "[rank %d] %s %s %s: served by gpustripe %ld times, expected %d\n", rank, what, t->name,
            op_names[o], got, expect);
    ++failures;
  }
}

/* MPI_Allreduce, in place or not. */
static void allreduce(const type_t* t, int o, size_t n, int in_place) {
  int seq = ++seq_no;
  size_t bytes = n * t->extent;
  buf_t s = dev_buf(bytes), r = dev_buf(bytes);
  buf_t* in = in_place ? &r : &s;
  fill_input(t, o, seq, in->h, n);
  buf_push(&hk, in);
  long before = served();
  int rc = MPI_Allreduce(in_place ? MPI_IN_PLACE : s.p, r.p, (int)n, t->t, mpi_op(o), MPI_COMM_WORLD);
  CHECK(rc == MPI_SUCCESS);
  check_served(before, on_gpu(t, o), in_place ? "allreduce in place" : "allreduce", t, o);
  buf_pull(&hk, &r);
  compare(t, o, seq, r.h, 0, n, in_place ? "allreduce in place" : "allreduce");
  buf_free(&hk, &s);
  buf_free(&hk, &r);
}

/* MPI_Reduce to the last rank, in place there or not. */
static void reduce(const type_t* t, int o, size_t n, int in_place) {
  int seq = ++seq_no, root = size - 1;
  size_t bytes = n * t->extent;
  buf_t s = dev_buf(bytes), r = dev_buf(bytes);
  const int use_in_place = in_place && rank == root;
  buf_t* in = use_in_place ? &r : &s;
  fill_input(t, o, seq, in->h, n);
  buf_push(&hk, in);
  long before = served();
  int rc = MPI_Reduce(use_in_place ? MPI_IN_PLACE : s.p, r.p, (int)n, t->t, mpi_op(o), root, MPI_COMM_WORLD);
  CHECK(rc == MPI_SUCCESS);
  check_served(before, on_gpu(t, o), "reduce", t, o);
  if (rank == root) {
    buf_pull(&hk, &r);
    compare(t, o, seq, r.h, 0, n, in_place ? "reduce in place" : "reduce");
  }
  buf_free(&hk, &s);
  buf_free(&hk, &r);
}

/* MPI_Reduce_scatter_block (counts == NULL, block elements per rank) or MPI_Reduce_scatter
 * (rank j gets counts[j]). */
static void reduce_scatter(const type_t* t, int o, size_t block, const int* counts, int in_place) {
  int seq = ++seq_no;
  size_t total = 0, mine = 0, off = 0;
  for (int j = 0; j < size; ++j) {
    size_t c = counts ? (size_t)counts[j] : block;
    if (j == rank) {
      mine = c;
      off = total;
    }
    total += c;
  }
  buf_t s = dev_buf(total * t->extent), r = dev_buf((in_place ? total : mine) * t->extent + 1);
  buf_t* in = in_place ? &r : &s;
  fill_input(t, o, seq, in->h, total);
  buf_push(&hk, in);
  long before = served();
  const void* sp = in_place ? MPI_IN_PLACE : s.p;
  int rc = counts ? MPI_Reduce_scatter(sp, r.p, counts, t->t, mpi_op(o), MPI_COMM_WORLD)
                  : MPI_Reduce_scatter_block(sp, r.p, (int)block, t->t, mpi_op(o), MPI_COMM_WORLD);
  CHECK(rc == MPI_SUCCESS);
  const char* what = counts ? (in_place ? "reduce_scatter in place" : "reduce_scatter")
                            : (in_place ? "reduce_scatter_block in place" : "reduce_scatter_block");
  check_served(before, on_gpu(t, o), what, t, o);
  buf_pull(&hk, &r);
  compare(t, o, seq, r.h, off, mine, what);
  buf_free(&hk, &s);
  buf_free(&hk, &r);
}

/* MPI_Scan, or MPI_Exscan (rank 0 gets nothing). */
static void scan_form(const type_t* t, int o, size_t n, int exclusive) {
  int seq = ++seq_no;
  buf_t s = dev_buf(n * t->extent), r = dev_buf(n * t->extent);
  fill_input(t, o, seq, s.h, n);
  buf_push(&hk, &s);
  long before = served();
  int rc = exclusive ? MPI_Exscan(s.p, r.p, (int)n, t->t, mpi_op(o), MPI_COMM_WORLD)
                     : MPI_Scan(s.p, r.p, (int)n, t->t, mpi_op(o), MPI_COMM_WORLD);
  CHECK(rc == MPI_SUCCESS);
  const char* what = exclusive ? "exscan" : "scan";
  check_served(before, on_gpu(t, o), what, t, o);
  buf_pull(&hk, &r);
  ref_last = exclusive ? rank - 1 : rank;
  if (ref_last >= 0) compare(t, o, seq, r.h, 0, n, what);
  ref_last = size - 1;
  buf_free(&hk, &s);
  buf_free(&hk, &r);
}

/* The reference against the MPI itself: the same allreduce on host buffers. */
static void reference_matches_mpi(const type_t* t, int o, size_t n) {
  int seq = ++seq_no;
  unsigned char* s = malloc(n * t->extent);
  unsigned char* r = calloc(n, t->extent);
  fill_input(t, o, seq, s, n);
  MPI_Datatype mt = t->t;
  int cnt = (int)n;
  if (t->per > 1) { /* Open MPI takes predefined ops on predefined types only */
    mt = MPI_FLOAT;
    cnt = (int)n * t->per;
  }
  CHECK(MPI_Allreduce(s, r, cnt, mt, mpi_op(o), MPI_COMM_WORLD) == MPI_SUCCESS);
  compare(t, o, seq, r, 0, n, "the MPI on host buffers (the reference's meaning)");
  free(s);
  free(r);
}

/* An op the MPI rejects for this type: the device call must fail the MPI's way. */
static void rejected(const type_t* t, int o) {
  unsigned char hs[64] = {0}, hr[64];
  int host_rc = MPI_Allreduce(hs, hr, 1, t->t, mpi_op(o), MPI_COMM_WORLD);
  buf_t s = dev_buf(t->extent * 4), r = dev_buf(t->extent * 4);
  long before = served();
  int rc = MPI_Allreduce(s.p, r.p, 4, t->t, mpi_op(o), MPI_COMM_WORLD);
  check_served(before, 0, "rejected allreduce", t, o);
  int hc = 0, dc = 0;
  MPI_Error_class(host_rc, &hc);
  MPI_Error_class(rc, &dc);
  if (t->per == 1 && (host_rc == MPI_SUCCESS || dc != hc)) {
    fprintf(stderr, "[rank %d] allreduce %s %s: host rc %d (class %d), device rc %d (class %d)\n", rank, t->name,
            op_names[o], host_rc, hc, rc, dc);
    ++failures;
  }
  buf_free(&hk, &s);
  buf_free(&hk, &r);
}

static void user_sum(void* in, void* inout, int* len, MPI_Datatype* t) {
  for (int i = 0; i < *len; ++i) ((float*)inout)[i] += ((float*)in)[i];
}

/* A user op: correct, through the MPI (not served). */
static void user_op(size_t n) {
  MPI_Op op;
  MPI_Op_create(user_sum, 1, &op);
  const type_t* t = &types[20]; /* float */
  int seq = ++seq_no;
  buf_t s = dev_buf(n * 4), r = dev_buf(n * 4);
  fill_input(t, O_SUM, seq, s.h, n);
  buf_push(&hk, &s);
  long before = served();
  CHECK(MPI_Allreduce(s.p, r.p, (int)n, MPI_FLOAT, op, MPI_COMM_WORLD) == MPI_SUCCESS);
  check_served(before, 0, "allreduce with a user op", t, O_SUM);
  buf_pull(&hk, &r);
  compare(t, O_SUM, seq, r.h, 0, n, "allreduce with a user op");
  buf_free(&hk, &s);
  buf_free(&hk, &r);
  MPI_Op_free(&op);
}

/* The nonblocking forms on device buffers, completed by MPI_Waitall / MPI_Test: the same
 * results as the blocking ones (float SUM, char SUM for the reductions). */
static void nonblocking(size_t n) {
  const type_t* tf = &types[20]; /* float */
  const type_t* tc = &types[0];  /* char */
  int seq_f = ++seq_no, seq_c = ++seq_no, seq_x = ++seq_no;
  size_t block = n / size ? n / size : 1, total = block * size;
  buf_t s1 = dev_buf(n * 4), r1 = dev_buf(n * 4), s2 = dev_buf(total), r2 = dev_buf(block + 1);
  buf_t s3 = dev_buf(block * 4), r3 = dev_buf(total * 4), b4 = dev_buf(n * 4), s5 = dev_buf(total * 4),
        r5 = dev_buf(total * 4);
  fill_input(tf, O_SUM, seq_f, s1.h, n);
  fill_input(tc, O_SUM, seq_c, s2.h, total);
  for (size_t i = 0; i < block * 4; ++i) s3.h[i] = (unsigned char)(rank * 31 + i + seq_x);
  for (size_t i = 0; i < n * 4; ++i) b4.h[i] = rank == 0 ? (unsigned char)(i * 7 + seq_x) : 0;
  for (int q = 0; q < size; ++q)
    for (size_t i = 0; i < block * 4; ++i) s5.h[q * block * 4 + i] = (unsigned char)(rank * 31 + q * 5 + i + seq_x);
  buf_push(&hk, &s1);
  buf_push(&hk, &s2);
  buf_push(&hk, &s3);
  buf_push(&hk, &b4);
  buf_push(&hk, &s5);
  MPI_Request req[5];
  long before = served();
  CHECK(MPI_Iallreduce(s1.p, r1.p, (int)n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD, &req[0]) == MPI_SUCCESS);
  CHECK(MPI_Ireduce_scatter_block(s2.p, r2.p, (int)block, MPI_CHAR, MPI_SUM, MPI_COMM_WORLD, &req[1]) == MPI_SUCCESS);
  CHECK(MPI_Iallgather(s3.p, (int)block * 4, MPI_BYTE, r3.p, (int)block * 4, MPI_BYTE, MPI_COMM_WORLD, &req[2]) ==
        MPI_SUCCESS);
  CHECK(MPI_Ibcast(b4.p, (int)n, MPI_FLOAT, 0, MPI_COMM_WORLD, &req[3]) == MPI_SUCCESS);
  CHECK(MPI_Ialltoall(s5.p, (int)block * 4, MPI_BYTE, r5.p, (int)block * 4, MPI_BYTE, MPI_COMM_WORLD, &req[4]) ==
        MPI_SUCCESS);
  /* MPI_Test until the first completes (the later ones progress meanwhile), then the rest. */
  int flag = 0;
  for (long polls = 0; !flag; ++polls) {
    CHECK(polls < 100000000L);
    CHECK(MPI_Test(&req[0], &flag, MPI_STATUS_IGNORE) == MPI_SUCCESS);
  }
  CHECK(req[0] == MPI_REQUEST_NULL);
  CHECK(MPI_Waitall(5, req, MPI_STATUSES_IGNORE) == MPI_SUCCESS);
  for (int i = 0; i < 5; ++i) CHECK(req[i] == MPI_REQUEST_NULL);
  long got = served() - before, expect = fake_nodes ? 0 : 5;
  if (got != expect) {
    fprintf(stderr, "[rank %d] nonblocking collectives: served by gpustripe %ld times, expected %ld\n", rank, got,
            expect);
    ++failures;
  }
  buf_pull(&hk, &r1);
  buf_pull(&hk, &r2);
  buf_pull(&hk, &r3);
  buf_pull(&hk, &b4);
  buf_pull(&hk, &r5);
  compare(tf, O_SUM, seq_f, r1.h, 0, n, "MPI_Iallreduce");
  compare(tc, O_SUM, seq_c, r2.h, rank * block, block, "MPI_Ireduce_scatter_block");
  size_t bad = 0;
  for (int q = 0; q < size; ++q)
    for (size_t i = 0; i < block * 4; ++i) {
      unsigned char want = (unsigned char)(q * 31 + i + seq_x);
      bad += r3.h[q * block * 4 + i] != want;
      bad += r5.h[q * block * 4 + i] != (unsigned char)(q * 31 + rank * 5 + i + seq_x);
    }
  for (size_t i = 0; i < n * 4; ++i) bad += b4.h[i] != (unsigned char)(i * 7 + seq_x);
  if (bad) {
    fprintf(stderr, "[rank %d] MPI_Iallgather / MPI_Ialltoall / MPI_Ibcast: %zu wrong bytes\n", rank, bad);
    ++failures;
  }
  buf_t* all[] = {&s1, &r1, &s2, &r2, &s3, &r3, &b4, &s5, &r5};
  for (int i = 0; i < 9; ++i) buf_free(&hk, all[i]);
}

/* ------------------------------------------------------------------ main */
static size_t parse_size(const char* s) {
  char* end;
  double v = strtod(s, &end);
  if (*end == 'K' || *end == 'k') v *= 1024;
  else if (*end == 'M' || *end == 'm') v *= 1024 * 1024;
  else if (*end == 'G' || *end == 'g') v *= 1024.0 * 1024 * 1024;
  return (size_t)v;
}
static int split(char* s, char** out, int most) {
  int n = 0;
  for (char* tok = strtok(s, ","); tok && n < most; tok = strtok(NULL, ",")) out[n++] = tok;
  return n;
}
static int listed(char** list, int n, const char* name) {
  if (n == 0) return 1;
  for (int i = 0; i < n; ++i)
    if (strcmp(list[i], name) == 0) return 1;
  return 0;
}

int main(int argc, char** argv) {
  test_mpi_init(&argc, &argv, &rank, &size);
  hk = hooks();
  ndev = hk.device_count();
  CHECK(ndev > 0);
  served_fn = (long (*)(void))dlsym(RTLD_DEFAULT, "gpustripe_mpi_test_coll_served");
  CHECK(served_fn != NULL);
  fake_nodes = test_fake_nodes() > 1;
  init_types();
  ref_last = size - 1;

  char* counts_s[32];
  char* type_list[64];
  char* op_list[NOPS];
  int ncounts = 0, ntl = 0, nol = 0, by_bytes = 0;
  static char defaults[] = "1,5,1000";
  ncounts = split(defaults, counts_s, 32);
  for (int i = 1; i + 1 < argc; i += 2) {
    if (strcmp(argv[i], "--counts") == 0) ncounts = split(argv[i + 1], counts_s, 32);
    else if (strcmp(argv[i], "--bytes") == 0) {
      ncounts = split(argv[i + 1], counts_s, 32);
      by_bytes = 1;
    } else if (strcmp(argv[i], "--types") == 0) ntl = split(argv[i + 1], type_list, 64);
    else if (strcmp(argv[i], "--ops") == 0) nol = split(argv[i + 1], op_list, NOPS);
    else {
      if (rank == 0) fprintf(stderr, "unknown option %s\n", argv[i]);
      MPI_Abort(MPI_COMM_WORLD, 2);
    }
  }

  for (int ti = 0; ti < NTYPES; ++ti) {
    const type_t* t = &types[ti];
    if (!listed(type_list, ntl, t->name)) continue;
    if (t->per > 1 && fake_nodes) continue; /* the MPI itself takes predefined ops on predefined types only */
    for (int o = 0; o < NOPS; ++o) {
      if (!listed(op_list, nol, op_names[o])) continue;
      if (!valid(t, o)) {
        rejected(t, o);
        continue;
      }
      for (int c = 0; c < ncounts; ++c) {
        size_t v = parse_size(counts_s[c]);
        size_t n = by_bytes ? v / t->extent : v;
        if (n == 0) n = 1;
        const int before = failures;
        const double t0 = now();
        if (c == 0 && n <= 4096) reference_matches_mpi(t, o, n);
        allreduce(t, o, n, 0);
        allreduce(t, o, n, 1);
        reduce(t, o, n, 0);
        reduce(t, o, n, 1);
        size_t block = n / size ? n / size : 1;
        reduce_scatter(t, o, block, NULL, 0);
        reduce_scatter(t, o, block, NULL, 1);
        int counts[64];
        for (int j = 0; j < size && j < 64; ++j) counts[j] = j == 1 ? 0 : (int)(block + j);
        reduce_scatter(t, o, 0, counts, 0);
        reduce_scatter(t, o, 0, counts, 1);
        scan_form(t, o, n, 0);
        scan_form(t, o, n, 1);
        int bad = failures - before, all_bad = 0;
        MPI_Allreduce(&bad, &all_bad, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
        if (rank == 0)
          printf("ROW {\"type\": \"%s\", \"op\": \"%s\", \"count\": %zu, \"bytes\": %zu, \"ranks\": %d, "
                 "\"failed_checks\": %d, \"seconds\": %.3f}\n",
                 t->name, op_names[o], n, n * t->extent, size, all_bad, now() - t0);
      }
    }
  }
  if (!ntl && !nol) {
    user_op(1000);
    nonblocking(1000);
  }

  int all = 0;
  MPI_Allreduce(&failures, &all, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  if (rank == 0) {
    if (all == 0) printf("mpi_coll_types: all checks passed on %d ranks\n", size);
    else printf("mpi_coll_types: %d checks failed on %d ranks\n", all, size);
  }
  MPI_Type_free(&types[NTYPES - 1].t);
  MPI_Finalize();
  return all != 0;
}
