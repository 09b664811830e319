// The engine on real GPUs (skipped without them): every ordered pair, sizes 1 B to 1 GiB
// with odd sizes and unaligned offsets, random data, destination poisoned first,
// byte-exact; forced plans through host and GPU staging; graph replays seeing new data;
// 8 threads x 8 streams at once; bad inputs. GPUSTRIPE_TEST_MAX_BYTES caps the sizes
// (compute-sanitizer runs a short subset).
#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <memory>
#include <thread>

#include "common/config.hpp"
#include "common/error.hpp"
#include "core/context.hpp"
#include "engine_test_util.hpp"
#include "test_util.hpp"

using namespace gpustripe;
using namespace engine_test;

namespace {

uint64_t max_bytes() {
  const char* v = std::getenv("GPUSTRIPE_TEST_MAX_BYTES");
  return v && *v ? parse_size(v, "GPUSTRIPE_TEST_MAX_BYTES") : (1ull << 30);
}

// Fast random bytes, never zero (splitmix64 words with every byte's low bit set).
void fill_random(uint8_t* p, size_t n, uint64_t seed) {
  uint64_t x = seed * 0x9E3779B97F4A7C15ull + 1;
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    x += 0x9E3779B97F4A7C15ull;
    uint64_t z = x;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    z |= 0x0101010101010101ull;
    std::memcpy(p + i, &z, 8);
  }
  for (; i < n; ++i) p[i] = static_cast<uint8_t>(0x5B ^ i) | 1;
}

// Per GPU: a source buffer of random bytes (and its host copy), a destination buffer,
// a stream; one pinned buffer to read results back.
class GpuNode : public ::testing::Test {
 protected:
  static constexpr size_t kPad = 4096;
  void SetUp() override {
    GS_REQUIRE_GPU(2);
    ctx_ = std::make_unique<Context>();
    n_ = ctx_->device_count();
    cap_ = max_bytes() + kPad;
  }
  void TearDown() override {
    if (!ctx_) return;
    Backend& b = ctx_->backend();
    for (auto& d : devs_) {
      b.synchronize_stream(d.stream);
      b.free_device(d.src);
      b.free_device(d.dst);
      b.destroy_stream(d.stream);
    }
    if (readback_) b.free_pinned(readback_);
    ctx_.reset();
  }
  void prepare() {
    Backend& b = ctx_->backend();
    readback_ = static_cast<uint8_t*>(b.alloc_pinned(cap_));
    devs_.resize(n_);
    for (int d = 0; d < n_; ++d) {
      devs_[d].stream = b.create_stream(d);
      devs_[d].src = static_cast<char*>(b.alloc_device(d, cap_));
      devs_[d].dst = static_cast<char*>(b.alloc_device(d, cap_));
      devs_[d].data.resize(cap_);
      fill_random(devs_[d].data.data(), cap_, 1234 + d);
      std::memcpy(readback_, devs_[d].data.data(), cap_);
      b.copy_async(devs_[d].src, d, readback_, kHostDevice, cap_, devs_[d].stream);
      b.synchronize_stream(devs_[d].stream);
    }
  }
  // Poisons dst, copies n bytes s -> d at the offsets with `copy`, checks every byte and the
  // poisoned bytes around the range.
  template <class Copy>
  void check(int s, int d, size_t n, size_t so, size_t dof, Copy&& copy) {
    Backend& b = ctx_->backend();
    const size_t span = std::min(cap_, n + dof + 64);
    // A memset runs on a stream of the memory's own GPU: poison, then copy, then read back.
    b.memset_async(devs_[d].dst, d, 0xEE, span, devs_[d].stream);
    b.synchronize_stream(devs_[d].stream);
    copy(devs_[d].dst + dof, devs_[s].src + so, devs_[s].stream);
    b.synchronize_stream(devs_[s].stream);
    b.copy_async(readback_, kHostDevice, devs_[d].dst, d, span, devs_[d].stream);
    b.synchronize_stream(devs_[d].stream);
    ASSERT_EQ(std::memcmp(readback_ + dof, devs_[s].data.data() + so, n), 0)
        << s << "->" << d << " " << n << " bytes (src+" << so << ", dst+" << dof << ") differ, first at "
        << first_mismatch(std::vector<uint8_t>(devs_[s].data.begin() + so, devs_[s].data.begin() + so + n),
                          readback_ + dof, n);
    for (size_t i = 0; i < dof; ++i) ASSERT_EQ(readback_[i], 0xEE) << "written before the destination";
    for (size_t i = dof + n; i < span; ++i) ASSERT_EQ(readback_[i], 0xEE) << "written past the destination";
  }

