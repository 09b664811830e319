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
// With `host` as the second argument (session 4, the exchanges' host path): what pinned host
// memory carries per GPU when all GPUs use it at once, alone and beside the copy-engine rounds.
// h is the share of every peer block on the host path; an alltoall's host part crosses PCIe
// twice (D2H by the sender, H2D by the receiver: every GPU moves (n-1) h blocks each way), an
// allgather's once out ((h block D2H) and (n-1) times in. No waits between the two halves: the
// ceiling of the paths' rates, not the store-and-forward pipeline (the library's own timing).
//   host_d2h / host_h2d / host_a2a / host_ag   the host part alone (D2H only, H2D only, both)
//   mix_a2a / mix_ag     copy-engine rounds over (1 - h) of every block beside the host part
//   hostk_a2a, mixk_a2a / mixk_ag   the same with the host part moved by SM kernels (stores into
//                        and loads from mapped pinned memory): copy engines then serve NVLink only
//   ce_overlap h         copy-engine rounds on two streams taking turns, round r+1 starting when
//                        round r has its last h of the block to go (hides a copy's start/finish?)
// Host rows add ce_us / d2h_us / h2d_us (each path's finish, the slowest GPU, medians) and
// their rates per GPU (ce_gbps per direction, d2h_gbps, h2d_gbps).
// Prints one JSON object per line: mode, mb (per rank), f, bp, us (median), busbw (GB/s per
// GPU per direction = (n-1) blocks / time). Build: nvcc -O2 -arch=sm_90 -o nvlink_mix nvlink_mix.cu
#include <cuda_runtime.h>

#include "probe_check.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <functional>
#include <vector>

constexpr int kMaxG = 8;
static int ng;
static char *sendb[kMaxG], *recvb[kMaxG], *red[kMaxG];
static cudaStream_t st[kMaxG][4];
static int nstreams = 2;  // streams per GPU that fork_all / join_all order (4 in host mode)
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
    for (int k = 0; k < nstreams; ++k)
      if (d || k) waitfor(d, st[d][k], e);
}
static void join_all() {
  for (int d = 0; d < ng; ++d)
    for (int k = 0; k < nstreams; ++k)
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

// Host mode: pinned staging per GPU (the D2H destination, the H2D source) and per-path timing.
static char *hostd[kMaxG], *hosts[kMaxG];
static cudaEvent_t tstart[kMaxG], tend[kMaxG][4];
struct Parts {
  double total, ce, d2h, h2d;
};
// Like time_us, and also when each GPU's streams 0 (copy engines), 2 (D2H) and 3 (H2D) finish,
// from that GPU's start: per path the slowest GPU, medians over reps.
static Parts time_parts(const std::function<void()>& f, int reps) {
  for (int w = 0; w < 2; ++w) {
    fork_all();
    f();
    join_all();
  }
  for (int d = 0; d < ng; ++d) {
    CK(cudaSetDevice(d));
    CK(cudaDeviceSynchronize());
  }
  CK(cudaSetDevice(0));
  cudaEvent_t a, b;
  CK(cudaEventCreate(&a));
  CK(cudaEventCreate(&b));
  std::vector<double> tot, path[3];
  const int ks[3] = {0, 2, 3};
  for (int r = 0; r < reps; ++r) {
    CK(cudaSetDevice(0));
    CK(cudaEventRecord(a, st[0][0]));
    fork_all();
    for (int d = 0; d < ng; ++d) {
      CK(cudaSetDevice(d));
      CK(cudaEventRecord(tstart[d], st[d][0]));
    }
    f();
    for (int d = 0; d < ng; ++d) {
      CK(cudaSetDevice(d));
      for (int k : ks) CK(cudaEventRecord(tend[d][k], st[d][k]));
    }
    join_all();
    CK(cudaSetDevice(0));
    CK(cudaEventRecord(b, st[0][0]));
    CK(cudaEventSynchronize(b));
    float ms;
    CK(cudaEventElapsedTime(&ms, a, b));
    tot.push_back(ms * 1e3);
    for (int p = 0; p < 3; ++p) {
      double worst = 0;
      for (int d = 0; d < ng; ++d) {
        CK(cudaSetDevice(d));
        CK(cudaEventElapsedTime(&ms, tstart[d], tend[d][ks[p]]));
        worst = std::max(worst, ms * 1e3);
      }
      path[p].push_back(worst);
    }
  }
  CK(cudaSetDevice(0));
  CK(cudaEventDestroy(a));
  CK(cudaEventDestroy(b));
  auto med = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  };
  return {med(tot), med(path[0]), med(path[1]), med(path[2])};
}

