#include "model/plan_search.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

#include "common/error.hpp"
#include "model/closed_form.hpp"

namespace gpustripe {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

// Chunk count minimising (c - 1) A + (m / x) (c + k - 1) / c: c = sqrt((k - 1) m / (x A)).
int best_chunks(const MultipathModel& model, const Route& r, double m, double x, const SearchOptions& opt,
                bool replayed) {
  const int k = static_cast<int>(r.hops.size());
  if (k == 1) return 1;  // one hop: chunking only adds startups
  if (opt.fixed_chunks > 0) return opt.fixed_chunks;
  const uint64_t smallest = r.kind == PathKind::HostStaged ? std::max(opt.min_chunk, opt.min_host_chunk) : opt.min_chunk;
  int hi = static_cast<int>(std::min<double>(opt.max_chunks, std::floor(m / static_cast<double>(smallest))));
  hi = std::max(hi, 1);
  double A = model.overhead_us(r, 2, replayed) - model.overhead_us(r, 1, replayed);
  auto cost = [&](int c) { return (c - 1) * A + (m / x) * MultipathModel::fill_factor(r, c); };
  double ideal = A > 0 ? std::sqrt((k - 1) * m / (x * A)) : hi;
  int lo_c = std::clamp(static_cast<int>(std::floor(ideal)), 1, hi);
  int hi_c = std::clamp(static_cast<int>(std::ceil(ideal)), 1, hi);
  return cost(lo_c) <= cost(hi_c) ? lo_c : hi_c;
}

struct Candidate {
  std::vector<const Route*> routes;
  Plan plan;
  double time = kInf;
};

// Equal-finish split of `bytes` over `routes` (closed form with each path's a and b in the
// mix), chunk counts chosen per path, then the aligned plan timed by the fluid simulation.
Candidate evaluate(const MultipathModel& model, int src, int dst, uint64_t bytes, std::vector<const Route*> routes,
                   const std::vector<PathLoad>& background, const SearchOptions& opt) {
  Candidate out;
  out.routes = routes;
  const size_t np = routes.size();
  std::vector<PathKind> kinds;
  for (const Route* r : routes) kinds.push_back(r->kind);
  const bool replayed = replays(kinds, model.engine_shape());
  std::vector<PathLoad> loads(background);
  for (const Route* r : routes) loads.push_back({r, bytes, 1, replayed});
  FairShare share = model.rates(loads);
  std::vector<double> x(np), theta(np);
  std::vector<int> chunks(np, 1);
  for (size_t i = 0; i < np; ++i) {
    x[i] = share.rate[background.size() + i];
    if (x[i] <= 0) return out;
    if (opt.fixed_chunks > 0 && routes[i]->hops.size() > 1) chunks[i] = opt.fixed_chunks;
  }
  const double n = static_cast<double>(bytes);
  for (int iter = 0; iter < 4; ++iter) {
    std::vector<double> a(np), b(np);
    // A split (or a staged path alone) runs on the engine's lanes: their fork/join waits are
    // a fixed cost of the path like its startups.
    const bool scheduled = np > 1 || routes[0]->kind != PathKind::Direct;
    for (size_t i = 0; i < np; ++i) {
      a[i] = model.overhead_us(*routes[i], chunks[i], replayed) +
             (scheduled ? model.fork_join_us(routes[i]->kind, replayed) : 0.0);
      b[i] = x[i] / MultipathModel::fill_factor(*routes[i], chunks[i]);
      // The margin was measured on the host path's cliff only (4x H200); on GPU-staged paths it
      // moved 1-4 MB splits onto host-bound plans that the model then mispredicted by 20-36%.
      if (np > 1 && routes[i]->kind == PathKind::HostStaged) b[i] *= 1.0 - opt.staged_margin;
    }
    theta = equal_finish_split(a, b, n);
    for (size_t i = 0; i < np; ++i)
      if (np > 1 && theta[i] * n < static_cast<double>(opt.align)) return out;  // the path does not pay
    for (size_t i = 0; i < np; ++i) chunks[i] = best_chunks(model, *routes[i], theta[i] * n, x[i], opt, replayed);
  }
  Plan& plan = out.plan;
  plan.src = src;
  plan.dst = dst;
  plan.bytes = bytes;
  plan.source = "model";
  uint64_t given = 0;
  std::vector<uint64_t> share_bytes(np, 0);
  for (size_t i = 1; i < np; ++i) {
    share_bytes[i] = static_cast<uint64_t>(std::llround(theta[i] * n / static_cast<double>(opt.align))) * opt.align;
    given += share_bytes[i];
  }
  if (given >= bytes) return out;
  share_bytes[0] = bytes - given;
  align_boundaries(share_bytes, opt.align);
  uint64_t offset = 0;
  for (size_t i = 0; i < np; ++i) {
    PathPlan p;
    p.kind = routes[i]->kind;
    p.via = routes[i]->via;
    p.offset = offset;
    p.bytes = share_bytes[i];
    p.chunks = static_cast<int>(std::min<uint64_t>(static_cast<uint64_t>(chunks[i]), std::max<uint64_t>(1, p.bytes / opt.align)));
    if (p.bytes == 0) return out;
    offset += p.bytes;
    plan.paths.push_back(p);
  }
  std::vector<PathLoad> all(background);
  for (size_t i = 0; i < np; ++i) all.push_back({routes[i], plan.paths[i].bytes, plan.paths[i].chunks, replayed});
  std::vector<PathTiming> t = model.simulate(all);
  for (size_t i = 0; i < np; ++i) {
    const PathTiming& pt = t[background.size() + i];
    plan.paths[i].predicted_us = pt.finish_us;
    if (pt.finish_us >= plan.predicted_us) {
      plan.predicted_us = pt.finish_us;
      plan.bottleneck = pt.limited_by;
    }
  }
  model.apply_schedule(plan);
  out.time = plan.predicted_us;
  return out;
}

size_t route_rank(const std::vector<Route>& all, const Route* r) { return static_cast<size_t>(r - all.data()); }

}  // namespace

