// Calibration through the Backend interface (emulated here; CUDA on the GPU machine)
// and the model's C API.
#include <gpustripe/model.h>
#include <gtest/gtest.h>

#include <cmath>

#include "backend/backend.hpp"
#include "common/error.hpp"
#include "bench/calibrate.hpp"
#include "test_model_util.hpp"
#include "test_util.hpp"

namespace gpustripe {
namespace {

TEST(ModelCalibrate, FitRecoversAlphaAndBeta) {
  std::vector<double> n, t;
  for (double s = 4096; s <= (256 << 20); s *= 4) {
    n.push_back(s);
    t.push_back(7.0 + s / (55.0 * 1e3));  // 7 us, 55 GB/s
  }
  auto [alpha, beta] = fit_hockney(n, t);
  EXPECT_NEAR(alpha, 7.0, 1e-6);
  EXPECT_NEAR(beta, 55.0, 1e-6);
  // Noise of a few percent keeps the fit close.
  for (size_t i = 0; i < t.size(); ++i) t[i] *= (i % 2 ? 1.03 : 0.97);
  auto [a2, b2] = fit_hockney(n, t);
  EXPECT_NEAR(a2, 7.0, 1.0);
  EXPECT_NEAR(b2, 55.0, 3.0);
  EXPECT_THROW(fit_hockney({1.0}, {1.0}), Error);
}

TEST(ModelCalibrate, SpreadOfRepetitionsIsStableForTwoGroupsAndIgnoresAFarOne) {
  // 41 repetitions, a quarter near 52 us and the rest near 59.5 (a relay's two groups): the
  // spread is the two groups' (~3.3 us) wherever the quartiles fall.
  std::vector<double> v;
  for (int i = 0; i < 41; ++i) v.push_back(i < 10 ? 52.0 + 0.01 * i : 59.5 + 0.01 * i);
  const double two = spread_sd(v);
  EXPECT_NEAR(two, 3.3, 0.4);
  std::vector<double> w = v;
  for (int i = 0; i < 6; ++i) w[static_cast<size_t>(10 + i)] = 52.0;  // a third near 52: about the same
  EXPECT_NEAR(spread_sd(w), two, 0.6);
  // One repetition far out (a 500 us stall) does not set it.
  v.back() = 500;
  EXPECT_NEAR(spread_sd(v), two, 0.3);
  EXPECT_DOUBLE_EQ(spread_sd({5.0, 5.0, 5.0, 5.0}), 0.0);
  EXPECT_DOUBLE_EQ(spread_sd({1.0, 2.0}), 0.0);  // too few
}

TEST(ModelCalibrate, RunsOnTheEmulatedBackendAndMatchesTheNode) {
  Topology t = load_topology_file("h200x4");
  auto backend = make_emulated_backend(t);
  std::vector<double> seen;
  Profile p = calibrate(*backend, t, CalibrationOptions{true, 2}, [&](double f, const std::string&) { seen.push_back(f); });
  EXPECT_EQ(profile_mismatch(p, t, /*emulated=*/true), "");
  EXPECT_NE(profile_mismatch(p, t), "");  // never the node's own profile
  EXPECT_EQ(p.fingerprint, profile_fingerprint(t, true));
  EXPECT_EQ(p.backend, std::string("emulated"));
  ASSERT_FALSE(seen.empty());
  EXPECT_DOUBLE_EQ(seen.back(), 1.0);
  for (size_t i = 1; i < seen.size(); ++i) EXPECT_GE(seen[i], seen[i - 1]);
  for (HopKind k : {HopKind::Peer, HopKind::D2H, HopKind::H2D}) EXPECT_GT(p.params.hop(k).beta_gbps, 0) << hop_kind_name(k);
  EXPECT_GT(p.params.capacities.count("pcie_d2h[gpu3]"), 0u);
  EXPECT_GT(p.params.capacities.count("nvlink_egress[gpu0]"), 0u);
  // The schedule's costs are measured too: the host's time per call, the event wait.
  EXPECT_GT(p.params.host_call_us, 0);
  EXPECT_LT(p.params.host_call_us, 1e4);
  EXPECT_GE(p.params.epsilon_us, 0);
  // And the engine's own cost per call of its schedule (enqueued: the probe plan has a
  // GPU-staged path, which this engine never replays), its bookkeeping on top of the calls.
  EXPECT_GT(p.params.engine_call_us, 0);
  EXPECT_LT(p.params.engine_call_us, 1e4);
  // The spread of a lane's finish, with the repetitions' quartiles it comes from.
  EXPECT_GE(p.params.lane_jitter_us, 0);
  EXPECT_LT(p.params.lane_jitter_us, 1e4);
  for (const char* key : {"\"host_call_us\"", "\"copy_engine_mixes_gpu0\"", "\"copy_engine_mixes_into_gpu1\"", "\"relay\"",
                          "\"engine_call\"", "\"join\"", "\"lane_spread_us\"", "\"epsilon_spread_us\"", "\"epsilon_pooled\""})
    EXPECT_NE(p.measurements_json.find(key), std::string::npos) << key;
  // The profile plans: every capacity names a resource of the node.
  ModelPlanner pl(t, profile_from_json(profile_to_json(p), "mem").params, SearchOptions{});
  pl.plan(0, 1, 64 << 20).check();
}

TEST(ModelCalibrate, NeedsTwoDevices) {
  Topology t = test::make_node(1, true, 18, 26.6, 63, 0, "one");
  auto backend = make_emulated_backend(t);
  EXPECT_THROW(calibrate(*backend, t, CalibrationOptions{true, 1}), Error);
}

TEST(ModelCalibrateGpu, MeasuresPlausibleFiguresOnTheGpus) {
  GS_REQUIRE_GPU(2);
  Topology t = detect_topology();
  auto backend = make_cuda_backend();
  Profile p = calibrate(*backend, t, CalibrationOptions{true, 3});
  EXPECT_EQ(p.backend, std::string("cuda"));
  // Measured peer bandwidth within a factor 2 of the nominal figure, below it plus 10%.
  double nominal = t.direct_gbps(0, 1);
  EXPECT_GT(p.params.hop(HopKind::Peer).beta_gbps, 0.5 * nominal);
  EXPECT_LT(p.params.hop(HopKind::Peer).beta_gbps, 1.1 * nominal);
  EXPECT_GT(p.params.hop(HopKind::D2H).beta_gbps, 0.4 * t.host_link_gbps(0));
  EXPECT_LT(p.params.hop(HopKind::Peer).alpha_us, 50);
  // A runtime call costs the host microseconds, an event wait the GPUs microseconds.
  EXPECT_GT(p.params.host_call_us, 0.05);
  EXPECT_LT(p.params.host_call_us, 50);
  EXPECT_LT(p.params.epsilon_us, 50);
}

TEST(ModelCapi, PlansIntoTheCallersArray) {
  gpustripe_model_t m = nullptr;
  ASSERT_EQ(gpustripe_model_create("h200x4", nullptr, &m), GPUSTRIPE_SUCCESS) << gpustripe_last_error();
  const char* source = nullptr;
  ASSERT_EQ(gpustripe_model_source(m, &source), GPUSTRIPE_SUCCESS);
  EXPECT_NE(std::string(source).find("nominal"), std::string::npos);
  gpustripe_path_plan_t paths[8];
  int n = 0;
  double us = 0;
  ASSERT_EQ(gpustripe_model_plan(m, 0, 1, 256 << 20, paths, 8, &n, &us), GPUSTRIPE_SUCCESS) << gpustripe_last_error();
  ASSERT_EQ(n, 2);
  EXPECT_EQ(paths[0].kind, GPUSTRIPE_PATH_DIRECT);
  EXPECT_EQ(paths[1].kind, GPUSTRIPE_PATH_HOST_STAGED);
  EXPECT_EQ(paths[0].bytes + paths[1].bytes, 256u << 20);
  EXPECT_GT(us, 0);
  double again = 0;
  ASSERT_EQ(gpustripe_model_predict(m, 0, 1, 256 << 20, paths, n, &again), GPUSTRIPE_SUCCESS);
  EXPECT_NEAR(again, us, 1e-6 * us);
  // Too little room: the count needed, the array untouched.
  gpustripe_path_plan_t one[1] = {};
  int need = 0;
  EXPECT_EQ(gpustripe_model_plan(m, 0, 1, 256 << 20, one, 1, &need, nullptr), GPUSTRIPE_ERR_INVALID_SIZE);
  EXPECT_EQ(need, 2);
  EXPECT_EQ(one[0].bytes, 0u);
  // Bad inputs.
  EXPECT_EQ(gpustripe_model_plan(m, 0, 1, 0, paths, 8, &n, &us), GPUSTRIPE_ERR_INVALID_SIZE);
  EXPECT_EQ(gpustripe_model_plan(m, 2, 2, 1 << 20, paths, 8, &n, &us), GPUSTRIPE_ERR_INVALID_DEVICE);
  EXPECT_EQ(gpustripe_model_plan(m, 0, 4, 1 << 20, paths, 8, &n, &us), GPUSTRIPE_ERR_INVALID_DEVICE);
  EXPECT_NE(std::string(gpustripe_last_error()).find("gpustripe_model_plan"), std::string::npos);
  paths[1].offset += 1;  // a gap
  EXPECT_EQ(gpustripe_model_predict(m, 0, 1, 256 << 20, paths, 2, &again), GPUSTRIPE_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(gpustripe_model_plan(nullptr, 0, 1, 1, paths, 8, &n, &us), GPUSTRIPE_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(gpustripe_model_destroy(m), GPUSTRIPE_SUCCESS);
  EXPECT_EQ(gpustripe_model_destroy(nullptr), GPUSTRIPE_SUCCESS);
  EXPECT_EQ(gpustripe_model_create("no-such-node", nullptr, &m), GPUSTRIPE_ERR_IO);
}

}  // namespace
}  // namespace gpustripe
