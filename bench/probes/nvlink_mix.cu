// Probe (issue 6): does one GPU's NVLink carry more when copy engines and SM kernels move
// data at the same time than either alone? Every GPU sends a block to every peer and
// receives one from each (the alltoall pattern of the collectives, where copy engines in
// permutation rounds reach ~363 GB/s per direction). Modes, per size per rank:
//   ce_rounds            copy engines, round r: i -> i+r (one stream per GPU)
//   sm_push / sm_pull    one kernel per GPU storing to (loading from) all peers at once
//   sm_push_rounds       one kernel per round, stores to one peer
//   mix_push f bp        copy engines move fraction f of every block in rounds while a kernel
//                        (bp blocks per peer) stores the rest to all peers
//   mix_pull f bp        the same with the kernel loading from the peers
//   ce_local_reduce      copy-engine rounds beside a local 4-input reduction kernel (the
//                        pipelined reduce-scatter's HBM and SM load): times alone and together
// Prints one JSON object per line: mode, mb (per rank), f, bp, us (median), busbw (GB/s per
// GPU per direction = (n-1) blocks / time). Build: nvcc -O2 -arch=sm_90 -o nvlink_mix nvlink_mix.cu
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <vector>

#define CK(x)                                                                                          \
  do {                                                                                                 \
    cudaError_t ck_e = (x);                                                                            \
    if (ck_e != cudaSuccess) {                                                                         \
      fprintf(stderr, "CUDA %s at %s:%d: %s\n", cudaGetErrorString(ck_e), __FILE__, __LINE__, #x);     \
      exit(1);                                                                                         \
    }                                                                                                  \
  } while (0)

constexpr int kMaxG = 8;
static int ng;
static char *sendb[kMaxG], *recvb[kMaxG], *red[kMaxG];
static cudaStream_t st[kMaxG][2];
static cudaEvent_t ev[kMaxG][64];
static int evi[kMaxG];

static cudaEvent_t mark(int d, cudaStream_t s) {
  CK(cudaSetDevice(d));
  cudaEvent_t e = ev[d][evi[d]++ % 64];
  CK(cudaEventRecord(e, s));
  return e;
}
static void waitfor(int d, cudaStream_t s, cudaEvent_t e) {
  CK(cudaSetDevice(d));
  CK(cudaStreamWaitEvent(s, e, 0));
}
// Every GPU's two streams start after GPU 0's stream 0; GPU 0's stream 0 ends after all.
static void fork_all() {
  cudaEvent_t e = mark(0, st[0][0]);
  for (int d = 0; d < ng; ++d)
    for (int k = 0; k < 2; ++k)
      if (d || k) waitfor(d, st[d][k], e);
}
static void join_all() {
  for (int d = 0; d < ng; ++d)
    for (int k = 0; k < 2; ++k)
      if (d || k) waitfor(0, st[0][0], mark(d, st[d][k]));
}
static double time_us(const std::function<void()>& f, int reps) {
  CK(cudaSetDevice(0));
  cudaEvent_t a, b;
  CK(cudaEventCreate(&a));
  CK(cudaEventCreate(&b));
  for (int w = 0; w < 2; ++w) {
    fork_all();
    f();
    join_all();
  }
  for (int d = 0; d < ng; ++d) {
    CK(cudaSetDevice(d));
    CK(cudaDeviceSynchronize());
  }
  std::vector<float> ts;
  for (int r = 0; r < reps; ++r) {
    CK(cudaSetDevice(0));
    CK(cudaEventRecord(a, st[0][0]));
    fork_all();
    f();
    join_all();
    CK(cudaSetDevice(0));
    CK(cudaEventRecord(b, st[0][0]));
    CK(cudaEventSynchronize(b));
    float ms;
    CK(cudaEventElapsedTime(&ms, a, b));
    ts.push_back(ms * 1e3f);
  }
  CK(cudaEventDestroy(a));
  CK(cudaEventDestroy(b));
  std::sort(ts.begin(), ts.end());
  return ts[ts.size() / 2];
}

// Up to kMaxG-1 (src, dst) streams of n vectors each; blockIdx.y picks one.
struct Moves {
  const uint4* s[kMaxG];
  uint4* d[kMaxG];
  size_t n;
};
__global__ void __launch_bounds__(512) move_kernel(Moves m) {
  const uint4* s = m.s[blockIdx.y];
  uint4* d = m.d[blockIdx.y];
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x;
  for (; i + 3 * stride < m.n; i += 4 * stride) {
    uint4 v0 = s[i], v1 = s[i + stride], v2 = s[i + 2 * stride], v3 = s[i + 3 * stride];
    d[i] = v0;
    d[i + stride] = v1;
    d[i + 2 * stride] = v2;
    d[i + 3 * stride] = v3;
  }
  for (; i < m.n; i += stride) d[i] = s[i];
}
// out = a + b + c + d (float), local memory.
__global__ void __launch_bounds__(512) reduce4(const float4* a, const float4* b, const float4* c, const float4* d,
                                               float4* out, size_t n) {
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n; i += stride) {
    float4 x = a[i], y = b[i], z = c[i], w = d[i];
    out[i] = make_float4(x.x + y.x + z.x + w.x, x.y + y.y + z.y + w.y, x.z + y.z + z.z + w.z, x.w + y.w + z.w + w.w);
  }
}

