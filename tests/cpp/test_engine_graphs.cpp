// Graph mode of the engine, without a GPU (recording_graph_backend.hpp). It checks what is
// the engine's in graph mode: capture once per key, self-contained staging, replays that
// read the pointers' current data, and staging areas shared by replays on several streams.
#include <gtest/gtest.h>

#include <mutex>
#include <set>
#include <thread>

#include "engine/engine.hpp"
#include "engine_test_util.hpp"
#include "test_util.hpp"
#include "recording_graph_backend.hpp"

using namespace gpustripe;
using namespace engine_test;

namespace {

// Graphs on every path kind (GPU-staged plans replayed too, which the engine's default leaves
// enqueued), a small host staging area (pieces wrap inside one capture), `cache` graphs kept.
EngineOptions graph_options(size_t cache) {
  EngineOptions o;
  o.graphs = true;
  o.replay_gpu_staged = true;
  o.graph_cache = cache;
  o.host_staging = 256 << 10;
  return o;
}

class EngineGraphs : public ::testing::Test {
 protected:
  void SetUp() override {
    topo_ = small_node(4);
    rec_ = new RecordingGraphBackend(make_emulated_backend(topo_));
    backend_.reset(rec_);
  }
  ScopedEnv jitter_{"GPUSTRIPE_TEST", "emu_jitter_us=20"};
  EngineOptions options_ = graph_options(3);
  Topology topo_;
  RecordingGraphBackend* rec_ = nullptr;
  std::unique_ptr<Backend> backend_;
};

TEST_F(EngineGraphs, CapturedOnceReplayedWithCurrentData) {
  FixedPlanner planner({{PathKind::Direct, -1, 0.6, 2}, {PathKind::HostStaged, 0, 0.3, 6}, {PathKind::GpuStaged, 0, 0.1, 3}});
  Engine engine(*backend_, topo_, &planner, options_);
  ASSERT_TRUE(engine.uses_graphs());
  const size_t n = (3u << 20) + 9;
  StreamHandle s = backend_->create_stream(0);
  char* src = static_cast<char*>(backend_->alloc_device(0, n));
  char* dst = static_cast<char*>(backend_->alloc_device(1, n));
  for (uint32_t round = 0; round < 4; ++round) {
    std::vector<uint8_t> data = pattern(n, 300 + round);
    upload(*backend_, src, 0, data, s);
    engine.copy_async(dst, 1, src, 0, n, s);
    std::vector<uint8_t> got = download(*backend_, dst, 1, n, s);
    EXPECT_EQ(first_mismatch(data, got.data(), n), -1) << "round " << round;
  }
  // Seen once: enqueued; the second time captured and replayed; then replayed.
  EXPECT_EQ(engine.stats().schedules, 1u);
  EXPECT_EQ(engine.stats().graph_captures, 1u);
  EXPECT_EQ(engine.stats().graph_launches, 3u);
  // More keys than the cache holds, each used twice: the least recently used graphs are destroyed.
  for (size_t k = 1; k <= 4; ++k)
    for (int twice = 0; twice < 2; ++twice) engine.copy_async(dst, 1, src, 0, n - k, s);
  backend_->synchronize_stream(s);
  EXPECT_EQ(rec_->captures, 5);
  EXPECT_EQ(rec_->destroyed, 2);
  backend_->free_device(src);
  backend_->free_device(dst);
  backend_->destroy_stream(s);
}

// A graph's copies refer to the allocations they were captured over: a buffer freed and
// reallocated at the same address (an IPC mapping closed and a new one opened at the same
// address: the 2-rank bench's window-64 512 MB row on the H200s) must be captured again, never
// served the old graph (which crashed inside cuGraphLaunch). Here the backend reports new buffer
// ids for the same pointers, as CUDA does for a new allocation at a freed address.
class ReallocatingBackend : public RecordingGraphBackend {
 public:
  using RecordingGraphBackend::RecordingGraphBackend;
  PointerInfo pointer_info(const void* p) override {
    PointerInfo i = in_->pointer_info(p);
    if (i.buffer_id) i.buffer_id += generation;
    return i;
  }
  uint64_t generation = 0;
};

TEST(EngineGraphKeys, ABufferReallocatedAtTheSameAddressIsCapturedAgain) {
  Topology topo = small_node(2);
  auto* rec = new ReallocatingBackend(make_emulated_backend(topo));
  std::unique_ptr<Backend> be(rec);
  FixedPlanner planner({{PathKind::Direct, -1, 0.8, 1}, {PathKind::HostStaged, 0, 0.2, 4}});
  Engine engine(*be, topo, &planner);
  ASSERT_TRUE(engine.uses_graphs());
  const size_t n = (2u << 20) + 4099;
  StreamHandle s = be->create_stream(0);
  char* src = static_cast<char*>(be->alloc_device(0, n));
  char* dst = static_cast<char*>(be->alloc_device(1, n));
  auto copy_checked = [&](uint32_t seed) {
    std::vector<uint8_t> data = pattern(n, seed);
    upload(*be, src, 0, data, s);
    engine.copy_async(dst, 1, src, 0, n, s);
    EXPECT_EQ(first_mismatch(data, download(*be, dst, 1, n, s).data(), n), -1) << "copy " << seed;
  };
  for (uint32_t k = 0; k < 3; ++k) copy_checked(k);  // enqueued, captured, replayed
  EXPECT_EQ(engine.stats().graph_captures, 1u);
  EXPECT_EQ(engine.stats().graph_launches, 2u);
  rec->generation = 1000;  // both buffers "freed and reallocated" at the same addresses
  for (uint32_t k = 3; k < 6; ++k) copy_checked(k);  // a new transfer: enqueued, captured, replayed
  EXPECT_EQ(engine.stats().schedules, 2u);
  EXPECT_EQ(engine.stats().graph_captures, 2u);
  EXPECT_EQ(engine.stats().graph_launches, 4u);
  be->free_device(src);
  be->free_device(dst);
  be->destroy_stream(s);
}

TEST_F(EngineGraphs, ReplaysOnManyStreamsShareStagingSafely) {
  // Replays from several threads and streams through the same host staging area: each must
  // wait for the previous user of the area, or the bytes of one would land in another.
  FixedPlanner planner({{PathKind::HostStaged, 0, 0.7, 5}, {PathKind::Direct, -1, 0.3, 1}});
  Engine engine(*backend_, topo_, &planner, options_);
  constexpr int kThreads = 4, kCopies = 3;
  std::vector<std::thread> threads;
  std::atomic<int> bad{0};
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&, t] {
      const size_t n = (1u << 20) + 101 * t;
      StreamHandle s = backend_->create_stream(0);
      std::vector<char*> srcs, dsts;
      std::vector<std::vector<uint8_t>> data;
      for (int k = 0; k < kCopies; ++k) {
        srcs.push_back(static_cast<char*>(backend_->alloc_device(0, n)));
        dsts.push_back(static_cast<char*>(backend_->alloc_device(1 + t % 3, n)));
        data.push_back(pattern(n, 900 + t * 8 + k));
        upload(*backend_, srcs[k], 0, data[k], s);
      }
      for (int r = 0; r < 3; ++r)
        for (int k = 0; k < kCopies; ++k) engine.copy_async(dsts[k], 1 + t % 3, srcs[k], 0, n, s);
      for (int k = 0; k < kCopies; ++k) {
        if (first_mismatch(data[k], download(*backend_, dsts[k], 1 + t % 3, n, s).data(), n) != -1) ++bad;
        backend_->free_device(srcs[k]);
        backend_->free_device(dsts[k]);
      }
      backend_->destroy_stream(s);
    });
  for (auto& th : threads) th.join();
  EXPECT_EQ(bad.load(), 0);
  EXPECT_EQ(engine.stats().schedules, static_cast<uint64_t>(kThreads * kCopies));
  EXPECT_EQ(engine.stats().graph_launches, static_cast<uint64_t>(kThreads * kCopies * 2));
}

