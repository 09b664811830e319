// Bad arguments that used to get through, on the default node (emulated in CI, the GPUs
// where there are some: the checks are the engine's, one for both backends): byte counts
// that wrap past 2^64 (a negative size converted to unsigned) on every plan kind, which must
// fail with ERR_INVALID_SIZE before anything is enqueued and leave the destination as it
// was; staging sizes no staged path can use, refused when the context is made; probes with
// arguments a receive refuses.
#include <gpustripe/gpustripe.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "core/context_handle.hpp"
#include "engine_test_util.hpp"
#include "test_util.hpp"

using namespace gpustripe;
using namespace engine_test;

namespace {

constexpr uint8_t kUntouched = 0xEE;

// Byte counts that wrap past 2^64 when added to an offset of `offset` (> 4095) into an
// allocation (the unchecked sum lands inside it and passed the range check), and one that is
// only far too large.
std::vector<uint64_t> wrapping_sizes(uint64_t offset) {
  return {UINT64_MAX, UINT64_MAX - 4095, UINT64_MAX - offset / 2, uint64_t{1} << 63};
}

class WrappingSizes : public ::testing::TestWithParam<const char*> {};

TEST_P(WrappingSizes, FailBeforeAnythingIsWrittenWithInvalidSize) {
  GS_REQUIRE_DEVICES(2);
  ScopedEnv plan("GPUSTRIPE_PLAN", GetParam());
  gpustripe_context_t ctx = nullptr;
  ASSERT_EQ(gpustripe_context_create(&ctx), GPUSTRIPE_SUCCESS) << gpustripe_last_error();
  if (std::strstr(GetParam(), "gpu2") && context_of(ctx).device_count() < 3) {
    gpustripe_context_destroy(ctx);
    GTEST_SKIP() << GetParam() << " stages through a third GPU; this node has fewer";
  }
  Backend& b = context_of(ctx).backend();
  const size_t n = 4 << 20, at = 4096;
  char* src = static_cast<char*>(b.alloc_device(0, n));
  char* dst = static_cast<char*>(b.alloc_device(1, n));
  StreamHandle s = b.create_stream(0);
  upload(b, src, 0, pattern(n, 5), s);
  const std::vector<uint8_t> before(n, kUntouched);
  for (uint64_t bytes : wrapping_sizes(at)) {
    upload(b, dst, 1, before, s);
    EXPECT_EQ(gpustripe_copy_async(ctx, dst + at, 1, src + at, 0, bytes, s), GPUSTRIPE_ERR_INVALID_SIZE)
        << bytes << ": " << gpustripe_last_error();
    EXPECT_EQ(gpustripe_copy(ctx, dst + at, 1, src, 0, bytes, s), GPUSTRIPE_ERR_INVALID_SIZE) << bytes;
    EXPECT_EQ(gpustripe_copy(ctx, dst, 1, src + at, 0, bytes, s), GPUSTRIPE_ERR_INVALID_SIZE) << bytes;
    b.synchronize_stream(s);
    EXPECT_EQ(first_mismatch(before, download(b, dst, 1, n, s).data(), n), -1) << "written before failing: " << bytes;
  }
  // One byte past the end, at the end of the address space of the allocation: the same.
  upload(b, dst, 1, before, s);
  EXPECT_EQ(gpustripe_copy(ctx, dst + at, 1, src + at, 0, n - at + 1, s), GPUSTRIPE_ERR_INVALID_SIZE);
  EXPECT_EQ(first_mismatch(before, download(b, dst, 1, n, s).data(), n), -1);
  // And the same copy at a valid size still goes through this plan.
  ASSERT_EQ(gpustripe_copy(ctx, dst + at, 1, src + at, 0, n - at, s), GPUSTRIPE_SUCCESS) << gpustripe_last_error();
  std::vector<uint8_t> want = pattern(n, 5);
  std::fill(want.begin(), want.begin() + at, kUntouched);
  EXPECT_EQ(first_mismatch(want, download(b, dst, 1, n, s).data(), n), -1);
  b.destroy_stream(s);
  b.free_device(src);
  b.free_device(dst);
  EXPECT_EQ(gpustripe_context_destroy(ctx), GPUSTRIPE_SUCCESS);
}

// Host-staged and GPU-staged (the plans that wrote most of the destination before the
// range error), direct, and the model's own choice.
INSTANTIATE_TEST_SUITE_P(Plans, WrappingSizes, ::testing::Values("host0:1x8", "gpu2:1x8", "direct:1x8", "model"),
                         [](const ::testing::TestParamInfo<const char*>& i) {
                           std::string s = i.param;
                           for (char& c : s)
                             if (!isalnum(static_cast<unsigned char>(c))) c = '_';
                           return s;
                         });

// Element counts whose byte count (count x element size, x ranks for the gathered buffers)
// does not fit in 64 bits: the wrapped product passed the buffer checks with a few bytes while
// the schedule ran over `count` elements. Refused, every buffer as it was.
TEST(WrappingCounts, CollectivesRefuseThemBeforeAnythingIsWritten) {
  GS_REQUIRE_DEVICES(2);
  gpustripe_context_t ctx = nullptr;
  ASSERT_EQ(gpustripe_context_create(&ctx), GPUSTRIPE_SUCCESS) << gpustripe_last_error();
  int devs[2] = {0, 1};
  gpustripe_comm_t comm = nullptr;
  ASSERT_EQ(gpustripe_comm_create(&comm, ctx, devs, 2), GPUSTRIPE_SUCCESS) << gpustripe_last_error();
  Backend& b = context_of(ctx).backend();
  const size_t n = 64 << 10;
  const std::vector<unsigned char> before(n, kUntouched);
  void* in[2];
  void* out[2];
  for (int r = 0; r < 2; ++r) {
    in[r] = b.alloc_device(r, n);
    out[r] = b.alloc_device(r, n);
    device_put(b, in[r], r, before);
    device_put(b, out[r], r, before);
  }
  // 8-byte elements: the first wraps to 8 bytes, the second to 0 bytes per rank x 2 ranks.
  for (size_t count : {(SIZE_MAX / 8) + 2, (SIZE_MAX / 16) + 1, SIZE_MAX}) {
    const auto* send = const_cast<const void* const*>(in);
    EXPECT_EQ(gpustripe_allreduce(comm, send, out, count, GPUSTRIPE_INT64, GPUSTRIPE_SUM, nullptr),
              GPUSTRIPE_ERR_INVALID_SIZE) << count << ": " << gpustripe_last_error();
    EXPECT_EQ(gpustripe_reduce(comm, send, out, count, GPUSTRIPE_INT64, GPUSTRIPE_SUM, 0, nullptr),
              GPUSTRIPE_ERR_INVALID_SIZE) << count;
    EXPECT_EQ(gpustripe_bcast(comm, out, count, GPUSTRIPE_INT64, 0, nullptr), GPUSTRIPE_ERR_INVALID_SIZE) << count;
    EXPECT_EQ(gpustripe_allgather(comm, send, out, count, GPUSTRIPE_INT64, nullptr), GPUSTRIPE_ERR_INVALID_SIZE)
        << count;
    EXPECT_EQ(gpustripe_alltoall(comm, send, out, count, GPUSTRIPE_INT64, nullptr), GPUSTRIPE_ERR_INVALID_SIZE)
        << count;
    EXPECT_EQ(gpustripe_reduce_scatter(comm, send, out, count, GPUSTRIPE_INT64, GPUSTRIPE_SUM, nullptr),
              GPUSTRIPE_ERR_INVALID_SIZE) << count;
  }
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(device_get(b, in[r], r, n), before) << "rank " << r;
    EXPECT_EQ(device_get(b, out[r], r, n), before) << "rank " << r;
    b.free_device(in[r]);
    b.free_device(out[r]);
  }
  EXPECT_EQ(gpustripe_comm_destroy(comm), GPUSTRIPE_SUCCESS);
  gpustripe_context_destroy(ctx);
}

