#include <algorithm>
#include <chrono>
#include <cmath>
#include <memory>

#include "bench/bench.hpp"
#include "bench/methods.hpp"
#include "bench/nccl_loader.hpp"
#include "common/error.hpp"
#include "common/log.hpp"
#include "common/median.hpp"
#include "core/context.hpp"

namespace gpustripe {
namespace {

// Device buffers for one pair, as large as the largest size, filled once (never zeros).
class PairBuffers {
 public:
  PairBuffers(Backend& b, int src, int dst, uint64_t bytes, bool both) : b_(b) {
    a_src = b_.alloc_device(src, bytes);
    a_dst = b_.alloc_device(dst, bytes);
    StreamHandle s = b_.create_stream(src);
    b_.memset_async(a_src, src, 0x5A, bytes, s);
    if (both) {
      b_src = b_.alloc_device(dst, bytes);
      b_dst = b_.alloc_device(src, bytes);
      b_.memset_async(b_src, dst, 0xA5, bytes, s);
    }
    b_.synchronize_stream(s);
    b_.destroy_stream(s);
  }
  ~PairBuffers() {
    for (void* p : {a_src, a_dst, b_src, b_dst})
      if (p) b_.free_device(p);
  }
  void *a_src = nullptr, *a_dst = nullptr, *b_src = nullptr, *b_dst = nullptr;

 private:
  Backend& b_;
};

BenchRow measure_bandwidth(Context& ctx, Method& m, const std::vector<Transfer>& ts, const BenchOptions& o,
                           StreamFork& streams) {
  auto post = [&] {
    streams.begin();
    m.post(ts, streams);
    streams.join();
  };
  int reps = o.reps, warmup = o.warmup;
  if (o.min_row_us > 0) {
    // A short pilot (after the warm-up) sizes the row: at least reps, at most 10x.
    const double pilot = median_of(time_back_to_back(ctx.backend(), ts[0].src_dev, streams.main(), post, warmup, 3));
    if (pilot > 0 && pilot * o.reps < o.min_row_us)
      reps = static_cast<int>(std::min<double>(10.0 * o.reps, std::ceil(o.min_row_us / pilot)));
    warmup = 1;
  }
  std::vector<double> us = time_back_to_back(ctx.backend(), ts[0].src_dev, streams.main(), post, warmup, reps);
  BenchRow row;
  row.op = ts.size() > 1 ? "bibw" : "p2p";
  row.method = m.name();
  row.src = ts[0].src_dev;
  row.dst = ts[0].dst_dev;
  row.bytes = ts[0].bytes;
  row.us = median_of(us);
  row.min_us = *std::min_element(us.begin(), us.end());
  row.max_us = *std::max_element(us.begin(), us.end());
  row.reps = reps;
  uint64_t total = 0;
  for (const Transfer& t : ts) total += t.bytes;
  row.gbps = row.us > 0 ? total / (row.us * 1e3) : 0;
  row.paths = m.describe();
  return row;
}

BenchRow measure_latency(Context& ctx, Method& m, const std::vector<Transfer>& ts, const BenchOptions& o,
                         StreamFork& streams) {
  Backend& b = ctx.backend();
  auto once = [&] {
    streams.begin();
    m.post(ts, streams);
    streams.join();
    b.synchronize_stream(streams.main());
  };
  for (int i = 0; i < std::max(o.warmup, 10); ++i) once();
  std::vector<double> us;
  for (int r = 0; r < o.latency_reps; ++r) {
    auto t0 = std::chrono::steady_clock::now();
    once();
    us.push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count());
  }
  BenchRow row;
  row.op = "latency";
  row.method = m.name();
  row.src = ts[0].src_dev;
  row.dst = ts[0].dst_dev;
  row.bytes = ts[0].bytes;
  row.us = median_of(us);
  row.min_us = *std::min_element(us.begin(), us.end());
  row.max_us = *std::max_element(us.begin(), us.end());
  row.gbps = row.us > 0 ? row.bytes / (row.us * 1e3) : 0;
  row.paths = m.describe();
  return row;
}

std::unique_ptr<Method> make_method(Context& ctx, const std::string& name) {
  if (name == "gpustripe") return make_gpustripe_method(ctx);
  if (name == "cudaMemcpyPeerAsync") return make_peer_copy_method(ctx);
  if (name == "nccl") return make_nccl_method(ctx);
  GS_THROW(GPUSTRIPE_ERR_INVALID_ARGUMENT, "unknown benchmark method '%s' (gpustripe, cudaMemcpyPeerAsync, nccl)",
           name.c_str());
}

}  // namespace

