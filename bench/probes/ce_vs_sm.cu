// Probe (issue 14, the halo exchange): copy engines or SM kernels between two GPUs, one way
// and both ways at once, 32-512 MB. NCCL's send/recv moves data with SM kernels over NVLink;
// the library's engine with copy engines. Which carries more, and does splitting one
// direction over two copy-engine streams, or over a copy engine and a kernel, add anything
// when the other direction is busy too? Modes (each flow of `mb` MB per direction):
//   ce_one      cudaMemcpyPeerAsync 0 -> 1 on a stream of GPU 0
//   ce_two      0 -> 1 and 1 -> 0 at once, one stream on each source GPU
//   ce2_two     both ways, each direction in two halves on two streams of its source GPU
//   sm_one      a copy kernel on GPU 0 storing into GPU 1's memory (push; NCCL's simple protocol)
//   sm_two      push kernels on both GPUs at once
//   mix_two     both ways, each direction half by a copy engine, half by a push kernel
//   serial_two  0 -> 1, then 1 -> 0 (two one-way copies back to back: what two MPI_Sendrecv
//               calls of a 2-rank halo exchange are, each waiting for the previous)
// Timing: one event on GPU 0's first stream starts every flow (the other streams wait on it);
// GPU 0's stream waits for every flow's end; median of `reps` after a warm-up. gbps is per
// direction: mb MB / time (serial_two: the two copies' total time, per direction as well).
// Prints one JSON object per line. Build: nvcc -O2 -arch=sm_90 -o ce_vs_sm ce_vs_sm.cu
// Run: ./ce_vs_sm [reps=7] [sizes in MB, comma list=32,128,512]
#include <cuda_runtime.h>

#include "probe_check.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace {

// 16-byte stores, grid-stride: the shape of a simple device copy kernel over NVLink.
__global__ void copy_kernel(int4* __restrict__ dst, const int4* __restrict__ src, size_t n) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x)
    dst[i] = src[i];
}

struct Gpu {
  int dev;
  int sms = 0;
  char* src = nullptr;  // this GPU's data to send
  char* dst = nullptr;  // where the other GPU's data lands
  cudaStream_t s[2];
  cudaEvent_t done[2];
};

struct Flow {  // one copy of `bytes` from a's src (+off) into b's dst (+off), on a's stream `lane`
  int from, lane;
  size_t off, bytes;
  bool kernel;
};

void launch(Gpu* g, const Flow& f) {
  Gpu& a = g[f.from];
  Gpu& b = g[1 - f.from];
  CK(cudaSetDevice(a.dev));
  if (f.kernel) {
    copy_kernel<<<a.sms * 4, 512, 0, a.s[f.lane]>>>(reinterpret_cast<int4*>(b.dst + f.off),
                                                  reinterpret_cast<const int4*>(a.src + f.off), f.bytes / 16);
    CK(cudaGetLastError());
  } else {
    CK(cudaMemcpyPeerAsync(b.dst + f.off, b.dev, a.src + f.off, a.dev, f.bytes, a.s[f.lane]));
  }
}

// Runs the flows at once (or, `serial`, one after the other on GPU 0's first stream's
// timeline), returns microseconds from the start event to the last flow's end.
float run(Gpu* g, const std::vector<Flow>& flows, bool serial) {
  cudaEvent_t start, stop;
  CK(cudaSetDevice(g[0].dev));
  CK(cudaEventCreate(&start));
  CK(cudaEventCreate(&stop));
  CK(cudaEventRecord(start, g[0].s[0]));
  cudaEvent_t prev = start;
  for (const Flow& f : flows) {
    Gpu& a = g[f.from];
    CK(cudaSetDevice(a.dev));
    CK(cudaStreamWaitEvent(a.s[f.lane], prev, 0));
    launch(g, f);
    CK(cudaEventRecord(a.done[f.lane], a.s[f.lane]));
    if (serial) prev = a.done[f.lane];
  }
  CK(cudaSetDevice(g[0].dev));
  for (const Flow& f : flows) CK(cudaStreamWaitEvent(g[0].s[0], g[f.from].done[f.lane], 0));
  CK(cudaEventRecord(stop, g[0].s[0]));
  CK(cudaEventSynchronize(stop));
  float ms = 0;
  CK(cudaEventElapsedTime(&ms, start, stop));
  CK(cudaEventDestroy(start));
  CK(cudaEventDestroy(stop));
  return ms * 1000.0f;
}

}  // namespace