// A one-rank job's endpoint through the C API.
class OneRankEndpoint : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string job = "reliab-" + std::to_string(getpid());
    ASSERT_EQ(gpustripe_channel_join(job.c_str(), 0, 1, &ch), GPUSTRIPE_SUCCESS) << gpustripe_last_error();
    ASSERT_EQ(gpustripe_context_create(&ctx), GPUSTRIPE_SUCCESS) << gpustripe_last_error();
    ASSERT_EQ(gpustripe_p2p_create(ctx, ch, &ep), GPUSTRIPE_SUCCESS) << gpustripe_last_error();
  }
  void TearDown() override {
    gpustripe_p2p_destroy(ep);
    gpustripe_channel_destroy(ch);
    gpustripe_context_destroy(ctx);
  }
  gpustripe_channel_t ch = nullptr;
  gpustripe_context_t ctx = nullptr;
  gpustripe_endpoint_t ep = nullptr;
};

TEST_F(OneRankEndpoint, WrappingSizesOfSendsAndReceivesAreRefused) {
  std::vector<char> host(4096, 1);
  gpustripe_request_t r = nullptr;
  EXPECT_EQ(gpustripe_p2p_isend(ep, host.data() + 16, UINT64_MAX - 8, 0, 1, 0, 0, &r), GPUSTRIPE_ERR_INVALID_SIZE);
  EXPECT_EQ(gpustripe_p2p_irecv(ep, host.data() + 16, UINT64_MAX - 8, 0, 1, 0, &r), GPUSTRIPE_ERR_INVALID_SIZE);
  EXPECT_EQ(r, nullptr);
}

