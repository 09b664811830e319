#include "model/plan_timing.hpp"

#include <algorithm>
#include <chrono>
#include <vector>

#include "bench/bench.hpp"
#include "common/error.hpp"
#include "core/context.hpp"

namespace gpustripe {

PlanTimer::PlanTimer(Context& ctx, uint64_t max_bytes) : ctx_(ctx), max_(max_bytes) {
  Backend& b = ctx_.backend();
  try {
    for (int d = 0; d < ctx_.device_count(); ++d) {
      streams_.push_back(b.create_stream(d));
      src_.push_back(b.alloc_device(d, max_));
      dst_.push_back(b.alloc_device(d, max_));
      b.memset_async(src_.back(), d, 0x5a, max_, streams_.back());
    }
    for (StreamHandle st : streams_) b.synchronize_stream(st);
  } catch (...) {
    this->~PlanTimer();
    throw;
  }
}

PlanTimer::~PlanTimer() {
  Backend& b = ctx_.backend();
  for (StreamHandle s : streams_) b.destroy_stream(s);
  for (void* p : src_) b.free_device(p);
  for (void* p : dst_) b.free_device(p);
  streams_.clear();
  src_.clear();
  dst_.clear();
}

PlanTiming PlanTimer::time(const Plan& plan, int warmup, int reps, PlanTimingMode mode) {
  GS_REQUIRE(plan.bytes <= max_, GPUSTRIPE_ERR_INVALID_SIZE, "plan of %llu bytes, the timer holds %llu",
             static_cast<unsigned long long>(plan.bytes), static_cast<unsigned long long>(max_));
  GS_REQUIRE(plan.src >= 0 && plan.src < ctx_.device_count() && plan.dst >= 0 && plan.dst < ctx_.device_count(),
             GPUSTRIPE_ERR_INVALID_DEVICE, "plan %d->%d: the context has %d devices", plan.src, plan.dst,
             ctx_.device_count());
  GS_REQUIRE(reps >= 1, GPUSTRIPE_ERR_INVALID_ARGUMENT, "reps must be at least 1");
  const size_t s = static_cast<size_t>(plan.src);
  Backend& b = ctx_.backend();
  std::vector<double> host;
  auto post = [&] {
    auto t0 = std::chrono::steady_clock::now();
    ctx_.engine().copy_with_plan(plan, dst_[static_cast<size_t>(plan.dst)], src_[s], streams_[s]);
    host.push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count());
  };
  std::vector<double> t;
  if (mode == PlanTimingMode::BackToBack) {
    t = time_back_to_back(b, plan.src, streams_[s], post, warmup, reps);
  } else {
    for (int i = 0; i < warmup; ++i) post();
    b.synchronize_stream(streams_[s]);
    EventHandle e0 = b.create_event(plan.src, true), e1 = nullptr;
    try {
      e1 = b.create_event(plan.src, true);
      for (int r = 0; r < reps; ++r) {
        b.record_event(e0, streams_[s]);
        post();
        b.record_event(e1, streams_[s]);
        b.synchronize_stream(streams_[s]);
        t.push_back(1e3 * b.elapsed_ms(e0, e1));
      }
    } catch (...) {
      b.destroy_event(e0);
      if (e1) b.destroy_event(e1);
      throw;
    }
    b.destroy_event(e0);
    b.destroy_event(e1);
  }
  host.erase(host.begin(), host.begin() + std::min<size_t>(host.size(), static_cast<size_t>(warmup)));
  std::sort(t.begin(), t.end());
  PlanTiming out;
  out.median_us = median_of(t);
  out.min_us = t.front();
  out.max_us = t.back();
  out.reps = reps;
  out.host_us = host.empty() ? 0.0 : median_of(host);
  return out;
}

}  // namespace gpustripe