int main(int argc, char** argv) {
  const int reps = argc > 1 ? std::max(1, atoi(argv[1])) : 7;
  std::vector<size_t> sizes_mb;
  {
    std::string list = argc > 2 ? argv[2] : "32,128,512";
    for (size_t p = 0; p < list.size();) {
      size_t q = list.find(',', p);
      if (q == std::string::npos) q = list.size();
      sizes_mb.push_back(std::stoul(list.substr(p, q - p)));
      p = q + 1;
    }
  }
  int n = 0;
  CK(cudaGetDeviceCount(&n));
  if (n < 2) {
    fprintf(stderr, "ce_vs_sm: needs 2 GPUs, found %d\n", n);
    return 1;
  }
  const size_t max_bytes = *std::max_element(sizes_mb.begin(), sizes_mb.end()) << 20;
  Gpu g[2];
  for (int i = 0; i < 2; ++i) {
    g[i].dev = i;
    CK(cudaSetDevice(i));
    CK(cudaDeviceEnablePeerAccess(1 - i, 0));
    CK(cudaDeviceGetAttribute(&g[i].sms, cudaDevAttrMultiProcessorCount, i));
    CK(cudaMalloc(&g[i].src, max_bytes));
    CK(cudaMalloc(&g[i].dst, max_bytes));
    CK(cudaMemset(g[i].src, 1 + i, max_bytes));
    for (int l = 0; l < 2; ++l) {
      CK(cudaStreamCreateWithFlags(&g[i].s[l], cudaStreamNonBlocking));
      CK(cudaEventCreateWithFlags(&g[i].done[l], cudaEventDisableTiming));
    }
  }
  for (size_t mb : sizes_mb) {
    const size_t b = mb << 20, h = b / 2;
    struct Mode {
      const char* name;
      std::vector<Flow> flows;
      bool serial;
    };
    const std::vector<Mode> modes = {
        {"ce_one", {{0, 0, 0, b, false}}, false},
        {"ce_two", {{0, 0, 0, b, false}, {1, 0, 0, b, false}}, false},
        {"ce2_two", {{0, 0, 0, h, false}, {0, 1, h, b - h, false}, {1, 0, 0, h, false}, {1, 1, h, b - h, false}}, false},
        {"sm_one", {{0, 0, 0, b, true}}, false},
        {"sm_two", {{0, 0, 0, b, true}, {1, 0, 0, b, true}}, false},
        {"mix_two", {{0, 0, 0, h, false}, {0, 1, h, b - h, true}, {1, 0, 0, h, false}, {1, 1, h, b - h, true}}, false},
        {"serial_two", {{0, 0, 0, b, false}, {1, 0, 0, b, false}}, true},
    };
    for (const Mode& m : modes) {
      run(g, m.flows, m.serial);  // warm-up
      std::vector<float> us;
      for (int r = 0; r < reps; ++r) us.push_back(run(g, m.flows, m.serial));
      std::sort(us.begin(), us.end());
      const float med = us[us.size() / 2];
      printf("{\"mode\": \"%s\", \"mb\": %zu, \"us\": %.1f, \"gbps\": %.1f}\n", m.name, mb, med, b / (med * 1e3));
      fflush(stdout);
    }
  }
  // Every byte of the last copies checked on GPU 1: the value GPU 0's buffer holds.
  std::vector<unsigned char> back(1 << 20);
  CK(cudaSetDevice(1));
  CK(cudaMemcpy(back.data(), g[1].dst, back.size(), cudaMemcpyDeviceToHost));
  const bool ok = std::all_of(back.begin(), back.end(), [](unsigned char c) { return c == 1; });
  printf("{\"check\": \"%s\"}\n", ok ? "ok" : "FAILED");
  return ok ? 0 : 2;
}
