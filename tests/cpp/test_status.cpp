#include <gpustripe/gpustripe.h>
#include <gtest/gtest.h>

#include <set>
#include <thread>
#include <string>

#include "common/capi_guard.hpp"

using namespace gpustripe;

TEST(Status, EveryCodeHasADistinctName) {
  std::set<std::string> names;
  for (int s = 0; s < GPUSTRIPE_STATUS_COUNT; ++s) {
    std::string n = gpustripe_status_string(static_cast<gpustripe_status_t>(s));
    EXPECT_EQ(n.rfind("GPUSTRIPE_", 0), 0u) << s;
    names.insert(n);
  }
  EXPECT_EQ(names.size(), static_cast<size_t>(GPUSTRIPE_STATUS_COUNT));
  EXPECT_STREQ(gpustripe_status_string(static_cast<gpustripe_status_t>(999)), "unknown status");
}

TEST(Status, GuardTurnsExceptionsIntoStatusAndMessage) {
  gpustripe_clear_last_error();
  EXPECT_EQ(capi_guard("gpustripe_ok", [] {}), GPUSTRIPE_SUCCESS);
  EXPECT_STREQ(gpustripe_last_error(), "");
  Status s = capi_guard("gpustripe_fn", [] { GS_THROW(GPUSTRIPE_ERR_INVALID_DEVICE, "device %d of %d", 7, 4); });
  EXPECT_EQ(s, GPUSTRIPE_ERR_INVALID_DEVICE);
  EXPECT_STREQ(gpustripe_last_error(), "gpustripe_fn: device 7 of 4");
  EXPECT_EQ(capi_guard("f", [] { throw std::runtime_error("boom"); }), GPUSTRIPE_ERR_INTERNAL);
  EXPECT_NE(std::string(gpustripe_last_error()).find("boom"), std::string::npos);
  EXPECT_EQ(capi_guard("f", [] { throw 42; }), GPUSTRIPE_ERR_INTERNAL);
}

TEST(Status, LastErrorIsPerThread) {
  capi_guard("main_thread", [] { GS_THROW(GPUSTRIPE_ERR_IO, "x"); });
  std::string other;
  std::thread t([&] { other = gpustripe_last_error(); });
  t.join();
  EXPECT_EQ(other, "");
  EXPECT_STREQ(gpustripe_last_error(), "main_thread: x");
}

TEST(Status, Version) {
  int a = -1, b = -1, c = -1;
  EXPECT_EQ(gpustripe_version(&a, &b, &c), GPUSTRIPE_SUCCESS);
  EXPECT_EQ(a, GPUSTRIPE_VERSION_MAJOR);
  EXPECT_EQ(gpustripe_version(nullptr, nullptr, nullptr), GPUSTRIPE_SUCCESS);
}
