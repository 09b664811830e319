// The engine on the emulated backend (CI): every byte of multi-path copies, relay
// dependencies through a small staging ring, ordering on the caller's stream and between
// messages, many threads and streams at once, and bad inputs. Injected jitter makes
// work on different streams complete in any order, as on real GPUs.
#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <memory>
#include <thread>

#include "common/error.hpp"
#include "engine/engine.hpp"
#include "engine/staging.hpp"
#include "engine_test_util.hpp"
#include "test_util.hpp"

using namespace gpustripe;
using namespace engine_test;

namespace {

class EngineTest : public ::testing::Test {
 protected:
  void SetUp() override {
    topo_ = small_node(4);
    backend_ = make_emulated_backend(topo_);
    for (int d = 0; d < 4; ++d) streams_.push_back(backend_->create_stream(d));
  }
  void TearDown() override {
    engine_.reset();
    for (void* p : allocs_) backend_->free_device(p);
    for (StreamHandle s : streams_) backend_->destroy_stream(s);
  }
  Engine& engine(Planner* planner = nullptr) {
    if (!engine_) engine_ = std::make_unique<Engine>(*backend_, topo_, planner);
    return *engine_;
  }
  char* alloc(int dev, size_t n) {
    void* p = backend_->alloc_device(dev, n);
    allocs_.push_back(p);
    return static_cast<char*>(p);
  }
  // Copies `plan` (src/dst offsets into larger buffers), checks every byte and that the
  // bytes around the destination range stay poisoned.
  void check_plan_copy(const Plan& plan, size_t src_off, size_t dst_off, uint32_t seed) {
    const size_t n = plan.bytes, pad = 64;
    char* src = alloc(plan.src, n + src_off);
    char* dst = alloc(plan.dst, n + dst_off + pad);
    std::vector<uint8_t> data = pattern(n + src_off, seed);
    upload(*backend_, src, plan.src, data, streams_[plan.src]);
    upload(*backend_, dst, plan.dst, std::vector<uint8_t>(n + dst_off + pad, 0xEE), streams_[plan.dst]);
    engine().copy_with_plan(plan, dst + dst_off, src + src_off, streams_[plan.src]);
    backend_->synchronize_stream(streams_[plan.src]);
    std::vector<uint8_t> got = download(*backend_, dst, plan.dst, n + dst_off + pad, streams_[plan.dst]);
    std::vector<uint8_t> want(data.begin() + src_off, data.end());
    long long bad = first_mismatch(want, got.data() + dst_off, n);
    EXPECT_EQ(bad, -1) << plan.describe() << " " << n << " bytes: first wrong byte " << bad;
    for (size_t i = 0; i < dst_off; ++i) ASSERT_EQ(got[i], 0xEE) << "byte before the destination written";
    for (size_t i = 0; i < pad; ++i) ASSERT_EQ(got[dst_off + n + i], 0xEE) << "byte after the destination written";
  }

