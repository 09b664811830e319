// The context and copy C API on the default node (emulated here, CUDA on a GPU machine):
// handles, device count, copies through gpustripe_copy/_async, statuses of bad calls.
#include <gpustripe/gpustripe.h>
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "core/context_handle.hpp"
#include "engine_test_util.hpp"
#include "test_util.hpp"

using namespace gpustripe;
using namespace engine_test;

namespace {

TEST(ContextCapi, CreateQueryDestroy) {
  gpustripe_context_t ctx = nullptr;
  ASSERT_EQ(gpustripe_context_create(&ctx), GPUSTRIPE_SUCCESS) << gpustripe_last_error();
  int n = 0;
  const char* name = nullptr;
  EXPECT_EQ(gpustripe_context_device_count(ctx, &n), GPUSTRIPE_SUCCESS);
  EXPECT_EQ(gpustripe_context_backend_name(ctx, &name), GPUSTRIPE_SUCCESS);
  if (cuda_device_count() > 0) EXPECT_EQ(n, cuda_device_count());
  else EXPECT_GE(n, 2);
  EXPECT_TRUE(std::string(name) == "cuda" || std::string(name) == "emulated") << name;
  if (cuda_device_count() == 0) EXPECT_STREQ(name, "emulated");
  EXPECT_EQ(gpustripe_context_device_count(ctx, nullptr), GPUSTRIPE_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(gpustripe_last_error()).find("count"), std::string::npos) << gpustripe_last_error();
  EXPECT_EQ(gpustripe_context_device_count(nullptr, &n), GPUSTRIPE_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(gpustripe_context_create(nullptr), GPUSTRIPE_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(gpustripe_context_destroy(ctx), GPUSTRIPE_SUCCESS);
  EXPECT_EQ(gpustripe_context_destroy(nullptr), GPUSTRIPE_SUCCESS);
}

TEST(ContextCapi, EmulatedNodeIsTheDefaultTopology) {
  if (cuda_device_count() > 0) GTEST_SKIP() << "a GPU is visible: the node is detected, not emulated";
  ScopedEnv topo("GPUSTRIPE_TOPOLOGY", nullptr);
  Context ctx;
  EXPECT_TRUE(ctx.emulated());
  EXPECT_EQ(ctx.device_count(), 4);
  EXPECT_EQ(ctx.device_label(), "emulated-h200x4");
  ASSERT_NE(ctx.planner(), nullptr);
}

TEST(CopyCapi, LargeCopiesAreSplitAndByteExact) {
  GS_REQUIRE_DEVICES(2);
  gpustripe_context_t ctx = nullptr;
  ASSERT_EQ(gpustripe_context_create(&ctx), GPUSTRIPE_SUCCESS) << gpustripe_last_error();
  Context& c = context_of(ctx);
  Backend& b = c.backend();
  for (size_t n : {size_t(1), size_t(4097), size_t(1) << 20, (size_t(256) << 20) + 3}) {
    char* src = static_cast<char*>(b.alloc_device(0, n));
    char* dst = static_cast<char*>(b.alloc_device(1, n));
    StreamHandle s = b.create_stream(0);
    std::vector<uint8_t> data = pattern(n, static_cast<uint32_t>(n));
    upload(b, src, 0, data, s);
    ASSERT_EQ(gpustripe_copy_async(ctx, dst, 1, src, 0, n, s), GPUSTRIPE_SUCCESS) << gpustripe_last_error();
    b.synchronize_stream(s);
    EXPECT_EQ(first_mismatch(data, download(b, dst, 1, n, s).data(), n), -1) << n;
    // NULL stream: the default stream of the source GPU; the blocking call returns when done.
    upload(b, dst, 1, std::vector<uint8_t>(n, 0xEE), s);
    ASSERT_EQ(gpustripe_copy(ctx, dst, 1, src, 0, n, nullptr), GPUSTRIPE_SUCCESS) << gpustripe_last_error();
    EXPECT_EQ(first_mismatch(data, download(b, dst, 1, n, s).data(), n), -1) << n;
    b.destroy_stream(s);
    b.free_device(src);
    b.free_device(dst);
  }
  EXPECT_GT(c.engine().stats().schedules + c.engine().stats().graph_launches, 0u) << "256 MB was not split";
  EXPECT_EQ(gpustripe_context_destroy(ctx), GPUSTRIPE_SUCCESS);
}

TEST(CopyCapi, BadCallsReturnStatusesAndWriteNothing) {
  GS_REQUIRE_DEVICES(2);
  gpustripe_context_t ctx = nullptr;
  ASSERT_EQ(gpustripe_context_create(&ctx), GPUSTRIPE_SUCCESS) << gpustripe_last_error();
  Backend& b = context_of(ctx).backend();
  const size_t n = 8192;
  char* src = static_cast<char*>(b.alloc_device(0, n));
  char* dst = static_cast<char*>(b.alloc_device(1, n));
  StreamHandle s = b.create_stream(1);
  upload(b, dst, 1, std::vector<uint8_t>(n, 0xEE), s);
  char host[16];
  EXPECT_EQ(gpustripe_copy(nullptr, dst, 1, src, 0, n, nullptr), GPUSTRIPE_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(gpustripe_copy(ctx, dst, 1, nullptr, 0, n, nullptr), GPUSTRIPE_ERR_INVALID_POINTER);
  EXPECT_NE(std::string(gpustripe_last_error()).find("src is NULL"), std::string::npos) << gpustripe_last_error();
  EXPECT_EQ(gpustripe_copy(ctx, dst, 1, host, 0, 16, nullptr), GPUSTRIPE_ERR_INVALID_POINTER);
  EXPECT_EQ(gpustripe_copy(ctx, dst, 1, src, 0, n + 1, nullptr), GPUSTRIPE_ERR_INVALID_SIZE);
  EXPECT_EQ(gpustripe_copy(ctx, dst, 9, src, 0, n, nullptr), GPUSTRIPE_ERR_INVALID_DEVICE);
  EXPECT_EQ(gpustripe_copy_async(ctx, dst, 1, src, 9, n, nullptr), GPUSTRIPE_ERR_INVALID_DEVICE);
  EXPECT_EQ(gpustripe_copy(ctx, dst, 1, src, 0, 0, nullptr), GPUSTRIPE_SUCCESS);
  EXPECT_EQ(gpustripe_copy(ctx, nullptr, 1, nullptr, 0, 0, nullptr), GPUSTRIPE_SUCCESS);
  EXPECT_EQ(first_mismatch(std::vector<uint8_t>(n, 0xEE), download(b, dst, 1, n, s).data(), n), -1);
  b.destroy_stream(s);
  b.free_device(src);
  b.free_device(dst);
  EXPECT_EQ(gpustripe_context_destroy(ctx), GPUSTRIPE_SUCCESS);
}

}  // namespace