TEST_F(EngineGraphs, EnqueuedSchedulesAndReplaysShareStagingSafely) {
  // One stream replays the same transfer while another enqueues transfers seen for the first
  // time (a new destination each), both through GPU 0's host staging area, which either one
  // fills several times over, nothing synchronized in between: each must wait for the
  // other's readers.
  FixedPlanner planner({{PathKind::Direct, -1, 0.2, 1}, {PathKind::HostStaged, 0, 0.8, 6}});
  Engine engine(*backend_, topo_, &planner, options_);
  constexpr int kRounds = 12;
  const size_t n = (1u << 20) + 4096;
  StreamHandle replay_s = backend_->create_stream(0), fresh_s = backend_->create_stream(0);
  char* src_a = static_cast<char*>(backend_->alloc_device(0, n));
  char* src_b = static_cast<char*>(backend_->alloc_device(0, n));
  char* dst_a = static_cast<char*>(backend_->alloc_device(1, n));
  std::vector<char*> dst_b;
  for (int r = 0; r < kRounds; ++r) dst_b.push_back(static_cast<char*>(backend_->alloc_device(2, n)));
  std::vector<uint8_t> da = pattern(n, 71), db = pattern(n, 72);
  upload(*backend_, src_a, 0, da, replay_s);
  upload(*backend_, src_b, 0, db, fresh_s);
  for (int r = 0; r < kRounds; ++r) {
    engine.copy_async(dst_a, 1, src_a, 0, n, replay_s);
    engine.copy_async(dst_b[r], 2, src_b, 0, n, fresh_s);
  }
  for (int r = 0; r < kRounds; ++r)
    EXPECT_EQ(first_mismatch(db, download(*backend_, dst_b[r], 2, n, fresh_s).data(), n), -1) << "enqueued copy " << r;
  EXPECT_EQ(first_mismatch(da, download(*backend_, dst_a, 1, n, replay_s).data(), n), -1);
  EXPECT_EQ(engine.stats().graph_launches, static_cast<uint64_t>(kRounds - 1));
  EXPECT_EQ(engine.stats().schedules, static_cast<uint64_t>(kRounds + 1));
  for (char* p : {src_a, src_b, dst_a}) backend_->free_device(p);
  for (char* p : dst_b) backend_->free_device(p);
  backend_->destroy_stream(replay_s);
  backend_->destroy_stream(fresh_s);
}

