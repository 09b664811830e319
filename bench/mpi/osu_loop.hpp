// The measurement loop of the OSU-style clients, shared by mpi_bench (plain MPI)
// and gs_p2p_bench (native gpustripe p2p), so both time exactly the same pattern.
// Uses MPI only for coordination (barriers, the reduction of the pair results);
// the messages go through a Transport:
//   void prepare(int slots, size_t bytes);   buffers for a window (both directions)
//   void release();
//   void isend(int slot, size_t bytes, int peer, int tag);
//   void irecv(int slot, size_t bytes, int peer, int tag);
//   void waitall();                          completes what isend/irecv started
//   std::string method() const;
// (Slots below holds a window's buffers.)
//
// Ranks pair up (r <-> r^1) and all pairs run at once; rank 0 prints one line
// "ROW {json}" per size: op (latency|p2p|bibw), method, bytes, gbps (one pair,
// algbw), us (median time per message: half a round trip for latency), window,
// ranks, agg_gbps (sum over pairs).
#pragma once
#include <mpi.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "bench_args.hpp"

namespace osu {

// One sweep over sizes: a test at a window.
struct Sweep {
  std::string test;
  int window;
  size_t min_bytes, max_bytes;
};

struct Options {
  // The sweep being run (run_sweeps sets these from `sweeps` in turn; the transports
  // read them through their reference to the options).
  std::string test = "bw";  // latency | bw | bibw
  int window = 64;
  size_t min_bytes = 1, max_bytes = size_t(1) << 30;
  std::vector<Sweep> sweeps;  // --sweep, or the one of --test/--window/--min/--max
  bool device = true;   // device buffers (else host)
  bool staged = false;  // device buffers, MPI on pinned host copies (the GPU-unaware pattern)
  // Where device buffers come from: plain (cudaMalloc), vmm (cuMemCreate with POSIX-fd
  // handles), pool (a cudaMallocAsync pool with POSIX-fd handles), async (the default pool).
  std::string alloc = "plain";
  int iters = 0;        // 0: by size
  std::string method;   // label override
};

[[noreturn]] inline void usage(const char* why) {
  std::fprintf(stderr,
               "%s\nusage: --test latency|bw|bibw [--window W] [--min B] [--max B] [--mem device|host] [--staged] "
               "[--iters N] [--method NAME] [--alloc plain|vmm|pool|async|vmm_multi]\n       or instead of --test..--max: --sweep TEST:WINDOW:MIN:MAX, "
               "repeated (one launch, several sweeps)\n",
               why);
  MPI_Abort(MPI_COMM_WORLD, 2);
  std::exit(2);
}

inline Options parse_options(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto next = [&]() -> const char* {
      if (i + 1 >= argc) usage((a + " needs a value").c_str());
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
    else if (a == "--alloc") {
      o.alloc = next();
      if (o.alloc != "plain" && o.alloc != "vmm" && o.alloc != "pool" && o.alloc != "async" && o.alloc != "vmm_multi")
        usage(("--alloc " + o.alloc + ": plain, vmm, pool, async or vmm_multi").c_str());
    }
    else if (a == "--sweep") {
      std::string v = next();
      size_t c1 = v.find(':'), c2 = v.find(':', c1 + 1), c3 = v.find(':', c2 + 1);
      if (c1 == std::string::npos || c2 == std::string::npos || c3 == std::string::npos)
        usage(("--sweep " + v + ": TEST:WINDOW:MIN:MAX").c_str());
      o.sweeps.push_back({v.substr(0, c1), std::atoi(v.substr(c1 + 1, c2 - c1 - 1).c_str()),
                          parse_bytes(v.substr(c2 + 1, c3 - c2 - 1).c_str()), parse_bytes(v.substr(c3 + 1).c_str())});
    } else usage(("unknown argument " + a).c_str());
  }
  if (o.sweeps.empty()) o.sweeps.push_back({o.test, o.window, o.min_bytes, o.max_bytes});
  for (Sweep& w : o.sweeps) {
    if (w.test != "latency" && w.test != "bw" && w.test != "bibw") usage("test: latency, bw or bibw");
    if (w.window < 1) usage("window: at least 1");
    if (w.test == "latency") w.window = 1;
    w.min_bytes = std::max<size_t>(w.min_bytes, 1);
  }
  return o;
}

// The buffers of one window: one per slot (sends, then receives of bibw), or, when a
// window of large messages would not fit in GPU memory (64 x 1 GB), one per direction
// shared by its slots, as osu_bw does. alloc(bytes) -> char*, free(char*).
class Slots {
 public:
  template <class Alloc>
  void make(const Options& o, int slots, size_t n, Alloc alloc) {
    bool share = n * slots > (size_t(2) << 30);
    int window = o.test == "bibw" ? slots / 2 : slots;
    bufs_.assign(slots, nullptr);
    owned_.assign(slots, false);
    for (int i = 0; i < slots; ++i) {
      int owner = share ? (i < window ? 0 : window) : i;
      owned_[i] = owner == i;
      bufs_[i] = owned_[i] ? alloc(n) : bufs_[owner];
    }
  }
  template <class Free>
  void drop(Free free) {
    for (size_t i = 0; i < bufs_.size(); ++i)
      if (owned_[i]) free(bufs_[i]);
    bufs_.clear();
    owned_.clear();
  }
  char* operator[](int slot) const { return bufs_[slot]; }

