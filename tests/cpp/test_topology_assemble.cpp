// The rules that turn CUDA's and NVML's answers into a Topology, fed with what the
// real nodes report (no GPU needed).
#include <gtest/gtest.h>

#include "common/error.hpp"
#include "topology/topology_assemble.hpp"

using namespace gpustripe;

namespace {

NodeReport node(int n, const char* name, int cc_major, bool all_peers) {
  NodeReport r;
  for (int i = 0; i < n; ++i) {
    GpuInfo g;
    g.index = i;
    g.name = name;
    g.uuid = "GPU-" + std::to_string(i);
    g.pci_bus_id = "0000:" + std::to_string(10 + i) + ":00.0";
    g.cc_major = cc_major;
    g.sm_count = 100;
    g.memory_bytes = 1ull << 34;
    g.copy_engines = 3;
    r.gpus.push_back(g);
  }
  r.peer_access.assign(size_t(n), std::vector<uint8_t>(size_t(n), all_peers));
  for (int i = 0; i < n; ++i) r.peer_access[size_t(i)][size_t(i)] = 0;
  r.native_atomics = r.peer_access;
  r.sysfs_numa.assign(size_t(n), 0);
  r.cpu = "test cpu";
  return r;
}

}  // namespace

TEST(TopologyAssemble, H200WithNvmlIsAnNvSwitchNode) {
  NodeReport r = node(4, "NVIDIA H200", 9, true);
  for (int i = 0; i < 4; ++i) {
    NvmlReport q;
    q.ok = true;
    q.active_links = q.switch_links = 18;
    q.gbps_per_link = 26.562;
    q.pcie_gen = 5;
    q.pcie_width = 16;
    r.nvml.push_back(q);
  }
  r.driver_version = "580.00";
  Topology t = assemble_topology(r);
  EXPECT_TRUE(t.has_nvswitch());
  EXPECT_TRUE(t.gpu_links.empty());
  EXPECT_EQ(t.gpus[3].nvlinks, 18);
  EXPECT_DOUBLE_EQ(t.gpus[3].nvlink_gbps, 26.562);
  EXPECT_NEAR(t.gpus[0].host_gbps, 63.0, 0.05);
  EXPECT_EQ(t.sockets.size(), 1u);
  EXPECT_EQ(t.name, "4x NVIDIA H200, NVSwitch (detected)");
  EXPECT_EQ(t.driver_version, "580.00");
  EXPECT_NEAR(t.direct_gbps(0, 1), 18 * 26.562, 1e-9);
  // The detected node is a valid file.
  EXPECT_EQ(load_topology_text(t.to_json(), "d.json").fingerprint(), t.fingerprint());
}

TEST(TopologyAssemble, MeshBundlesFromRemoteGpus) {
  NodeReport r = node(4, "NVIDIA A100-SXM4-40GB", 8, true);
  for (int i = 0; i < 4; ++i) {
    NvmlReport q;
    q.ok = true;
    q.active_links = 12;
    q.gbps_per_link = 25;
    q.pcie_gen = 4;
    q.pcie_width = 16;
    for (int j = 0; j < 4; ++j)
      if (j != i) q.links_to_gpu[j] = 4;
    q.numa_node = i / 2;
    r.nvml.push_back(q);
  }
  Topology t = assemble_topology(r);
  EXPECT_FALSE(t.has_nvswitch());
  EXPECT_EQ(t.gpu_links.size(), 6u);
  EXPECT_EQ(t.nvlinks_between(1, 3), 4);
  EXPECT_DOUBLE_EQ(t.direct_gbps(1, 3), 100);
  EXPECT_EQ(t.sockets.size(), 2u) << "one socket per NUMA node";
  EXPECT_EQ(t.gpus[3].socket, 1);
  EXPECT_EQ(t.socket_links.size(), 1u);
  EXPECT_EQ(t.socket_links[0].gbps, 0) << "unknown, not invented";
  EXPECT_DOUBLE_EQ(t.direct_gbps(0, 3), 25 * 4);
}

TEST(TopologyAssemble, Power9CpuLinksCarryHostTraffic) {
  NodeReport r = node(4, "Tesla V100-SXM2-32GB", 7, true);
  for (int i = 0; i < 4; ++i) {
    NvmlReport q;
    q.ok = true;
    q.active_links = 6;
    q.cpu_links = 3;
    q.links_to_gpu[i ^ 1] = 3;
    q.gbps_per_link = 25;
    q.pcie_gen = 3;
    q.pcie_width = 16;
    q.numa_node = i < 2 ? 0 : 8;
    r.nvml.push_back(q);
  }
  Topology t = assemble_topology(r);
  EXPECT_EQ(t.gpus[0].host_link, HostLinkKind::NVLink);
  EXPECT_EQ(t.gpus[0].host_nvlinks, 3);
  EXPECT_DOUBLE_EQ(t.gpus[0].host_gbps, 75);
  EXPECT_EQ(t.gpus[0].nvlinks, 3);
  EXPECT_EQ(t.gpu_links.size(), 2u);
  EXPECT_DOUBLE_EQ(t.direct_gbps(0, 1), 75);
  EXPECT_DOUBLE_EQ(t.direct_gbps(1, 2), 75) << "socket link speed unknown: bounded by the CPU links only";
  EXPECT_EQ(t.socket_of(2).numa_node, 8);
}