namespace {
// copy_with_plan_detached (a p2p window's copies, alternating areas): each copy
// its own data, on two streams, nothing synchronized in between, through staging areas each copy
// fills several times over. The staged part alone is captured once per area and replayed after
// that; the direct path is never part of a graph; every copy lands intact, and no wait names an
// event recorded inside a capture.
// `replay` false: the staged parts enqueued through one staging ring, never captured.
void copies_apart(RecordingGraphBackend* rec_, Backend* backend_, const Topology& topo_, bool replay = true) {
  FixedPlanner planner({{PathKind::Direct, -1, 0.75, 2}, {PathKind::HostStaged, 0, 0.25, 5}});
  Engine engine(*backend_, topo_, &planner, graph_options(64));
  constexpr int kCopies = 8;
  const size_t n = (1u << 20) + 4097;
  StreamHandle a = backend_->create_stream(0), b = backend_->create_stream(0);
  char* src = static_cast<char*>(backend_->alloc_device(0, n));
  std::vector<char*> dst;
  for (int k = 0; k < kCopies; ++k) dst.push_back(static_cast<char*>(backend_->alloc_device(1, n)));
  const Plan plan = planner.plan(0, 1, n);
  std::vector<std::vector<uint8_t>> data;
  for (int round = 0; round < 3; ++round) {
    data.clear();
    for (int k = 0; k < kCopies; ++k) {
      // One source buffer rewritten between copies: the copies must run in stream order.
      data.push_back(pattern(n, 500 + 10 * round + k));
      backend_->synchronize_stream(a);
      backend_->synchronize_stream(b);
      upload(*backend_, src, 0, data[k], a);
      engine.copy_with_plan_detached(plan, dst[k], src, k % 2 ? b : a, !replay || k % 2 == 1, replay);
    }
    backend_->synchronize_stream(a);
    backend_->synchronize_stream(b);
    for (int k = 0; k < kCopies; ++k)
      EXPECT_EQ(first_mismatch(data[k], download(*backend_, dst[k], 1, n, a).data(), n), -1)
          << "round " << round << " copy " << k;
  }
  if (!replay) {
    EXPECT_EQ(engine.stats().schedules, 3u * kCopies);
    EXPECT_EQ(engine.stats().graph_captures, 0u);
    EXPECT_EQ(engine.stats().graph_launches, 0u);
    backend_->free_device(src);
    for (char* p : dst) backend_->free_device(p);
    backend_->destroy_stream(a);
    backend_->destroy_stream(b);
    return;
  }
  // Eight destinations, so eight keys of the staged part alone: each enqueued in round 0,
  // captured in round 1, replayed in rounds 1 and 2.
  EXPECT_EQ(engine.stats().schedules, static_cast<uint64_t>(kCopies));
  EXPECT_EQ(engine.stats().graph_captures, static_cast<uint64_t>(kCopies));
  EXPECT_EQ(engine.stats().graph_launches, 2u * kCopies);
  EXPECT_EQ(rec_->waits_on_captured_events, 0);
  EXPECT_GE(engine.stats().staging_bytes, 2u * (256u << 10)) << "both host staging areas";
  backend_->free_device(src);
  for (char* p : dst) backend_->free_device(p);
  backend_->destroy_stream(a);
  backend_->destroy_stream(b);
}
}  // namespace

