// Probe (issue 14): the least time an iteration of the halo application (apps/halo) can take in
// the MPI pattern, against what NCCL's stream-ordered pattern takes. An MPI program waits for its
// step on the host before it exchanges (MPI reads device buffers only once they are written:
// cudaStreamSynchronize), and its next step is launched after the exchange returns; NCCL's
// send/recv are enqueued behind the step on the same stream, so nothing on the host lies between
// the step, the exchange and the next step. This probe runs the application's own Jacobi step
// (apps/halo/jacobi.cu) on two GPUs in two processes, with the least exchange an MPI library
// could make between them: each process waits for its step, says so in shared memory, waits for
// the other's word, pulls the other's boundary row (cuMemcpyDtoDAsync in its own context through
// an IPC mapping, as UCX's cuda_ipc and the p2p layer pull), spins on the stream until it has
// landed, says so, and waits for the other's word (its send's completion) before the next step.
// No matching, no MPI call, no library: whatever an MPI library adds comes on top.
// Ways (each a median and mean over the iterations, rank 0's clock):
//   compute      the steps back to back on the stream (no exchange): the step's own time
//   exchange     the exchange alone (the sync on an idle stream, the words, the pull)
//   mpi_pattern  step, sync, exchange, repeated: an MPI program's iteration at its floor
// Compare mpi_pattern with NCCL's iteration (`gpustripe bench halo`, method nccl) of the same
// shape on the same machine: where NCCL's is shorter, the MPI pattern cannot match it.
// Build: nvcc -O2 -arch=sm_90 -DHALO_HAVE_CUDA -I../../apps/halo -o halo_floor halo_floor.cu ../../apps/halo/jacobi.cu -lcuda
// Run:   ./halo_floor [ROWSxCOLS ...]   (default 4096x4096 16384x16384)
#include <cuda.h>
#include <cuda_runtime.h>

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "jacobi.hpp"
#include "probe_check.h"
#include "probe_time.h"
#include "probe_words.h"

namespace {

constexpr int kIters = 400;
constexpr int kWarm = 50;

struct Shared {
  Word ready[2], landed[2], phase[2];
  cudaIpcMemHandle_t handle[2][2];  // [rank][array]
  std::atomic<int> handles[2];
};

enum Way { Compute, Exchange, MpiPattern, kWays };
const char* kNames[] = {"compute", "exchange", "mpi_pattern"};

// Rank r of 2 on GPU r: rows [r0, r0 + lr) of the domain, its slab in two arrays (a step reads one
// and writes the other), the peer's two arrays mapped in this GPU's context.
void rank_main(Shared* sh, int r, long rows, long cols, const std::string& shape) {
  const int peer = 1 - r;
  const long lr = rows / 2, r0 = r * lr;
  const size_t row_bytes = static_cast<size_t>(cols) * sizeof(double);
  CK(cudaSetDevice(r));
  CU(cuInit(0), "cuInit");
  double* arr[2];
  cudaStream_t s;
  CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  for (int i = 0; i < 2; ++i) {
    CK(cudaMalloc(&arr[i], (lr + 2) * row_bytes));
    halo::init_device(arr[i], lr, cols, r0, rows, s);
    CK(cudaIpcGetMemHandle(&sh->handle[r][i], arr[i]));
  }
  CK(cudaStreamSynchronize(s));
  sh->handles[r].fetch_add(1, std::memory_order_release);
  while (sh->handles[peer].load(std::memory_order_acquire) == 0) {
  }
  const double* peer_arr[2];
  for (int i = 0; i < 2; ++i)
    CK(cudaIpcOpenMemHandle(reinterpret_cast<void**>(const_cast<double**>(&peer_arr[i])), sh->handle[peer][i],
                            cudaIpcMemLazyEnablePeerAccess));
  // Rank 0 owns the top rows: its ghost row lr + 1 takes the peer's first owned row (1); rank 1's
  // ghost row 0 takes rank 0's last owned row (lr).
  const long ghost = r == 0 ? lr + 1 : 0, theirs = r == 0 ? 1 : lr;
  int cur = 0;
  uint64_t seq = 0;  // exchanges so far, the same count on both ranks
  // Both ranks at the same point (a way's start, the mappings closed).
  auto meet = [&] {
    const uint64_t phase = sh->phase[r].v.load() + 1;
    sh->phase[r].v.store(phase, std::memory_order_release);
    spin_until(sh->phase[peer], phase);
  };
  auto exchange = [&] {
    CK(cudaStreamSynchronize(s));  // the step that wrote the boundary row has finished
    ++seq;
    sh->ready[r].v.store(seq, std::memory_order_release);
    spin_until(sh->ready[peer], seq);
    CU(cuMemcpyDtoDAsync(reinterpret_cast<CUdeviceptr>(arr[cur] + ghost * cols),
                         reinterpret_cast<CUdeviceptr>(peer_arr[cur] + theirs * cols), row_bytes,
                         reinterpret_cast<CUstream>(s)),
       "cuMemcpyDtoDAsync");
    while (cuStreamQuery(reinterpret_cast<CUstream>(s)) == CUDA_ERROR_NOT_READY) {
    }
    sh->landed[r].v.store(seq, std::memory_order_release);
    spin_until(sh->landed[peer], seq);  // the peer has read our row: the next step may rewrite it
  };
  auto step = [&] {
    halo::step_device(arr[cur], arr[1 - cur], lr, cols, s);
    cur = 1 - cur;
  };
  for (int w = 0; w < kWays; ++w) {
    meet();
    std::vector<double> per;
    double t_start = 0;
    for (int i = 0; i < kWarm + kIters; ++i) {
      if (i == kWarm) {
        CK(cudaStreamSynchronize(s));
        t_start = now_us();
      }
      const double t0 = now_us();
      if (w == Compute) step();
      if (w == Exchange) exchange();
      if (w == MpiPattern) {
        exchange();
        step();
      }
      if (i >= kWarm) per.push_back(now_us() - t0);
    }
    CK(cudaStreamSynchronize(s));
    const double mean = (now_us() - t_start) / kIters;
    // Compute alone is timed by its mean (the host only enqueues); the others by both.
    if (r == 0) {
      printf("{\"probe\": \"halo_floor\", \"shape\": \"%s\", \"way\": \"%s\", \"halo_bytes\": %zu, \"median_us\": %.2f, "
             "\"mean_us\": %.2f}\n",
             shape.c_str(), kNames[w], row_bytes, w == Compute ? mean : median(per), mean);
      fflush(stdout);
    }
  }
  CK(cudaGetLastError());
  for (int i = 0; i < 2; ++i) {
    CK(cudaIpcCloseMemHandle(const_cast<double*>(peer_arr[i])));
  }
  meet();  // neither frees its arrays before the other has closed its mappings of them
  for (int i = 0; i < 2; ++i) CK(cudaFree(arr[i]));
  CK(cudaStreamDestroy(s));
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> shapes;
  for (int i = 1; i < argc; ++i) shapes.push_back(argv[i]);
  if (shapes.empty()) shapes = {"4096x4096", "16384x16384"};
  for (const std::string& shape : shapes) {
    long rows = 0, cols = 0;
    if (sscanf(shape.c_str(), "%ldx%ld", &rows, &cols) != 2 || rows < 4 || cols < 3) {
      fprintf(stderr, "halo_floor: shape %s is not ROWSxCOLS (rows >= 4, cols >= 3)\n", shape.c_str());
      return 1;
    }
    // A fresh pair of processes per shape.
    if (!run_pair<Shared>([&](Shared* sh, int r) { rank_main(sh, r, rows, cols, shape); })) return 2;
  }
  return 0;
}
