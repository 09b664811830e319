// Shared resources: what was measured on the 4x H200 node, reproduced from
// nominal figures; and the property that more bandwidth never gives a slower plan.
#include <gtest/gtest.h>

#include <random>

#include "common/error.hpp"
#include "model/fluid.hpp"
#include "test_model_util.hpp"

namespace gpustripe {
namespace {

using test::count_paths;
using test::make_node;

Topology h200() { return make_node(4, true, 18, 26.6, 63.0, 0, "h200"); }

double time_of(const MultipathModel& m, std::vector<Plan> plans) {
  m.predict(plans);
  double t = 0;
  for (const Plan& p : plans) t = std::max(t, p.predicted_us);
  return t;
}

Plan fixed(const MultipathModel& m, const char* spec, int src, int dst, uint64_t bytes) {
  return build_fixed_plan(m, parse_plan_spec(spec), src, dst, bytes);
}

TEST(ModelContention, TwoCopiesFromOneGpuShareItsEgress) {
  MultipathModel m(h200(), nominal_params(h200()));
  const uint64_t n = 256 << 20;
  double alone = time_of(m, {fixed(m, "direct", 0, 1, n)});
  std::vector<Plan> both{fixed(m, "direct", 0, 1, n), fixed(m, "direct", 0, 2, n)};
  m.predict(both);
  // 0->1 plus 0->2: aggregate equals one copy alone (measured on 4x H200: 394 vs 394).
  EXPECT_NEAR(both[0].predicted_us, 2 * alone, 0.02 * alone);
  EXPECT_EQ(both[0].bottleneck, "nvlink_egress[gpu0]");
  // 0->1 plus 2->1: the destination's ingress.
  std::vector<Plan> in{fixed(m, "direct", 0, 1, n), fixed(m, "direct", 2, 1, n)};
  m.predict(in);
  EXPECT_NEAR(in[0].predicted_us, 2 * alone, 0.02 * alone);
  EXPECT_EQ(in[0].bottleneck, "nvlink_ingress[gpu1]");
  // Bidirectional 0<->1 shares nothing on a switch: both at full speed.
  EXPECT_NEAR(time_of(m, {fixed(m, "direct", 0, 1, n), fixed(m, "direct", 1, 0, n)}), alone, 0.01 * alone);
}

TEST(ModelContention, APipelinesDrainSharesItsLastHopsLink) {
  // Flow A moves 100 bytes over link 0, then drains 50 more over link 1 (its relay's link);
  // flow B moves 120 over link 1. Both links 1 byte/us. Until 100 us each has its link; then
  // A's drain and B's last 20 bytes share link 1: B ends at 140, A at 100 + 40 + 30 = 170.
  Flow a, b;
  a.uses = {{0, 1.0}};
  a.work = 100;
  a.tail = 50;
  a.tail_uses = {{1, 1.0}};
  b.uses = {{1, 1.0}};
  b.work = 120;
  FluidResult r = simulate_flows({1.0, 1.0}, {a, b});
  EXPECT_NEAR(r.finish_us[1], 140.0, 1e-6);
  EXPECT_NEAR(r.finish_us[0], 170.0, 1e-6);
  // A drain that holds no link runs at the flow's last rate.
  a.tail_uses.clear();
  r = simulate_flows({1.0, 1.0}, {a, b});
  EXPECT_NEAR(r.finish_us[0], 150.0, 1e-6);
  EXPECT_NEAR(r.finish_us[1], 120.0, 1e-6);
}

TEST(ModelContention, GpuStagingOnNvswitchIsNoFasterThanDirect) {
  MultipathModel m(h200(), nominal_params(h200()));
  const uint64_t n = 256 << 20;
  double direct = time_of(m, {fixed(m, "direct", 0, 1, n)});
  for (const char* spec : {"direct,gpu2:0.1x8", "direct,gpu2:0.15x8,gpu3:0.15x8", "direct,gpu2:0.33x16"})
    EXPECT_GE(time_of(m, {fixed(m, spec, 0, 1, n)}), direct) << spec;
}

TEST(ModelContention, HostShareCliff) {
  // Past the share where the host path finishes last, time grows at the host path's
  // slope: 20% on the host is far slower than 10% (measured on 4x H200: 430 -> 232 GB/s).
  MultipathModel m(h200(), nominal_params(h200()));
  const uint64_t n = 256 << 20;
  double t10 = time_of(m, {fixed(m, "direct,host0:0.10x8", 0, 1, n)});
  double t15 = time_of(m, {fixed(m, "direct,host0:0.15x8", 0, 1, n)});
  double t20 = time_of(m, {fixed(m, "direct,host0:0.20x8", 0, 1, n)});
  double direct = time_of(m, {fixed(m, "direct", 0, 1, n)});
  EXPECT_LT(t10, direct);
  EXPECT_GT(t15, t10 * 1.25);
  EXPECT_GT(t20, direct * 1.5);
}

TEST(ModelContention, HostPathsOfSeveralGpusShareHostMemory) {
  // Host memory of 100 GB/s: one host-staged copy alone runs at its PCIe rate (32 GB/s,
  // 64 GB/s of memory traffic: written, then read), four at once are bound by memory.
  Topology t = make_node(4, false, 1, 25.0, 32.0, 100.0);
  MultipathModel m(t, nominal_params(t));
  const uint64_t n = 256 << 20;
  Plan one = fixed(m, "host0:1x16", 0, 1, n);
  m.predict(one);
  EXPECT_EQ(one.bottleneck.rfind("pcie", 0), 0u) << one.bottleneck;
  std::vector<Plan> four{fixed(m, "host0:1x16", 0, 1, n), fixed(m, "host0:1x16", 1, 2, n),
                         fixed(m, "host0:1x16", 2, 3, n), fixed(m, "host0:1x16", 3, 0, n)};
  m.predict(four);
  EXPECT_EQ(four[0].bottleneck, "host_memory[socket0]");
  // Each gets 100 / 4 / 2 = 12.5 GB/s instead of 32.
  EXPECT_NEAR(four[0].predicted_us / one.predicted_us, 32.0 / 12.5, 0.1);
}

TEST(ModelContention, ConcurrentTransfersArePlannedTogether) {
  // On a V100-like mesh a lone 0->1 uses every link out of GPU 0 (direct + staged via 2
  // and 3). 0->1 and 0->2 at once share all of them: planned together each takes about
  // twice its lone time, and no worse than the two lone plans run side by side.
  Topology t = make_node(4, false, 2, 25.0, 16.0, 128.0);
  ModelPlanner pl(t, nominal_params(t), SearchOptions{});
  const uint64_t n = 256 << 20;
  double alone = pl.plan_exact(0, 1, n).predicted_us;
  std::vector<Plan> lone{pl.plan_exact(0, 1, n), pl.plan_exact(0, 2, n)};
  double lone_together = time_of(pl.model(), lone);
  std::vector<Plan> joint = pl.plan_concurrent({{0, 1, n}, {0, 2, n}});
  double joint_time = std::max(joint[0].predicted_us, joint[1].predicted_us);
  EXPECT_LE(joint_time, lone_together * 1.001);
  EXPECT_NEAR(joint_time / alone, 2.0, 0.25);
  // Bidirectional 0<->1 uses each link in both directions: no contention on NVLink.
  std::vector<Plan> bidir = pl.plan_concurrent({{0, 1, n}, {1, 0, n}});
  EXPECT_NEAR(std::max(bidir[0].predicted_us, bidir[1].predicted_us), alone, 0.05 * alone);
}

// Random nodes; more capacity on any one resource (or a faster per-hop rate) never
// yields a plan predicted slower, up to the planner's decline threshold.
TEST(ModelProperty, MoreBandwidthNeverGivesASlowerPlan) {
  std::mt19937 rng(12345);
  std::uniform_real_distribution<double> u(0, 1);
  int checked = 0;
  for (int trial = 0; trial < 60; ++trial) {
    int n = 2 + static_cast<int>(u(rng) * 6);
    bool sw = u(rng) < 0.4;
    Topology t = make_node(n, sw, 1 + static_cast<int>(u(rng) * 6), 10 + u(rng) * 40, 8 + u(rng) * 60,
                           u(rng) < 0.3 ? 0 : 40 + u(rng) * 200, "rand" + std::to_string(trial));
    ModelParams base = nominal_params(t);
    int src = static_cast<int>(u(rng) * n), dst = (src + 1 + static_cast<int>(u(rng) * (n - 1))) % n;
    uint64_t bytes = static_cast<uint64_t>(std::exp2(16 + u(rng) * 15));
    SearchOptions o;
    double before = ModelPlanner(t, base, o).plan_exact(src, dst, bytes).predicted_us;
    MultipathModel probe(t, base);
    for (int k = 0; k < 4; ++k) {
      ModelParams more = base;
      const auto& res = probe.node().resources();
      const Resource& r = res[static_cast<size_t>(u(rng) * res.size())];
      more.capacities[r.name] = r.gbps * (1.1 + u(rng) * 3);
      double after = ModelPlanner(t, more, o).plan_exact(src, dst, bytes).predicted_us;
      EXPECT_LE(after, before * (1 + o.min_gain) + 1e-6)
          << "trial " << trial << ": " << r.name << " raised, " << src << "->" << dst << " " << bytes << " bytes";
      ++checked;
    }
  }
  EXPECT_EQ(checked, 240);
}

}  // namespace
}  // namespace gpustripe
