// Probe (issue 5, the 4-rank bound): what one pair's two paths carry when one or two
// pairs (0->1, then 0->1 and 2->3 at once, as the 4-rank `gpustripe bench mpi` runs them)
// use them together. Per pair, three flows, each on its own stream, all started together:
//   direct   peer copy src -> dst (NVLink, copy engine)
//   d2h      src -> pinned host (the first half of the host path)
//   h2d      pinned host -> dst (the second half; a separate buffer: no wait between halves,
//            so this is the ceiling of the host path, not the store-and-forward pipeline)
// Each flow repeats its copy until about `ms` milliseconds of work are queued, so the flows
// overlap for their whole length; a flow's rate is its bytes over its own first-to-last time.
// A pair's two-path ceiling is then direct + min(d2h, h2d), measured with the other pair's
// flows running, not inferred from single-flow numbers.
// Modes per pair count: direct only, host only (d2h + h2d), all three.
// Prints one JSON object per line (a flow, or a pair's bound); bench/probes/pair_bound.py
// turns them into a results file and its plot. Build: nvcc -O2 -arch=sm_90 -o pair_bound pair_bound.cu
// Run: ./pair_bound [reps=5] [ms=20]
#include <cuda_runtime.h>

#include "probe_check.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string_view>
#include <vector>