TEST(TopologyAssemble, WithoutNvmlHopperAllPairsIsASwitch) {
  NodeReport r = node(4, "NVIDIA H200", 9, true);
  Topology t = assemble_topology(r);
  EXPECT_TRUE(t.has_nvswitch());
  EXPECT_EQ(t.gpus[0].nvlinks, 18);
  EXPECT_DOUBLE_EQ(t.gpus[0].nvlink_gbps, 26.5625);
  EXPECT_EQ(t.gpus[0].pcie_gen, 0) << "unknown without NVML";
  EXPECT_EQ(t.gpus[0].host_gbps, 0);
  EXPECT_NE(t.description.find("NVML unavailable"), std::string::npos);
}

TEST(TopologyAssemble, WithoutNvmlAtomicsMarkNvlinkPairs) {
  NodeReport r = node(3, "Tesla V100-SXM2-16GB", 7, true);
  r.native_atomics[0][2] = r.native_atomics[2][0] = 0;  // 0-2 peers over PCIe only
  Topology t = assemble_topology(r);
  EXPECT_FALSE(t.has_nvswitch());
  EXPECT_EQ(t.nvlinks_between(0, 1), 1);
  EXPECT_EQ(t.nvlinks_between(1, 2), 1);
  EXPECT_EQ(t.nvlinks_between(0, 2), 0);
  EXPECT_DOUBLE_EQ(t.direct_gbps(0, 1), 25);
  EXPECT_EQ(t.gpus[1].nvlinks, 2);
}

TEST(TopologyAssemble, PcieOnlyNodeHasNoNvlink) {
  NodeReport r = node(2, "NVIDIA L40S", 8, false);
  for (int i = 0; i < 2; ++i) {
    NvmlReport q;
    q.ok = true;
    q.pcie_gen = 4;
    q.pcie_width = 16;
    r.nvml.push_back(q);
  }
  Topology t = assemble_topology(r);
  EXPECT_EQ(t.gpus[0].nvlinks, 0);
  EXPECT_FALSE(t.can_access_peer(0, 1));
  EXPECT_EQ(t.direct_gbps(0, 1), 0);
  EXPECT_NEAR(t.host_link_gbps(1), 31.5, 0.02);
  EXPECT_EQ(t.name, "2x NVIDIA L40S (detected)");
}

TEST(TopologyAssemble, NvmlMissingForOneGpuFallsBackForAll) {
  NodeReport r = node(2, "NVIDIA A100-SXM4-40GB", 8, true);
  NvmlReport ok;
  ok.ok = true;
  ok.active_links = 12;
  ok.gbps_per_link = 25;
  ok.links_to_gpu[1] = 12;
  ok.pcie_gen = 4;
  ok.pcie_width = 16;
  r.nvml = {ok, NvmlReport{}};
  Topology t = assemble_topology(r);  // must not produce a bundle GPU 1 cannot hold
  EXPECT_EQ(t.nvlinks_between(0, 1), 1) << "inferred from atomics";
  EXPECT_EQ(t.gpus[0].pcie_gen, 4) << "NVML's PCIe figures kept where it answered";
  EXPECT_EQ(t.gpus[1].pcie_gen, 0);
}

TEST(TopologyAssemble, NvlinkSpeedTables) {
  EXPECT_EQ(nvlink_gbps_by_version(2), 25);
  EXPECT_EQ(nvlink_gbps_by_version(4), 26.5625);
  EXPECT_EQ(nvlink_gbps_by_version(9), 0);
  EXPECT_EQ(nvlink_gbps_by_cc(8), 25);
  EXPECT_EQ(nvlink_gbps_by_cc(10), 50);
  EXPECT_EQ(nvlink_gbps_by_cc(5), 0);
}

// Seen on the 4x H200 machine: NVML answers link state and switch type but not the
// NVLink speed field; the node must still come out valid, at the generation's speed.
TEST(TopologyAssemble, MissingNvlinkSpeedFallsBackToTheGpuGeneration) {
  NodeReport r = node(4, "NVIDIA H200", 9, true);
  for (int i = 0; i < 4; ++i) {
    NvmlReport q;
    q.ok = true;
    q.active_links = q.switch_links = 18;
    q.gbps_per_link = 0;
    q.pcie_gen = 5;
    q.pcie_width = 16;
    r.nvml.push_back(q);
  }
  Topology t = assemble_topology(r);
  EXPECT_NO_THROW(t.validate());
  EXPECT_DOUBLE_EQ(t.gpus[2].nvlink_gbps, 26.5625);
  EXPECT_NEAR(t.direct_gbps(0, 3), 18 * 26.5625, 1e-9);
  EXPECT_NO_THROW(load_topology_text(t.to_json(), "detected.json"));
}