TEST_F(EngineGraphs, DetachedCopiesReplayTheStagedPartInEitherArea) {
  copies_apart(rec_, backend_.get(), topo_);
}
TEST_F(EngineGraphs, DetachedCopiesEnqueueTheStagedPartThroughOneRing) {
  copies_apart(rec_, backend_.get(), topo_, false);
}

TEST_F(EngineGraphs, ASecondAreaReplayStagesInTheSecondArea) {
  // A replay waits for the earlier users of the area its key names and then stands for them:
  // the captured copies must stage in that same area. Captured in the other one, the replays of
  // a window's copies, which alternate between the two areas on lanes of their own, fill one
  // host range at once (corrupt data on GPUs, where the copies run concurrently).
  FixedPlanner planner({{PathKind::Direct, -1, 0.75, 1}, {PathKind::HostStaged, 0, 0.25, 4}});
  Engine engine(*backend_, topo_, &planner, options_);
  const size_t n = (1u << 20) + 4097;
  StreamHandle s = backend_->create_stream(0);
  char* src = static_cast<char*>(backend_->alloc_device(0, n));
  char* dst = static_cast<char*>(backend_->alloc_device(1, n));
  const Plan plan = planner.plan(0, 1, n);
  std::vector<uint8_t> data = pattern(n, 77);
  upload(*backend_, src, 0, data, s);
  for (int k = 0; k < 2; ++k) engine.copy_with_plan(plan, dst, src, s);  // enqueued, captured (first area)
  for (int k = 0; k < 2; ++k) engine.copy_with_plan_detached(plan, dst, src, s, true);  // staged part, second area
  EXPECT_EQ(first_mismatch(data, download(*backend_, dst, 1, n, s).data(), n), -1);
  ASSERT_EQ(rec_->captured_host_ranges.size(), 2u);
  auto overlap = [](const std::vector<RecordingGraphBackend::HostRange>& a,
                    const std::vector<RecordingGraphBackend::HostRange>& b) {
    for (const auto& x : a)
      for (const auto& y : b)
        if (x.begin < y.begin + y.bytes && y.begin < x.begin + x.bytes) return true;
    return false;
  };
  const auto& first = rec_->captured_host_ranges[0];
  ASSERT_FALSE(first.empty());
  for (size_t g = 1; g < 2; ++g) {
    ASSERT_FALSE(rec_->captured_host_ranges[g].empty()) << "capture " << g;
    EXPECT_FALSE(overlap(first, rec_->captured_host_ranges[g])) << "capture " << g << " staged in the first area";
  }
  backend_->free_device(src);
  backend_->free_device(dst);
  backend_->destroy_stream(s);
}

TEST_F(EngineGraphs, MarksKeptAcrossTransfersAreNeverRecordedInACapture) {
  // A 0->1 transfer enqueued once leaves marks of the host->1 relay lanes in GPU 0's staging
  // area; then many 2->1 transfers are captured, which use the same relay lanes (through
  // GPU 2's area): more marks than a lane's event ring holds. When the 0->1 transfer comes
  // again its replay waits for the marks in GPU 0's area: a capture must not have recycled them.
  FixedPlanner planner({{PathKind::Direct, -1, 0.5, 1}, {PathKind::HostStaged, 0, 0.5, 4}});
  Engine engine(*backend_, topo_, &planner, graph_options(200));  // every capture kept: no thrash guard
  const size_t n = 64u << 10, copies = 80;
  StreamHandle s0 = backend_->create_stream(0), s2 = backend_->create_stream(2);
  char* a = static_cast<char*>(backend_->alloc_device(0, n));
  char* b = static_cast<char*>(backend_->alloc_device(2, n + copies * 64));
  char* dst = static_cast<char*>(backend_->alloc_device(1, n + copies * 64));
  std::vector<uint8_t> da = pattern(n, 5), db = pattern(n + copies * 64, 6);
  upload(*backend_, a, 0, da, s0);
  upload(*backend_, b, 2, db, s2);
  engine.copy_async(dst, 1, a, 0, n, s0);
  backend_->synchronize_stream(s0);
  for (size_t k = 1; k <= copies; ++k)
    for (int twice = 0; twice < 2; ++twice) engine.copy_async(dst + 64 * k, 1, b + 64 * k, 2, n, s2);
  backend_->synchronize_stream(s2);
  // Seen again (or, the cache of seen keys being short, enqueued, then captured): replayed.
  for (int twice = 0; twice < 2; ++twice) engine.copy_async(dst, 1, a, 0, n, s0);
  EXPECT_EQ(first_mismatch(da, download(*backend_, dst, 1, n, s0).data(), n), -1);
  EXPECT_EQ(engine.stats().graph_captures, copies + 1);
  EXPECT_EQ(rec_->waits_on_captured_events, 0);
  for (char* p : {a, b, dst}) backend_->free_device(p);
  backend_->destroy_stream(s0);
  backend_->destroy_stream(s2);
}