 private:
  std::vector<char*> bufs_;
  std::vector<bool> owned_;
};

inline int iterations(const Options& o, size_t n) {
  if (o.iters > 0) return o.iters;
  if (n <= (64u << 10)) return o.test == "latency" ? 1000 : 100;
  if (n <= (16u << 20)) return 40;
  // A window of 16-64 messages of 512 MB-1 GB is 8-64 GB per iteration: 3 of them give a
  // median as steady as 5 (the run must fit one device call with every method).
  if (o.window >= 16 && n > (256u << 20)) return 3;
  return n <= (256u << 20) ? 10 : 5;
}

// Seconds of one iteration on this rank.
template <class T>
double run_once(const Options& o, T& t, size_t n, int peer, bool first) {
  const int tag = 100;
  MPI_Barrier(MPI_COMM_WORLD);
  double t0 = MPI_Wtime();
  if (o.test == "latency") {
    if (first) {
      t.isend(0, n, peer, tag);
      t.waitall();
      t.irecv(0, n, peer, tag);
      t.waitall();
    } else {
      t.irecv(0, n, peer, tag);
      t.waitall();
      t.isend(0, n, peer, tag);
      t.waitall();
    }
    return (MPI_Wtime() - t0) / 2;
  }
  bool bidir = o.test == "bibw";
  if (bidir || !first)
    for (int w = 0; w < o.window; ++w) t.irecv(w, n, peer, tag);
  if (bidir || first)
    for (int w = 0; w < o.window; ++w) t.isend(bidir ? o.window + w : w, n, peer, tag);
  t.waitall();
  // The receiver's acknowledgement closes the window (as osu_bw does).
  char ack = 0;
  if (first) MPI_Recv(&ack, 1, MPI_BYTE, peer, tag + 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
  else MPI_Send(&ack, 1, MPI_BYTE, peer, tag + 1, MPI_COMM_WORLD);
  return MPI_Wtime() - t0;
}

template <class T>
void run_sweep(const Options& o, T& t);

// Every sweep of o.sweeps in turn, in one launch (MPI and GPU start-up paid once).
template <class T>
void run_sweeps(Options& o, T& t) {
  for (const Sweep& w : o.sweeps) {
    o.test = w.test;
    o.window = w.window;
    o.min_bytes = w.min_bytes;
    o.max_bytes = w.max_bytes;
    run_sweep(o, t);
  }
}

template <class T>
void run_sweep(const Options& o, T& t) {
  int rank, size;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  if (size % 2) usage("an even number of ranks is needed (pairs r <-> r^1)");
  int peer = rank ^ 1;
  bool first = rank % 2 == 0;
  int slots = o.test == "bibw" ? 2 * o.window : o.window;
  for (size_t n = o.min_bytes; n <= o.max_bytes; n *= 2) {
    t.prepare(slots, n);
    int iters = iterations(o, n);
    std::vector<double> times;
    for (int it = -2; it < iters; ++it) {  // two warm-up rounds
      double s = run_once(o, t, n, peer, first);
      if (it >= 0) times.push_back(s);
    }
    t.release();
    std::sort(times.begin(), times.end());
    double s = times[times.size() / 2];
    double us = o.test == "latency" ? s * 1e6 : s * 1e6 / o.window;
    double dirs = o.test == "bibw" ? 2 : 1;
    double gbps = o.test == "latency" ? n / (s * 1e9) : dirs * n * o.window / (s * 1e9);
    double mine = first ? gbps : 0, agg = 0;
    MPI_Reduce(&mine, &agg, 1, MPI_DOUBLE, MPI_SUM, 0, MPI_COMM_WORLD);
    if (rank == 0) {
      const char* op = o.test == "latency" ? "latency" : o.test == "bibw" ? "bibw" : "p2p";
      std::printf(
          "ROW {\"op\": \"%s\", \"method\": \"%s\", \"bytes\": %zu, \"gbps\": %.6g, \"us\": %.3f, \"window\": %d, "
          "\"ranks\": %d, \"agg_gbps\": %.6g, \"mem\": \"%s\", \"iters\": %d, \"alloc\": \"%s\"}\n",
          op, t.method().c_str(), n, gbps, us, o.window, size, agg, o.device ? "device" : "host", iters,
          o.device ? o.alloc.c_str() : "host");
      std::fflush(stdout);
    }
  }
}

}  // namespace osu
