// Topology queries on the shipped nodes: NVLink mesh, NVSwitch, and the AC922's
// sockets; fingerprints; the node selection.
#include <gtest/gtest.h>

#include "common/error.hpp"
#include "test_util.hpp"
#include "topology/topology.hpp"

using namespace gpustripe;

TEST(TopologyQuery, MeshDirectIsTheBundle) {
  Topology beluga = load_topology_file("beluga-v100x4");
  Topology narval = load_topology_file("narval-a100x4");
  EXPECT_FALSE(beluga.has_nvswitch());
  for (int i = 0; i < 4; ++i)
    for (int j = 0; j < 4; ++j) {
      if (i == j) continue;
      EXPECT_EQ(beluga.nvlinks_between(i, j), 2);
      EXPECT_DOUBLE_EQ(beluga.direct_gbps(i, j), 50);
      EXPECT_EQ(narval.nvlinks_between(i, j), 4);
      EXPECT_DOUBLE_EQ(narval.direct_gbps(i, j), 100);
    }
  EXPECT_DOUBLE_EQ(beluga.nvlink_egress_gbps(0), 150);  // 3 peers x 2 links x 25
  EXPECT_DOUBLE_EQ(narval.nvlink_ingress_gbps(3), 300);
  EXPECT_DOUBLE_EQ(beluga.host_link_gbps(2), 15.75);
  EXPECT_DOUBLE_EQ(narval.host_link_gbps(2), 31.5);
  EXPECT_EQ(beluga.socket_of(3).id, 1);
  EXPECT_GT(beluga.socket_link_gbps(0, 1), 0);
}

TEST(TopologyQuery, SwitchDirectIsEgressIngress) {
  Topology h = load_topology_file("h200x4");
  EXPECT_TRUE(h.has_nvswitch());
  EXPECT_TRUE(h.gpu_links.empty());
  EXPECT_EQ(h.gpu_count(), 4);
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(h.gpu(i).nvlinks, 18);
    EXPECT_EQ(h.gpu(i).pcie_gen, 5);
    EXPECT_EQ(h.gpu(i).pcie_width, 16);
    EXPECT_EQ(h.gpu(i).sm_count, 132);
    EXPECT_EQ(h.gpu(i).copy_engines, 3);
    for (int j = 0; j < 4; ++j) {
      if (i == j) continue;
      EXPECT_EQ(h.nvlinks_between(i, j), 18);
      EXPECT_NEAR(h.direct_gbps(i, j), 18 * 26.6, 1e-9);
    }
  }
  EXPECT_DOUBLE_EQ(h.host_link_gbps(0), 63.0);
  EXPECT_EQ(h.socket_link_gbps(0, 0), 0);
  Topology h8 = load_topology_file("h200x8");
  EXPECT_EQ(h8.gpu_count(), 8);
  EXPECT_NEAR(h8.direct_gbps(0, 7), 18 * 26.6, 1e-9);
}

TEST(TopologyQuery, SwitchDirectIsBoundByTheSlowerSide) {
  Topology h = load_topology_file("h200x4");
  h.gpus[1].nvlinks = 12;  // a GPU with links down
  EXPECT_NEAR(h.direct_gbps(0, 1), 12 * 26.6, 1e-9);
  EXPECT_NEAR(h.direct_gbps(1, 2), 12 * 26.6, 1e-9);
  EXPECT_NEAR(h.direct_gbps(0, 2), 18 * 26.6, 1e-9);
  EXPECT_EQ(h.nvlinks_between(1, 0), 12);
}

TEST(TopologyQuery, Ac922CrossSocketHasNoNvlink) {
  Topology m = load_topology_file("mist-ac922");
  EXPECT_EQ(m.nvlinks_between(0, 1), 3);
  EXPECT_DOUBLE_EQ(m.direct_gbps(0, 1), 75);
  EXPECT_DOUBLE_EQ(m.direct_gbps(3, 2), 75);
  // Across sockets: GPU NVLink to the CPU (75), X-bus (64), CPU NVLink (75).
  EXPECT_EQ(m.nvlinks_between(1, 2), 0);
  EXPECT_DOUBLE_EQ(m.direct_gbps(1, 2), 64);
  EXPECT_DOUBLE_EQ(m.direct_gbps(0, 3), 64);
  EXPECT_EQ(m.gpu(0).host_link, HostLinkKind::NVLink);
  EXPECT_EQ(m.gpu(0).host_nvlinks, 3);
  EXPECT_DOUBLE_EQ(m.host_link_gbps(0), 75);
  EXPECT_DOUBLE_EQ(m.socket_link_gbps(1, 0), 64);
  EXPECT_EQ(m.socket_of(2).numa_node, 8);
  EXPECT_DOUBLE_EQ(m.nvlink_egress_gbps(0), 75) << "GPU-GPU NVLink only, not the CPU links";
}