std::vector<double> time_back_to_back(Backend& b, int dev, StreamHandle stream, const std::function<void()>& post,
                                      int warmup, int reps) {
  GS_REQUIRE(reps >= 1 && warmup >= 0, GPUSTRIPE_ERR_INVALID_ARGUMENT, "reps must be at least 1, warmup at least 0");
  for (int i = 0; i < warmup; ++i) post();
  b.synchronize_stream(stream);
  std::vector<EventHandle> events;
  try {
    for (int i = 0; i < 2 * reps; ++i) events.push_back(b.create_event(dev, true));
    for (int r = 0; r < reps; ++r) {
      b.record_event(events[2 * r], stream);
      post();
      b.record_event(events[2 * r + 1], stream);
    }
    b.synchronize_stream(stream);
  } catch (...) {
    for (EventHandle e : events) b.destroy_event(e);
    throw;
  }
  std::vector<double> us;
  for (int r = 0; r < reps; ++r) us.push_back(1e3 * b.elapsed_ms(events[2 * r], events[2 * r + 1]));
  for (EventHandle e : events) b.destroy_event(e);
  return us;
}

std::vector<uint64_t> size_range(uint64_t lo, uint64_t hi) {
  std::vector<uint64_t> out;
  for (uint64_t s = std::max<uint64_t>(1, lo); s <= hi; s *= 2) out.push_back(s);
  return out;
}

std::vector<std::string> bench_methods(Context& ctx, std::vector<std::string>* unavailable) {
  std::vector<std::string> out{"gpustripe", "cudaMemcpyPeerAsync"};
  if (ctx.emulated()) {
    if (unavailable) unavailable->push_back("nccl: needs real GPUs (this context is emulated)");
  } else if (!NcclLibrary::get().available()) {
    if (unavailable) unavailable->push_back("nccl: " + NcclLibrary::get().why_not());
  } else {
    out.push_back("nccl");
  }
  return out;
}

std::vector<BenchRow> run_p2p_bench(Context& ctx, const BenchOptions& o, const BenchProgress& progress) {
  const int n = ctx.device_count();
  for (auto [s, d] : o.pairs) {
    GS_REQUIRE(s >= 0 && s < n && d >= 0 && d < n, GPUSTRIPE_ERR_INVALID_DEVICE,
               "pair %d->%d: the context has GPUs 0..%d", s, d, n - 1);
    GS_REQUIRE(s != d, GPUSTRIPE_ERR_INVALID_ARGUMENT, "pair %d->%d: source and destination are the same GPU", s, d);
  }
  GS_REQUIRE(o.reps >= 1 && o.warmup >= 0 && o.latency_reps >= 1, GPUSTRIPE_ERR_INVALID_ARGUMENT,
             "reps, warmup and latency reps must be positive");
  std::vector<std::string> names = o.methods.empty() ? bench_methods(ctx) : o.methods;
  std::vector<std::unique_ptr<Method>> methods;
  for (const std::string& name : names) methods.push_back(make_method(ctx, name));

  uint64_t biggest = 1;
  for (uint64_t s : o.sizes) biggest = std::max(biggest, s);
  for (uint64_t s : o.latency_sizes) biggest = std::max(biggest, s);
  std::vector<BenchRow> rows;
  for (auto [s, d] : o.pairs) {
    PairBuffers buf(ctx.backend(), s, d, biggest, o.bidirectional);
    StreamFork streams(ctx.backend(), s);
    auto transfers = [&](uint64_t bytes) {
      std::vector<Transfer> ts{{buf.a_dst, d, buf.a_src, s, bytes}};
      if (o.bidirectional) ts.push_back({buf.b_dst, s, buf.b_src, d, bytes});
      return ts;
    };
    // Methods alternate size by size, so drift of the machine hits them alike.
    for (uint64_t bytes : o.latency_sizes)
      for (auto& m : methods) {
        rows.push_back(measure_latency(ctx, *m, transfers(bytes), o, streams));
        if (progress) progress(rows.back());
      }
    for (uint64_t bytes : o.sizes)
      for (auto& m : methods) {
        rows.push_back(measure_bandwidth(ctx, *m, transfers(bytes), o, streams));
        if (progress) progress(rows.back());
      }
  }
  return rows;
}

}  // namespace gpustripe
