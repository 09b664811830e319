// Plans wait for their last lane: the median of the latest of lanes whose finish spreads
// (model/straggler.hpp), and what it adds to a plan's predicted time.
#include <gtest/gtest.h>

#include <cmath>

#include "model/multipath_model.hpp"
#include "model/plan_spec.hpp"
#include "model/straggler.hpp"
#include "test_model_util.hpp"

namespace gpustripe {
namespace {

TEST(ModelStraggler, WithoutSpreadItIsThePlainMaximum) {
  EXPECT_DOUBLE_EQ(median_of_latest(10, {}), 10);
  EXPECT_NEAR(median_of_latest(10, {{12, 0}, {11, 0}}), 12, 1e-6);
  EXPECT_NEAR(median_of_latest(15, {{12, 0}, {11, 0}}), 15, 1e-9);
}

TEST(ModelStraggler, LanesEndingTogetherEndAtTheMedianOfTheirMaximum) {
  // n lanes of median 30 us, sd 2 us: P(all <= t) = Phi((t - 30) / 2)^n = 1/2, so t is the
  // single lane's 0.5^(1/n) quantile: z = 0, 0.5450, 0.8193, 0.9981 for n = 1..4.
  const double z[] = {0.0, 0.5450, 0.8193, 0.9981};
  for (int n = 1; n <= 4; ++n) {
    std::vector<LaneFinish> lanes(static_cast<size_t>(n), LaneFinish{30, 2});
    EXPECT_NEAR(median_of_latest(0, lanes), 30 + 2 * z[n - 1], 2e-3) << n << " lanes";
  }
}

TEST(ModelStraggler, ALaneFarAheadOrAFloorFarBehindDoNotCount) {
  const double two = median_of_latest(0, {{30, 2}, {30, 2}});
  EXPECT_NEAR(median_of_latest(0, {{30, 2}, {30, 2}, {10, 2}}), two, 1e-6);  // 10 sd ahead
  EXPECT_NEAR(median_of_latest(50, {{30, 2}, {30, 2}}), 50, 1e-9);           // all long done
  // One lane alone at the floor: half its repetitions end before it, so the median is the floor.
  EXPECT_NEAR(median_of_latest(30, {{30, 3}}), 30, 1e-6);
}

TEST(ModelStraggler, MoreSpreadNeverEndsEarlier) {
  double last = 0;
  for (double sd : {0.0, 0.5, 1.0, 2.0, 4.0}) {
    const double t = median_of_latest(25, {{30, sd}, {29, sd}, {28, sd}});
    EXPECT_GE(t, last - 1e-9) << sd;
    last = t;
  }
}

TEST(ModelStraggler, APlanOfLanesThatEndTogetherPaysTheirSpread) {
  Topology t = load_topology_file("h200x4");
  ModelParams p = nominal_params(t);
  p.host_call_us = 0;
  p.epsilon_us = 5;
  p.join_us = 1;
  EngineShape e;  // the engine's default: direct on the caller's stream, one relay lane per path
  e.direct_on_caller = true;
  e.marks_per_piece = false;
  e.host_lanes = e.host_first_lanes = 1;
  ModelParams spread = p;
  spread.lane_jitter_us = 3;
  MultipathModel m0(t, p, e), m(t, spread, e);
  EXPECT_DOUBLE_EQ(m.lane_jitter_us(false), 3.0);
  EXPECT_DOUBLE_EQ(m.lane_jitter_us(true), 3.0);  // no figure of its own for replays: the same
  // The model's own split over direct + 2 GPU-staged paths + host at 4 MB: every path ends together.
  SearchOptions o;
  Plan a0 = plan_for_routes(m0, 0, 1, 4 << 20, {"direct", "gpu2", "gpu3", "host0"}, o);
  Plan a = build_fixed_plan(m, parse_plan_spec(format_plan_spec(a0)), 0, 1, 4 << 20);
  ASSERT_EQ(a.paths.size(), 4u);
  EXPECT_GT(a.predicted_us, a0.predicted_us + 1.0);  // three lanes near the end: ~+0.8 sd
  EXPECT_LT(a.predicted_us, a0.predicted_us + 3 * 3.0);
  // Lanes long done before the direct copy ends: the spread does not show.
  auto early = parse_plan_spec("direct,gpu2:0.01x1,gpu3:0.01x1,host0:0.01x1");
  Plan b0 = build_fixed_plan(m0, early, 0, 1, 256 << 20), b = build_fixed_plan(m, early, 0, 1, 256 << 20);
  EXPECT_NEAR(b.predicted_us, b0.predicted_us, 1e-6);
  EXPECT_NEAR(b.predicted_us, b.paths[0].predicted_us + 3 * 1.0, 1e-6);
  // A plain copy has no lanes.
  Plan d0 = build_fixed_plan(m0, parse_plan_spec("direct"), 0, 1, 4 << 20);
  Plan d = build_fixed_plan(m, parse_plan_spec("direct"), 0, 1, 4 << 20);
  EXPECT_DOUBLE_EQ(d.predicted_us, d0.predicted_us);
  // A replayed plan takes the replay's own figure where calibration measured one.
  ModelParams g = spread;
  g.graph_lane_jitter_us = 0.5;
  EXPECT_DOUBLE_EQ(MultipathModel(t, g, e).lane_jitter_us(true), 0.5);
}

}  // namespace
}  // namespace gpustripe