  ScopedEnv jitter_{"GPUSTRIPE_TEST", "emu_jitter_us=30"};
  Topology topo_;
  std::unique_ptr<Backend> backend_;
  std::vector<StreamHandle> streams_;
  std::vector<void*> allocs_;
  std::unique_ptr<Engine> engine_;
};

TEST_F(EngineTest, EveryByteOfMultiPathPlans) {
  const uint64_t sizes[] = {1, 7, 4096, 65537, 1000003, 3u << 20};
  uint32_t seed = 1;
  for (uint64_t n : sizes) {
    const std::vector<Plan> plans = {
        make_plan(0, 1, n, {{PathKind::Direct, -1, 1.0, 1}}),
        make_plan(0, 1, n, {{PathKind::Direct, -1, 0.9, 3}, {PathKind::HostStaged, 0, 0.1, 8}}),
        make_plan(2, 1, n, {{PathKind::Direct, -1, 0.5, 2}, {PathKind::GpuStaged, 3, 0.3, 5}, {PathKind::HostStaged, 0, 0.2, 7}}),
        make_plan(3, 0, n, {{PathKind::HostStaged, 0, 1.0, 16}}),
        make_plan(1, 3, n, {{PathKind::GpuStaged, 0, 0.5, 4}, {PathKind::GpuStaged, 2, 0.5, 9}}),
        // Tapered chunks: a small first (and last) chunk of a few bytes up to pages.
        make_plan(0, 1, n, {{PathKind::Direct, -1, 0.9, 1}, {PathKind::HostStaged, 0, 0.1, 8, 3}}),
        make_plan(1, 2, n, {{PathKind::HostStaged, 0, 0.6, 11, 4, 2}, {PathKind::GpuStaged, 3, 0.4, 6, 2, 3}}),
        make_plan(2, 0, n, {{PathKind::Direct, -1, 0.7, 5, 2, 2}, {PathKind::HostStaged, 0, 0.3, 16, 0, 5}}),
    };
    for (const Plan& p : plans) {
      check_plan_copy(p, 0, 0, seed++);
      check_plan_copy(p, 3, 5, seed++);  // unaligned offsets at both ends
    }
  }
}

TEST_F(EngineTest, SmallStagingRingWrapsAndWaitsForRelays) {
  // 64 KB of staging for megabytes of data: pieces reuse the same slots many times within
  // one message and across messages, so a first hop that did not wait for the relay that
  // last read its slot would corrupt the data.
  ScopedEnv host("GPUSTRIPE_HOST_STAGING", "64K"), gpu("GPUSTRIPE_GPU_STAGING", "64K");
  Plan p = make_plan(0, 1, (5u << 20) + 13, {{PathKind::HostStaged, 0, 0.6, 3}, {PathKind::GpuStaged, 2, 0.4, 2}});
  for (uint32_t seed = 100; seed < 104; ++seed) check_plan_copy(p, seed % 3, seed % 5, seed);
  EXPECT_EQ(engine().stats().staging_bytes, 2u * 64 * 1024);
  EXPECT_EQ(engine().stats().schedules, 4u);
}

TEST_F(EngineTest, LaterMessageOnTheSameStreamWins) {
  // Copy A then copy B into the same destination, both multi-path, back to back without
  // synchronizing: B's bytes must be what stays, on every path and chunk.
  const size_t n = (2u << 20) + 77;
  char* a = alloc(0, n);
  char* b = alloc(0, n);
  char* dst = alloc(1, n);
  std::vector<uint8_t> da = pattern(n, 7), db = pattern(n, 8);
  upload(*backend_, a, 0, da, streams_[0]);
  upload(*backend_, b, 0, db, streams_[0]);
  Plan pa = make_plan(0, 1, n, {{PathKind::Direct, -1, 0.3, 1}, {PathKind::HostStaged, 0, 0.7, 9}});
  Plan pb = make_plan(0, 1, n, {{PathKind::HostStaged, 0, 0.6, 5}, {PathKind::GpuStaged, 2, 0.4, 3}});
  for (int round = 0; round < 5; ++round) {
    engine().copy_with_plan(pa, dst, a, streams_[0]);
    engine().copy_with_plan(pb, dst, b, streams_[0]);
  }
  backend_->synchronize_stream(streams_[0]);
  std::vector<uint8_t> got = download(*backend_, dst, 1, n, streams_[1]);
  EXPECT_EQ(first_mismatch(db, got.data(), n), -1);
}

TEST_F(EngineTest, OrderedWithTheCallersEarlierAndLaterWork) {
  const size_t n = (3u << 20) + 5;
  char* src = alloc(0, n);
  char* mid = alloc(1, n);
  char* back = alloc(0, n);
  std::vector<uint8_t> old_data = pattern(n, 11), new_data = pattern(n, 12);
  upload(*backend_, src, 0, old_data, streams_[0]);
  void* pinned = backend_->alloc_pinned(n);
  std::memcpy(pinned, new_data.data(), n);
  Plan there = make_plan(0, 1, n, {{PathKind::Direct, -1, 0.5, 2}, {PathKind::HostStaged, 0, 0.5, 6}});
  Plan home = make_plan(1, 0, n, {{PathKind::GpuStaged, 3, 0.5, 4}, {PathKind::HostStaged, 0, 0.5, 6}});
  // Earlier work on the caller's stream (refreshing src) must land before the first hops
  // read src; the copy back must read `mid` only after every path wrote it.
  backend_->copy_async(src, 0, pinned, kHostDevice, n, streams_[0]);
  engine().copy_with_plan(there, mid, src, streams_[0]);
  // The copy back is ordered on GPU 1's stream after the first copy through an event.
  EventHandle done = backend_->create_event(0, false);
  backend_->record_event(done, streams_[0]);
  backend_->wait_event(streams_[1], done);
  engine().copy_with_plan(home, back, mid, streams_[1]);
  backend_->synchronize_stream(streams_[1]);
  std::vector<uint8_t> got = download(*backend_, back, 0, n, streams_[0]);
  EXPECT_EQ(first_mismatch(new_data, got.data(), n), -1);
  backend_->destroy_event(done);
  backend_->free_pinned(pinned);
}

TEST_F(EngineTest, CopyAsyncPlansThroughThePlanner) {
  FixedPlanner planner({{PathKind::Direct, -1, 0.8, 2}, {PathKind::HostStaged, 0, 0.15, 4}, {PathKind::GpuStaged, 0, 0.05, 2}});
  Engine& e = engine(&planner);
  for (int s = 0; s < 4; ++s)
    for (int d = 0; d < 4; ++d) {
      if (s == d) continue;
      const size_t n = 300000 + 17 * s + d;
      char* src = alloc(s, n);
      char* dst = alloc(d, n);
      std::vector<uint8_t> data = pattern(n, 40 + s * 4 + d);
      upload(*backend_, src, s, data, streams_[s]);
      e.copy(dst, d, src, s, n, streams_[s]);
      std::vector<uint8_t> got = download(*backend_, dst, d, n, streams_[d]);
      EXPECT_EQ(first_mismatch(data, got.data(), n), -1) << s << "->" << d;
    }
  EXPECT_EQ(e.stats().schedules, 12u);
  EXPECT_EQ(e.stats().plain_copies, 0u);
}

// copy_async_from_dst: the caller's stream belongs to the destination GPU (a put into another
// process's memory mapped on that GPU). Every byte, after the caller's earlier work there and
// before its later work; plans through another GPU run as one plain copy (their relay would write
// from that GPU's context).
TEST_F(EngineTest, CopyFromTheDestinationsStream) {
  FixedPlanner planner({{PathKind::Direct, -1, 0.8, 2}, {PathKind::HostStaged, 0, 0.2, 4}});
  Engine& e = engine(&planner);
  const size_t n = (2u << 20) + 77;
  for (int s = 0; s < 4; ++s)
    for (int d = 0; d < 4; ++d) {
      if (s == d) continue;
      char* src = alloc(s, n);
      char* dst = alloc(d, n);
      char* after = alloc(d, n);
      std::vector<uint8_t> data = pattern(n, 60 + s * 4 + d);
      upload(*backend_, src, s, data, streams_[s]);
      // Earlier work on the destination's stream writes dst: the copy lands after it.
      void* pinned = backend_->alloc_pinned(n);
      std::memset(pinned, 0x5A, n);
      backend_->copy_async(dst, d, pinned, kHostDevice, n, streams_[d]);
      e.copy_async_from_dst(dst, d, src, s, n, streams_[d]);
      backend_->copy_async(after, d, dst, d, n, streams_[d]);  // later work sees every path's bytes
      backend_->synchronize_stream(streams_[d]);
      backend_->free_pinned(pinned);
      EXPECT_EQ(first_mismatch(data, download(*backend_, dst, d, n, streams_[d]).data(), n), -1) << s << "->" << d;
      EXPECT_EQ(first_mismatch(data, download(*backend_, after, d, n, streams_[d]).data(), n), -1) << s << "->" << d;
    }
  EXPECT_EQ(e.stats().schedules, 12u);
  FixedPlanner via_gpu({{PathKind::Direct, -1, 0.5, 1}, {PathKind::GpuStaged, 2, 0.5, 2}});
  Engine other(*backend_, topo_, &via_gpu);
  char* src = alloc(0, n);
  char* dst = alloc(1, n);
  std::vector<uint8_t> data = pattern(n, 99);
  upload(*backend_, src, 0, data, streams_[0]);
  other.copy_async_from_dst(dst, 1, src, 0, n, streams_[1]);
  backend_->synchronize_stream(streams_[1]);
  EXPECT_EQ(first_mismatch(data, download(*backend_, dst, 1, n, streams_[1]).data(), n), -1);
  EXPECT_EQ(other.stats().plain_copies, 1u);
  EXPECT_EQ(other.stats().schedules, 0u);
}

TEST_F(EngineTest, SinglePathAndDeviceLocalCopiesArePlain) {
  FixedPlanner planner({{PathKind::Direct, -1, 1.0, 1}});
  Engine& e = engine(&planner);
  const size_t n = 12345;
  char* a = alloc(2, 2 * n);
  char* b = alloc(3, n);
  std::vector<uint8_t> data = pattern(n, 5);
  upload(*backend_, a, 2, data, streams_[2]);
  e.copy(b, 3, a, 2, n, streams_[2]);
  e.copy(a + n, 2, a, 2, n, streams_[2]);  // device-local
  EXPECT_EQ(first_mismatch(data, download(*backend_, b, 3, n, streams_[3]).data(), n), -1);
  EXPECT_EQ(first_mismatch(data, download(*backend_, a + n, 2, n, streams_[2]).data(), n), -1);
  EXPECT_EQ(e.stats().plain_copies, 2u);
  EXPECT_EQ(e.stats().schedules, 0u);
  EXPECT_EQ(e.stats().staging_bytes, 0u);
}

TEST_F(EngineTest, ManyThreadsAndStreamsOverlapping) {
  // 8 threads, each with its own 8 streams, copying to the same and to different pairs
  // at once through staged plans that share the lanes and the staging areas.
  ScopedEnv host("GPUSTRIPE_HOST_STAGING", "1M");
  FixedPlanner planner({{PathKind::Direct, -1, 0.5, 2}, {PathKind::HostStaged, 0, 0.3, 5}, {PathKind::GpuStaged, 0, 0.2, 3}});
  Engine& e = engine(&planner);
  constexpr int kThreads = 8, kStreams = 8, kRounds = 3;
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      const int s = t % 4, d = (t / 4 + 1 + t) % 4 == s ? (s + 1) % 4 : (t / 4 + 1 + t) % 4;
      std::vector<StreamHandle> streams;
      std::vector<char*> srcs, dsts;
      std::vector<std::vector<uint8_t>> data;
      for (int k = 0; k < kStreams; ++k) {
        size_t n = 100000 + 4099 * k + t;
        streams.push_back(backend_->create_stream(s));
        srcs.push_back(static_cast<char*>(backend_->alloc_device(s, n)));
        dsts.push_back(static_cast<char*>(backend_->alloc_device(d, n)));
        data.push_back(pattern(n, 1000 + t * 16 + k));
        upload(*backend_, srcs[k], s, data[k], streams[k]);
      }
      for (int r = 0; r < kRounds; ++r)
        for (int k = 0; k < kStreams; ++k) e.copy_async(dsts[k], d, srcs[k], s, data[k].size(), streams[k]);
      for (int k = 0; k < kStreams; ++k) {
        backend_->synchronize_stream(streams[k]);
        std::vector<uint8_t> got = download(*backend_, dsts[k], d, data[k].size(), streams[k]);
        if (first_mismatch(data[k], got.data(), got.size()) != -1) ++failures;
        backend_->free_device(srcs[k]);
        backend_->free_device(dsts[k]);
        backend_->destroy_stream(streams[k]);
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(failures.load(), 0);
  EXPECT_EQ(e.stats().schedules, static_cast<uint64_t>(kThreads * kStreams * kRounds));
}

TEST_F(EngineTest, BadInputsFailClearlyAndWriteNothing) {
  FixedPlanner planner({{PathKind::Direct, -1, 0.5, 2}, {PathKind::HostStaged, 0, 0.5, 2}});
  Engine& e = engine(&planner);
  const size_t n = 4096;
  char* src = alloc(0, n);
  char* dst = alloc(1, n);
  upload(*backend_, src, 0, pattern(n, 3), streams_[0]);
  upload(*backend_, dst, 1, std::vector<uint8_t>(n, 0xEE), streams_[1]);
  std::vector<char> host(n);
  void* pinned = backend_->alloc_pinned(n);
  auto status_of = [&](auto&& f) {
    try {
      f();
    } catch (const Error& err) {
      return err.status();
    }
    return GPUSTRIPE_SUCCESS;
  };
  StreamHandle s = streams_[0];
  EXPECT_EQ(status_of([&] { e.copy_async(dst, 1, nullptr, 0, n, s); }), GPUSTRIPE_ERR_INVALID_POINTER);
  EXPECT_EQ(status_of([&] { e.copy_async(nullptr, 1, src, 0, n, s); }), GPUSTRIPE_ERR_INVALID_POINTER);
  EXPECT_EQ(status_of([&] { e.copy_async(dst, 1, host.data(), 0, n, s); }), GPUSTRIPE_ERR_INVALID_POINTER);
  EXPECT_EQ(status_of([&] { e.copy_async(pinned, 1, src, 0, n, s); }), GPUSTRIPE_ERR_INVALID_POINTER);
  EXPECT_EQ(status_of([&] { e.copy_async(dst, 1, src, 2, n, s); }), GPUSTRIPE_ERR_INVALID_POINTER);  // wrong device
  EXPECT_EQ(status_of([&] { e.copy_async(dst, 1, src, 0, n + 1, s); }), GPUSTRIPE_ERR_INVALID_SIZE);
  EXPECT_EQ(status_of([&] { e.copy_async(dst, 1, src + 1, 0, n, s); }), GPUSTRIPE_ERR_INVALID_SIZE);
  EXPECT_EQ(status_of([&] { e.copy_async(dst, 4, src, 0, n, s); }), GPUSTRIPE_ERR_INVALID_DEVICE);
  EXPECT_EQ(status_of([&] { e.copy_async(dst, 1, src, -1, n, s); }), GPUSTRIPE_ERR_INVALID_DEVICE);
  EXPECT_EQ(status_of([&] { e.copy_async(src + 8, 0, src, 0, 64, s); }), GPUSTRIPE_ERR_INVALID_ARGUMENT);  // overlap
  EXPECT_EQ(status_of([&] { e.copy_async(dst, 1, src, 0, 0, s); }), GPUSTRIPE_SUCCESS);      // nothing to do
  EXPECT_EQ(status_of([&] { e.copy_async(nullptr, 1, nullptr, 0, 0, s); }), GPUSTRIPE_SUCCESS);
  Plan bad_via = make_plan(0, 1, n, {{PathKind::Direct, -1, 0.5, 1}, {PathKind::GpuStaged, 1, 0.5, 2}});
  EXPECT_EQ(status_of([&] { e.copy_with_plan(bad_via, dst, src, s); }), GPUSTRIPE_ERR_INVALID_ARGUMENT);
  Plan bad_socket = make_plan(0, 1, n, {{PathKind::HostStaged, 3, 1.0, 2}});
  EXPECT_EQ(status_of([&] { e.copy_with_plan(bad_socket, dst, src, s); }), GPUSTRIPE_ERR_INVALID_ARGUMENT);
  backend_->synchronize_stream(s);
  std::vector<uint8_t> got = download(*backend_, dst, 1, n, streams_[1]);
  EXPECT_EQ(first_mismatch(std::vector<uint8_t>(n, 0xEE), got.data(), n), -1) << "a failed call wrote the destination";
  EXPECT_EQ(e.stats().schedules + e.stats().plain_copies, 0u);
  backend_->free_pinned(pinned);
}

TEST(StagingUses, TracksTheLastReaderOfEveryByte) {
  StagingUses u;
  int tag[4];
  auto m = [&](int i) { return LaneMark{nullptr, &tag[i]}; };
  u.set(0, 100, m(0));
  u.set(50, 150, m(1));
  u.set(120, 130, m(2));
  auto marks = [&](uint64_t b, uint64_t e) {
    std::vector<void*> out;
    for (const LaneMark& x : u.overlapping(b, e)) out.push_back(x.event);
    return out;
  };
  EXPECT_EQ(marks(0, 50), std::vector<void*>({&tag[0]}));
  EXPECT_EQ(marks(40, 60), std::vector<void*>({&tag[0], &tag[1]}));
  EXPECT_EQ(marks(125, 140), std::vector<void*>({&tag[2], &tag[1]}));
  EXPECT_EQ(marks(150, 200), std::vector<void*>());
  u.set(0, 200, m(3));
  EXPECT_EQ(marks(0, 200), std::vector<void*>({&tag[3]}));
  EXPECT_EQ(u.ranges(), 1u);
}

}  // namespace