// Every GPU's host part: d2h_n copies of `piece` bytes to pinned memory (stream 2) and h2d_n from
// it (stream 3), the tails of its peer blocks, each split into `chunks` copies (the library's
// pipeline chunks).
static void host_part(size_t blk, size_t piece, int d2h_n, int h2d_n, int chunks) {
  if (piece == 0) return;
  const size_t step = (piece + chunks - 1) / chunks;
  for (int d = 0; d < ng; ++d) {
    CK(cudaSetDevice(d));
    for (int k = 0; k < d2h_n; ++k)
      for (size_t off = 0; off < piece; off += step)
        CK(cudaMemcpyAsync(hostd[d] + k * piece + off, sendb[d] + ((d + 1 + k) % ng) * blk + blk - piece + off,
                           std::min(step, piece - off), cudaMemcpyDeviceToHost, st[d][2]));
    for (int k = 0; k < h2d_n; ++k)
      for (size_t off = 0; off < piece; off += step)
        CK(cudaMemcpyAsync(recvb[d] + ((d + 1 + k) % ng) * blk + blk - piece + off, hosts[d] + k * piece + off,
                           std::min(step, piece - off), cudaMemcpyHostToDevice, st[d][3]));
  }
}

// Copy-engine rounds on two streams per GPU taking turns: round r+1's copy starts once round r's
// first (1 - tail) of the block is through, beside round r's tail (each 64M round copy pays ~16 us
// of start and finish in the alltoall pattern, s2 timelines: does the next copy hide it?).
static void ce_rounds_overlap(size_t blk, double tail) {
  std::vector<cudaEvent_t> bulk_done(ng);
  for (int r = 1; r < ng; ++r) {
    const int k = (r - 1) % 2;
    for (int i = 0; i < ng; ++i) {
      const int j = (i + r) % ng;
      const size_t bulk = static_cast<size_t>(blk * (1 - tail)) / 4096 * 4096;
      if (r > 1) waitfor(i, st[i][k], bulk_done[i]);
      CK(cudaSetDevice(i));
      CK(cudaMemcpyPeerAsync(recvb[j] + i * blk, j, sendb[i] + j * blk, i, bulk, st[i][k]));
      bulk_done[i] = mark(i, st[i][k]);
      CK(cudaMemcpyPeerAsync(recvb[j] + i * blk + bulk, j, sendb[i] + j * blk + bulk, i, blk - bulk, st[i][k]));
    }
  }
}

// The same host part moved by SM kernels (bp blocks per direction per GPU: stores into mapped
// pinned memory, loads from it) instead of copy engines, which then serve NVLink alone.
static void host_part_kernels(size_t blk, size_t piece, int d2h_n, int h2d_n, int bp) {
  if (piece == 0) return;
  for (int d = 0; d < ng; ++d) {
    CK(cudaSetDevice(d));
    Moves out{}, in{};
    out.n = in.n = piece / 16;
    for (int k = 0; k < d2h_n; ++k) {
      out.s[k] = reinterpret_cast<const uint4*>(sendb[d] + ((d + 1 + k) % ng) * blk + blk - piece);
      out.d[k] = reinterpret_cast<uint4*>(hostd[d] + k * piece);
    }
    for (int k = 0; k < h2d_n; ++k) {
      in.s[k] = reinterpret_cast<const uint4*>(hosts[d] + k * piece);
      in.d[k] = reinterpret_cast<uint4*>(recvb[d] + ((d + 1 + k) % ng) * blk + blk - piece);
    }
    if (d2h_n) move_kernel<<<dim3(bp, d2h_n), 512, 0, st[d][2]>>>(out);
    if (h2d_n) move_kernel<<<dim3(bp, h2d_n), 512, 0, st[d][3]>>>(in);
    CK(cudaGetLastError());
  }
}