  struct Dev {
    StreamHandle stream = nullptr;
    char* src = nullptr;
    char* dst = nullptr;
    std::vector<uint8_t> data;
  };
  std::unique_ptr<Context> ctx_;
  int n_ = 0;
  size_t cap_ = 0;
  std::vector<Dev> devs_;
  uint8_t* readback_ = nullptr;
};

TEST_F(GpuNode, EveryPairEverySizeByteExact) {
  prepare();
  std::vector<size_t> sizes = {1, 3, 4095, 65537, (1u << 20) + 7, (16u << 20) + 3, (64u << 20) + 5,
                               (256u << 20) + 1, 1u << 30};
  for (int s = 0; s < n_; ++s)
    for (int d = 0; d < n_; ++d) {
      if (s == d) continue;
      for (size_t n : sizes) {
        if (n + 1000 > cap_) continue;
        // Big sizes: aligned and unaligned once each; small ones at a few offsets.
        for (auto [so, dof] : {std::pair<size_t, size_t>{0, 0}, {1, 3}, {4096 - 5, 17}}) {
          if (n >= (256u << 20) && so == 4096 - 5) continue;
          check(s, d, n, so, dof, [&](char* dst, const char* src, StreamHandle st) {
            ctx_->engine().copy_async(dst, d, src, s, n, st);
          });
          if (HasFatalFailure()) return;
        }
      }
    }
  EngineStats st = ctx_->engine().stats();
  std::printf("engine: %llu plain copies, %llu schedules, %llu graph captures, %llu launches\n",
              (unsigned long long)st.plain_copies, (unsigned long long)st.schedules,
              (unsigned long long)st.graph_captures, (unsigned long long)st.graph_launches);
  // The planner splits from about 64 MB on this node (the fork/join must pay); runs
  // capped lower (GPUSTRIPE_TEST_MAX_BYTES under compute-sanitizer) only copy plainly.
  if (cap_ >= (256u << 20))
    EXPECT_GT(st.schedules + st.graph_launches, 0u) << "no size was split: the planner never chose several paths";
}

TEST_F(GpuNode, ForcedPlansThroughHostAndGpuStaging) {
  GS_REQUIRE_GPU(3);
  prepare();
  const size_t n = std::min<size_t>((48u << 20) + 11, cap_ - 1000);
  const std::vector<Plan> plans = {
      make_plan(0, 1, n, {{PathKind::Direct, -1, 0.85, 1}, {PathKind::HostStaged, 0, 0.15, 8}}),
      make_plan(1, 0, n, {{PathKind::Direct, -1, 0.5, 3}, {PathKind::GpuStaged, 2, 0.3, 6}, {PathKind::HostStaged, 0, 0.2, 5}}),
      make_plan(2, 0, n, {{PathKind::HostStaged, 0, 1.0, 16}}),
      make_plan(0, 2, n, {{PathKind::GpuStaged, 1, 1.0, 12}}),
      // Tapered chunks (small first and last chunks, odd size: an unaligned last chunk).
      make_plan(0, 1, n, {{PathKind::Direct, -1, 0.88, 1}, {PathKind::HostStaged, 0, 0.12, 9, 4, 2}}),
      make_plan(2, 1, n, {{PathKind::Direct, -1, 0.6, 1}, {PathKind::GpuStaged, 0, 0.25, 7, 3}, {PathKind::HostStaged, 0, 0.15, 6, 0, 3}}),
  };
  // Graph mode: a transfer seen before is captured and replayed, so the last round replays
  // the second round's transfers (same pointers) while the first used other offsets.
  for (int round = 0; round < 3; ++round)
    for (const Plan& p : plans) {
      check(p.src, p.dst, n, round ? 7 : 0, round ? 9 : 0, [&](char* dst, const char* src, StreamHandle st) {
        ctx_->engine().copy_with_plan(p, dst, src, st);
      });
      if (HasFatalFailure()) return;
    }
}

