/* Helpers of the MPI test programs: the interposer's test hooks (found with dlsym,
 * see src/mpi/gpustripe_mpi_test.h), deterministic data, and checks that abort the
 * job with the failing line so mpirun exits non-zero. */
#ifndef MPI_TEST_UTIL_H
#define MPI_TEST_UTIL_H
#define _GNU_SOURCE
#include <dlfcn.h>
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define CHECK(cond)                                                                       \
  do {                                                                                    \
    if (!(cond)) {                                                                        \
      int r_;                                                                             \
      MPI_Comm_rank(MPI_COMM_WORLD, &r_);                                                 \
      fprintf(stderr, "[rank %d] %s:%d: check failed: %s\n", r_, __FILE__, __LINE__, #cond); \
      fflush(stderr);                                                                     \
      MPI_Abort(MPI_COMM_WORLD, 3);                                                       \
    }                                                                                     \
  } while (0)

/* MPI_Init, this rank and the world's size, and errors returned rather than fatal (the
 * programs check every call's return code). */
static void test_mpi_init(int* argc, char*** argv, int* rank, int* size) {
  MPI_Init(argc, argv);
  MPI_Comm_rank(MPI_COMM_WORLD, rank);
  MPI_Comm_size(MPI_COMM_WORLD, size);
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
}

/* The value of `key` in GPUSTRIPE_TEST ("fake_nodes=2,alloc=vmm", src/common/config.hpp),
 * copied into `out` (of `cap` bytes); NULL where the setting does not name the key. */
static const char* test_hook(const char* key, char* out, size_t cap) {
  const char* text = getenv("GPUSTRIPE_TEST");
  const size_t klen = strlen(key);
  for (const char* at = text; at && *at;) {
    while (*at == ' ' || *at == ',') ++at;
    const char* end = strchr(at, ',');
    if (!end) end = at + strlen(at);
    if ((size_t)(end - at) > klen && !strncmp(at, key, klen) && at[klen] == '=') {
      size_t n = (size_t)(end - at) - klen - 1;
      if (n >= cap) n = cap - 1;
      memcpy(out, at + klen + 1, n);
      out[n] = 0;
      return out;
    }
    at = end;
  }
  return NULL;
}

/* GPUSTRIPE_TEST's fake_nodes (0 where not set). */
static int test_fake_nodes(void) {
  char v[16];
  return test_hook("fake_nodes", v, sizeof v) ? atoi(v) : 0;
}

typedef struct {
  int (*active)(void);
  const char* (*backend)(void);
  int (*device_count)(void);
  void* (*alloc)(int, size_t);
  void (*free_)(void*);
  int (*copy)(void*, const void*, size_t);
} hooks_t;

static hooks_t hooks(void) {
  hooks_t h;
  h.active = (int (*)(void))dlsym(RTLD_DEFAULT, "gpustripe_mpi_active");
  h.backend = (const char* (*)(void))dlsym(RTLD_DEFAULT, "gpustripe_mpi_test_backend");
  h.device_count = (int (*)(void))dlsym(RTLD_DEFAULT, "gpustripe_mpi_test_device_count");
  h.alloc = (void* (*)(int, size_t))dlsym(RTLD_DEFAULT, "gpustripe_mpi_test_alloc");
  h.free_ = (void (*)(void*))dlsym(RTLD_DEFAULT, "gpustripe_mpi_test_free");
  h.copy = (int (*)(void*, const void*, size_t))dlsym(RTLD_DEFAULT, "gpustripe_mpi_test_copy");
  if (!h.active || !h.active()) {
    fprintf(stderr, "this test needs the interposer: mpirun -x LD_PRELOAD=.../libgpustripe_mpi.so\n");
    MPI_Abort(MPI_COMM_WORLD, 2);
  }
  /* On the GPU machine the "device" buffers must be real GPU memory (scripts/gpu-check.d
   * sets GPUSTRIPE_TEST_REQUIRE_BACKEND=cuda), not emulated devices in host memory. */
  const char* want = getenv("GPUSTRIPE_TEST_REQUIRE_BACKEND");
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  if (rank == 0) printf("backend %s, %d devices\n", h.backend(), h.device_count());
  CHECK(!want || !*want || strcmp(want, h.backend()) == 0);
  return h;
}

/* Byte i of message (from, tag, seq). */
/* Monotonic seconds: how long a call took to fail (the kill tests), or a message (bandwidth rows). */
static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + t.tv_nsec * 1e-9;
}

static unsigned char pat(int from, int tag, int seq, size_t i) {
  uint64_t x = (uint64_t)from * 1000003u + (uint64_t)tag * 7919u + (uint64_t)seq * 104729u + i * 2654435761u;
  x ^= x >> 13;
  return (unsigned char)(x * 0x9E3779B97F4A7C15ull >> 56);
}
static void fill(unsigned char* p, size_t n, int from, int tag, int seq) {
  for (size_t i = 0; i < n; ++i) p[i] = pat(from, tag, seq, i);
}
static int same(const unsigned char* p, size_t n, int from, int tag, int seq) {
  for (size_t i = 0; i < n; ++i)
    if (p[i] != pat(from, tag, seq, i)) return 0;
  return 1;
}

/* A buffer on the device (dev >= 0) or the host (dev < 0), and its host copy. */
typedef struct {
  unsigned char* p;  /* what MPI sees */
  unsigned char* h;  /* host shadow */
  size_t n;
  int dev;
} buf_t;

static buf_t buf_new(hooks_t* hk, int dev, size_t n) {
  buf_t b;
  b.n = n;
  b.dev = dev;
  b.h = (unsigned char*)calloc(n ? n : 1, 1);
  b.p = dev >= 0 ? (unsigned char*)hk->alloc(dev, n ? n : 1) : b.h;
  CHECK(b.p != NULL);
  return b;
}
static void buf_push(hooks_t* hk, buf_t* b) {
  if (b->dev >= 0 && b->n) CHECK(hk->copy(b->p, b->h, b->n) == 0);
}
static void buf_pull(hooks_t* hk, buf_t* b) {
  if (b->dev >= 0 && b->n) CHECK(hk->copy(b->h, b->p, b->n) == 0);
}
static void buf_free(hooks_t* hk, buf_t* b) {
  if (b->dev >= 0) hk->free_(b->p);
  free(b->h);
}
#endif