static int sms = 132;

// Member i's copy-engine rounds over bytes [off, off+len) of every peer block.
static void ce_rounds(size_t blk, size_t off, size_t len) {
  if (len == 0) return;
  for (int r = 1; r < ng; ++r)
    for (int i = 0; i < ng; ++i) {
      int j = (i + r) % ng;
      CK(cudaSetDevice(i));
      CK(cudaMemcpyPeerAsync(recvb[j] + i * blk + off, j, sendb[i] + j * blk + off, i, len, st[i][0]));
    }
}
// Kernels over bytes [off, off+len) of every peer block: push (GPU i stores to its peers)
// or pull (GPU j loads from its peers), all peers at once (one_peer < 0) or one round's peer.
static void sm_moves(size_t blk, size_t off, size_t len, bool push, int bp, int stream, int round = -1) {
  if (len == 0) return;
  for (int me = 0; me < ng; ++me) {
    Moves m{};
    m.n = len / 16;
    int k = 0;
    for (int r = 1; r < ng; ++r) {
      if (round > 0 && r != round) continue;
      if (push) {
        int j = (me + r) % ng;  // me sends to j
        m.s[k] = reinterpret_cast<const uint4*>(sendb[me] + j * blk + off);
        m.d[k] = reinterpret_cast<uint4*>(recvb[j] + me * blk + off);
      } else {
        int i = (me + r) % ng;  // me receives from i
        m.s[k] = reinterpret_cast<const uint4*>(sendb[i] + me * blk + off);
        m.d[k] = reinterpret_cast<uint4*>(recvb[me] + i * blk + off);
      }
      ++k;
    }
    CK(cudaSetDevice(me));
    move_kernel<<<dim3(bp, k), 512, 0, st[me][stream]>>>(m);
    CK(cudaGetLastError());
  }
}

static void row(const char* mode, size_t mb, double f, int bp, double us, double bytes_per_gpu, const char* extra = "") {
  printf("{\"mode\": \"%s\", \"mb\": %zu, \"f\": %.2f, \"bp\": %d, \"us\": %.1f, \"busbw\": %.1f%s}\n", mode, mb, f, bp,
         us, bytes_per_gpu / us / 1e3, extra);
  fflush(stdout);
}