TEST_F(GpuNode, ReplayedTransfersSeeNewData) {
  prepare();
  const size_t n = std::min<size_t>(256u << 20, cap_ - 1000);
  Backend& b = ctx_->backend();
  for (int round = 0; round < 4; ++round) {
    // New source bytes each round, same pointers and size: a replayed graph must copy them.
    fill_random(devs_[0].data.data(), n, 777 + round);
    std::memcpy(readback_, devs_[0].data.data(), n);
    b.copy_async(devs_[0].src, 0, readback_, kHostDevice, n, devs_[0].stream);
    b.synchronize_stream(devs_[0].stream);
    check(0, 1, n, 0, 0, [&](char* dst, const char* src, StreamHandle st) {
      ctx_->engine().copy_async(dst, 1, src, 0, n, st);
    });
    if (HasFatalFailure()) return;
  }
  // Enqueued the first time, captured the second, replayed after (when the plan splits).
  EngineStats st = ctx_->engine().stats();
  if (ctx_->engine().uses_graphs() && st.schedules + st.graph_launches > 0) EXPECT_EQ(st.graph_launches, 3u);
}

TEST_F(GpuNode, EightThreadsEightStreamsOverlapping) {
  Backend& b = ctx_->backend();
  constexpr int kThreads = 8, kStreams = 8, kRounds = 3;
  const size_t base = std::min<size_t>(24u << 20, max_bytes());
  std::atomic<int> failures{0};
  std::atomic<int> errors{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      try {
        // Threads t and t + n share a pair; pairs of different t % n differ.
        const int s = t % n_, d = (s + 1) % n_;
        std::vector<StreamHandle> streams;
        std::vector<char*> srcs, dsts;
        std::vector<size_t> sizes;
        uint8_t* host = static_cast<uint8_t*>(b.alloc_pinned(base + 64 * 1024));
        StreamHandle poison = b.create_stream(d);
        for (int k = 0; k < kStreams; ++k) {
          size_t n = base - 4099 * k + t;
          streams.push_back(b.create_stream(s));
          srcs.push_back(static_cast<char*>(b.alloc_device(s, n)));
          dsts.push_back(static_cast<char*>(b.alloc_device(d, n)));
          sizes.push_back(n);
          fill_random(host, n, 5000 + t * 16 + k);
          b.copy_async(srcs[k], s, host, kHostDevice, n, streams[k]);
          b.synchronize_stream(streams[k]);
          b.memset_async(dsts[k], d, 0xEE, n, poison);
          b.synchronize_stream(poison);
        }
        for (int r = 0; r < kRounds; ++r)
          for (int k = 0; k < kStreams; ++k) ctx_->engine().copy_async(dsts[k], d, srcs[k], s, sizes[k], streams[k]);
        for (int k = 0; k < kStreams; ++k) {
          b.synchronize_stream(streams[k]);
          b.copy_async(host, kHostDevice, dsts[k], d, sizes[k], poison);
          b.synchronize_stream(poison);
          std::vector<uint8_t> want(sizes[k]);
          fill_random(want.data(), sizes[k], 5000 + t * 16 + k);
          if (std::memcmp(want.data(), host, sizes[k]) != 0) ++failures;
          b.free_device(srcs[k]);
          b.free_device(dsts[k]);
          b.destroy_stream(streams[k]);
        }
        b.free_pinned(host);
        b.destroy_stream(poison);
      } catch (const std::exception& e) {
        std::fprintf(stderr, "thread %d: %s\n", t, e.what());
        ++errors;
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(errors.load(), 0);
  EXPECT_EQ(failures.load(), 0);
}

TEST_F(GpuNode, BadInputsFailClearlyAndWriteNothing) {
  Backend& b = ctx_->backend();
  const size_t n = 1 << 20;
  char* src = static_cast<char*>(b.alloc_device(0, n));
  char* dst = static_cast<char*>(b.alloc_device(1, n));
  StreamHandle s = b.create_stream(0), s1 = b.create_stream(1);
  b.memset_async(src, 0, 0x11, n, s);
  b.memset_async(dst, 1, 0xEE, n, s1);
  b.synchronize_stream(s);
  b.synchronize_stream(s1);
  std::vector<char> host(n);
  void* pinned = b.alloc_pinned(n);
  Engine& e = ctx_->engine();
  auto status_of = [&](auto&& f) {
    try {
      f();
    } catch (const Error& err) {
      return err.status();
    }
    return GPUSTRIPE_SUCCESS;
  };
  EXPECT_EQ(status_of([&] { e.copy_async(dst, 1, nullptr, 0, n, s); }), GPUSTRIPE_ERR_INVALID_POINTER);
  EXPECT_EQ(status_of([&] { e.copy_async(dst, 1, host.data(), 0, n, s); }), GPUSTRIPE_ERR_INVALID_POINTER);
  EXPECT_EQ(status_of([&] { e.copy_async(dst, 1, pinned, 0, n, s); }), GPUSTRIPE_ERR_INVALID_POINTER);
  EXPECT_EQ(status_of([&] { e.copy_async(pinned, 1, src, 0, n, s); }), GPUSTRIPE_ERR_INVALID_POINTER);
  EXPECT_EQ(status_of([&] { e.copy_async(dst, 0, src, 0, n, s); }), GPUSTRIPE_ERR_INVALID_POINTER);  // dst is GPU 1's
  EXPECT_EQ(status_of([&] { e.copy_async(dst, 1, src, 0, n + 1, s); }), GPUSTRIPE_ERR_INVALID_SIZE);
  EXPECT_EQ(status_of([&] { e.copy_async(dst, n_, src, 0, n, s); }), GPUSTRIPE_ERR_INVALID_DEVICE);
  EXPECT_EQ(status_of([&] { e.copy_async(dst, 1, src, -1, n, s); }), GPUSTRIPE_ERR_INVALID_DEVICE);
  EXPECT_EQ(status_of([&] { e.copy_async(dst, 1, src, 0, 0, s); }), GPUSTRIPE_SUCCESS);
  b.synchronize_stream(s);
  b.copy_async(pinned, kHostDevice, dst, 1, n, s1);
  b.synchronize_stream(s1);
  std::vector<uint8_t> got(static_cast<uint8_t*>(pinned), static_cast<uint8_t*>(pinned) + n);
  EXPECT_EQ(first_mismatch(std::vector<uint8_t>(n, 0xEE), got.data(), n), -1) << "a failed call wrote the destination";
  // src == dst device: a device-local copy
  char* local = static_cast<char*>(b.alloc_device(0, n));
  e.copy(local, 0, src, 0, n, s);
  b.copy_async(pinned, kHostDevice, local, 0, n, s);
  b.synchronize_stream(s);
  EXPECT_EQ(static_cast<uint8_t*>(pinned)[n - 1], 0x11);
  b.free_device(local);
  b.free_device(src);
  b.free_device(dst);
  b.free_pinned(pinned);
  b.destroy_stream(s);
  b.destroy_stream(s1);
}

}  // namespace
