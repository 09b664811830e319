// The p2p benchmark library (like UCX's perf engine): shared by `gpustripe bench p2p|bibw`
// and the tests. Every method runs in the same process, on the same buffers, one after the
// other, size by size, so the ratios compare like with like.
//   bandwidth  median of `reps` (or more, see min_row_us) timed repetitions after `warmup` untimed ones; each
//              repetition is bracketed by a device event pair on the source GPU's stream,
//              all of its work joined back into that stream; algbw = bytes / time
//              (nccl-tests); bidirectional rows count both directions' bytes.
//   latency    end to end on the host, per call: post + synchronize, median.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "backend/backend.hpp"

namespace gpustripe {

class Context;

struct BenchOptions {
  std::vector<std::pair<int, int>> pairs{{0, 1}};
  std::vector<uint64_t> sizes;          // bandwidth rows
  std::vector<uint64_t> latency_sizes;  // latency rows (empty: none)
  std::vector<std::string> methods;     // empty: every available one
  bool bidirectional = false;
  int warmup = 5;
  int reps = 20;
  int latency_reps = 200;
  // Short rows take more repetitions, up to 10x reps, until they span this much time: a
  // repetition of 1-16 MB lasts 5-60 us, and bidirectional ones (a fork and join across two
  // GPUs each) spread over 2x between repetitions, so the median of 20 flipped between
  // modes (bibw 1-32M on 4x H200: 0.81-1.11x between two plain copies' methods whose
  // fastest repetitions agreed within 3%).
  double min_row_us = 5000;
};

struct BenchRow {
  std::string op;      // "p2p", "bibw" or "latency"
  std::string method;  // "gpustripe", "cudaMemcpyPeerAsync", "nccl"
  int src = 0, dst = 0;
  uint64_t bytes = 0;  // per direction
  double us = 0;       // median time of one repetition
  double gbps = 0;     // algbw
  double min_us = 0, max_us = 0;
  int reps = 0;        // timed repetitions behind the median
  std::string paths;   // gpustripe: the plan ("direct 90.5% x1 + host0 9.5% x8")
};

// Names of the methods this context can run, and one line per method it cannot, with why.
std::vector<std::string> bench_methods(Context& ctx, std::vector<std::string>* unavailable = nullptr);

using BenchProgress = std::function<void(const BenchRow&)>;
// Throws ERR_INVALID_DEVICE for a pair outside the context, ERR_INVALID_ARGUMENT for an
// unknown or unavailable method named in options.methods.
std::vector<BenchRow> run_p2p_bench(Context& ctx, const BenchOptions& options, const BenchProgress& progress = {});

// The timing of every bandwidth row (and of the model's forced plans, model/plan_timing):
// `warmup` untimed repetitions, then `reps` repetitions enqueued back to back, each
// bracketed by a device event pair on `stream` (of device `dev`), one synchronization at
// the end. The host runs ahead of the GPUs wherever it can, as in an application's loop of
// copies, so a repetition costs max(GPU time, host time to enqueue it). `post` enqueues one
// repetition, all of its work joined back into `stream`. Returns the times in us.
std::vector<double> time_back_to_back(Backend& backend, int dev, StreamHandle stream, const std::function<void()>& post,
                                      int warmup, int reps);

// Powers of two from `lo` to `hi`.
std::vector<uint64_t> size_range(uint64_t lo, uint64_t hi);

}  // namespace gpustripe