static void host_row(const char* mode, size_t mb, double h, int chunks, const Parts& t, size_t blk, size_t ce_bytes,
                     size_t d2h_bytes, size_t h2d_bytes) {
  auto rate = [](size_t bytes, double us) { return us > 0 && bytes ? bytes / us / 1e3 : 0.0; };
  printf("{\"mode\": \"%s\", \"mb\": %zu, \"h\": %.3f, \"chunks\": %d, \"us\": %.1f, \"busbw\": %.1f, \"ce_us\": %.1f, "
         "\"d2h_us\": %.1f, \"h2d_us\": %.1f, \"ce_gbps\": %.1f, \"d2h_gbps\": %.1f, \"h2d_gbps\": %.1f}\n",
         mode, mb, h, chunks, t.total, (ng - 1) * blk / t.total / 1e3, t.ce, t.d2h, t.h2d,
         rate((ng - 1) * ce_bytes, t.ce), rate(d2h_bytes, t.d2h), rate(h2d_bytes, t.h2d));
  fflush(stdout);
}

static int host_main(int reps) {
  nstreams = 4;
  const size_t kMax = 1ull << 30;
  const double kMaxShare = 0.2;
  const size_t host_cap = static_cast<size_t>((ng - 1) * (kMax / ng) * kMaxShare) + 4096;
  for (int i = 0; i < ng; ++i) {
    CK(cudaSetDevice(i));
    CK(cudaMalloc(&sendb[i], kMax));
    CK(cudaMalloc(&recvb[i], kMax));
    CK(cudaMemset(sendb[i], i + 1, kMax));
    CK(cudaHostAlloc(&hostd[i], host_cap, cudaHostAllocPortable | cudaHostAllocMapped));
    CK(cudaHostAlloc(&hosts[i], host_cap, cudaHostAllocPortable | cudaHostAllocMapped));
    memset(hosts[i], i + 1, host_cap);
    for (int k = 0; k < 4; ++k) CK(cudaStreamCreateWithFlags(&st[i][k], cudaStreamNonBlocking));
    for (int k = 0; k < 64; ++k) CK(cudaEventCreateWithFlags(&ev[i][k], cudaEventDisableTiming));
    CK(cudaEventCreate(&tstart[i]));
    for (int k = 0; k < 4; ++k) CK(cudaEventCreate(&tend[i][k]));
    for (int j = 0; j < ng; ++j)
      if (j != i) CK(cudaDeviceEnablePeerAccess(j, 0));
  }
  fprintf(stderr, "nvlink_mix host: %d GPUs, reps %d\n", ng, reps);
  auto align = [](double v) { return static_cast<size_t>(v) / 4096 * 4096; };
  const int p = ng - 1;
  for (size_t mb : {256, 64, 1024}) {
    const size_t blk = (mb << 20) / ng;
    auto a2a = [&](const char* mode, double h, bool ce, bool d2h, bool h2d, int chunks = 1) {
      const size_t piece = align(blk * h), ce_bytes = blk - piece;
      Parts t = time_parts([&] {
        if (ce) ce_rounds(blk, 0, ce_bytes);
        host_part(blk, piece, d2h ? p : 0, h2d ? p : 0, chunks);
      }, reps);
      host_row(mode, mb, h, chunks, t, blk, ce ? ce_bytes : 0, d2h ? p * piece : 0, h2d ? p * piece : 0);
    };
    auto ag = [&](const char* mode, double h, bool ce) {
      const size_t piece = align(blk * h), ce_bytes = blk - piece;
      Parts t = time_parts([&] {
        if (ce) ce_rounds(blk, 0, ce_bytes);
        host_part(blk, piece, 1, p, 1);
      }, reps);
      host_row(mode, mb, h, 1, t, blk, ce ? ce_bytes : 0, piece, p * piece);
    };
    auto a2ak = [&](const char* mode, double h, bool ce, int bp, bool ag_pattern = false) {
      const size_t piece = align(blk * h), ce_bytes = blk - piece;
      const int outs = ag_pattern ? 1 : p;
      Parts t = time_parts([&] {
        if (ce) ce_rounds(blk, 0, ce_bytes);
        host_part_kernels(blk, piece, outs, p, bp);
      }, reps);
      host_row(mode, mb, h, bp, t, blk, ce ? ce_bytes : 0, outs * piece, p * piece);
    };
    a2a("ce_rounds", 0, true, false, false);
    for (double tail : {0.03, 0.06, 0.12, 0.25}) {
      Parts t = time_parts([&] { ce_rounds_overlap(blk, tail); }, reps);
      host_row("ce_overlap", mb, tail, 2, t, blk, blk, 0, 0);
    }
    if (mb == 1024) {  // the library's 1G shares only
      for (double h : {0.04, 0.05, 0.06}) a2a("mix_a2a", h, true, true, true);
      for (double h : {0.06, 0.07, 0.09}) ag("mix_ag", h, true);
      continue;
    }
    a2a("host_d2h", 0.06, false, true, false);
    a2a("host_h2d", 0.06, false, false, true);
    for (double h : {0.04, 0.06, 0.08}) a2a("host_a2a", h, false, true, true);
    for (double h : {0.06, 0.09, 0.12}) ag("host_ag", h, false);
    for (double h : {0.03, 0.04, 0.05, 0.06, 0.07, 0.08, 0.10}) a2a("mix_a2a", h, true, true, true);
    for (int c : {2, 4, 8, 16}) a2a("mix_a2a", 0.06, true, true, true, c);
    for (double h : {0.05, 0.06, 0.07, 0.08, 0.09, 0.10, 0.11, 0.12, 0.14}) ag("mix_ag", h, true);
    // Host part by SM kernels ("chunks" = blocks per peer and direction).
    for (int bp : {2, 8, 32}) a2ak("hostk_a2a", 0.06, false, bp);
    for (double h : {0.04, 0.06, 0.08, 0.10}) a2ak("mixk_a2a", h, true, 8);
    for (double h : {0.08, 0.10, 0.12, 0.14}) a2ak("mixk_ag", h, true, 8, true);
  }
  fprintf(stderr, "nvlink_mix host: done\n");
  return 0;
}

int main(int argc, char** argv) {
  const int reps = argc > 1 ? atoi(argv[1]) : 10;
  CK(cudaGetDeviceCount(&ng));
  ng = std::min(ng, kMaxG);
  if (ng < 2) {
    fprintf(stderr, "needs 2+ GPUs\n");
    return 1;
  }
  if (argc > 2 && std::string(argv[2]) == "host") return host_main(reps);
  CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  const size_t kMax = 256ull << 20;
  for (int i = 0; i < ng; ++i) {
    CK(cudaSetDevice(i));
    CK(cudaMalloc(&sendb[i], kMax));
    CK(cudaMalloc(&recvb[i], kMax));
    CK(cudaMalloc(&red[i], 5 * (kMax / ng)));
    CK(cudaMemset(sendb[i], i + 1, kMax));
    CK(cudaMemset(red[i], 0, 5 * (kMax / ng)));
    for (int k = 0; k < 4; ++k) CK(cudaStreamCreateWithFlags(&st[i][k], cudaStreamNonBlocking));
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
