// OSU-style one-sided (MPI RMA) benchmark written against plain MPI (and the CUDA
// runtime for device buffers): nothing of gpustripe in it, so one binary measures the
// MPI alone and the MPI with libgpustripe_mpi.so preloaded.
//
// Ranks pair up (r <-> r^1); the even rank of a pair is the origin, the odd one the
// target, all pairs at once, one window (MPI_Win_create over each rank's buffer) per size.
//   --test put_bw|get_bw   --window W operations per epoch (each at its own displacement
//                          while W x size fits in 1 GiB, else all at 0), bandwidth per pair
//   --test put_lat|get_lat one operation per epoch, time per epoch
//   --test acc_rate        --window W MPI_Accumulate (MPI_SUM of one double) per epoch: ops/s
//   --test fop_lat         one MPI_Fetch_and_op (MPI_SUM, long long) per epoch
//   --sync fence|pscw|lock the epoch: fence pairs; post/start/complete/wait; for lock one
//                          MPI_Win_lock for the whole run and MPI_Win_flush per epoch
//   --busy-ms N            lock only: the target spends N ms outside MPI (a sleep) while the
//                          origin runs its epochs (the "target busy" pattern: an origin whose
//                          operations need the target's progress waits for it)
//   --min/--max bytes, --mem device|host, --iters N (0: by size, fewer where a row would
//                          last more than kRowSeconds at the warm-up's rate), --method NAME (label)
// Prints "ROW {json}" per size: op, method, sync, bytes, gbps (per pair), us (per epoch),
// mops (operations per second, millions), window, ranks, agg_gbps (sum over pairs), mem, iters;
// with --sync lock, op_call_us and flush_us: the origin's time per epoch in the operation calls
// and in MPI_Win_flush (rank 0's; 0 for the other syncs).
//
//   mpirun -np 2 [-x LD_PRELOAD=.../libgpustripe_mpi.so] mpi_rma_bench --test put_bw --sync lock
#include <mpi.h>

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "bench_args.hpp"
#include "bench_buffers.hpp"
#include "row_iterations.hpp"