TEST_F(OneRankEndpoint, ProbeRefusesWhatAReceiveRefuses) {
  int found = 7;
  gpustripe_p2p_status_t st{};
  for (int src : {1, 5, -2, 1 << 20}) {
    EXPECT_EQ(gpustripe_p2p_iprobe(ep, src, 0, 0, &found, &st), GPUSTRIPE_ERR_INVALID_ARGUMENT) << src;
    int v = 0;
    gpustripe_request_t r = nullptr;
    EXPECT_EQ(gpustripe_p2p_irecv(ep, &v, sizeof v, src, 0, 0, &r), GPUSTRIPE_ERR_INVALID_ARGUMENT) << src;
  }
  for (int tag : {-2, -100}) {
    EXPECT_EQ(gpustripe_p2p_iprobe(ep, 0, tag, 0, &found, &st), GPUSTRIPE_ERR_INVALID_ARGUMENT) << tag;
    EXPECT_NE(std::string(gpustripe_last_error()).find("tag"), std::string::npos) << gpustripe_last_error();
  }
  // The values a receive takes are still fine: nothing has arrived.
  EXPECT_EQ(gpustripe_p2p_iprobe(ep, GPUSTRIPE_ANY_SOURCE, GPUSTRIPE_ANY_TAG, 0, &found, &st), GPUSTRIPE_SUCCESS);
  EXPECT_EQ(found, 0);
  EXPECT_EQ(gpustripe_p2p_iprobe(ep, 0, 3, 0, &found, &st), GPUSTRIPE_SUCCESS);
}

// A staging area no staged path can use is a configuration error when the context is made,
// not an internal error at the first staged copy.
TEST(BadArguments, StagingSizesTooSmallForAPieceFailAtContextCreation) {
  for (const char* var : {"GPUSTRIPE_HOST_STAGING", "GPUSTRIPE_GPU_STAGING"})
    for (const char* value : {"0", "1", "4095"}) {
      ScopedEnv e(var, value);
      gpustripe_context_t ctx = nullptr;
      EXPECT_EQ(gpustripe_context_create(&ctx), GPUSTRIPE_ERR_CONFIG) << var << "=" << value;
      EXPECT_NE(std::string(gpustripe_last_error()).find(var), std::string::npos) << gpustripe_last_error();
      if (ctx) gpustripe_context_destroy(ctx);
    }
}

// The smallest accepted areas carry a staged copy through every plan that stages.
TEST(BadArguments, SmallestStagingSizesCarryStagedCopies) {
  GS_REQUIRE_DEVICES(2);
  ScopedEnv host("GPUSTRIPE_HOST_STAGING", "4096");
  ScopedEnv gpu("GPUSTRIPE_GPU_STAGING", "4096");
  for (const char* p : {"host0:1x8", "gpu2:1x8", "direct:0.5,host0:0.25x4,gpu2:0.25x4"}) {
    ScopedEnv plan("GPUSTRIPE_PLAN", p);
    gpustripe_context_t ctx = nullptr;
    ASSERT_EQ(gpustripe_context_create(&ctx), GPUSTRIPE_SUCCESS) << gpustripe_last_error();
    if (std::strstr(p, "gpu2") && context_of(ctx).device_count() < 3) {  // a node of fewer GPUs
      gpustripe_context_destroy(ctx);
      continue;
    }
    Backend& b = context_of(ctx).backend();
    const size_t n = (1 << 20) + 3;
    char* src = static_cast<char*>(b.alloc_device(0, n));
    char* dst = static_cast<char*>(b.alloc_device(1, n));
    StreamHandle s = b.create_stream(0);
    upload(b, src, 0, pattern(n, 11), s);
    EXPECT_EQ(gpustripe_copy(ctx, dst, 1, src, 0, n, s), GPUSTRIPE_SUCCESS) << p << ": " << gpustripe_last_error();
    EXPECT_EQ(first_mismatch(pattern(n, 11), download(b, dst, 1, n, s).data(), n), -1) << p;
    b.destroy_stream(s);
    b.free_device(src);
    b.free_device(dst);
    gpustripe_context_destroy(ctx);
  }
}

}  // namespace
