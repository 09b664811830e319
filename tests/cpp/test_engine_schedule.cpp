// The shape of a multi-path schedule, on the emulated backend through a backend that logs
// every stream operation: the direct path runs on the caller's stream ahead of the staged
// paths, only the lanes that read the source wait for the caller, the caller joins only the
// lanes that write the destination, and each staged piece costs one event (plus one per
// relay lane at the end). The bytes are checked too: a schedule that is lean but wrong fails.
#include <gtest/gtest.h>

#include <algorithm>
#include <mutex>
#include <set>

#include "engine/engine.hpp"
#include "engine_test_util.hpp"
#include "test_util.hpp"
#include "forwarding_backend.hpp"

using namespace gpustripe;
using namespace engine_test;

namespace {

struct Op {
  enum Kind { Copy, Record, Wait } kind;
  StreamHandle stream;
  void* dst = nullptr;
  size_t bytes = 0;
};

class TracingBackend : public ForwardingBackend {
 public:
  using ForwardingBackend::ForwardingBackend;
  const char* name() const override { return "tracing"; }
  void record_event(EventHandle e, StreamHandle s) override {
    log({Op::Record, s});
    in_->record_event(e, s);
  }
  void wait_event(StreamHandle s, EventHandle e) override {
    log({Op::Wait, s});
    in_->wait_event(s, e);
  }
  void copy_async(void* dst, int dd, const void* src, int sd, size_t n, StreamHandle s) override {
    log({Op::Copy, s, dst, n});
    in_->copy_async(dst, dd, src, sd, n, s);
  }

  std::vector<Op> take() {
    std::lock_guard<std::mutex> lock(mu_);
    return std::exchange(ops_, {});
  }

 private:
  void log(Op op) {
    std::lock_guard<std::mutex> lock(mu_);
    ops_.push_back(op);
  }
  std::mutex mu_;
  std::vector<Op> ops_;
};

// Two relay lanes per host path (the engine's default is one), so that tests see pieces
// alternate between them.
EngineOptions two_relay_lanes() {
  EngineOptions o;
  o.host_lanes = 2;
  return o;
}

class EngineSchedule : public ::testing::Test {
 protected:
  void SetUp() override {
    topo_ = small_node(4);
    trace_ = new TracingBackend(make_emulated_backend(topo_));
    backend_.reset(trace_);
    caller_ = backend_->create_stream(0);
    src_ = static_cast<char*>(backend_->alloc_device(0, kBytes));
    dst_ = static_cast<char*>(backend_->alloc_device(1, kBytes));
    data_ = pattern(kBytes, 77);
    upload(*backend_, src_, 0, data_, caller_);
    trace_->take();
  }
  void TearDown() override {
    backend_->free_device(src_);
    backend_->free_device(dst_);
    backend_->destroy_stream(caller_);
  }
  // Runs `plan` once on a fresh engine, checks every byte, returns the operations it enqueued.
  enum class Run { Plain, Detached };
  std::vector<Op> run(const Plan& plan, Run how = Run::Plain) {
    std::vector<Op> ops;
    {
      Engine engine(*backend_, topo_, nullptr, options_);
      if (how == Run::Detached) engine.copy_with_plan_detached(plan, dst_, src_, caller_);
      else engine.copy_with_plan(plan, dst_, src_, caller_);
      ops = trace_->take();
      backend_->synchronize_stream(caller_);
    }
    std::vector<uint8_t> got = download(*backend_, dst_, 1, kBytes, caller_);
    EXPECT_EQ(first_mismatch(data_, got.data(), kBytes), -1) << plan.describe();
    trace_->take();
    return ops;
  }
  static size_t count(const std::vector<Op>& ops, Op::Kind k, StreamHandle s = nullptr) {
    return std::count_if(ops.begin(), ops.end(), [&](const Op& o) { return o.kind == k && (!s || o.stream == s); });
  }

