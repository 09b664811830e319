// Collective benchmark written against plain MPI (and the CUDA runtime for device
// buffers): nothing of gpustripe in it. Run with libgpustripe_mpi.so preloaded it
// measures the interposer's collectives (method mpi_gpustripe); with --staged it runs
// the GPU-unaware pattern on the same device buffers: copy to pinned host memory, the
// MPI collective there, copy back (mpi_host_staged). Timing is nccl-tests': a batch of
// back-to-back calls between barriers, time per call, the median of several batches,
// the slowest rank's; sizes per rank as nccl-tests reports them (alltoall and
// reduce_scatter: the send buffer, allgather: the receive buffer), MPI_SUM over --dtype
// (float32 by default; int8 is MPI_CHAR, what OSU's suite sums). reduce_scatter_v is
// MPI_Reduce_scatter with every rank's count equal (the same data as reduce_scatter).
//
//   mpirun -np 4 -x LD_PRELOAD=.../libgpustripe_mpi.so mpi_coll_bench --min 1M --max 1G
// Prints one "ROW {json}" line per (op, size) on rank 0. --check: after the timed calls, one
// more call on known data (the same buffers: a repeated call), its result compared with the
// exact one on every rank ("bad": wrong elements of a sample, all ranks together).
// --nonblocking: each call is the MPI_I* form completed by MPI_Wait at once (its cost beside
// the blocking form's). --overlap: then batches of calls each started, a host computation
// as long as the call's own time (a spin without MPI calls), then waited for, as OSU's
// nonblocking benchmarks measure: "overlap_pct" is how much of the call hid behind the
// computation, 100 * (call + compute - total) / call, within 0..100. --paired: both forms in one
// process, their batches taking turns (which form goes first alternating from trial to trial),
// rows METHOD (blocking) and METHOD_nb (with --overlap, the overlap on the nonblocking row): the two
// forms compared in the same state of the machine, which separate processes run one after the
// other do not share.
#include <mpi.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "bench_args.hpp"
#include "bench_buffers.hpp"

