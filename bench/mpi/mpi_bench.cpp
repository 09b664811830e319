// OSU-style point-to-point benchmark written against plain MPI (and the CUDA
// runtime for device buffers): nothing of gpustripe in it, so the same binary
// measures the MPI alone, the MPI with libgpustripe_mpi.so preloaded, and the
// GPU-unaware pattern (copy to host, MPI, copy back).
//
//   mpi_bench --test latency|bw|bibw [--window W] [--min B] [--max B] [--mem device|host]
//             [--staged] [--iters N] [--method NAME]
//
// Ranks pair up (r <-> r^1); every pair runs at once (4 ranks: two pairs), rank 0
// reports its pair, plus the sum over pairs for bw/bibw. Each result is one line
// "ROW {json}" on rank 0's stdout: op, method, bytes, gbps (algbw of one pair),
// us (median time of one message: half a round trip for latency, one window /
// window for bw), window, ranks, agg_gbps.
#include <mpi.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#ifdef BENCH_HAVE_CUDA
#include <cuda_runtime.h>
#define CUDA_OK(call)                                                                          \
  do {                                                                                         \
    cudaError_t e_ = (call);                                                                   \
    if (e_ != cudaSuccess) {                                                                   \
      std::fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call, cudaGetErrorString(e_)); \
      MPI_Abort(MPI_COMM_WORLD, 4);                                                            \
    }                                                                                          \
  } while (0)
#endif

namespace {

struct Options {
  std::string test = "bw";
  int window = 64;
  size_t min_bytes = 1, max_bytes = size_t(1) << 30;
  bool device = true;
  bool staged = false;  // device buffers, MPI on host copies
  int iters = 0;        // 0: by size
  std::string method;
};

size_t parse_bytes(const char* s) {
  char* end = nullptr;
  double v = std::strtod(s, &end);
  switch (end && *end ? *end : ' ') {
    case 'K': case 'k': v *= 1024; break;
    case 'M': case 'm': v *= 1024 * 1024; break;
    case 'G': case 'g': v *= 1024.0 * 1024 * 1024; break;
    default: break;
  }
  return static_cast<size_t>(v);
}

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto next = [&]() -> const char* {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "%s needs a value\n", a.c_str());
        MPI_Abort(MPI_COMM_WORLD, 2);
      }
      return argv[++i];
    };
    if (a == "--test") o.test = next();
    else if (a == "--window") o.window = std::atoi(next());
    else if (a == "--min") o.min_bytes = parse_bytes(next());
    else if (a == "--max") o.max_bytes = parse_bytes(next());
    else if (a == "--mem") o.device = std::string(next()) == "device";
    else if (a == "--staged") o.staged = true;
    else if (a == "--iters") o.iters = std::atoi(next());
    else if (a == "--method") o.method = next();
    else {
      std::fprintf(stderr, "unknown argument %s\n", a.c_str());
      MPI_Abort(MPI_COMM_WORLD, 2);
    }
  }
  if (o.test != "latency" && o.test != "bw" && o.test != "bibw") {
    std::fprintf(stderr, "--test latency|bw|bibw\n");
    MPI_Abort(MPI_COMM_WORLD, 2);
  }
  if (o.test == "latency") o.window = 1;
#ifndef BENCH_HAVE_CUDA
  if (o.device || o.staged) {
    std::fprintf(stderr, "built without CUDA: only --mem host\n");
    MPI_Abort(MPI_COMM_WORLD, 2);
  }
#endif
  return o;
}

// One message buffer per window slot: what MPI sees (`mpi`) and, staged, the device one.
struct Slot {
  char* mpi = nullptr;
  char* dev = nullptr;
};

char* alloc_buffer(size_t n, bool device) {
  char* p = nullptr;
#ifdef BENCH_HAVE_CUDA
  if (device) {
    CUDA_OK(cudaMalloc(reinterpret_cast<void**>(&p), n));
    CUDA_OK(cudaMemset(p, 0x5a, n));
    return p;
  }
#endif
  p = static_cast<char*>(std::malloc(n));
  std::memset(p, 0x5a, n);
  return p;
}

void free_buffer(char* p, bool device) {
#ifdef BENCH_HAVE_CUDA
  if (device) {
    cudaFree(p);
    return;
  }
#endif
  std::free(p);
}

char* alloc_host_staging(size_t n) {
#ifdef BENCH_HAVE_CUDA
  char* p = nullptr;
  CUDA_OK(cudaMallocHost(reinterpret_cast<void**>(&p), n));
  return p;
#else
  return static_cast<char*>(std::malloc(n));
#endif
}

void free_host_staging(char* p) {
#ifdef BENCH_HAVE_CUDA
  cudaFreeHost(p);
#else
  std::free(p);
#endif
}

// The GPU-unaware pattern around each MPI call.
void to_host(const Options& o, Slot& s, size_t n) {
#ifdef BENCH_HAVE_CUDA
  if (o.staged) CUDA_OK(cudaMemcpy(s.mpi, s.dev, n, cudaMemcpyDeviceToHost));
#endif
}
void to_device(const Options& o, Slot& s, size_t n) {
#ifdef BENCH_HAVE_CUDA
  if (o.staged) CUDA_OK(cudaMemcpy(s.dev, s.mpi, n, cudaMemcpyHostToDevice));
#endif
}

