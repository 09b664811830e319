// detect_topology() on a real node (skipped without a GPU).
#include <gtest/gtest.h>

#include <set>

#include "test_util.hpp"
#include "topology/topology.hpp"

#ifdef GPUSTRIPE_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

using namespace gpustripe;

TEST(TopologyGpu, DetectedNodeIsSane) {
  GS_REQUIRE_GPU(1);
#ifdef GPUSTRIPE_HAVE_CUDA
  int n = 0;
  ASSERT_EQ(cudaGetDeviceCount(&n), cudaSuccess);
  Topology t = detect_topology();
  std::cout << t.summary();
  EXPECT_EQ(t.gpu_count(), n);
  EXPECT_EQ(t.origin, "detected");
  EXPECT_NO_THROW(t.validate());
  ASSERT_EQ(t.peer_access.size(), static_cast<size_t>(n));
  std::set<std::string> uuids;
  for (const GpuInfo& g : t.gpus) {
    EXPECT_FALSE(g.name.empty());
    EXPECT_EQ(g.uuid.rfind("GPU-", 0), 0u) << g.uuid;
    uuids.insert(g.uuid);
    EXPECT_GT(g.sm_count, 0);
    EXPECT_GT(g.memory_bytes, 0u);
    EXPECT_GT(g.copy_engines, 0);
    EXPECT_FALSE(g.pci_bus_id.empty());
    EXPECT_EQ(t.peer_access[size_t(g.index)].size(), static_cast<size_t>(n));
  }
  EXPECT_EQ(uuids.size(), static_cast<size_t>(n));
  // The detected node writes a file that loads back to the same hardware.
  Topology back = load_topology_text(t.to_json(), "detected.json");
  EXPECT_EQ(back.fingerprint(), t.fingerprint());
  // The H200 nodes we measured: 18 NVLinks per GPU through NVSwitch (where the node has several
  // GPUs: a machine of one H200 shows none), PCIe Gen5 x16, all peers.
  if (t.gpus[0].name.find("H200") != std::string::npos) {
    for (const GpuInfo& g : t.gpus) {
      if (n >= 2) {
        EXPECT_EQ(g.nvlinks, 18) << "GPU " << g.index;
        EXPECT_TRUE(g.nvswitch) << "GPU " << g.index;
        EXPECT_NEAR(g.nvlink_gbps, 26.6, 0.2);
      }
      EXPECT_EQ(g.pcie_gen, 5);
      EXPECT_EQ(g.pcie_width, 16);
      EXPECT_EQ(g.copy_engines, 3);
      EXPECT_EQ(g.sm_count, 132);
    }
    for (int i = 0; i < n; ++i)
      for (int j = 0; j < n; ++j)
        if (i != j) EXPECT_TRUE(t.can_access_peer(i, j)) << i << "->" << j;
    EXPECT_FALSE(t.driver_version.empty());
  }
#endif
}
