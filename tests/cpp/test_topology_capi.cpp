// The topology C API: results and error paths (NULL handles, bad devices, bad files).
#include <gpustripe/gpustripe.h>
#include <gtest/gtest.h>

#include <fstream>
#include <string>
#include <vector>

#include "test_util.hpp"

namespace {
std::string last() { return gpustripe_last_error(); }
}  // namespace

TEST(TopologyCapi, LoadQueryDestroy) {
  gpustripe_topology_t t = nullptr;
  ASSERT_EQ(gpustripe_topology_load("narval-a100x4", &t), GPUSTRIPE_SUCCESS) << last();
  int n = 0;
  EXPECT_EQ(gpustripe_topology_gpu_count(t, &n), GPUSTRIPE_SUCCESS);
  EXPECT_EQ(n, 4);
  double g = 0;
  EXPECT_EQ(gpustripe_topology_direct_gbps(t, 0, 3, &g), GPUSTRIPE_SUCCESS);
  EXPECT_DOUBLE_EQ(g, 100);
  size_t needed = 0;
  EXPECT_EQ(gpustripe_topology_to_json(t, nullptr, 0, &needed), GPUSTRIPE_SUCCESS);
  ASSERT_GT(needed, 100u);
  std::vector<char> buf(needed);
  EXPECT_EQ(gpustripe_topology_to_json(t, buf.data(), buf.size(), &needed), GPUSTRIPE_SUCCESS);
  EXPECT_EQ(std::string(buf.data()).size() + 1, needed);
  EXPECT_NE(std::string(buf.data()).find("\"schema\": 1"), std::string::npos);
  // Too small: an error, the buffer untouched.
  std::vector<char> small(10, 'x');
  EXPECT_EQ(gpustripe_topology_to_json(t, small.data(), small.size(), &needed), GPUSTRIPE_ERR_INVALID_SIZE);
  EXPECT_EQ(small[0], 'x');
  EXPECT_NE(last().find("gpustripe_topology_to_json"), std::string::npos) << last();
  // The JSON loads back to the same node.
  std::string path = ::testing::TempDir() + "/capi-roundtrip.json";
  std::ofstream(path) << buf.data();
  gpustripe_topology_t back = nullptr;
  ASSERT_EQ(gpustripe_topology_load(path.c_str(), &back), GPUSTRIPE_SUCCESS) << last();
  EXPECT_EQ(gpustripe_topology_direct_gbps(back, 3, 0, &g), GPUSTRIPE_SUCCESS);
  EXPECT_DOUBLE_EQ(g, 100);
  EXPECT_EQ(gpustripe_topology_destroy(back), GPUSTRIPE_SUCCESS);
  EXPECT_EQ(gpustripe_topology_destroy(t), GPUSTRIPE_SUCCESS);
}

TEST(TopologyCapi, NullHandlesAndArguments) {
  int n = -1;
  double g = -1;
  size_t needed = 0;
  EXPECT_EQ(gpustripe_topology_gpu_count(nullptr, &n), GPUSTRIPE_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(last(), "gpustripe_topology_gpu_count: topology handle is NULL");
  EXPECT_EQ(n, -1);
  EXPECT_EQ(gpustripe_topology_direct_gbps(nullptr, 0, 1, &g), GPUSTRIPE_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(gpustripe_topology_to_json(nullptr, nullptr, 0, &needed), GPUSTRIPE_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(gpustripe_topology_load(nullptr, nullptr), GPUSTRIPE_ERR_INVALID_ARGUMENT);
  EXPECT_NE(last().find("name_or_path"), std::string::npos) << last();
  EXPECT_EQ(gpustripe_topology_load("h200x4", nullptr), GPUSTRIPE_ERR_INVALID_ARGUMENT);
  EXPECT_NE(last().find("'topo' is NULL"), std::string::npos) << last();
  EXPECT_EQ(gpustripe_topology_detect(nullptr), GPUSTRIPE_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(gpustripe_topology_destroy(nullptr), GPUSTRIPE_SUCCESS);

  gpustripe_topology_t t = nullptr;
  ASSERT_EQ(gpustripe_topology_load("h200x4", &t), GPUSTRIPE_SUCCESS);
  EXPECT_EQ(gpustripe_topology_gpu_count(t, nullptr), GPUSTRIPE_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(gpustripe_topology_direct_gbps(t, 0, 1, nullptr), GPUSTRIPE_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(gpustripe_topology_to_json(t, nullptr, 0, nullptr), GPUSTRIPE_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(gpustripe_topology_to_json(t, nullptr, 100, &needed), GPUSTRIPE_ERR_INVALID_ARGUMENT);
  gpustripe_topology_destroy(t);
}

TEST(TopologyCapi, BadDeviceIds) {
  gpustripe_topology_t t = nullptr;
  ASSERT_EQ(gpustripe_topology_load("h200x4", &t), GPUSTRIPE_SUCCESS);
  double g = -1;
  EXPECT_EQ(gpustripe_topology_direct_gbps(t, 0, 4, &g), GPUSTRIPE_ERR_INVALID_DEVICE);
  EXPECT_EQ(last(), "gpustripe_topology_direct_gbps: GPU 4 does not exist: valid GPUs are 0-3 on '4x H200 SXM 141GB, NVSwitch'");
  EXPECT_EQ(g, -1) << "outputs unchanged on failure";
  EXPECT_EQ(gpustripe_topology_direct_gbps(t, -1, 0, &g), GPUSTRIPE_ERR_INVALID_DEVICE);
  EXPECT_EQ(gpustripe_topology_direct_gbps(t, 1, 1, &g), GPUSTRIPE_ERR_INVALID_ARGUMENT);
  gpustripe_topology_destroy(t);
}

TEST(TopologyCapi, BadFiles) {
  gpustripe_topology_t t = reinterpret_cast<gpustripe_topology_t>(0x1);
  EXPECT_EQ(gpustripe_topology_load("/nonexistent/topo.json", &t), GPUSTRIPE_ERR_IO);
  EXPECT_EQ(t, reinterpret_cast<gpustripe_topology_t>(0x1)) << "output unchanged on failure";
  EXPECT_NE(last().find("/nonexistent/topo.json"), std::string::npos) << last();
  EXPECT_EQ(gpustripe_topology_load("not-a-shipped-node", &t), GPUSTRIPE_ERR_IO);
  std::string path = ::testing::TempDir() + "/capi-bad.json";
  std::ofstream(path) << "{\n  \"schema\": 1,\n  \"name\": 7\n}\n";
  EXPECT_EQ(gpustripe_topology_load(path.c_str(), &t), GPUSTRIPE_ERR_TOPOLOGY);
  EXPECT_EQ(last(), "gpustripe_topology_load: " + path + ":3: name: expected a string, got 7");
}

TEST(TopologyCapi, DetectWithoutGpuIsNotSupported) {
  if (gpustripe::cuda_device_count() > 0) GTEST_SKIP() << "a GPU is visible (covered by the GPU test)";
  gpustripe_topology_t t = nullptr;
  EXPECT_EQ(gpustripe_topology_detect(&t), GPUSTRIPE_ERR_NOT_SUPPORTED);
  EXPECT_EQ(t, nullptr);
  EXPECT_NE(last().find("gpustripe_topology_detect"), std::string::npos);
}