Plan search_plan(const MultipathModel& model, int src, int dst, uint64_t bytes, const std::vector<PathLoad>& background,
                 const SearchOptions& opt) {
  const std::vector<Route>& all = model.node().routes(src, dst);  // validates src and dst
  GS_REQUIRE(bytes > 0, GPUSTRIPE_ERR_INVALID_SIZE, "transfer %d->%d of 0 bytes: nothing to plan", src, dst);
  std::vector<const Route*> pool;
  for (const Route& r : all)
    if (!(r.kind == PathKind::HostStaged && opt.host == HostPathMode::Off)) pool.push_back(&r);
  GS_REQUIRE(!pool.empty(), GPUSTRIPE_ERR_NOT_SUPPORTED,
             "no path %d->%d: the GPUs have no peer access and the host path is off (GPUSTRIPE_HOST_PATH=off)", src, dst);

  auto sorted = [&](std::vector<const Route*> v) {
    std::sort(v.begin(), v.end(), [&](const Route* a, const Route* b) { return route_rank(all, a) < route_rank(all, b); });
    return v;
  };
  // Start from the best single path (the direct copy wherever there is one).
  Candidate cur;
  for (const Route* r : pool) {
    Candidate c = evaluate(model, src, dst, bytes, {r}, background, opt);
    if (c.time < cur.time) cur = c;
  }
  GS_REQUIRE(cur.time < kInf, GPUSTRIPE_ERR_NOT_SUPPORTED, "no usable path %d->%d on this node", src, dst);
  if (bytes < opt.min_split) {
    cur.plan.source = "single";
    return cur.plan;
  }
  auto gpu_paths = [](const std::vector<const Route*>& v) {
    return static_cast<int>(std::count_if(v.begin(), v.end(), [](const Route* r) { return r->kind == PathKind::GpuStaged; }));
  };
  auto in = [](const std::vector<const Route*>& v, const Route* r) { return std::find(v.begin(), v.end(), r) != v.end(); };
  if (opt.host == HostPathMode::On) {
    for (const Route* r : pool) {
      if (r->kind != PathKind::HostStaged || in(cur.routes, r)) continue;
      std::vector<const Route*> next = cur.routes;
      next.push_back(r);
      Candidate c = evaluate(model, src, dst, bytes, sorted(next), background, opt);
      if (c.time < kInf) cur = c;
      break;  // one host path: through the source's socket
    }
  }
  // Greedy: add the path that shortens the finish time most, while it pays.
  for (;;) {
    Candidate best;
    for (const Route* r : pool) {
      if (in(cur.routes, r)) continue;
      if (r->kind == PathKind::GpuStaged && opt.max_gpu_paths >= 0 && gpu_paths(cur.routes) >= opt.max_gpu_paths) continue;
      std::vector<const Route*> next = cur.routes;
      next.push_back(r);
      Candidate c = evaluate(model, src, dst, bytes, sorted(next), background, opt);
      if (c.time < best.time) best = c;
    }
    if (!(best.time < cur.time * (1.0 - opt.min_gain))) break;
    cur = best;
  }
  return cur.plan;
}

