#include "model/fluid.hpp"

#include <algorithm>
#include <limits>

namespace gpustripe {

FairShare max_min_rates(const std::vector<double>& capacity, const std::vector<Flow>& flows) {
  const size_t nf = flows.size();
  const double inf = std::numeric_limits<double>::infinity();
  FairShare out;
  out.rate.assign(nf, 0.0);
  out.limited_by.assign(nf, -1);
  std::vector<bool> frozen(nf, false);
  std::vector<double> left(capacity);
  size_t active = nf;
  // Progressive filling: raise every unfrozen flow's rate by the same amount until a
  // resource fills or a flow reaches its own cap; freeze those flows; repeat.
  while (active > 0) {
    std::vector<double> weight(capacity.size(), 0.0);
    for (size_t f = 0; f < nf; ++f)
      if (!frozen[f])
        for (const auto& u : flows[f].uses) weight[static_cast<size_t>(u.first)] += u.second;
    double step = inf;
    for (size_t r = 0; r < capacity.size(); ++r)
      if (weight[r] > 0) step = std::min(step, std::max(0.0, left[r]) / weight[r]);
    for (size_t f = 0; f < nf; ++f)
      if (!frozen[f] && flows[f].cap > 0) step = std::min(step, flows[f].cap - out.rate[f]);
    if (step == inf) step = 0;  // a flow that uses nothing and has no cap: leave it at 0 rather than loop
    for (size_t f = 0; f < nf; ++f)
      if (!frozen[f]) out.rate[f] += step;
    for (size_t r = 0; r < capacity.size(); ++r) left[r] -= step * weight[r];
    const double eps = 1e-9;
    size_t before = active;
    for (size_t f = 0; f < nf; ++f) {
      if (frozen[f]) continue;
      if (flows[f].cap > 0 && out.rate[f] >= flows[f].cap * (1 - eps)) {
        frozen[f] = true;
        out.limited_by[f] = -1;
        --active;
        continue;
      }
      for (const auto& u : flows[f].uses) {
        size_t r = static_cast<size_t>(u.first);
        if (left[r] <= eps * std::max(1.0, capacity[r])) {
          frozen[f] = true;
          out.limited_by[f] = u.first;
          --active;
          break;
        }
      }
    }
    if (active == before) {  // nothing bounds the rest (step was 0 with no resource): stop
      for (size_t f = 0; f < nf; ++f)
        if (!frozen[f]) frozen[f] = true;
      active = 0;
    }
  }
  return out;
}

FluidResult simulate_flows(const std::vector<double>& capacity, std::vector<Flow> flows) {
  const size_t nf = flows.size();
  FluidResult out;
  out.finish_us.assign(nf, 0.0);
  out.limited_by.assign(nf, -1);
  std::vector<size_t> live;
  for (size_t f = 0; f < nf; ++f)
    if (flows[f].work > 0) live.push_back(f);
    else out.finish_us[f] = flows[f].latency;
  double now = 0;
  bool first = true;
  while (!live.empty()) {
    std::vector<Flow> active;
    for (size_t f : live) active.push_back(flows[f]);
    FairShare share = max_min_rates(capacity, active);
    if (first) {
      for (size_t i = 0; i < live.size(); ++i) out.limited_by[live[i]] = share.limited_by[i];
      first = false;
    }
    double dt = std::numeric_limits<double>::infinity();
    for (size_t i = 0; i < live.size(); ++i)
      if (share.rate[i] > 0) dt = std::min(dt, flows[live[i]].work / share.rate[i]);
    if (dt == std::numeric_limits<double>::infinity()) {
      // No bandwidth at all for what is left (a zero capacity): never finishes.
      for (size_t f : live) out.finish_us[f] = std::numeric_limits<double>::infinity();
      break;
    }
    now += dt;
    std::vector<size_t> next;
    for (size_t i = 0; i < live.size(); ++i) {
      Flow& fl = flows[live[i]];
      fl.work -= share.rate[i] * dt;
      if (fl.work > 1e-9 * std::max(1.0, share.rate[i] * dt)) {
        next.push_back(live[i]);
      } else if (fl.tail > 0 && !fl.tail_uses.empty()) {  // the drain: on the last hop's resources
        fl.work = fl.tail;
        fl.tail = 0;
        fl.uses = fl.tail_uses;
        fl.tail_uses.clear();
        fl.cap = fl.tail_cap;
        next.push_back(live[i]);
      } else {
        out.finish_us[live[i]] = now + fl.latency + (fl.tail > 0 ? fl.tail / share.rate[i] : 0.0);
      }
    }
    live.swap(next);
  }
  return out;
}

}  // namespace gpustripe
