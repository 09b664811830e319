#include "bench/plan_timing.hpp"

#include <algorithm>
#include <chrono>
#include <utility>
#include <vector>

#include "bench/bench.hpp"
#include "common/error.hpp"
#include "common/median.hpp"
#include "core/context.hpp"
#include "engine/engine.hpp"
#include "model/schedule_cost.hpp"
#include "topology/topology.hpp"

namespace gpustripe {

Plan engine_probe_plan(Backend& b, const Topology& topo) {
  const uint64_t part = 128u << 10;
  Plan plan;
  plan.src = 0;
  plan.dst = 1;
  plan.paths.push_back({PathKind::Direct, -1, 0, 24 * part, 1});
  for (int g = 2; g < topo.gpu_count(); ++g)
    if (topo.can_access_peer(0, g) && topo.can_access_peer(g, 1) && b.can_access_peer(0, g) && b.can_access_peer(g, 1))
      plan.paths.push_back({PathKind::GpuStaged, g, plan.paths.back().offset + plan.paths.back().bytes, 3 * part, 1});
  plan.paths.push_back({PathKind::HostStaged, topo.gpu(0).socket, plan.paths.back().offset + plan.paths.back().bytes,
                        part, 1});
  plan.bytes = plan.paths.back().offset + plan.paths.back().bytes;
  return plan;
}

EngineCallCost engine_call_cost(Engine& engine, Backend& b, const Plan& plan, void* dst, const void* src,
                                StreamHandle stream) {
  EngineCallCost out;
  out.calls = schedule_calls(plan, EngineShape::from_settings()) + kPointerChecks;
  for (int r = 0; r < 8; ++r) engine.copy_with_plan(plan, dst, src, stream);  // lanes, staging
  b.synchronize_stream(stream);
  std::vector<double> us;
  for (int r = 0; r < 40; ++r) {
    auto t0 = std::chrono::steady_clock::now();
    engine.copy_with_plan(plan, dst, src, stream);
    us.push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count());
  }
  b.synchronize_stream(stream);
  out.per_plan_us = median_of(us);
  out.per_call_us = out.per_plan_us / out.calls;
  return out;
}

namespace {

// The timing of `t` (each repetition's us) and of `host` (each call's, warm-ups first).
PlanTiming summarize(std::vector<double> t, std::vector<double> host, int warmup, int reps) {
  host.erase(host.begin(), host.begin() + std::min<size_t>(host.size(), static_cast<size_t>(warmup)));
  PlanTiming out;
  out.samples_us = t;
  std::sort(t.begin(), t.end());
  out.median_us = median_of(t);
  out.min_us = t.front();
  out.max_us = t.back();
  out.reps = reps;
  out.host_us = host.empty() ? 0.0 : median_of(host);
  return out;
}

}  // namespace

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

EngineCallCost PlanTimer::host_cost() {
  GS_REQUIRE(ctx_.device_count() >= 2, GPUSTRIPE_ERR_NOT_SUPPORTED, "the engine's host cost needs 2 devices");
  const Plan plan = engine_probe_plan(ctx_.backend(), ctx_.topology());
  GS_REQUIRE(plan.bytes <= max_, GPUSTRIPE_ERR_INVALID_SIZE, "probe plan of %llu bytes, the timer holds %llu",
             static_cast<unsigned long long>(plan.bytes), static_cast<unsigned long long>(max_));
  if (replays(plan, EngineShape::from_settings())) return {};
  return engine_call_cost(ctx_.engine(), ctx_.backend(), plan, dst_[1], src_[0], streams_[0]);
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
  return summarize(std::move(t), std::move(host), warmup, reps);
}

PlanTiming PlanTimer::time_concurrent(const std::vector<Plan>& plans, int warmup, int reps) {
  GS_REQUIRE(!plans.empty(), GPUSTRIPE_ERR_INVALID_ARGUMENT, "no plans to time");
  GS_REQUIRE(reps >= 1, GPUSTRIPE_ERR_INVALID_ARGUMENT, "reps must be at least 1");
  const int n = ctx_.device_count();
  std::vector<uint64_t> sent(static_cast<size_t>(n), 0), received(static_cast<size_t>(n), 0);
  std::vector<char*> from, to;
  for (const Plan& p : plans) {
    GS_REQUIRE(p.src >= 0 && p.src < n && p.dst >= 0 && p.dst < n, GPUSTRIPE_ERR_INVALID_DEVICE,
               "plan %d->%d: the context has %d devices", p.src, p.dst, n);
    uint64_t& s = sent[static_cast<size_t>(p.src)];
    uint64_t& r = received[static_cast<size_t>(p.dst)];
    from.push_back(static_cast<char*>(src_[static_cast<size_t>(p.src)]) + s);
    to.push_back(static_cast<char*>(dst_[static_cast<size_t>(p.dst)]) + r);
    s += p.bytes;
    r += p.bytes;
    GS_REQUIRE(s <= max_ && r <= max_, GPUSTRIPE_ERR_INVALID_SIZE,
               "transfers at once from GPU %d or into GPU %d exceed the timer's %llu bytes", p.src, p.dst,
               static_cast<unsigned long long>(max_));
  }
  Backend& b = ctx_.backend();
  const int lead = plans[0].src;
  StreamHandle main = streams_[static_cast<size_t>(lead)];
  // A stream per transfer (the lead GPU's first one is `main`) and an event per stream.
  std::vector<StreamHandle> own(plans.size(), nullptr);
  std::vector<EventHandle> done(plans.size(), nullptr);
  EventHandle start = nullptr;
  auto release = [&] {
    b.synchronize_stream(main);
    for (size_t i = 0; i < plans.size(); ++i) {
      if (own[i] && own[i] != main) {
        b.synchronize_stream(own[i]);
        b.destroy_stream(own[i]);
      }
      if (done[i]) b.destroy_event(done[i]);
    }
    if (start) b.destroy_event(start);
  };
  std::vector<double> host, t;
  try {
    start = b.create_event(lead, false);
    for (size_t i = 0; i < plans.size(); ++i) {
      own[i] = i == 0 ? main : b.create_stream(plans[i].src);
      done[i] = b.create_event(plans[i].src, false);
    }
    auto post = [&] {
      auto t0 = std::chrono::steady_clock::now();
      b.record_event(start, main);
      for (size_t i = 1; i < plans.size(); ++i) b.wait_event(own[i], start);
      for (size_t i = 0; i < plans.size(); ++i) ctx_.engine().copy_with_plan(plans[i], to[i], from[i], own[i]);
      for (size_t i = 1; i < plans.size(); ++i) {
        b.record_event(done[i], own[i]);
        b.wait_event(main, done[i]);
      }
      host.push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count());
    };
    t = time_back_to_back(b, lead, main, post, warmup, reps);
  } catch (...) {
    release();
    throw;
  }
  release();
  return summarize(std::move(t), std::move(host), warmup, reps);
}

}  // namespace gpustripe