namespace {

struct Options {
  std::string test = "put_bw", sync = "lock", method = "mpi";
  size_t min_bytes = 8, max_bytes = size_t(64) << 20;
  int window = 64, iters = 0, busy_ms = 0;
  bool device = true;
};

[[noreturn]] void usage(const char* why) {
  std::fprintf(stderr,
               "%s\nusage: mpi_rma_bench --test put_bw|get_bw|put_lat|get_lat|acc_rate|fop_lat "
               "[--sync fence|pscw|lock] [--window W] [--min B] [--max B] [--mem device|host] [--iters N] "
               "[--method NAME] [--busy-ms N]\n",
               why);
  MPI_Abort(MPI_COMM_WORLD, 2);
  std::exit(2);
}

Options parse(int argc, char** argv) {
  Options o;
  for (ArgWalk a(argc, argv, usage); a.next();) {
    if (a.is("--test")) o.test = a.choice({"put_bw", "get_bw", "put_lat", "get_lat", "acc_rate", "fop_lat"});
    else if (a.is("--sync")) o.sync = a.choice({"fence", "pscw", "lock"});
    else if (a.is("--window")) o.window = static_cast<int>(a.integer(1));
    else if (a.is("--min")) o.min_bytes = a.bytes();
    else if (a.is("--max")) o.max_bytes = a.bytes();
    else if (a.is("--mem")) o.device = a.choice({"device", "host"}) == "device";
    else if (a.is("--iters")) o.iters = static_cast<int>(a.integer(0));
    else if (a.is("--method")) o.method = a.text();
    else if (a.is("--busy-ms")) o.busy_ms = static_cast<int>(a.integer(0));
    else a.unknown();
  }
  if (o.busy_ms > 0 && o.sync != "lock") usage("--busy-ms needs --sync lock (the target takes part in the others)");
  if (o.test == "acc_rate" || o.test == "fop_lat") o.min_bytes = o.max_bytes = 8;
  return o;
}

bool is_bw(const Options& o) { return o.test == "put_bw" || o.test == "get_bw" || o.test == "acc_rate"; }

int iterations(const Options& o, size_t n) {
  if (o.iters > 0) return o.iters;
  const size_t per_epoch = n * (is_bw(o) ? o.window : 1);
  return static_cast<int>(std::clamp<size_t>((size_t(1) << 30) / std::max<size_t>(per_epoch, 1), 10, 1000));
}

// Seconds one row's timed epochs may take (--iters 0): the epochs by size are cut to what fits
// at the warm-up's rate, so a slow method or size does not hold up the whole comparison.
constexpr double kRowSeconds = 0.2;
constexpr int kMinTimed = 5;

// Where an origin's lock/flush epochs spend their time: seconds in the operation calls (MPI_Put,
// MPI_Get, ...) and in MPI_Win_flush, over a run. The operation call is the host's work before the
// data moves; the flush waits for the copy and sees it complete.
struct Split {
  double ops = 0, sync = 0;
};

// One run of `iters` epochs; returns seconds (on the origin; the target's time is its wait).
double run(const Options& o, MPI_Win win, MPI_Group peer_group, bool origin, int peer, char* buf, size_t n,
           int iters, size_t stride, Split* split = nullptr) {
  const int ops = is_bw(o) ? o.window : 1;
  double one = 1;
  long long add = 1, fetched = 0;
  auto epoch_ops = [&] {
    for (int i = 0; i < ops; ++i) {
      const MPI_Aint disp = static_cast<MPI_Aint>(i * stride);
      if (o.test == "put_bw" || o.test == "put_lat")
        MPI_Put(buf + i * stride, static_cast<int>(n), MPI_BYTE, peer, disp, static_cast<int>(n), MPI_BYTE, win);
      else if (o.test == "get_bw" || o.test == "get_lat")
        MPI_Get(buf + i * stride, static_cast<int>(n), MPI_BYTE, peer, disp, static_cast<int>(n), MPI_BYTE, win);
      else if (o.test == "acc_rate")
        MPI_Accumulate(&one, 1, MPI_DOUBLE, peer, 0, 1, MPI_DOUBLE, MPI_SUM, win);
      else
        MPI_Fetch_and_op(&add, &fetched, MPI_LONG_LONG, peer, 8, MPI_SUM, win);
    }
  };
  if (o.sync == "lock" && origin) MPI_Win_lock(MPI_LOCK_SHARED, peer, 0, win);
  if (o.sync == "fence") MPI_Win_fence(MPI_MODE_NOPRECEDE, win);
  MPI_Barrier(MPI_COMM_WORLD);
  const double t0 = MPI_Wtime();
  for (int it = 0; it < iters; ++it) {
    if (o.sync == "fence") {
      if (origin) epoch_ops();
      MPI_Win_fence(0, win);
    } else if (o.sync == "pscw") {
      if (origin) {
        MPI_Win_start(peer_group, 0, win);
        epoch_ops();
        MPI_Win_complete(win);
      } else {
        MPI_Win_post(peer_group, 0, win);
        MPI_Win_wait(win);
      }
    } else if (origin) {
      const double a = MPI_Wtime();
      epoch_ops();
      const double b = MPI_Wtime();
      MPI_Win_flush(peer, win);
      if (split) {
        split->ops += b - a;
        split->sync += MPI_Wtime() - b;
      }
    } else if (o.busy_ms > 0 && it == 0) {
      usleep(static_cast<useconds_t>(o.busy_ms) * 1000);
    }
  }
  const double s = MPI_Wtime() - t0;
  if (o.sync == "lock" && origin) MPI_Win_unlock(peer, win);
  if (o.sync == "fence") MPI_Win_fence(MPI_MODE_NOSUCCEED, win);
  MPI_Barrier(MPI_COMM_WORLD);
  return s;
}

// The exit status of a run whose windows the MPI cannot make (ctest's skip code).
constexpr int kSkipped = 77;

// MPI_Win_create over buf, or false (every rank) with the MPI's reason printed by rank 0: an
// MPI without a one-sided transport for this memory (Debian's Open MPI has neither osc ucx nor
// osc pt2pt, and osc rdma needs CMA) cannot make the window, and says so here instead of aborting.
bool make_window(char* buf, size_t bytes, bool device, MPI_Win* win) {
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  const int rc = MPI_Win_create(buf, static_cast<MPI_Aint>(bytes), 1, MPI_INFO_NULL, MPI_COMM_WORLD, win);
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_ARE_FATAL);
  int ok = rc == MPI_SUCCESS, all = 0;
  MPI_Allreduce(&ok, &all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  if (all) return true;
  if (ok) MPI_Win_free(win);
  char msg[MPI_MAX_ERROR_STRING] = "another rank's MPI_Win_create failed";
  int len = 0;
  if (!ok) MPI_Error_string(rc, msg, &len);
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  if (rank == 0) {
    std::printf("SKIP mpi_rma_bench: this MPI cannot make a window over %s memory (MPI_Win_create of %zu bytes: %s)\n",
                device ? "device" : "host", bytes, msg);
    std::fflush(stdout);
  }
  return false;
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  Options o = parse(argc, argv);
  int rank = 0, size = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  if (size % 2) usage("an even number of ranks (pairs)");
  bench::select_gpu(o.device, "mpi_rma_bench");
  const int peer = rank ^ 1;
  const bool origin = rank % 2 == 0;
  MPI_Group world, peer_group;
  MPI_Comm_group(MPI_COMM_WORLD, &world);
  MPI_Group_incl(world, 1, &peer, &peer_group);
  int rc = 0;
  for (size_t n = o.min_bytes; n <= o.max_bytes; n *= 2) {
    const int ops = is_bw(o) ? o.window : 1;
    // Every operation of an epoch at its own displacement while that fits in 1 GiB.
    const size_t stride = n * ops <= (size_t(1) << 30) ? n : 0;
    const size_t bytes = std::max<size_t>(stride * (ops - 1) + n, 16);
    char* buf = bench::alloc(bytes, o.device);
    MPI_Win win = MPI_WIN_NULL;
    if (!make_window(buf, bytes, o.device, &win)) {
      bench::free_buf(buf, o.device);
      rc = kSkipped;
      break;
    }
    const int by_size = iterations(o, n);
    const int warm = std::clamp(by_size / 10, 2, 10);
    const double warm_s = run(o, win, peer_group, origin, peer, buf, n, warm, stride);
    // The origins' rate: a target's loop may include its --busy-ms sleep.
    // Fence and PSCW pair the epochs: every rank runs the same count.
    const int iters = bench::agreed_iterations(by_size, o.iters == 0 && origin ? warm_s / warm : 0, 0, kRowSeconds,
                                               kMinTimed, by_size);
    Split split;
    double s = run(o, win, peer_group, origin, peer, buf, n, iters, stride, &split);
    MPI_Win_free(&win);
    bench::free_buf(buf, o.device);
    const double us = s * 1e6 / iters;  // per epoch
    const double gbps = is_bw(o) || o.test == "put_lat" || o.test == "get_lat" ? n * ops * iters / (s * 1e9) : 0;
    const double mops = ops * iters / s / 1e6;
    double mine = origin ? gbps : 0, agg = 0;
    MPI_Reduce(&mine, &agg, 1, MPI_DOUBLE, MPI_SUM, 0, MPI_COMM_WORLD);
    if (rank == 0) {
      std::printf(
          "ROW {\"op\": \"%s\", \"method\": \"%s\", \"sync\": \"%s\", \"bytes\": %zu, \"gbps\": %.6g, \"us\": %.3f, "
          "\"mops\": %.6g, \"window\": %d, \"ranks\": %d, \"agg_gbps\": %.6g, \"mem\": \"%s\", \"iters\": %d, "
          "\"busy_ms\": %d, \"op_call_us\": %.3f, \"flush_us\": %.3f}\n",
          o.test.c_str(), o.method.c_str(), o.sync.c_str(), n, gbps, us, mops, ops, size, agg,
          o.device ? "device" : "host", iters, o.busy_ms, split.ops * 1e6 / iters, split.sync * 1e6 / iters);
      std::fflush(stdout);
    }
  }
  MPI_Group_free(&peer_group);
  MPI_Group_free(&world);
  MPI_Finalize();
  return rc;
}
