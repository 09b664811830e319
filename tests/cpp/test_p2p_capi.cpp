// The C API of the channel and p2p layers (ipc.h, p2p.h) across forked processes:
// join by name, send/receive/probe, truncation as a status, bad arguments.
#include <gpustripe/gpustripe.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <string>
#include <vector>

#include "test_ipc_ranks.hpp"
#include "test_util.hpp"

namespace {

void ok(gpustripe_status_t s, const char* what) {
  if (s != GPUSTRIPE_SUCCESS)
    throw std::runtime_error(std::string(what) + ": " + gpustripe_status_string(s) + ": " + gpustripe_last_error());
}

}  // namespace

TEST(P2pCapi, JoinSendReceiveProbeTruncate) {
  std::string job = "capi-test-" + std::to_string(getpid());
  EXPECT_RANKS_OK(run_processes(2, [&](int rank) {
    gpustripe_context_t ctx = nullptr;
    ok(gpustripe_context_create(&ctx), "context");
    gpustripe_channel_t ch = nullptr;
    ok(gpustripe_channel_join(job.c_str(), rank, 2, &ch), "join");
    int r = -1, n = -1;
    ok(gpustripe_channel_rank(ch, &r, &n), "rank");
    RANK_CHECK(r == rank && n == 2);
    gpustripe_endpoint_t ep = nullptr;
    ok(gpustripe_p2p_create(ctx, ch, &ep), "endpoint");
    std::vector<char> big(200000);
    if (rank == 0) {
      for (size_t i = 0; i < big.size(); ++i) big[i] = static_cast<char>(i * 7);
      gpustripe_request_t a, b;
      ok(gpustripe_p2p_isend(ep, big.data(), big.size(), 1, 4, 9, 0, &a), "isend");
      ok(gpustripe_p2p_isend(ep, big.data(), 100, 1, 5, 9, 1, &b), "issend");
      ok(gpustripe_p2p_wait(ep, &a, nullptr), "wait a");
      ok(gpustripe_p2p_wait(ep, &b, nullptr), "wait b");
      RANK_CHECK(a == nullptr && b == nullptr);
    } else {
      int found = 0;
      gpustripe_p2p_status_t st{};
      while (!found) ok(gpustripe_p2p_iprobe(ep, GPUSTRIPE_ANY_SOURCE, GPUSTRIPE_ANY_TAG, 9, &found, &st), "iprobe");
      RANK_CHECK(st.source == 0 && st.tag == 4 && st.message_bytes == big.size());
      gpustripe_request_t a;
      ok(gpustripe_p2p_irecv(ep, big.data(), big.size(), 0, 4, 9, &a), "irecv");
      int done = 0;
      while (!done) ok(gpustripe_p2p_test(ep, &a, &done, &st), "test");
      RANK_CHECK(st.bytes == big.size() && big[199999] == static_cast<char>(199999 * 7));
      char small[10];
      gpustripe_request_t b;
      ok(gpustripe_p2p_irecv(ep, small, sizeof small, 0, 5, 9, &b), "irecv small");
      RANK_CHECK(gpustripe_p2p_wait(ep, &b, &st) == GPUSTRIPE_ERR_TRUNCATE);
      RANK_CHECK(st.bytes == sizeof small && st.message_bytes == 100 && b == nullptr);
      RANK_CHECK(std::strstr(gpustripe_last_error(), "truncated") != nullptr);
    }
    ok(gpustripe_p2p_destroy(ep), "destroy endpoint");
    ok(gpustripe_channel_destroy(ch), "leave");
    ok(gpustripe_context_destroy(ctx), "destroy context");
  }));
}

TEST(P2pCapi, BadArgumentsAreRejected) {
  gpustripe_channel_t ch = reinterpret_cast<gpustripe_channel_t>(1);
  EXPECT_EQ(gpustripe_channel_join("a/b", 0, 1, &ch), GPUSTRIPE_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(ch, nullptr);
  EXPECT_EQ(gpustripe_channel_join("x", 2, 2, &ch), GPUSTRIPE_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(gpustripe_channel_join(nullptr, 0, 1, &ch), GPUSTRIPE_ERR_INVALID_ARGUMENT);
  gpustripe_endpoint_t ep = nullptr;
  EXPECT_EQ(gpustripe_p2p_create(nullptr, nullptr, &ep), GPUSTRIPE_ERR_INVALID_ARGUMENT);
  gpustripe_request_t r = nullptr;
  EXPECT_EQ(gpustripe_p2p_isend(nullptr, "x", 1, 0, 0, 0, 0, &r), GPUSTRIPE_ERR_INVALID_ARGUMENT);
  int done = 0;
  EXPECT_EQ(gpustripe_p2p_test(nullptr, &r, &done, nullptr), GPUSTRIPE_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(gpustripe_p2p_destroy(nullptr), GPUSTRIPE_SUCCESS);
  EXPECT_EQ(gpustripe_channel_destroy(nullptr), GPUSTRIPE_SUCCESS);
}

TEST(P2pCapi, OneRankJobSendsToItself) {
  gpustripe_channel_t ch = nullptr;
  std::string job = "capi-self-" + std::to_string(getpid());
  ASSERT_EQ(gpustripe_channel_join(job.c_str(), 0, 1, &ch), GPUSTRIPE_SUCCESS) << gpustripe_last_error();
  gpustripe_context_t ctx = nullptr;
  ASSERT_EQ(gpustripe_context_create(&ctx), GPUSTRIPE_SUCCESS) << gpustripe_last_error();
  gpustripe_endpoint_t ep = nullptr;
  ASSERT_EQ(gpustripe_p2p_create(ctx, ch, &ep), GPUSTRIPE_SUCCESS);
  int v = 7, w = 0;
  gpustripe_request_t s, r;
  ASSERT_EQ(gpustripe_p2p_isend(ep, &v, sizeof v, 0, 1, 0, 0, &s), GPUSTRIPE_SUCCESS);
  ASSERT_EQ(gpustripe_p2p_irecv(ep, &w, sizeof w, 0, 1, 0, &r), GPUSTRIPE_SUCCESS);
  EXPECT_EQ(gpustripe_p2p_wait(ep, &r, nullptr), GPUSTRIPE_SUCCESS);
  EXPECT_EQ(gpustripe_p2p_wait(ep, &s, nullptr), GPUSTRIPE_SUCCESS);
  EXPECT_EQ(w, 7);
  gpustripe_p2p_destroy(ep);
  gpustripe_channel_destroy(ch);
  gpustripe_context_destroy(ctx);
}