  static constexpr size_t kBytes = (4u << 20) + 4096;
  ScopedEnv jitter_{"GPUSTRIPE_TEST", "emu_jitter_us=20"};
  EngineOptions options_ = two_relay_lanes();
  Topology topo_;
  TracingBackend* trace_ = nullptr;
  std::unique_ptr<Backend> backend_;
  StreamHandle caller_ = nullptr;
  char *src_ = nullptr, *dst_ = nullptr;
  std::vector<uint8_t> data_;
};

TEST_F(EngineSchedule, DirectPathGoesFirstOnTheCallersStream) {
  Plan p = make_plan(0, 1, kBytes, {{PathKind::Direct, -1, 0.9, 1}, {PathKind::HostStaged, 0, 0.1, 4}});
  std::vector<Op> ops = run(p);
  // The caller's mark for the staged lanes, then the direct copy, on the caller's stream.
  ASSERT_GE(ops.size(), 2u);
  EXPECT_EQ(ops[0].kind, Op::Record);
  EXPECT_EQ(ops[0].stream, caller_);
  EXPECT_EQ(ops[1].kind, Op::Copy);
  EXPECT_EQ(ops[1].stream, caller_);
  EXPECT_EQ(ops[1].dst, dst_);
  EXPECT_EQ(ops[1].bytes, p.paths[0].bytes);
  EXPECT_EQ(count(ops, Op::Copy, caller_), 1u);
  // 4 pieces, 2 copies each; the one D2H lane waits for the caller; the caller waits for
  // the 2 relay lanes only.
  EXPECT_EQ(count(ops, Op::Copy), 1u + 2 * 4);
  EXPECT_EQ(count(ops, Op::Wait, caller_), 2u);
  // Events: the caller's mark, one per piece (first hop done), one per relay lane at the end.
  EXPECT_EQ(count(ops, Op::Record), 1u + 4 + 2);
  // Waits: 1 fork, 4 relays on their piece, 2 joins (a fresh staging area has no readers).
  EXPECT_EQ(count(ops, Op::Wait), 1u + 4 + 2);
}

TEST_F(EngineSchedule, DetachedCopiesWaitForNothingOnTheCallersStreamAndJoinItAtTheEnd) {
  // copy_with_plan_detached: nothing is recorded on the caller's stream for the paths to wait
  // for; the direct chunks go first, on a lane of their own; the staged part on another lane;
  // the caller waits for those two lanes last (and for nothing else), so later work on it
  // still follows both paths (bytes checked by run()).
  Plan p = make_plan(0, 1, kBytes, {{PathKind::Direct, -1, 0.9, 2}, {PathKind::HostStaged, 0, 0.1, 4}});
  std::vector<Op> ops = run(p, Run::Detached);
  ASSERT_GE(ops.size(), 4u);
  EXPECT_EQ(count(ops, Op::Record, caller_), 0u);
  EXPECT_EQ(count(ops, Op::Copy, caller_), 0u);
  EXPECT_EQ(ops[0].kind, Op::Copy);
  EXPECT_EQ(ops[1].kind, Op::Copy);
  EXPECT_EQ(ops[0].stream, ops[1].stream);
  EXPECT_EQ(ops[0].bytes + ops[1].bytes, p.paths[0].bytes);
  StreamHandle direct_lane = ops[0].stream;
  EXPECT_EQ(count(ops, Op::Copy, direct_lane), 2u);
  EXPECT_EQ(count(ops, Op::Copy), 2u + 2 * 4);
  EXPECT_EQ(count(ops, Op::Wait, caller_), 2u);
  EXPECT_EQ(ops[ops.size() - 1].kind, Op::Wait);
  EXPECT_EQ(ops[ops.size() - 1].stream, caller_);
  // Nothing waits for the caller: the direct lane not at all, the staged part's lanes only for
  // each other (4 relays on their pieces, its lane on the 2 relay lanes), then the caller on the
  // staged part's lane and the direct lane. Forked from a start mark, it would be 3 waits more.
  EXPECT_EQ(count(ops, Op::Wait, direct_lane), 0u);
  EXPECT_EQ(count(ops, Op::Wait), 4u + 2 + 2);
}

TEST_F(EngineSchedule, TaperedChunksAreCutAsThePlanSays) {
  // Head 3, tail 1 over 8 chunks: first hops carry 1/8, 1/4, 1/2, 1, 1, 1, 1, 1/2 of the
  // steady chunk, in that order, and the relay copies follow the same sizes.
  Plan p = make_plan(0, 1, kBytes, {{PathKind::Direct, -1, 0.75, 1}, {PathKind::HostStaged, 0, 0.25, 8, 3, 1}});
  const PathPlan& host = p.paths[1];
  const std::vector<uint64_t> edge = chunk_edges(host);
  std::vector<Op> ops = run(p);
  std::vector<size_t> to_host, from_host;
  for (const Op& o : ops) {
    if (o.kind != Op::Copy || o.stream == caller_) continue;
    if (o.dst >= dst_ && o.dst < dst_ + kBytes) from_host.push_back(o.bytes);
    else to_host.push_back(o.bytes);
  }
  ASSERT_EQ(to_host.size(), 8u);
  ASSERT_EQ(from_host.size(), 8u);
  for (int c = 0; c < 8; ++c) {
    EXPECT_EQ(to_host[c], edge[c + 1] - edge[c]) << "chunk " << c;
    EXPECT_EQ(from_host[c], edge[c + 1] - edge[c]) << "chunk " << c;
  }
  EXPECT_LT(to_host[0] * 6, to_host[3]);  // about an eighth: the relay starts early
  EXPECT_LT(to_host[7] * 3 / 2, to_host[6]);
}

TEST_F(EngineSchedule, DirectOnlyMultiChunkPlanNeedsNoEvents) {
  Plan p = make_plan(0, 1, kBytes, {{PathKind::Direct, -1, 1.0, 3}});
  std::vector<Op> ops = run(p);
  EXPECT_EQ(count(ops, Op::Copy, caller_), 3u);
  EXPECT_EQ(count(ops, Op::Record), 0u);
  EXPECT_EQ(count(ops, Op::Wait), 0u);
}

TEST_F(EngineSchedule, OneFirstHopLaneTwoRelayLanes) {
  // GPU-to-host hops in order on one stream; host-to-GPU hops alternate between two.
  Plan p = make_plan(0, 1, kBytes, {{PathKind::Direct, -1, 0.8, 1}, {PathKind::HostStaged, 0, 0.2, 6}});
  std::vector<Op> ops = run(p);
  std::set<StreamHandle> to_host, to_dst;
  for (const Op& o : ops) {
    if (o.kind != Op::Copy || o.stream == caller_) continue;
    (o.dst >= dst_ && o.dst < dst_ + kBytes ? to_dst : to_host).insert(o.stream);
  }
  EXPECT_EQ(to_host.size(), 1u);
  EXPECT_EQ(to_dst.size(), 2u);
  EXPECT_EQ(count(ops, Op::Wait, caller_), 2u);
}

TEST_F(EngineSchedule, GpuStagedPathsTakeAFirstHopLaneEach) {
  Plan p = make_plan(0, 1, kBytes, {{PathKind::Direct, -1, 0.4, 1}, {PathKind::GpuStaged, 2, 0.3, 3}, {PathKind::GpuStaged, 3, 0.3, 3}});
  auto first_hop_streams = [&](const std::vector<Op>& ops) {
    std::set<StreamHandle> out;
    for (const Op& o : ops)
      if (o.kind == Op::Copy && o.stream != caller_ && !(o.dst >= dst_ && o.dst < dst_ + kBytes)) out.insert(o.stream);
    return out.size();
  };
  EXPECT_EQ(first_hop_streams(run(p)), 2u);
}

TEST_F(EngineSchedule, RelayMarkedEarlyOnlyWhenItsRangeIsReusedInTheSchedule) {
  // 256 KB of staging, 1 MB through it in 8 chunks: pieces of 128 KB (half the area), so
  // from the third piece on each one reuses a range that a relay of this schedule reads:
  // that relay's lane is marked before the first hop waits for it.
  options_.host_staging = 256 << 10;
  Plan p = make_plan(0, 1, kBytes, {{PathKind::Direct, -1, 0.75, 1}, {PathKind::HostStaged, 0, 0.25, 8}});
  std::vector<Op> ops = run(p);
  const size_t pieces = (count(ops, Op::Copy) - 1) / 2;
  ASSERT_GE(pieces, 8u);
  EXPECT_GE(count(ops, Op::Record), 1u + pieces + (pieces - 2) + 2);
}

}  // namespace