Plan split_over(const MultipathModel& model, int src, int dst, uint64_t bytes, const std::vector<const Route*>& routes,
                const SearchOptions& opt) {
  Candidate c = evaluate(model, src, dst, bytes, routes, {}, opt);
  if (c.time < kInf) return c.plan;
  Plan none;
  none.src = src;
  none.dst = dst;
  none.bytes = bytes;
  return none;
}

Plan plan_for_routes(const MultipathModel& model, int src, int dst, uint64_t bytes,
                     const std::vector<std::string>& names, const SearchOptions& opt) {
  const std::vector<Route>& all = model.node().routes(src, dst);
  GS_REQUIRE(bytes > 0, GPUSTRIPE_ERR_INVALID_SIZE, "transfer %d->%d of 0 bytes: nothing to plan", src, dst);
  std::vector<const Route*> routes;
  for (const std::string& n : names) {
    auto it = std::find_if(all.begin(), all.end(), [&](const Route& r) { return r.name() == n; });
    GS_REQUIRE(it != all.end(), GPUSTRIPE_ERR_INVALID_ARGUMENT, "transfer %d->%d has no path '%s'", src, dst, n.c_str());
    if (std::find(routes.begin(), routes.end(), &*it) == routes.end()) routes.push_back(&*it);
  }
  GS_REQUIRE(!routes.empty(), GPUSTRIPE_ERR_INVALID_ARGUMENT, "no path named for %d->%d", src, dst);
  std::sort(routes.begin(), routes.end(), [&](const Route* a, const Route* b) { return route_rank(all, a) < route_rank(all, b); });
  // Drop the path that pays least until the rest all carry bytes.
  while (routes.size() > 1) {
    Candidate c = evaluate(model, src, dst, bytes, routes, {}, opt);
    if (c.time < kInf) return c.plan;
    routes.pop_back();
  }
  Candidate c = evaluate(model, src, dst, bytes, routes, {}, opt);
  GS_REQUIRE(c.time < kInf, GPUSTRIPE_ERR_NOT_SUPPORTED, "path %s cannot carry %d->%d", routes[0]->name().c_str(), src, dst);
  return c.plan;
}

void align_boundaries(std::vector<uint64_t>& sizes, uint64_t align) {
  if (sizes.size() < 2) return;
  uint64_t tail = sizes[0] % align;
  if (tail == sizes[0]) return;  // the first path carries less than one unit: leave it
  sizes[0] -= tail;
  sizes.back() += tail;
}

std::vector<PathLoad> loads_of(const MultipathModel& model, const Plan& plan) {
  std::vector<PathLoad> out;
  const bool replayed = replays(plan, model.engine_shape());
  for (const PathPlan& p : plan.paths) out.push_back({&model.route_of(plan.src, plan.dst, p), p.bytes, p.chunks, replayed});
  return out;
}

}  // namespace gpustripe
