#include <gtest/gtest.h>

#include <algorithm>

#include "common/config.hpp"
#include "common/error.hpp"
#include "test_util.hpp"

using namespace gpustripe;

static const SizeSetting kTestSize{"GPUSTRIPE_TEST_SIZE", "64K", "test only"};
static const ChoiceSetting kTestChoice{"GPUSTRIPE_TEST_CHOICE", "b", "test only", {"a", "b", "c"}};
static const BoolSetting kTestBool{"GPUSTRIPE_TEST_BOOL", "no", "test only"};

TEST(Config, ParseSize) {
  EXPECT_EQ(parse_size("4096", "x"), 4096u);
  EXPECT_EQ(parse_size("256M", "x"), 256ull << 20);
  EXPECT_EQ(parse_size("1G", "x"), 1ull << 30);
  EXPECT_EQ(parse_size("1.5K", "x"), 1536u);
  EXPECT_EQ(parse_size("64KB", "x"), 64u << 10);
  EXPECT_EQ(parse_size(" 2Gi ", "x"), 2ull << 30);
  for (const char* bad : {"", "-1", "abc", "12Q", "0.5"}) {
    try {
      parse_size(bad, "GPUSTRIPE_X");
      FAIL() << "accepted " << bad;
    } catch (const Error& e) {
      EXPECT_EQ(e.status(), GPUSTRIPE_ERR_CONFIG);
      EXPECT_NE(std::string(e.what()).find("GPUSTRIPE_X"), std::string::npos) << e.what();
    }
  }
}

TEST(Config, TestHooksAreKeyValueItemsOfOneSetting) {
  {
    ScopedEnv e("GPUSTRIPE_TEST", nullptr);
    EXPECT_EQ(test_hook("fake_nodes", "0"), "0");
  }
  {
    ScopedEnv e("GPUSTRIPE_TEST", " fake_nodes=2, alloc = vmm ,");
    EXPECT_EQ(test_hook("fake_nodes", "0"), "2");
    EXPECT_EQ(test_hook("alloc", "plain"), "vmm");
    EXPECT_EQ(test_hook("emu_gbps", "0"), "0") << "a key not named keeps its fallback";
  }
  {
    ScopedEnv e("GPUSTRIPE_TEST", "coll.chunk=8K,fake_nodes=2,coll.peer_kernels=no");
    const auto coll = test_hooks("coll.");
    ASSERT_EQ(coll.size(), 2u);
    EXPECT_EQ(coll[0], std::make_pair(std::string("chunk"), std::string("8K")));
    EXPECT_EQ(coll[1], std::make_pair(std::string("peer_kernels"), std::string("no")));
    EXPECT_EQ(test_hook("fake_nodes", "0"), "2");
  }
  for (const char* bad : {"fake_node=2", "fake_nodes", "alloc=vmm,jitter=3"}) {
    ScopedEnv e("GPUSTRIPE_TEST", bad);
    try {
      test_hook("alloc", "plain");
      FAIL() << "accepted " << bad;
    } catch (const Error& err) {
      EXPECT_EQ(err.status(), GPUSTRIPE_ERR_CONFIG);
      EXPECT_NE(std::string(err.what()).find("fake_nodes, alloc"), std::string::npos) << err.what();
    }
  }
}

TEST(Config, FormatSizeRoundTrips) {
  for (uint64_t v : {1ull, 1000ull, 1024ull, 3ull << 20, 1ull << 30, 12345678ull})
    EXPECT_EQ(parse_size(format_size(v), "x"), v);
  EXPECT_EQ(format_size(256ull << 20), "256M");
}

TEST(Config, SettingsReadEnvironmentAndDefaults) {
  {
    ScopedEnv e("GPUSTRIPE_TEST_SIZE", nullptr);
    EXPECT_EQ(kTestSize.get(), 64u << 10);
  }
  {
    ScopedEnv e("GPUSTRIPE_TEST_SIZE", "2M");
    EXPECT_EQ(kTestSize.get(), 2u << 20);
  }
  {
    ScopedEnv e("GPUSTRIPE_TEST_CHOICE", "C");
    EXPECT_EQ(kTestChoice.get(), "c");
  }
  {
    ScopedEnv e("GPUSTRIPE_TEST_CHOICE", "z");
    EXPECT_THROW(kTestChoice.get(), Error);
  }
  {
    ScopedEnv e("GPUSTRIPE_TEST_BOOL", "on");
    EXPECT_TRUE(kTestBool.get());
  }
  {
    ScopedEnv e("GPUSTRIPE_TEST_BOOL", "maybe");
    EXPECT_THROW(kTestBool.get(), Error);
  }
}

TEST(Config, RegistryListsEveryDeclaredSetting) {
  auto all = all_settings();
  auto has = [&](const char* n) {
    return std::any_of(all.begin(), all.end(), [&](const SettingInfo& s) { return s.name == n; });
  };
  EXPECT_TRUE(has("GPUSTRIPE_TEST_SIZE"));
  EXPECT_TRUE(has("GPUSTRIPE_LOG_LEVEL"));  // declared in the library, not the test
  EXPECT_TRUE(std::is_sorted(all.begin(), all.end(), [](auto& a, auto& b) { return a.name < b.name; }));
  for (auto& s : all) EXPECT_FALSE(s.description.empty()) << s.name;
}

TEST(Config, UnknownNamesAreListed) {
  ScopedEnv typo("GPUSTRIPE_CHUNK_MINN", "1M");   // no such setting
  ScopedEnv known("GPUSTRIPE_TEST_SIZE", "1M");   // declared above
  ScopedEnv script("GPUSTRIPE_BUILD_DIR", "/x");  // read by the scripts, not the library
  ScopedEnv mpi("GPUSTRIPE_MPI_NO_SUCH", "1");     // the MPI interposer's: not loaded in this test
  std::vector<std::string> unknown = unknown_setting_names();
  EXPECT_NE(std::find(unknown.begin(), unknown.end(), "GPUSTRIPE_CHUNK_MINN"), unknown.end());
  for (const char* meant : {"GPUSTRIPE_TEST_SIZE", "GPUSTRIPE_BUILD_DIR", "GPUSTRIPE_MPI_NO_SUCH"})
    EXPECT_EQ(std::find(unknown.begin(), unknown.end(), meant), unknown.end()) << meant;
}
