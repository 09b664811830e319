#include "model/multipath_model.hpp"

#include <algorithm>

#include "common/error.hpp"
#include "model/straggler.hpp"
#include "topology/topology.hpp"

namespace gpustripe {
namespace {


std::vector<std::pair<std::string, double>> overrides_of(const ModelParams& p) {
  return {p.capacities.begin(), p.capacities.end()};
}

}  // namespace

MultipathModel::MultipathModel(const Topology& topo, ModelParams params, EngineShape shape)
    : node_(topo, overrides_of(params)), params_(std::move(params)), shape_(shape) {
  for (const Resource& r : node_.resources()) capacity_.push_back(r.gbps * 1e3);
}

double MultipathModel::overhead_us(const Route& r, int chunks, bool replayed) const {
  double sum = 0, worst = 0;
  for (size_t j = 0; j < r.hops.size(); ++j) {
    double a = params_.hop(r.hops[j].kind).alpha_us + (j == 0 ? 0.0 : wait_us(replayed));
    sum += a;
    worst = std::max(worst, a);
  }
  return sum + (chunks - 1) * worst;
}

double MultipathModel::fill_factor(const Route& r, int chunks) {
  return static_cast<double>(chunks + static_cast<int>(r.hops.size()) - 1) / chunks;
}

double MultipathModel::rate_cap(const Route& r) const {
  double cap = 0;
  for (const Hop& h : r.hops) {
    double b = params_.hop(h.kind).beta_gbps * 1e3;
    if (b > 0) cap = cap > 0 ? std::min(cap, b) : b;
  }
  return cap;
}

Flow MultipathModel::flow(const PathLoad& p) const {
  Flow f;
  for (const Hop& h : p.route->hops)
    for (const auto& u : h.uses) {
      auto it = std::find_if(f.uses.begin(), f.uses.end(), [&](const auto& x) { return x.first == u.first; });
      if (it == f.uses.end()) f.uses.push_back(u);
      else it->second += u.second;  // host memory: written by the first hop, read by the relay
    }
  f.cap = rate_cap(*p.route);
  // A pipeline loads its hops' resources while its first hop moves the bytes; its relays
  // then drain the last chunk: (k - 1) m / c bytes more on the last hop's resources only,
  // shared with whatever still runs (the source's egress is free for other paths, the
  // destination's ingress is not).
  f.work = static_cast<double>(p.bytes);
  f.tail = drain_bytes(p);
  if (f.tail > 0) {
    const Hop& last = p.route->hops.back();
    f.tail_uses = last.uses;
    const double b = params_.hop(last.kind).beta_gbps * 1e3;
    f.tail_cap = b > 0 ? b : 0.0;
  }
  f.latency = p.bytes ? overhead_us(*p.route, p.chunks, p.replayed) : 0.0;
  return f;
}

double MultipathModel::drain_bytes(const PathLoad& p) const {
  const Route& r = *p.route;
  if (r.hops.size() != 2 || p.chunks < 1 || p.bytes == 0)
    return static_cast<double>(p.bytes) * (fill_factor(r, std::max(1, p.chunks)) - 1.0);
  PathPlan path;
  path.bytes = p.bytes;
  path.chunks = p.chunks;
  path.taper_head = p.taper_head;
  path.taper_tail = p.taper_tail;
  const std::vector<uint64_t> edge = chunk_edges(path);
  double x1 = params_.hop(r.hops[0].kind).beta_gbps, x2 = params_.hop(r.hops[1].kind).beta_gbps;
  if (x1 <= 0 || x2 <= 0) x1 = x2 = 1.0;  // rates left to the resources: take them as equal
  // max over k of the flow shop's two sums, in bytes at x2.
  const double m = static_cast<double>(p.bytes);
  double before = 0, worst = 0;
  for (size_t k = 0; k + 1 < edge.size(); ++k) {
    const double s = static_cast<double>(edge[k + 1] - edge[k]);
    before += s;                                        // s_1 + .. + s_k
    const double after = m - before + s;                // s_k + .. + s_c
    worst = std::max(worst, before * x2 / x1 + after);  // (before / x1 + after / x2) * x2
  }
  return std::max(0.0, worst - m * x2 / std::min(x1, x2));
}

std::vector<double> MultipathModel::capacities() const { return capacity_; }

FairShare MultipathModel::rates(const std::vector<PathLoad>& paths) const {
  std::vector<Flow> flows;
  for (const PathLoad& p : paths) flows.push_back(flow(p));
  return max_min_rates(capacity_, flows);
}

std::vector<PathTiming> MultipathModel::simulate(const std::vector<PathLoad>& paths) const {
  std::vector<Flow> flows;
  for (const PathLoad& p : paths) flows.push_back(flow(p));
  FluidResult res = simulate_flows(capacity_, flows);
  std::vector<PathTiming> out(paths.size());
  for (size_t i = 0; i < paths.size(); ++i) {
    out[i].finish_us = res.finish_us[i];
    out[i].limited_by = limit_name(*paths[i].route, res.limited_by[i]);
  }
  return out;
}

std::string MultipathModel::limit_name(const Route& r, int limited_by) const {
  if (limited_by >= 0) return node_.resources()[static_cast<size_t>(limited_by)].name;
  // Bounded by its own slowest hop's measured rate.
  const Hop* slow = nullptr;
  for (const Hop& h : r.hops)
    if (params_.hop(h.kind).beta_gbps > 0 &&
        (!slow || params_.hop(h.kind).beta_gbps < params_.hop(slow->kind).beta_gbps))
      slow = &h;
  return slow ? std::string(hop_kind_name(slow->kind)) + "_copy_rate" : "none";
}

const Route& MultipathModel::route_of(int src, int dst, const PathPlan& p) const {
  const Route* r = node_.route(src, dst, p.kind, p.via);
  GS_REQUIRE(r != nullptr, GPUSTRIPE_ERR_INVALID_ARGUMENT, "the node has no %s path %d->%d%s", path_kind_name(p.kind),
             src, dst, p.kind == PathKind::Direct ? "" : format(" via %d", p.via).c_str());
  return *r;
}

void MultipathModel::predict(std::vector<Plan>& plans) const {
  std::vector<PathLoad> loads;
  for (const Plan& plan : plans) {
    const bool replayed = replays(plan, shape_);
    for (const PathPlan& p : plan.paths)
      loads.push_back({&route_of(plan.src, plan.dst, p), p.bytes, p.chunks, replayed, p.taper_head, p.taper_tail});
  }
  std::vector<PathTiming> t = simulate(loads);
  size_t i = 0;
  for (Plan& plan : plans) {
    plan.predicted_us = 0;
    plan.bottleneck.clear();
    for (PathPlan& p : plan.paths) {
      p.predicted_us = t[i].finish_us;
      if (p.predicted_us >= plan.predicted_us) {
        plan.predicted_us = p.predicted_us;
        plan.bottleneck = t[i].limited_by;
      }
      ++i;
    }
    apply_schedule(plan);
  }
}

void MultipathModel::predict(Plan& plan) const {
  std::vector<Plan> one{plan};
  predict(one);
  plan = one[0];
}

double MultipathModel::wait_us(bool replayed) const {
  return replayed && params_.graph_epsilon_us >= 0 ? params_.graph_epsilon_us : params_.epsilon_us;
}

double MultipathModel::join_us(bool replayed) const {
  return replayed && params_.graph_join_us >= 0 ? params_.graph_join_us : params_.join_us;
}

double MultipathModel::fork_join_us(PathKind kind, bool replayed) const {
  return runs_on_lane(kind, shape_) ? 2 * wait_us(replayed) : 0.0;
}

double MultipathModel::lane_jitter_us(bool replayed) const {
  return replayed && params_.graph_lane_jitter_us >= 0 ? params_.graph_lane_jitter_us : params_.lane_jitter_us;
}

double MultipathModel::call_us() const {
  return params_.engine_call_us > 0 ? params_.engine_call_us : params_.host_call_us;
}

double MultipathModel::enqueue_us(const Plan& plan) const {
  const int nodes = graph_copies(plan, shape_);
  return (kPointerChecks + schedule_calls(plan, shape_)) * call_us() +
         (nodes > 0 ? params_.graph_launch_us + nodes * params_.graph_node_us : 0.0);
}

void MultipathModel::apply_schedule(Plan& plan) const {
  if (plan.paths.empty()) return;
  const bool plain = plan.single_path() && plan.paths[0].kind == PathKind::Direct;
  if (!plain) {
    // Paths on lanes are forked from the caller's stream (a wait) and joined back: the
    // caller's stream, after its own direct copy, waits on each final lane in turn. A wait
    // whose lane is still running ends `wait` after the lane's last copy (its wake-up); one
    // whose lane is done still costs the caller join_us, so they add up behind a direct
    // copy that finishes last. In a replay the direct copy is a captured (UVA) copy node,
    // which starts late. Unrolled, t = max(t0 + L join, max_l (lane_l + (L - l) join)) over
    // the L final lanes in the engine's order; each lane's finish spreads (lane_jitter_us),
    // and the time is the median of that maximum (straggler.hpp).
    const bool replayed = replays(plan, shape_);
    const double wait = wait_us(replayed), joined = join_us(replayed), spread = lane_jitter_us(replayed);
    auto late = [&](const PathPlan& p) { return replayed && p.kind == PathKind::Direct ? params_.graph_start_us : 0.0; };
    double t0 = 0;
    for (const PathPlan& p : plan.paths)
      if (!runs_on_lane(p.kind, shape_)) t0 = std::max(t0, p.predicted_us + late(p));
    std::vector<LaneFinish> lanes;
    for (int direct_first = 1; direct_first >= 0; --direct_first)  // the engine's order
      for (const PathPlan& p : plan.paths) {
        if ((p.kind == PathKind::Direct) != (direct_first == 1) || !runs_on_lane(p.kind, shape_)) continue;
        const double done = p.predicted_us + late(p) + wait;  // forked: its lane's wait on the start
        for (int l = final_lanes(p, shape_); l > 0; --l) lanes.push_back({done + wait, spread});
      }
    const double count = static_cast<double>(lanes.size());
    for (size_t l = 0; l < lanes.size(); ++l) lanes[l].median_us += (count - 1 - static_cast<double>(l)) * joined;
    plan.predicted_us = std::max(plan.predicted_us, median_of_latest(t0 + count * joined, lanes));
  }
  // Copies issued back to back settle at one plan per max(GPU time, host time): where the
  // host is slower the GPUs wait for it (each repetition starts when the previous one's
  // join completes, which the host has long enqueued when the GPUs are the slower side).
  const double host = enqueue_us(plan);
  if (host > plan.predicted_us) {
    plan.predicted_us = host;
    plan.bottleneck = "host_enqueue";
  }
}

ModelParams nominal_params(const Topology& topo) {
  ModelParams p;
  // Startups of one copy-engine call and of a cross-stream event wait, of the order the
  // CUDA runtime costs on current drivers; calibration replaces them. Bandwidths are
  // left unbounded per hop: the topology's link and host figures bound every path.
  p.hop(HopKind::Peer) = {5.0, 0.0};
  p.hop(HopKind::D2H) = {5.0, 0.0};
  p.hop(HopKind::H2D) = {5.0, 0.0};
  p.hop(HopKind::Local) = {3.0, 0.0};
  p.hop(HopKind::Kernel) = {4.0, 0.0};
  p.epsilon_us = 3.0;
  p.host_call_us = 1.5;
  p.source = "nominal figures of '" + topo.name + "'";
  return p;
}

}  // namespace gpustripe
