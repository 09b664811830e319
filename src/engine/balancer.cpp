#include "engine/balancer.hpp"

#include <algorithm>
#include <cmath>

#include "common/error.hpp"
#include "common/log.hpp"

namespace gpustripe {
namespace {

constexpr int64_t kPage = 4096;
constexpr size_t kMaxPending = 64;  // probes in flight per transfer; beyond, the oldest is waited for

int64_t min_bytes(const PathPlan& p) { return static_cast<int64_t>(std::max(1, p.chunks)) * kPage; }

}  // namespace

Balancer::~Balancer() {
  try {
    for (auto& [key, st] : states_)
      for (const BalanceProbe& p : st.pending) {
        backend_.synchronize_event(p.staged_done);
        backend_.synchronize_event(p.direct_done);
        give_back(p);
      }
    for (auto& [dev, events] : free_events_)
      for (EventHandle e : events) backend_.destroy_event(e);
  } catch (const std::exception& e) {
    GS_LOG_ERROR(Subsys::Engine, "balancer teardown: %s", e.what());
  }
}

bool Balancer::eligible(const Plan& plan) {
  return plan.paths.size() == 2 && plan.paths[0].kind == PathKind::Direct && plan.paths[1].kind != PathKind::Direct &&
         plan.paths[0].offset == 0 && plan.paths[1].offset == plan.paths[0].bytes;
}

EventHandle Balancer::take_event(int dev) {
  std::vector<EventHandle>& pool = free_events_[dev];
  if (pool.empty()) return backend_.create_event(dev, true);
  EventHandle e = pool.back();
  pool.pop_back();
  return e;
}

void Balancer::give_back(const BalanceProbe& p) {
  for (EventHandle e : {p.start, p.direct_done, p.staged_start, p.staged_done})
    if (e) free_events_[p.dev].push_back(e);
}

void Balancer::collect(const Plan& planned, State& s) {
  while (!s.pending.empty()) {
    BalanceProbe& p = s.pending.front();
    if (s.pending.size() > kMaxPending) {
      backend_.synchronize_event(p.staged_done);
      backend_.synchronize_event(p.direct_done);
    } else if (!backend_.query_event(p.staged_done) || !backend_.query_event(p.direct_done)) {
      break;
    }
    if (p.counts && p.shift == s.shift) {
      s.sum_direct += 1e3 * backend_.elapsed_ms(p.start, p.direct_done);
      s.sum_staged += 1e3 * backend_.elapsed_ms(p.staged_start, p.staged_done);
      ++s.n;
      ++samples_;
    }
    give_back(p);
    s.pending.pop_front();
  }
  if (s.n < std::max(1, opt_.samples)) return;
  const double td = s.sum_direct / s.n, ts = s.sum_staged / s.n;
  s.n = 0;
  s.sum_direct = s.sum_staged = 0;
  const double direct_bytes = static_cast<double>(static_cast<int64_t>(planned.paths[0].bytes) - s.shift);
  const double staged_bytes = static_cast<double>(static_cast<int64_t>(planned.paths[1].bytes) + s.shift);
  if (td <= 0 || ts <= 0 || direct_bytes <= 0 || staged_bytes <= 0) return;
  // Positive: the staged path finishes later than it should (past the cliff).
  const double err = (ts - td) + opt_.margin * td;
  if (std::fabs(err) <= opt_.deadband * td) {
    s.settled = true;
    return;
  }
  if (s.settled && std::fabs(err) <= opt_.settled_band * opt_.deadband * td) return;
  s.settled = false;
  // Moving b bytes to the staged path changes the gap by b (ts/staged + td/direct); ts
  // includes the staged path's fill, so ts/staged overstates its per-byte time and the step
  // falls short rather than overshoots.
  double step = -err / (ts / staged_bytes + td / direct_bytes);
  step = std::clamp(step, -opt_.max_step * staged_bytes, opt_.max_step * staged_bytes);
  int64_t pages = static_cast<int64_t>(std::llround(step / kPage));
  if (pages == 0) pages = step > 0 ? 1 : -1;
  s.shift += pages * kPage;
  ++steps_;
  GS_LOG_DEBUG(Subsys::Engine, "balance %d->%d %llu bytes: direct %.1f us, staged %.1f us -> shift %lld bytes",
               planned.src, planned.dst, static_cast<unsigned long long>(planned.bytes), td, ts,
               static_cast<long long>(s.shift));
}

Plan Balancer::apply(const Plan& plan, int64_t& shift) {
  // Both paths keep a page per chunk.
  const int64_t d = static_cast<int64_t>(plan.paths[0].bytes), h = static_cast<int64_t>(plan.paths[1].bytes);
  const int64_t lo = min_bytes(plan.paths[1]) - h, hi = d - min_bytes(plan.paths[0]);
  if (lo <= hi) shift = std::clamp(shift, lo / kPage * kPage, hi / kPage * kPage);
  else shift = 0;
  Plan out = plan;
  out.paths[0].bytes = static_cast<uint64_t>(d - shift);
  out.paths[1].offset = out.paths[0].bytes;
  out.paths[1].bytes = static_cast<uint64_t>(h + shift);
  return out;
}

Plan Balancer::steer(const Plan& plan) {
  GS_REQUIRE(eligible(plan), GPUSTRIPE_ERR_INTERNAL, "balancer: plan %s is not a direct path plus one staged path",
             plan.describe().c_str());
  State& s = states_[Key{plan.src, plan.dst, plan.bytes}];
  collect(plan, s);
  return apply(plan, s.shift);
}

Plan Balancer::peek(const Plan& plan) const {
  if (!eligible(plan)) return plan;
  int64_t shift = this->shift(plan.src, plan.dst, plan.bytes);
  return apply(plan, shift);
}

BalanceProbe& Balancer::probe(const Plan& plan) {
  State& s = states_[Key{plan.src, plan.dst, plan.bytes}];
  BalanceProbe p;
  p.dev = plan.src;
  p.start = take_event(plan.src);
  p.direct_done = take_event(plan.src);
  p.staged_start = take_event(plan.src);
  p.staged_done = take_event(plan.src);
  p.shift = s.shift;
  s.pending.push_back(p);
  return s.pending.back();
}

bool Balancer::measuring(const Plan& plan) const {
  auto it = states_.find(Key{plan.src, plan.dst, plan.bytes});
  return it == states_.end() || !it->second.settled;
}

int64_t Balancer::shift(int src, int dst, uint64_t bytes) const {
  auto it = states_.find(Key{src, dst, bytes});
  return it == states_.end() ? 0 : it->second.shift;
}

}  // namespace gpustripe
