// Probe (issue 14, two-way exchanges across processes): does a GPU's peer copy keep its rate
// when another copy on the same GPU's copy engines comes from another process (another CUDA
// context) rather than from the same one? In a two-way exchange between two ranks, each
// rank's host-staged path relays into its own GPU (host -> GPU) while the other rank's
// direct copy leaves that GPU, issued from the other rank's process; in one process (the
// engine's bibw) the same copies share one context.
//   alone   each flow by itself
//   same    both flows at once from one process (two streams of GPU 0)
//   apart   both flows at once, each from its own process (forked before CUDA starts)
// Flows, each on a stream of GPU 0, repeated for about `ms` milliseconds of work:
//   direct  peer copy GPU 0 -> GPU 1, 256 MB a copy
//   h2d     pinned host -> GPU 0, 32 MB a copy
// A flow's rate is its bytes over its own first-to-last time (events on its stream).
// Prints one JSON object per line. Build: nvcc -O2 -arch=sm_90 -o ce_contexts ce_contexts.cu
// Run: ./ce_contexts [ms=20]
#include <cuda_runtime.h>
#include <sys/wait.h>
#include <unistd.h>

#include "probe_check.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace {

constexpr size_t kDirect = 256ull << 20, kH2d = 32ull << 20;

struct FlowState {
  bool direct;
  cudaStream_t s;
  cudaEvent_t t0, t1;
  void* a = nullptr;  // direct: GPU 0 source; h2d: pinned source
  void* b = nullptr;  // direct: GPU 1 destination; h2d: GPU 0 destination
  int reps = 1;
};

// Allocates, warms up (one copy) and sizes the flow to about `ms` of work.
void prepare(FlowState& f, bool direct, double ms) {
  f.direct = direct;
  CK(cudaSetDevice(0));
  if (direct) {
    CK(cudaDeviceEnablePeerAccess(1, 0));
    CK(cudaMalloc(&f.a, kDirect));
    CK(cudaSetDevice(1));
    CK(cudaMalloc(&f.b, kDirect));
    CK(cudaSetDevice(0));
  } else {
    CK(cudaMallocHost(&f.a, kH2d));
    std::memset(f.a, 7, kH2d);
    CK(cudaMalloc(&f.b, kH2d));
  }
  CK(cudaStreamCreateWithFlags(&f.s, cudaStreamNonBlocking));
  CK(cudaEventCreate(&f.t0));
  CK(cudaEventCreate(&f.t1));
  const size_t bytes = direct ? kDirect : kH2d;
  const double gbps = direct ? 390.0 : 55.0;  // nominal, only to size the work
  f.reps = std::max(1, static_cast<int>(ms * 1e-3 * gbps * 1e9 / bytes));
  if (direct) CK(cudaMemcpyPeerAsync(f.b, 1, f.a, 0, bytes, f.s));
  else CK(cudaMemcpyAsync(f.b, f.a, bytes, cudaMemcpyHostToDevice, f.s));
  CK(cudaStreamSynchronize(f.s));
}

void enqueue(FlowState& f) {
  CK(cudaSetDevice(0));
  CK(cudaEventRecord(f.t0, f.s));
  for (int r = 0; r < f.reps; ++r) {
    if (f.direct) CK(cudaMemcpyPeerAsync(f.b, 1, f.a, 0, kDirect, f.s));
    else CK(cudaMemcpyAsync(f.b, f.a, kH2d, cudaMemcpyHostToDevice, f.s));
  }
  CK(cudaEventRecord(f.t1, f.s));
}

void report(const char* mode, FlowState& f) {
  CK(cudaEventSynchronize(f.t1));
  float ms = 0;
  CK(cudaEventElapsedTime(&ms, f.t0, f.t1));
  const double bytes = double(f.direct ? kDirect : kH2d) * f.reps;
  printf("{\"mode\": \"%s\", \"flow\": \"%s\", \"ms\": %.3f, \"gbps\": %.1f}\n", mode, f.direct ? "direct" : "h2d", ms,
         bytes / (ms * 1e6));
  fflush(stdout);
}

// One flow in a child process; `ready` and `go` are pipes to and from the parent.
pid_t child(bool direct, double ms, int ready, int go) {
  pid_t p = fork();
  if (p != 0) return p;
  FlowState f;
  prepare(f, direct, ms);
  char c = 1;
  if (write(ready, &c, 1) != 1 || read(go, &c, 1) != 1) _exit(3);
  enqueue(f);
  report("apart", f);
  _exit(0);
}

}  // namespace

int main(int argc, char** argv) {
  const double ms = argc > 1 ? atof(argv[1]) : 20.0;
  {  // apart first: the parent has not touched CUDA yet, so its children may
    int ready[2], go[2];
    if (pipe(ready) || pipe(go)) return 1;
    pid_t a = child(true, ms, ready[1], go[0]);
    pid_t b = child(false, ms, ready[1], go[0]);
    char c;
    for (int i = 0; i < 2; ++i)
      if (read(ready[0], &c, 1) != 1) return 1;
    c = 1;
    for (int i = 0; i < 2; ++i)
      if (write(go[1], &c, 1) != 1) return 1;
    int st = 0, bad = 0;
    waitpid(a, &st, 0);
    bad |= !WIFEXITED(st) || WEXITSTATUS(st);
    waitpid(b, &st, 0);
    bad |= !WIFEXITED(st) || WEXITSTATUS(st);
    if (bad) {
      fprintf(stderr, "ce_contexts: a child failed\n");
      return 1;
    }
  }
  int n = 0;
  CK(cudaGetDeviceCount(&n));
  if (n < 2) {
    fprintf(stderr, "ce_contexts: needs 2 GPUs, found %d\n", n);
    return 1;
  }
  FlowState d, h;
  prepare(d, true, ms);
  prepare(h, false, ms);
  enqueue(d);
  report("alone", d);
  enqueue(h);
  report("alone", h);
  enqueue(d);
  enqueue(h);
  report("same", d);
  report("same", h);
  return 0;
}
