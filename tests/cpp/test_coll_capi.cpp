// The collectives' C API on the default node (emulated here, CUDA on a GPU machine):
// handles, a collective through each entry point, statuses and messages of bad calls.
#include <gpustripe/gpustripe.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "core/context_handle.hpp"
#include "test_util.hpp"

using namespace gpustripe;

namespace {

class CollCapi : public ::testing::Test {
 protected:
  void SetUp() override {
    GS_REQUIRE_DEVICES(2);
    ASSERT_EQ(gpustripe_context_create(&ctx), GPUSTRIPE_SUCCESS) << gpustripe_last_error();
    int devs[2] = {0, 1};
    ASSERT_EQ(gpustripe_comm_create(&comm, ctx, devs, 2), GPUSTRIPE_SUCCESS) << gpustripe_last_error();
    Backend& b = context_of(ctx).backend();
    for (int r = 0; r < 2; ++r) {
      buf[r] = b.alloc_device(r, kN * sizeof(int64_t) * 2);
      out[r] = b.alloc_device(r, kN * sizeof(int64_t) * 2);
    }
  }
  void TearDown() override {
    if (!comm) return;  // skipped
    EXPECT_EQ(gpustripe_comm_destroy(comm), GPUSTRIPE_SUCCESS);
    Backend& b = context_of(ctx).backend();
    for (int r = 0; r < 2; ++r) {
      b.free_device(buf[r]);
      b.free_device(out[r]);
    }
    gpustripe_context_destroy(ctx);
  }
  void put(int r, void* p, const std::vector<int64_t>& v) {
    Backend& b = context_of(ctx).backend();
    StreamHandle s = context_of(ctx).default_stream(r);
    b.copy_async(p, r, v.data(), kHostDevice, v.size() * 8, s);
    b.synchronize_stream(s);
  }
  std::vector<int64_t> get(int r, const void* p, size_t n) {
    std::vector<int64_t> v(n);
    Backend& b = context_of(ctx).backend();
    StreamHandle s = context_of(ctx).default_stream(r);
    b.copy_async(v.data(), kHostDevice, p, r, n * 8, s);
    b.synchronize_stream(s);
    return v;
  }
  static constexpr size_t kN = 1001;
  gpustripe_context_t ctx = nullptr;
  gpustripe_comm_t comm = nullptr;
  void* buf[2] = {};
  void* out[2] = {};
};

TEST_F(CollCapi, QueriesAndEveryCollective) {
  int n = 0, dev = -1;
  EXPECT_EQ(gpustripe_comm_size(comm, &n), GPUSTRIPE_SUCCESS);
  EXPECT_EQ(n, 2);
  EXPECT_EQ(gpustripe_comm_device(comm, 1, &dev), GPUSTRIPE_SUCCESS);
  EXPECT_EQ(dev, 1);
  EXPECT_EQ(gpustripe_dtype_size(GPUSTRIPE_BFLOAT16), 2u);
  EXPECT_EQ(gpustripe_dtype_size(static_cast<gpustripe_dtype_t>(42)), 0u);

  std::vector<int64_t> a(kN), b(kN);
  for (size_t i = 0; i < kN; ++i) {
    a[i] = static_cast<int64_t>(i);
    b[i] = 3 * static_cast<int64_t>(i) - 7;
  }
  put(0, buf[0], a);
  put(1, buf[1], b);
  const void* send[2] = {buf[0], buf[1]};
  ASSERT_EQ(gpustripe_allreduce(comm, send, out, kN, GPUSTRIPE_INT64, GPUSTRIPE_MAX, nullptr), GPUSTRIPE_SUCCESS)
      << gpustripe_last_error();
  for (int r = 0; r < 2; ++r) {
    auto got = get(r, out[r], kN);
    for (size_t i = 0; i < kN; ++i) ASSERT_EQ(got[i], std::max(a[i], b[i])) << i;
  }
  EXPECT_NE(std::string(gpustripe_comm_last_schedule(comm)).find("allreduce"), std::string::npos);

  ASSERT_EQ(gpustripe_bcast(comm, buf, kN, GPUSTRIPE_INT64, 1, nullptr), GPUSTRIPE_SUCCESS);
  EXPECT_EQ(get(0, buf[0], kN), b);
  ASSERT_EQ(gpustripe_reduce(comm, send, out, kN, GPUSTRIPE_INT64, GPUSTRIPE_SUM, 0, nullptr), GPUSTRIPE_SUCCESS);
  auto sum = get(0, out[0], kN);
  for (size_t i = 0; i < kN; ++i) ASSERT_EQ(sum[i], 2 * b[i]);
  ASSERT_EQ(gpustripe_allgather(comm, send, out, kN, GPUSTRIPE_INT64, nullptr), GPUSTRIPE_SUCCESS);
  auto all = get(1, out[1], 2 * kN);
  EXPECT_EQ(std::vector<int64_t>(all.begin() + kN, all.end()), b);
  ASSERT_EQ(gpustripe_alltoall(comm, send, out, kN / 2, GPUSTRIPE_INT64, nullptr), GPUSTRIPE_SUCCESS);
  ASSERT_EQ(gpustripe_reduce_scatter(comm, send, out, kN / 2, GPUSTRIPE_INT64, GPUSTRIPE_SUM, nullptr),
            GPUSTRIPE_SUCCESS);
  auto rs = get(1, out[1], kN / 2);
  for (size_t i = 0; i < kN / 2; ++i) ASSERT_EQ(rs[i], 2 * b[kN / 2 + i]);
  EXPECT_EQ(gpustripe_comm_synchronize(comm), GPUSTRIPE_SUCCESS);
}

TEST_F(CollCapi, BadCallsReturnStatusAndMessage) {
  const void* send[2] = {buf[0], buf[1]};
  EXPECT_EQ(gpustripe_allreduce(nullptr, send, out, 4, GPUSTRIPE_FLOAT32, GPUSTRIPE_SUM, nullptr),
            GPUSTRIPE_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(gpustripe_allreduce(comm, nullptr, out, 4, GPUSTRIPE_FLOAT32, GPUSTRIPE_SUM, nullptr),
            GPUSTRIPE_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(gpustripe_last_error()).find("sendbufs"), std::string::npos) << gpustripe_last_error();
  EXPECT_EQ(gpustripe_allreduce(comm, send, out, 4, GPUSTRIPE_DTYPE_COUNT, GPUSTRIPE_SUM, nullptr),
            GPUSTRIPE_ERR_INVALID_TYPE);
  EXPECT_NE(std::string(gpustripe_last_error()).find("gpustripe_allreduce"), std::string::npos);
  EXPECT_EQ(gpustripe_bcast(comm, buf, 4, GPUSTRIPE_FLOAT32, -1, nullptr), GPUSTRIPE_ERR_INVALID_ARGUMENT);
  const void* swapped[2] = {buf[1], buf[0]};
  EXPECT_EQ(gpustripe_allgather(comm, swapped, out, 4, GPUSTRIPE_FLOAT32, nullptr), GPUSTRIPE_ERR_INVALID_POINTER);
  gpustripe_comm_t bad = reinterpret_cast<gpustripe_comm_t>(1);
  int devs[2] = {0, 0};
  EXPECT_EQ(gpustripe_comm_create(&bad, ctx, devs, 2), GPUSTRIPE_ERR_INVALID_DEVICE);
  EXPECT_EQ(bad, nullptr);
  EXPECT_EQ(gpustripe_comm_create(&bad, ctx, devs, 0), GPUSTRIPE_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(gpustripe_comm_create(&bad, nullptr, devs, 1), GPUSTRIPE_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(gpustripe_comm_destroy(nullptr), GPUSTRIPE_SUCCESS);
  EXPECT_STREQ(gpustripe_comm_last_schedule(nullptr), "");
}

}  // namespace