TEST(TopologyQuery, PciePeerWithoutNvlink) {
  Topology t = load_topology_file("narval-a100x4");
  t.gpu_links.clear();
  for (GpuInfo& g : t.gpus) g.nvlinks = 0;
  t.validate();
  EXPECT_DOUBLE_EQ(t.direct_gbps(0, 1), 31.5);
  EXPECT_DOUBLE_EQ(t.direct_gbps(0, 2), 31.5);  // xGMI (96) is faster than PCIe
  t.gpus[2].host_gbps = 15.75;
  EXPECT_DOUBLE_EQ(t.direct_gbps(0, 2), 15.75) << "the slower host link";
  t.peer_access[0][2] = t.peer_access[2][0] = 0;
  EXPECT_EQ(t.direct_gbps(0, 2), 0);
  EXPECT_FALSE(t.can_access_peer(2, 0));
}

TEST(TopologyQuery, BadDeviceIdsNameTheRange) {
  Topology h = load_topology_file("h200x4");
  for (int bad : {-1, 4, 100}) {
    try {
      h.gpu(bad);
      FAIL() << bad;
    } catch (const Error& e) {
      EXPECT_EQ(e.status(), GPUSTRIPE_ERR_INVALID_DEVICE);
      EXPECT_NE(std::string(e.what()).find("0-3"), std::string::npos) << e.what();
    }
    EXPECT_THROW(h.direct_gbps(0, bad), Error);
    EXPECT_THROW(h.can_access_peer(bad, 0), Error);
  }
  try {
    h.direct_gbps(2, 2);
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.status(), GPUSTRIPE_ERR_INVALID_ARGUMENT);
  }
  EXPECT_THROW(h.socket_link_gbps(0, 5), Error);
}

TEST(TopologyQuery, FingerprintFollowsHardwareNotNames) {
  Topology a = load_topology_file("h200x4");
  Topology b = a;
  b.name = "renamed";
  b.description = "other words";
  b.origin = "elsewhere";
  EXPECT_EQ(a.fingerprint(), b.fingerprint());
  b.gpus[2].uuid = "GPU-other";
  EXPECT_NE(a.fingerprint(), b.fingerprint());
  EXPECT_NE(a.fingerprint(), load_topology_file("h200x8").fingerprint());
  EXPECT_NE(load_topology_file("beluga-v100x4").fingerprint(), load_topology_file("mist-ac922").fingerprint());
  EXPECT_EQ(a.fingerprint().rfind("4xNVIDIA-H200-", 0), 0u) << a.fingerprint();
}

TEST(TopologyQuery, ValidateNamesTheInconsistency) {
  Topology t = load_topology_file("beluga-v100x4");
  t.gpu_links.push_back({0, 1, 1, 25});
  try {
    t.validate();
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.status(), GPUSTRIPE_ERR_TOPOLOGY);
    EXPECT_NE(std::string(e.what()).find("gpu_links[6]: GPUs 0 and 1 are already linked by gpu_links[0]"),
              std::string::npos)
        << e.what();
  }
  t = load_topology_file("h200x4");
  t.gpu_links.push_back({0, 1, 2, 25});
  ASSERT_TRUE(t.find_issue());
  EXPECT_EQ(t.find_issue()->path, "gpu_links[0]");
  t = load_topology_file("mist-ac922");
  t.socket_links.clear();
  ASSERT_TRUE(t.find_issue());
  EXPECT_EQ(t.find_issue()->path, "socket_links");
}

TEST(TopologyQuery, SummaryShowsTheNode) {
  std::string s = load_topology_file("mist-ac922").summary();
  for (const char* want : {"Tesla V100-SXM2-32GB", "xbus", "64.0", "3 NVLink to CPU", "socket 1  NUMA 8"})
    EXPECT_NE(s.find(want), std::string::npos) << want << " not in:\n" << s;
  s = load_topology_file("h200x4").summary();
  for (const char* want : {"PCIe Gen5 x16", "18 x 26.6", "into NVSwitch", "478.8"})
    EXPECT_NE(s.find(want), std::string::npos) << want << " not in:\n" << s;
}

TEST(TopologyQuery, PcieNominalRates) {
  EXPECT_NEAR(pcie_gbps(3, 16), 15.75, 0.01);
  EXPECT_NEAR(pcie_gbps(4, 16), 31.5, 0.02);
  EXPECT_NEAR(pcie_gbps(5, 16), 63.0, 0.02);
  EXPECT_NEAR(pcie_gbps(2, 8), 4.0, 1e-9);
  EXPECT_EQ(pcie_gbps(0, 16), 0);
}

TEST(TopologyQuery, NodeTopologyHonoursGpustripeTopology) {
  ScopedEnv env("GPUSTRIPE_TOPOLOGY", "mist-ac922");
  bool emulated = false;
  Topology t = node_topology(&emulated);
  EXPECT_TRUE(emulated);
  EXPECT_EQ(t.gpus[0].name, "Tesla V100-SXM2-32GB");
}

TEST(TopologyQuery, NodeTopologyFallsBackToTheDefaultWithoutGpu) {
  if (cuda_device_count() > 0) GTEST_SKIP() << "a GPU is visible: node_topology() detects it";
  ScopedEnv env("GPUSTRIPE_TOPOLOGY", nullptr);
  bool emulated = false;
  Topology t = node_topology(&emulated);
  EXPECT_TRUE(emulated);
  EXPECT_EQ(t.to_json(), load_topology_file(kDefaultTopology).to_json());
}
