// Calibration profiles: round trip, where the planner's parameters come from, and a
// profile of another node is an error when named, ignored when found in the cache.
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <unistd.h>

#include "common/error.hpp"
#include "model/profile.hpp"
#include "test_model_util.hpp"
#include "test_util.hpp"

namespace gpustripe {
namespace {

std::string temp_dir() {
  char tmpl[] = "/tmp/gpustripe-profile-XXXXXX";
  return mkdtemp(tmpl);
}

Profile sample_profile(const Topology& t) {
  Profile p;
  p.fingerprint = t.fingerprint();
  p.topology = t.name;
  p.backend = "cuda";
  p.params = nominal_params(t);
  p.params.hop(HopKind::Peer) = {7.5, 380.0};
  p.params.hop(HopKind::D2H) = {9.0, 55.3};
  p.params.epsilon_us = 2.5;
  p.params.host_call_us = 1.75;
  p.params.engine_call_us = 2.25;
  p.params.graph_start_us = 6.5;
  p.params.graph_epsilon_us = 1.25;
  p.params.lane_jitter_us = 2.75;
  p.params.graph_lane_jitter_us = 0.75;
  p.params.capacities["nvlink_egress[gpu0]"] = 394.0;
  p.params.capacities["pcie_d2h[gpu0]"] = 55.3;
  return p;
}

TEST(ModelProfile, RoundTripsThroughJson) {
  Topology t = load_topology_file("h200x4");
  Profile p = sample_profile(t);
  Profile q = profile_from_json(profile_to_json(p), "mem");
  EXPECT_EQ(q.fingerprint, p.fingerprint);
  EXPECT_DOUBLE_EQ(q.params.hop(HopKind::Peer).beta_gbps, 380.0);
  EXPECT_DOUBLE_EQ(q.params.hop(HopKind::D2H).alpha_us, 9.0);
  EXPECT_DOUBLE_EQ(q.params.epsilon_us, 2.5);
  EXPECT_DOUBLE_EQ(q.params.host_call_us, 1.75);
  EXPECT_DOUBLE_EQ(q.params.engine_call_us, 2.25);
  EXPECT_DOUBLE_EQ(q.params.graph_start_us, 6.5);
  EXPECT_DOUBLE_EQ(q.params.graph_epsilon_us, 1.25);
  EXPECT_DOUBLE_EQ(q.params.lane_jitter_us, 2.75);
  EXPECT_DOUBLE_EQ(q.params.graph_lane_jitter_us, 0.75);
  EXPECT_DOUBLE_EQ(q.params.capacities.at("pcie_d2h[gpu0]"), 55.3);
  EXPECT_EQ(profile_mismatch(q, t), "");
}

TEST(ModelProfile, MalformedProfilesNameTheField) {
  for (const char* bad : {"{", "{\"schema\": 2, \"fingerprint\": \"x\"}", "{\"schema\": 1}",
                          "{\"schema\":1,\"fingerprint\":\"x\",\"hops\":{\"warp\":{\"alpha_us\":1,\"beta_gbps\":1}},"
                          "\"epsilon_us\":1,\"capacities\":{}}",
                          "{\"schema\":1,\"fingerprint\":\"x\",\"hops\":{},\"epsilon_us\":1,\"capacities\":{\"a\":-1}}",
                          "{\"schema\":1,\"fingerprint\":\"x\",\"hops\":{},\"epsilon_us\":1,\"host_call_us\":-2,"
                          "\"capacities\":{}}",
                          "{\"schema\":1,\"fingerprint\":\"x\",\"hops\":{},\"epsilon_us\":1,\"engine_call_us\":-1,"
                          "\"capacities\":{}}",
                          "{\"schema\":1,\"fingerprint\":\"x\",\"hops\":{},\"epsilon_us\":1,\"lane_jitter_us\":-1,"
                          "\"capacities\":{}}"}) {
    try {
      profile_from_json(bad, "p.json");
      ADD_FAILURE() << "accepted: " << bad;
    } catch (const Error& e) {
      EXPECT_EQ(e.status(), GPUSTRIPE_ERR_PROFILE) << bad;
      EXPECT_NE(std::string(e.what()).find("p.json"), std::string::npos) << e.what();
    }
  }
}

TEST(ModelProfile, MeasuredFiguresChangeThePlan) {
  // With the rates measured on 4x H200 (394 NVLink, 55 PCIe) instead of the nominal
  // 479 / 63, the host share stays in the measured 8-11% band.
  Topology t = load_topology_file("h200x4");
  Profile p = sample_profile(t);
  for (int g = 0; g < 4; ++g) {
    p.params.capacities["nvlink_egress[gpu" + std::to_string(g) + "]"] = 394;
    p.params.capacities["nvlink_ingress[gpu" + std::to_string(g) + "]"] = 394;
    p.params.capacities["pcie_d2h[gpu" + std::to_string(g) + "]"] = 55.3;
    p.params.capacities["pcie_h2d[gpu" + std::to_string(g) + "]"] = 55.4;
  }
  ModelPlanner pl(t, p.params, SearchOptions{});
  Plan plan = pl.plan_exact(0, 1, 256 << 20);
  double host = test::share_of(plan, PathKind::HostStaged);
  EXPECT_GT(host, 0.08) << plan.describe();
  EXPECT_LT(host, 0.115) << plan.describe();
  EXPECT_NEAR(build_fixed_plan(pl.model(), parse_plan_spec("direct"), 0, 1, 256 << 20).predicted_gbps(), 0.268 * 1470,
              20);  // 256 MiB at 380 GB/s (the per-copy rate binds before the 394 egress)
}

TEST(ModelProfile, ResolveOrderExplicitCacheNominal) {
  Topology t = load_topology_file("h200x4");
  Topology other = load_topology_file("h200x8");
  std::string dir = temp_dir();
  ScopedEnv cache("XDG_CACHE_HOME", dir.c_str());
  ScopedEnv named("GPUSTRIPE_PROFILE", nullptr);

  // Nothing anywhere: nominal, and it says so.
  EXPECT_NE(resolve_params(t).source.find("nominal"), std::string::npos);

  // A profile of this node in the cache is used.
  save_profile(sample_profile(t), cached_profile_path(t));
  ModelParams from_cache = resolve_params(t);
  EXPECT_NE(from_cache.source.find("profile"), std::string::npos);
  EXPECT_DOUBLE_EQ(from_cache.hop(HopKind::Peer).beta_gbps, 380.0);

  // A profile of another node under this node's cache name: ignored with a warning.
  save_profile(sample_profile(other), cached_profile_path(t));
  EXPECT_NE(resolve_params(t).source.find("nominal"), std::string::npos);

  // Named explicitly (argument or GPUSTRIPE_PROFILE): an error, never silent use.
  std::string path = dir + "/other.json";
  save_profile(sample_profile(other), path);
  try {
    resolve_params(t, path);
    ADD_FAILURE() << "a profile of another node was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.status(), GPUSTRIPE_ERR_PROFILE);
    EXPECT_NE(std::string(e.what()).find("does not belong"), std::string::npos) << e.what();
  }
  {
    ScopedEnv env("GPUSTRIPE_PROFILE", path.c_str());
    EXPECT_THROW(resolve_params(t), Error);
    EXPECT_THROW(make_planner(t), Error);
  }
  // A missing named file is an I/O error.
  try {
    resolve_params(t, dir + "/missing.json");
    ADD_FAILURE();
  } catch (const Error& e) {
    EXPECT_EQ(e.status(), GPUSTRIPE_ERR_IO);
  }
  // A different driver is another calibration.
  Profile drv = sample_profile(t);
  drv.driver = "550.1";
  Topology t2 = t;
  t2.driver_version = "580.2";
  EXPECT_NE(profile_mismatch(drv, t2).find("driver"), std::string::npos);
}

// A calibration of emulated devices (a host's memcpy speeds) is kept apart from the node it
// emulates: used by a context on the emulated backend, never for the real node or the file.
TEST(ModelProfile, EmulatedCalibrationNeverServesARealOrFileTopology) {
  Topology t = load_topology_file("h200x4");
  std::string dir = temp_dir();
  ScopedEnv cache("XDG_CACHE_HOME", dir.c_str());
  ScopedEnv named("GPUSTRIPE_PROFILE", nullptr);
  Profile emu = sample_profile(t);
  emu.backend = "emulated";
  emu.fingerprint = profile_fingerprint(t, true);
  EXPECT_NE(cached_profile_path(t, true), cached_profile_path(t));
  save_profile(emu, cached_profile_path(t, true));
  EXPECT_NE(resolve_params(t, "", true).source.find("profile"), std::string::npos);  // the emulated context
  EXPECT_NE(resolve_params(t).source.find("nominal"), std::string::npos);            // the node, the file

  // One written under the node's own fingerprint (as calibrations of emulated devices once
  // were) is still not the node's.
  Profile old = emu;
  old.fingerprint = t.fingerprint();
  save_profile(old, cached_profile_path(t));
  EXPECT_NE(resolve_params(t).source.find("nominal"), std::string::npos);
  EXPECT_NE(profile_mismatch(old, t).find("emulated devices"), std::string::npos);
  std::string path = dir + "/emu.json";
  save_profile(emu, path);
  try {
    resolve_params(t, path);
    ADD_FAILURE() << "a profile of emulated devices was accepted for the node";
  } catch (const Error& e) {
    EXPECT_EQ(e.status(), GPUSTRIPE_ERR_PROFILE);
  }
}

}  // namespace
}  // namespace gpustripe
