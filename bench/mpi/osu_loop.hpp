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
// and, where the transport has blocking calls (MPI_Send/MPI_Recv), optionally
//   void send(int slot, size_t bytes, int peer, int tag);
//   void recv(int slot, size_t bytes, int peer, int tag);
// (else latency uses isend/irecv + waitall). Slots below holds a window's buffers.
//
// The three tests are the OSU micro-benchmarks' definitions, so figures compare with
// osu_latency / osu_bw / osu_bibw run on another MPI:
//   latency  ping-pong of blocking send/recv; one-way time = round trip / 2
//   bw       the sender posts a window of isends, waits, and the receiver's ack
//            (after its window of irecvs completed) closes the iteration
//   bibw     both ranks post a window of irecvs and a window of isends, then waitall
// Each is timed over its iterations back to back after a few untimed ones (no
// barrier between iterations), on the first rank of each pair; time per message is
// that total over the messages. The count by size is raised to last kMinRowSeconds at
// the untimed iterations' rate (--iters N fixes it).
//
// Ranks pair up (r <-> r^1) and all pairs run at once; rank 0 prints one line
// "ROW {json}" per size: op (latency|p2p|bibw), method, bytes, gbps (one pair,
// algbw), us (time per message: half a round trip for latency), window,
// ranks, agg_gbps (sum over pairs).
#pragma once
#include <mpi.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "bench_args.hpp"
#include "row_iterations.hpp"

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
  for (ArgWalk a(argc, argv, usage); a.next();) {
    if (a.is("--test")) o.test = a.text();
    else if (a.is("--window")) o.window = static_cast<int>(a.integer(1));
    else if (a.is("--min")) o.min_bytes = a.bytes();
    else if (a.is("--max")) o.max_bytes = a.bytes();
    else if (a.is("--mem")) o.device = a.choice({"device", "host"}) == "device";
    else if (a.is("--staged")) o.staged = true;
    else if (a.is("--iters")) o.iters = static_cast<int>(a.integer(0));
    else if (a.is("--method")) o.method = a.text();
    else if (a.is("--alloc")) o.alloc = a.choice({"plain", "vmm", "pool", "async", "vmm_multi"});
    else if (a.is("--sweep")) {
      std::vector<std::string> f = split_list(a.text(), ':');
      long window = 0;
      Sweep w;
      if (f.size() != 4 || !parse_long(f[1], &window) || !parse_bytes(f[2], &w.min_bytes) ||
          !parse_bytes(f[3], &w.max_bytes))
        a.fail("expected TEST:WINDOW:MIN:MAX, e.g. bw:64:1M:64M");
      w.test = f[0];
      w.window = static_cast<int>(window);
      o.sweeps.push_back(w);
    } else a.unknown();
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

// A row's timed iterations last at least this long at the warm-up's rate, so that one
// disturbance of a millisecond or two (a descheduled rank, the driver) weighs a few percent, not
// double, on a window-1 figure of 10 us per message.
constexpr double kMinRowSeconds = 0.05;
constexpr int kMaxIters = 100000;

inline int iterations(const Options& o, size_t n) {
  if (o.iters > 0) return o.iters;
  if (n <= (64u << 10)) return o.test == "latency" ? 1000 : 100;
  if (n <= (16u << 20)) return 40;
  // A window of 16-64 messages of 512 MB-1 GB is 8-64 GB per iteration: 3 of them give a
  // figure as steady as 5 (the run must fit one device call with every method).
  if (o.window >= 16 && n > (256u << 20)) return 3;
  return n <= (256u << 20) ? 10 : 5;
}

// Whether the transport has blocking send/recv (detected, so transports without them
// need no stubs).
template <class T, class = void>
struct has_blocking : std::false_type {};
template <class T>
struct has_blocking<T, std::void_t<decltype(std::declval<T&>().send(0, size_t(0), 0, 0)),
                                   decltype(std::declval<T&>().recv(0, size_t(0), 0, 0))>> : std::true_type {};

template <class T>
void blocking_send(T& t, size_t n, int peer, int tag) {
  if constexpr (has_blocking<T>::value) {
    t.send(0, n, peer, tag);
  } else {
    t.isend(0, n, peer, tag);
    t.waitall();
  }
}

template <class T>
void blocking_recv(T& t, size_t n, int peer, int tag) {
  if constexpr (has_blocking<T>::value) {
    t.recv(0, n, peer, tag);
  } else {
    t.irecv(0, n, peer, tag);
    t.waitall();
  }
}

// One iteration of the test on this rank (untimed here: the caller times a run of them).
template <class T>
void run_once(const Options& o, T& t, size_t n, int peer, bool first) {
  const int tag = 100;
  if (o.test == "latency") {
    if (first) {
      blocking_send(t, n, peer, tag);
      blocking_recv(t, n, peer, tag);
    } else {
      blocking_recv(t, n, peer, tag);
      blocking_send(t, n, peer, tag);
    }
    return;
  }
  bool bidir = o.test == "bibw";
  if (bidir || !first)
    for (int w = 0; w < o.window; ++w) t.irecv(w, n, peer, tag);
  if (bidir || first)
    for (int w = 0; w < o.window; ++w) t.isend(bidir ? o.window + w : w, n, peer, tag);
  t.waitall();
  if (bidir) return;
  // The receiver's acknowledgement closes the window (as osu_bw does).
  char ack = 0;
  if (first) MPI_Recv(&ack, 1, MPI_BYTE, peer, tag + 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
  else MPI_Send(&ack, 1, MPI_BYTE, peer, tag + 1, MPI_COMM_WORLD);
}

// Untimed iterations first (OSU's skip: more for small messages, whose first calls
// set up connections and caches).
inline int warmups(size_t n) { return n <= (64u << 10) ? 10 : 2; }

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
    MPI_Barrier(MPI_COMM_WORLD);
    double fastest = 0;
    for (int it = 0; it < warmups(n); ++it) {
      const double w0 = MPI_Wtime();
      run_once(o, t, n, peer, first);
      const double took = MPI_Wtime() - w0;
      if (it == 0 || took < fastest) fastest = took;
    }
    const int iters =
        bench::agreed_iterations(iterations(o, n), o.iters > 0 ? 0 : fastest, kMinRowSeconds, 0, 1, kMaxIters);
    double t0 = MPI_Wtime();
    for (int it = 0; it < iters; ++it) run_once(o, t, n, peer, first);
    double s = (MPI_Wtime() - t0) / iters;  // one iteration: a round trip, or a window
    if (o.test == "latency") s /= 2;
    t.release();
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