TEST_F(EngineGraphs, StopsCapturingWhenTheCacheThrashes) {
  // Five transfers in a cycle through a cache of three graphs: every capture would be
  // evicted before its next use. After 16 such captures new ones stop; the data stays right.
  FixedPlanner planner({{PathKind::Direct, -1, 0.5, 1}, {PathKind::HostStaged, 0, 0.5, 3}});
  Engine engine(*backend_, topo_, &planner, options_);
  const size_t n = 64u << 10;
  constexpr int kKeys = 5, kLaps = 12;
  StreamHandle s = backend_->create_stream(0);
  char* src = static_cast<char*>(backend_->alloc_device(0, n));
  char* dst = static_cast<char*>(backend_->alloc_device(1, n * kKeys));
  std::vector<uint8_t> data = pattern(n, 9);
  upload(*backend_, src, 0, data, s);
  for (int lap = 0; lap < kLaps; ++lap)
    for (int k = 0; k < kKeys; ++k) engine.copy_async(dst + n * k, 1, src, 0, n, s);
  for (int k = 0; k < kKeys; ++k)
    EXPECT_EQ(first_mismatch(data, download(*backend_, dst + n * k, 1, n, s).data(), n), -1) << "key " << k;
  EngineStats st = engine.stats();
  EXPECT_EQ(st.graph_captures, 19u);  // 3 kept + 16 evicted unused
  EXPECT_EQ(st.schedules + st.graph_launches, static_cast<uint64_t>(kKeys * kLaps));
  backend_->free_device(src);
  backend_->free_device(dst);
  backend_->destroy_stream(s);
}

TEST_F(EngineGraphs, PlansWithGpuStagingAreEnqueuedByDefault) {
  FixedPlanner planner({{PathKind::Direct, -1, 0.6, 1}, {PathKind::GpuStaged, 0, 0.4, 3}});
  EngineOptions defaults;
  defaults.host_staging = options_.host_staging;
  Engine engine(*backend_, topo_, &planner, defaults);
  const size_t n = 256u << 10;
  StreamHandle s = backend_->create_stream(0);
  char* src = static_cast<char*>(backend_->alloc_device(0, n));
  char* dst = static_cast<char*>(backend_->alloc_device(1, n));
  std::vector<uint8_t> data = pattern(n, 13);
  upload(*backend_, src, 0, data, s);
  for (int r = 0; r < 3; ++r) engine.copy_async(dst, 1, src, 0, n, s);
  EXPECT_EQ(first_mismatch(data, download(*backend_, dst, 1, n, s).data(), n), -1);
  EXPECT_EQ(engine.stats().graph_captures, 0u);
  EXPECT_EQ(engine.stats().schedules, 3u);
  // A direct + host plan of the same engine is still replayed.
  Plan host = make_plan(0, 1, n, {{PathKind::Direct, -1, 0.9, 1}, {PathKind::HostStaged, 0, 0.1, 2}});
  for (int r = 0; r < 3; ++r) engine.copy_with_plan(host, dst, src, s);
  EXPECT_EQ(first_mismatch(data, download(*backend_, dst, 1, n, s).data(), n), -1);
  EXPECT_EQ(engine.stats().graph_captures, 1u);
  EXPECT_EQ(engine.stats().graph_launches, 2u);
  backend_->free_device(src);
  backend_->free_device(dst);
  backend_->destroy_stream(s);
}

}  // namespace