int iterations(const Options& o, size_t n) {
  if (o.iters > 0) return o.iters;
  if (n <= (64u << 10)) return o.test == "latency" ? 1000 : 100;
  if (n <= (16u << 20)) return 40;
  return n <= (256u << 20) ? 10 : 5;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

// Time of one iteration in seconds on this rank.
double run_once(const Options& o, std::vector<Slot>& slots, size_t n, int rank, int peer, bool first) {
  std::vector<MPI_Request> reqs(2 * o.window);
  char ack = 0;
  int tag = 100;
  MPI_Barrier(MPI_COMM_WORLD);
  double t0 = MPI_Wtime();
  if (o.test == "latency") {
    Slot& s = slots[0];
    if (first) {
      to_host(o, s, n);
      MPI_Send(s.mpi, static_cast<int>(n), MPI_BYTE, peer, tag, MPI_COMM_WORLD);
      MPI_Recv(s.mpi, static_cast<int>(n), MPI_BYTE, peer, tag, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
      to_device(o, s, n);
    } else {
      MPI_Recv(s.mpi, static_cast<int>(n), MPI_BYTE, peer, tag, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
      to_device(o, s, n);
      to_host(o, s, n);
      MPI_Send(s.mpi, static_cast<int>(n), MPI_BYTE, peer, tag, MPI_COMM_WORLD);
    }
    return (MPI_Wtime() - t0) / 2;
  }
  bool bidir = o.test == "bibw";
  int nreq = 0;
  if (bidir || !first)
    for (int w = 0; w < o.window; ++w)
      MPI_Irecv(slots[w].mpi, static_cast<int>(n), MPI_BYTE, peer, tag, MPI_COMM_WORLD, &reqs[nreq++]);
  if (bidir || first)
    for (int w = 0; w < o.window; ++w) {
      Slot& s = slots[bidir ? o.window + w : w];
      to_host(o, s, n);
      MPI_Isend(s.mpi, static_cast<int>(n), MPI_BYTE, peer, tag, MPI_COMM_WORLD, &reqs[nreq++]);
    }
  MPI_Waitall(nreq, reqs.data(), MPI_STATUSES_IGNORE);
  if (bidir || !first)
    for (int w = 0; w < o.window; ++w) to_device(o, slots[w], n);
  // The receiver's acknowledgement closes the window (as osu_bw does).
  if (first) MPI_Recv(&ack, 1, MPI_BYTE, peer, tag + 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
  else MPI_Send(&ack, 1, MPI_BYTE, peer, tag + 1, MPI_COMM_WORLD);
  return MPI_Wtime() - t0;
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank, size;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  Options o = parse(argc, argv);
  if (size % 2) {
    if (rank == 0) std::fprintf(stderr, "mpi_bench needs an even number of ranks (pairs r <-> r^1)\n");
    MPI_Abort(MPI_COMM_WORLD, 2);
  }
#ifdef BENCH_HAVE_CUDA
  int ndev = 0;
  CUDA_OK(cudaGetDeviceCount(&ndev));
  MPI_Comm node;
  MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &node);
  int local;
  MPI_Comm_rank(node, &local);
  CUDA_OK(cudaSetDevice(local % ndev));
  MPI_Comm_free(&node);
#endif
  int peer = rank ^ 1;
  bool first = rank % 2 == 0;
  std::string method = !o.method.empty() ? o.method : o.staged ? "mpi_host_staged" : "mpi";
  int slots_n = o.test == "bibw" ? 2 * o.window : o.window;
  bool mpi_on_device = o.device && !o.staged;
  for (size_t n = std::max<size_t>(o.min_bytes, 1); n <= o.max_bytes; n *= 2) {
    std::vector<Slot> slots(slots_n);
    // Windows of large messages share one buffer per direction (as osu_bw does) so
    // 64 x 1 GB fits in GPU memory; small ones get a buffer each.
    bool share = n * slots_n > (size_t(2) << 30);
    for (int i = 0; i < slots_n; ++i) {
      if (share && i > 0 && i != o.window) {
        slots[i] = slots[i < o.window ? 0 : o.window];
        continue;
      }
      slots[i].mpi = o.staged ? alloc_host_staging(n) : alloc_buffer(n, mpi_on_device);
      if (o.staged) slots[i].dev = alloc_buffer(n, true);
    }
    int iters = iterations(o, n);
    std::vector<double> times;
    for (int it = -2; it < iters; ++it) {  // two warm-up rounds
      double t = run_once(o, slots, n, rank, peer, first);
      if (it >= 0) times.push_back(t);
    }
    double t = median(times);
    double per_msg_us = o.test == "latency" ? t * 1e6 : t * 1e6 / o.window;
    double dirs = o.test == "bibw" ? 2 : 1;
    double gbps = o.test == "latency" ? n / (t * 1e9) : dirs * n * o.window / (t * 1e9);
    double agg = 0;
    double mine = first ? gbps : 0;
    MPI_Reduce(&mine, &agg, 1, MPI_DOUBLE, MPI_SUM, 0, MPI_COMM_WORLD);
    if (rank == 0) {
      const char* op = o.test == "latency" ? "latency" : o.test == "bibw" ? "bibw" : "p2p";
      std::printf(
          "ROW {\"op\": \"%s\", \"method\": \"%s\", \"bytes\": %zu, \"gbps\": %.4f, \"us\": %.3f, \"window\": %d, "
          "\"ranks\": %d, \"agg_gbps\": %.4f, \"mem\": \"%s\", \"iters\": %d}\n",
          op, method.c_str(), n, gbps, per_msg_us, o.window, size, agg, o.device ? "device" : "host", iters);
      std::fflush(stdout);
    }
    for (int i = 0; i < slots_n; ++i) {
      if (share && i > 0 && i != o.window) continue;
      if (o.staged) {
        free_host_staging(slots[i].mpi);
        free_buffer(slots[i].dev, true);
      } else {
        free_buffer(slots[i].mpi, mpi_on_device);
      }
    }
  }
  MPI_Finalize();
  return 0;
}