namespace {

constexpr size_t kDirectBytes = 256ull << 20;  // one direct copy
constexpr size_t kHostBytes = 32ull << 20;     // one host-path copy (a chunk-sized piece)

struct Flow {
  const char* kind;
  int dev;  // the GPU whose stream issues it
  void* dst;
  const void* src;
  int dst_dev, src_dev;  // -1: host
  size_t bytes;
  int count;  // copies queued
  cudaStream_t stream;
  cudaEvent_t begin, end;
};

struct Pair {
  int src, dst;
  char *sbuf, *dbuf, *dbuf_host_in;
  char *hbuf_out, *hbuf_in;  // pinned
  cudaStream_t s_direct, s_d2h, s_h2d;
};

Pair make_pair(int src, int dst) {
  Pair p{src, dst};
  CK(cudaSetDevice(src));
  const cudaError_t e = cudaDeviceEnablePeerAccess(dst, 0);
  if (e == cudaErrorPeerAccessAlreadyEnabled)
    (void)cudaGetLastError();
  else
    CK(e);
  CK(cudaMalloc(&p.sbuf, kDirectBytes));
  CK(cudaMemset(p.sbuf, 1, kDirectBytes));
  CK(cudaStreamCreateWithFlags(&p.s_direct, cudaStreamNonBlocking));
  CK(cudaStreamCreateWithFlags(&p.s_d2h, cudaStreamNonBlocking));
  CK(cudaSetDevice(dst));
  CK(cudaMalloc(&p.dbuf, kDirectBytes));
  CK(cudaMalloc(&p.dbuf_host_in, kHostBytes));
  CK(cudaStreamCreateWithFlags(&p.s_h2d, cudaStreamNonBlocking));
  CK(cudaHostAlloc(&p.hbuf_out, kHostBytes, cudaHostAllocPortable));
  CK(cudaHostAlloc(&p.hbuf_in, kHostBytes, cudaHostAllocPortable));
  memset(p.hbuf_in, 2, kHostBytes);
  return p;
}

int copies_for(double gbps_guess, size_t bytes, double ms) {
  return std::max(1, static_cast<int>(ms * 1e-3 * gbps_guess * 1e9 / bytes + 0.5));
}

std::vector<Flow> flows_of(const Pair& p, bool direct, bool host, double ms) {
  std::vector<Flow> f;
  if (direct)
    f.push_back({"direct", p.src, p.dbuf, p.sbuf, p.dst, p.src, kDirectBytes,
                 copies_for(390, kDirectBytes, ms), p.s_direct});
  if (host) {
    f.push_back({"d2h", p.src, p.hbuf_out, p.sbuf, -1, p.src, kHostBytes, copies_for(45, kHostBytes, ms),
                 p.s_d2h});
    f.push_back({"h2d", p.dst, p.dbuf_host_in, p.hbuf_in, p.dst, -1, kHostBytes,
                 copies_for(45, kHostBytes, ms), p.s_h2d});
  }
  return f;
}

// Runs the flows together once; returns each flow's GB/s.
std::vector<double> run_once(std::vector<Flow>& flows) {
  for (auto& f : flows) {
    CK(cudaSetDevice(f.dev));
    CK(cudaEventCreate(&f.begin));
    CK(cudaEventCreate(&f.end));
  }
  for (auto& f : flows) {
    CK(cudaSetDevice(f.dev));
    CK(cudaDeviceSynchronize());
  }
  for (auto& f : flows) {
    CK(cudaSetDevice(f.dev));
    CK(cudaEventRecord(f.begin, f.stream));
    for (int i = 0; i < f.count; ++i) {
      if (f.src_dev >= 0 && f.dst_dev >= 0)
        CK(cudaMemcpyPeerAsync(f.dst, f.dst_dev, f.src, f.src_dev, f.bytes, f.stream));
      else
        CK(cudaMemcpyAsync(f.dst, f.src, f.bytes, cudaMemcpyDefault, f.stream));
    }
    CK(cudaEventRecord(f.end, f.stream));
  }
  std::vector<double> gbps;
  for (auto& f : flows) {
    CK(cudaEventSynchronize(f.end));
    float ms = 0;
    CK(cudaEventElapsedTime(&ms, f.begin, f.end));
    gbps.push_back(f.count * static_cast<double>(f.bytes) / (ms * 1e-3) / 1e9);
    CK(cudaEventDestroy(f.begin));
    CK(cudaEventDestroy(f.end));
  }
  return gbps;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  const int reps = argc > 1 ? atoi(argv[1]) : 5;
  const double ms = argc > 2 ? atof(argv[2]) : 20.0;
  int n = 0;
  CK(cudaGetDeviceCount(&n));
  std::vector<Pair> pairs{make_pair(0, 1)};
  if (n >= 4) pairs.push_back(make_pair(2, 3));
  struct Mode {
    const char* name;
    bool direct, host;
  };
  const Mode modes[] = {{"direct", true, false}, {"host", false, true}, {"both", true, true}};
  for (size_t npairs = 1; npairs <= pairs.size(); ++npairs) {
    for (const Mode& m : modes) {
      std::vector<Flow> flows;
      for (size_t i = 0; i < npairs; ++i) {
        auto f = flows_of(pairs[i], m.direct, m.host, ms);
        flows.insert(flows.end(), f.begin(), f.end());
      }
      run_once(flows);  // warm-up
      std::vector<std::vector<double>> samples(flows.size());
      for (int r = 0; r < reps; ++r) {
        auto g = run_once(flows);
        for (size_t k = 0; k < g.size(); ++k) samples[k].push_back(g[k]);
      }
      // One line per flow (its median rate and time per copy), then one per pair: its two-path
      // ceiling, direct + min(d2h, h2d).
      const size_t per_pair = flows.size() / npairs;
      for (size_t i = 0; i < npairs; ++i) {
        double direct = 0, d2h = 0, h2d = 0;
        for (size_t k = i * per_pair; k < (i + 1) * per_pair; ++k) {
          const double g = median(samples[k]);
          const std::string_view kind = flows[k].kind;
          (kind == "direct" ? direct : kind == "d2h" ? d2h : h2d) = g;
          printf("{\"pairs\": %zu, \"mode\": \"%s\", \"pair\": \"%d->%d\", \"flow\": \"%s\", \"bytes\": %zu, "
                 "\"copies\": %d, \"us\": %.2f, \"gbps\": %.1f}\n",
                 npairs, m.name, pairs[i].src, pairs[i].dst, flows[k].kind, flows[k].bytes, flows[k].count,
                 flows[k].bytes / (g * 1e3), g);
        }
        const double host = m.host ? std::min(d2h, h2d) : 0.0;
        printf("{\"pairs\": %zu, \"mode\": \"%s\", \"pair\": \"%d->%d\", \"flow\": \"pair_bound\", "
               "\"gbps\": %.1f}\n",
               npairs, m.name, pairs[i].src, pairs[i].dst, direct + host);
      }
      fflush(stdout);
    }
  }
  return 0;
}