int main(int argc, char** argv) {
  const int reps = argc > 1 ? atoi(argv[1]) : 10;
  CK(cudaGetDeviceCount(&ng));
  ng = std::min(ng, kMaxG);
  if (ng < 2) {
    fprintf(stderr, "needs 2+ GPUs\n");
    return 1;
  }
  CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  const size_t kMax = 256ull << 20;
  for (int i = 0; i < ng; ++i) {
    CK(cudaSetDevice(i));
    CK(cudaMalloc(&sendb[i], kMax));
    CK(cudaMalloc(&recvb[i], kMax));
    CK(cudaMalloc(&red[i], 5 * (kMax / ng)));
    CK(cudaMemset(sendb[i], i + 1, kMax));
    CK(cudaMemset(red[i], 0, 5 * (kMax / ng)));
    for (int k = 0; k < 2; ++k) CK(cudaStreamCreateWithFlags(&st[i][k], cudaStreamNonBlocking));
    for (int k = 0; k < 64; ++k) CK(cudaEventCreateWithFlags(&ev[i][k], cudaEventDisableTiming));
    for (int j = 0; j < ng; ++j)
      if (j != i) CK(cudaDeviceEnablePeerAccess(j, 0));
  }
  fprintf(stderr, "nvlink_mix: %d GPUs, %d SMs, reps %d\n", ng, sms, reps);
  const int per_peer_full = std::max(1, sms * 2 / (ng - 1));  // all SMs, 2 blocks of 512 each
  for (size_t mb : {256, 64}) {
    const size_t total = mb << 20, blk = total / ng, moved = blk * (ng - 1);
    auto align = [](double v) { return static_cast<size_t>(v) / 4096 * 4096; };
    row("ce_rounds", mb, 1, 0, time_us([&] { ce_rounds(blk, 0, blk); }, reps), moved);
    for (int bp : {per_peer_full / 2, per_peer_full, per_peer_full * 2}) {
      row("sm_push", mb, 0, bp, time_us([&] { sm_moves(blk, 0, blk, true, bp, 1); }, reps), moved);
      row("sm_pull", mb, 0, bp, time_us([&] { sm_moves(blk, 0, blk, false, bp, 1); }, reps), moved);
    }
    row("sm_push_rounds", mb, 0, per_peer_full * (ng - 1), time_us([&] {
          for (int r = 1; r < ng; ++r) sm_moves(blk, 0, blk, true, per_peer_full * (ng - 1), 1, r);
        }, reps),
        moved);
    for (double f : {0.5, 0.65, 0.8, 0.9})
      for (int bp : {std::max(1, per_peer_full / 4), per_peer_full / 2, per_peer_full}) {
        const size_t ce = align(blk * f);
        row("mix_push", mb, f, bp, time_us([&] {
              ce_rounds(blk, 0, ce);
              sm_moves(blk, ce, blk - ce, true, bp, 1);
            }, reps),
            moved);
        row("mix_pull", mb, f, bp, time_us([&] {
              ce_rounds(blk, 0, ce);
              sm_moves(blk, ce, blk - ce, false, bp, 1);
            }, reps),
            moved);
      }
    // The pipelined reduce-scatter's local side: 4 inputs of a block reduced beside the rounds.
    const size_t q = blk / 16;  // float4 per block
    auto reduce_all = [&] {
      for (int d = 0; d < ng; ++d) {
        CK(cudaSetDevice(d));
        const float4* r = reinterpret_cast<const float4*>(red[d]);
        reduce4<<<sms * 2, 512, 0, st[d][1]>>>(r, r + q, r + 2 * q, r + 3 * q,
                                               reinterpret_cast<float4*>(red[d]) + 4 * q, q);
        CK(cudaGetLastError());
      }
    };
    double t_red = time_us(reduce_all, reps);
    double t_both = time_us([&] {
      ce_rounds(blk, 0, blk);
      reduce_all();
    }, reps);
    char extra[96];
    snprintf(extra, sizeof extra, ", \"reduce_alone_us\": %.1f, \"local_gbps\": %.1f", t_red, 5.0 * blk / t_red / 1e3);
    row("ce_local_reduce", mb, 1, sms * 2, t_both, moved, extra);
  }
  fprintf(stderr, "nvlink_mix: done\n");
  return 0;
}