namespace {

struct Options {
  std::vector<std::string> ops{"alltoall", "allgather", "reduce_scatter", "allreduce", "bcast"};
  std::string dtype = "float32";
  size_t min_bytes = size_t(1) << 20, max_bytes = size_t(1) << 30;
  bool device = true, staged = false, check = false, nonblocking = false, overlap = false, paired = false;
  int iters = 0, trials = 5, warmup = 2;  // iters 0: by size
  std::string method;
};

[[noreturn]] void usage(const char* why) {
  std::fprintf(stderr,
               "%s\nusage: mpi_coll_bench [--ops a,b,...] [--min B] [--max B] [--mem device|host] [--staged] "
               "[--iters N] [--trials N] [--warmup N] [--method NAME] [--check] [--nonblocking] [--overlap] [--paired] "
               "[--dtype float32|float64|int32|int64|int8|uint8]\n",
               why);
  MPI_Abort(MPI_COMM_WORLD, 2);
  std::exit(2);
}

Options parse(int argc, char** argv) {
  Options o;
  for (ArgWalk a(argc, argv, usage); a.next();) {
    if (a.is("--ops")) o.ops = a.list();
    else if (a.is("--min")) o.min_bytes = a.bytes();
    else if (a.is("--max")) o.max_bytes = a.bytes();
    else if (a.is("--mem")) o.device = a.choice({"device", "host"}) == "device";
    else if (a.is("--staged")) o.staged = true;
    else if (a.is("--iters")) o.iters = static_cast<int>(a.integer(0));
    else if (a.is("--trials")) o.trials = static_cast<int>(a.integer(1));
    else if (a.is("--warmup")) o.warmup = static_cast<int>(a.integer(0));
    else if (a.is("--method")) o.method = a.text();
    else if (a.is("--check")) o.check = true;
    else if (a.is("--nonblocking")) o.nonblocking = true;
    else if (a.is("--overlap")) o.overlap = o.nonblocking = true;
    else if (a.is("--paired")) o.paired = true;
    else if (a.is("--dtype")) o.dtype = a.text();
    else a.unknown();
  }
  for (const std::string& op : o.ops)
    if (op != "alltoall" && op != "allgather" && op != "reduce_scatter" && op != "reduce_scatter_v" &&
        op != "allreduce" && op != "bcast")
      usage(("unknown op " + op).c_str());
  if (o.staged) o.device = true;
  if (o.staged && (o.nonblocking || o.paired)) usage("--staged times the blocking pattern only");
  return o;
}

// The element type: its MPI datatype and how a value is stored (the check's values are small
// integers, exact in every type; char sums wrap as the MPI's do).
struct Elem {
  MPI_Datatype type = MPI_FLOAT;
  size_t size = 4;
  std::string name;
  void put(char* p, size_t i, long v) const {
    if (name == "float32") reinterpret_cast<float*>(p)[i] = static_cast<float>(v);
    else if (name == "float64") reinterpret_cast<double*>(p)[i] = static_cast<double>(v);
    else if (name == "int32") reinterpret_cast<int32_t*>(p)[i] = static_cast<int32_t>(v);
    else if (name == "int64") reinterpret_cast<int64_t*>(p)[i] = v;
    else reinterpret_cast<uint8_t*>(p)[i] = static_cast<uint8_t>(v);
  }
  // The value stored at i, as its bits say (8-bit types compared modulo 256).
  long get(const char* p, size_t i) const {
    if (name == "float32") return static_cast<long>(reinterpret_cast<const float*>(p)[i]);
    if (name == "float64") return static_cast<long>(reinterpret_cast<const double*>(p)[i]);
    if (name == "int32") return reinterpret_cast<const int32_t*>(p)[i];
    if (name == "int64") return static_cast<long>(reinterpret_cast<const int64_t*>(p)[i]);
    return reinterpret_cast<const uint8_t*>(p)[i];
  }
  long wrap(long v) const { return size == 1 ? static_cast<uint8_t>(v) : v; }
};

Elem elem_of(const std::string& name) {
  Elem e;
  e.name = name;
  if (name == "float32") e = {MPI_FLOAT, 4, name};
  else if (name == "float64") e = {MPI_DOUBLE, 8, name};
  else if (name == "int32") e = {MPI_INT, 4, name};
  else if (name == "int64") e = {MPI_INT64_T, 8, name};
  else if (name == "int8") e = {MPI_CHAR, 1, name};
  else if (name == "uint8") e = {MPI_UNSIGNED_CHAR, 1, name};
  else usage(("unknown --dtype " + name).c_str());
  return e;
}

// nccl-tests' bus bandwidth factors.
double busbw_factor(const std::string& op, int n) {
  if (op == "allreduce") return 2.0 * (n - 1) / n;
  if (op == "bcast") return 1.0;
  return double(n - 1) / n;  // alltoall, allgather, reduce_scatter(_v)
}

// Copies between the host and a benchmark buffer (`device`: GPU memory, else host memory).
void to_host(char* h, const char* d, size_t n, bool device = true) {
#ifdef BENCH_HAVE_CUDA
  if (device) {
    CUDA_OK(cudaMemcpy(h, d, n, cudaMemcpyDeviceToHost));
    return;
  }
#endif
  (void)device;
  std::memcpy(h, d, n);
}
void to_device(char* d, const char* h, size_t n, bool device = true) {
#ifdef BENCH_HAVE_CUDA
  if (device) {
    CUDA_OK(cudaMemcpy(d, h, n, cudaMemcpyHostToDevice));
    return;
  }
#endif
  (void)device;
  std::memcpy(d, h, n);
}

// One call of `op` of `bytes` per rank (nccl-tests' size) over x (in) and y (out).
struct Call {
  std::string op;
  size_t bytes;
  int n;
  const Elem* e;
  std::vector<int> counts;  // reduce_scatter_v: every rank's count
  bool reduces_blocks() const { return op == "reduce_scatter" || op == "reduce_scatter_v"; }
  // Bytes each buffer of the call holds: the input and the output.
  size_t in_bytes() const { return op == "allgather" ? bytes / n : bytes; }
  size_t out_bytes() const { return reduces_blocks() ? bytes / n : bytes; }
  void mpi(const char* in, char* out) {
    const int count = static_cast<int>(bytes / e->size);
    const MPI_Datatype t = e->type;
    if (op == "alltoall") MPI_Alltoall(in, count / n, t, out, count / n, t, MPI_COMM_WORLD);
    else if (op == "allgather") MPI_Allgather(in, count / n, t, out, count / n, t, MPI_COMM_WORLD);
    else if (op == "reduce_scatter") MPI_Reduce_scatter_block(in, out, count / n, t, MPI_SUM, MPI_COMM_WORLD);
    else if (op == "reduce_scatter_v") {
      counts.assign(n, count / n);
      MPI_Reduce_scatter(in, out, counts.data(), t, MPI_SUM, MPI_COMM_WORLD);
    } else if (op == "allreduce") MPI_Allreduce(in, out, count, t, MPI_SUM, MPI_COMM_WORLD);
    else MPI_Bcast(out, count, t, 0, MPI_COMM_WORLD);
  }
  // The nonblocking form of mpi(); MPI_Wait completes it.
  MPI_Request start(const char* in, char* out) {
    const int count = static_cast<int>(bytes / e->size);
    const MPI_Datatype t = e->type;
    MPI_Request r = MPI_REQUEST_NULL;
    if (op == "alltoall") MPI_Ialltoall(in, count / n, t, out, count / n, t, MPI_COMM_WORLD, &r);
    else if (op == "allgather") MPI_Iallgather(in, count / n, t, out, count / n, t, MPI_COMM_WORLD, &r);
    else if (op == "reduce_scatter") MPI_Ireduce_scatter_block(in, out, count / n, t, MPI_SUM, MPI_COMM_WORLD, &r);
    else if (op == "reduce_scatter_v") {
      counts.assign(n, count / n);
      MPI_Ireduce_scatter(in, out, counts.data(), t, MPI_SUM, MPI_COMM_WORLD, &r);
    } else if (op == "allreduce") MPI_Iallreduce(in, out, count, t, MPI_SUM, MPI_COMM_WORLD, &r);
    else MPI_Ibcast(out, count, t, 0, MPI_COMM_WORLD, &r);
    return r;
  }
};

// A host computation of `us` microseconds that makes no MPI call.
void compute(double us) {
  const double end = MPI_Wtime() + us * 1e-6;
  volatile double acc = 0;
  while (MPI_Wtime() < end)
    for (int i = 0; i < 64; ++i) acc = acc + i * 0.5;
}

// Rank q's input element i in --check: small integers, so float sums are exact in any order.
long pattern(int q, size_t i) { return q + 1 + static_cast<long>(i % 13); }

// Fills this rank's input of `c` with the pattern, runs `once`, and counts wrong elements of
// a sample of its output.
long check_call(const Call& c, int rank, bool device, char* x, char* y, std::vector<char>& h,
                const std::function<void()>& once) {
  const int n = c.n;
  const Elem& e = *c.e;
  const size_t in = c.in_bytes() / e.size, blk = c.bytes / e.size / n;
  h.assign(in * e.size, 0);
  if (c.op != "bcast" || rank == 0)
    for (size_t i = 0; i < in; ++i) e.put(h.data(), i, pattern(rank, i));
  to_device(x, h.data(), in * e.size, device);
#ifdef BENCH_HAVE_CUDA
  // A pageable cudaMemcpy may return before its last DMA has landed (CUDA's "API
  // synchronization behavior"): the check tests the collective, not that race.
  if (device) CUDA_OK(cudaDeviceSynchronize());
#endif
  MPI_Barrier(MPI_COMM_WORLD);
  once();
  const bool into_x = c.op == "bcast";
  const size_t out = c.out_bytes() / e.size;
  h.assign(out * e.size, 0);
  to_host(h.data(), into_x ? x : y, out * e.size, device);
  auto want = [&](size_t i) {
    if (c.op == "alltoall") return e.wrap(pattern(static_cast<int>(i / blk), rank * blk + i % blk));
    if (c.op == "allgather") return e.wrap(pattern(static_cast<int>(i / blk), i % blk));
    if (c.op == "bcast") return e.wrap(pattern(0, i));
    long sum = 0;
    for (int q = 0; q < n; ++q) sum += pattern(q, (c.reduces_blocks() ? rank * blk : 0) + i);
    return e.wrap(sum);
  };
  long bad = e.get(h.data(), out - 1) != want(out - 1);
  for (size_t i = 0; i < out; i += 1021) bad += e.get(h.data(), i) != want(i);
  long all = 0;
  MPI_Allreduce(&bad, &all, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
  return all;
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  Options o = parse(argc, argv);
  int rank = 0, n = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &n);
#ifndef BENCH_HAVE_CUDA
  if (o.device) usage("built without CUDA: --mem host only");
#endif
  bench::select_gpu(o.device, "mpi_coll_bench");
  const std::string method = !o.method.empty() ? o.method : o.staged ? "mpi_host_staged" : "mpi";
  const Elem elem = elem_of(o.dtype);
  const size_t unit = elem.size * n;
  // The largest buffers once; each size uses their leading part.
  const size_t top = o.max_bytes / unit * unit;
  char* x = bench::alloc(std::max(top, unit), o.device);
  char* y = bench::alloc(std::max(top, unit), o.device);
  char *hx = nullptr, *hy = nullptr;
  if (o.staged) {
    hx = bench::alloc_pinned(std::max(top, unit));
    hy = bench::alloc_pinned(std::max(top, unit));
  }
  std::vector<char> check_host;
  for (size_t size = o.min_bytes; size <= o.max_bytes; size *= 2) {
    if (size % unit) continue;
    for (const std::string& op : o.ops) {
      Call c{op, size, n, &elem};
      char* out = op == "bcast" ? x : y;
      auto blocking = [&] {
        if (!o.staged) {
          c.mpi(x, out);
          return;
        }
        // The GPU-unaware pattern: what a program does with an MPI that cannot read device memory.
        if (op == "bcast") {
          if (rank == 0) to_host(hx, x, size);
          c.mpi(hx, hx);
          if (rank != 0) to_device(x, hx, size);
          return;
        }
        to_host(hx, x, c.in_bytes());
        c.mpi(hx, hy);
        to_device(y, hy, c.out_bytes());
      };
      auto nonblocking = [&] {
        MPI_Request r = c.start(x, out);
        MPI_Wait(&r, MPI_STATUS_IGNORE);
      };
      // The forms timed, each with its rows' method: one, or both with --paired.
      struct Form {
        std::function<void()> call;
        std::string method;
        bool nonblocking;
      };
      std::vector<Form> forms;
      if (o.paired) forms = {{blocking, method, false}, {nonblocking, method + "_nb", true}};
      else if (o.nonblocking) forms = {{nonblocking, method, true}};
      else forms = {{blocking, method, false}};
      // Batches of about 256 MB moved, 2 to 20 calls.
      const int iters = o.iters > 0 ? o.iters : static_cast<int>(std::clamp<size_t>((size_t(256) << 20) / size, 2, 20));
      for (const Form& f : forms)
        for (int i = 0; i < o.warmup; ++i) f.call();
      // One batch of `iters` calls between barriers: this rank's time per call.
      auto batch = [&](const std::function<void()>& call) {
        MPI_Barrier(MPI_COMM_WORLD);
        double t0 = MPI_Wtime();
        for (int i = 0; i < iters; ++i) call();
#ifdef BENCH_HAVE_CUDA
        if (o.device) CUDA_OK(cudaDeviceSynchronize());
#endif
        return (MPI_Wtime() - t0) / iters * 1e6;
      };
      // Sorts a form's batch times; the slowest rank's median (of an even count, the mean of the
      // middle two).
      auto slowest_median = [](std::vector<double>& times) {
        std::sort(times.begin(), times.end());
        const size_t k = times.size();
        double us = k % 2 ? times[k / 2] : (times[k / 2 - 1] + times[k / 2]) / 2;
        double slowest = 0;
        MPI_Allreduce(&us, &slowest, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
        return slowest;
      };
      // Trial t runs every form's batch, the first form taking turns.
      std::vector<std::vector<double>> times(forms.size());
      for (int t = 0; t < o.trials; ++t)
        for (size_t k = 0; k < forms.size(); ++k) {
          const size_t f = (k + static_cast<size_t>(t)) % forms.size();
          times[f].push_back(batch(forms[f].call));
        }
      for (size_t f = 0; f < forms.size(); ++f) {
        const double slowest = slowest_median(times[f]);
        std::string overlap;
        if (o.overlap && forms[f].nonblocking) {
          // Every rank computes as long as the slowest rank's call took.
          std::vector<double> total;
          for (int t = 0; t < o.trials; ++t)
            total.push_back(batch([&] {
              MPI_Request r = c.start(x, out);
              compute(slowest);
              MPI_Wait(&r, MPI_STATUS_IGNORE);
            }));
          const double worst = slowest_median(total);
          const double pct = std::clamp(100.0 * (2 * slowest - worst) / slowest, 0.0, 100.0);
          char buf[96];
          std::snprintf(buf, sizeof buf, ", \"overlap_pct\": %.1f, \"overlap_total_us\": %.3f", pct, worst);
          overlap = buf;
        }
        const long bad = o.check ? check_call(c, rank, o.device, x, y, check_host, forms[f].call) : -1;
        if (rank == 0) {
          double gbps = size / (slowest * 1e3);
          std::string checked = bad >= 0 ? ", \"bad\": " + std::to_string(bad) : "";
          std::printf(
              "ROW {\"op\": \"%s\", \"method\": \"%s\", \"bytes\": %zu, \"gbps\": %.4f, \"busbw_gbps\": %.4f, "
              "\"us\": %.3f, \"min_us\": %.3f, \"max_us\": %.3f, \"ranks\": %d, \"iters\": %d, \"trials\": %d, "
              "\"dtype\": \"%s\"%s%s}\n",
              op.c_str(), forms[f].method.c_str(), size, gbps, gbps * busbw_factor(op, n), slowest, times[f].front(),
              times[f].back(), n, iters, o.trials, elem.name.c_str(), checked.c_str(), overlap.c_str());
          std::fflush(stdout);
        }
      }
    }
  }
  bench::free_buf(x, o.device);
  bench::free_buf(y, o.device);
  if (o.staged) {
    bench::free_pinned(hx);
    bench::free_pinned(hy);
  }
  MPI_Finalize();
  return 0;
}
