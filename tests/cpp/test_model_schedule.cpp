// The engine's schedule as the model charges it: backend calls per plan (host enqueue
// time), fork/join waits, and the host-bound regime of copies issued back to back.
#include <gtest/gtest.h>

#include "common/config.hpp"
#include "common/error.hpp"
#include "engine/engine.hpp"
#include "engine_test_util.hpp"
#include "model/schedule_cost.hpp"
#include "test_model_util.hpp"
#include "test_util.hpp"
#include "forwarding_backend.hpp"

namespace gpustripe {
namespace {

Plan two_paths(uint64_t direct, uint64_t host, int chunks) {
  Plan p;
  p.src = 0;
  p.dst = 1;
  p.bytes = direct + host;
  p.paths.push_back({PathKind::Direct, -1, 0, direct, 1});
  p.paths.push_back({PathKind::HostStaged, 0, direct, host, chunks});
  return p;
}

TEST(ModelSchedule, CallsFollowTheEnginesSchedule) {
  EngineShape e;  // 2 host lanes, 128 MB host staging, no graphs
  Plan plain;
  plain.bytes = 1 << 20;
  plain.paths.push_back({PathKind::Direct, -1, 0, 1 << 20, 1});
  EXPECT_EQ(schedule_calls(plain, e), 1);  // one plain copy on the caller's stream

  // direct + host in 4 chunks of 1 MB: start event; direct lane waits, copies; host path:
  // 2 lane pairs wait (4), 4 pieces x 6 calls; 5 lanes joined (mark + wait each).
  Plan p = two_paths(60 << 20, 4 << 20, 4);
  EXPECT_EQ(schedule_calls(p, e), 1 + 2 + (4 + 24) + 2 * 5);

  // One host lane: fewer lanes to wait on and join.
  EngineShape one = e;
  one.host_lanes = 1;
  one.host_first_lanes = 1;
  EXPECT_EQ(schedule_calls(p, one), 1 + 2 + (2 + 24) + 2 * 3);

  // A chunk larger than half the staging area is cut into pieces.
  EXPECT_EQ(staged_pieces(200ull << 20, 128ull << 20), 4u);
  EXPECT_EQ(staged_pieces(64ull << 20, 128ull << 20), 1u);
  Plan big = two_paths(800 << 20, 200 << 20, 1);
  EXPECT_EQ(schedule_calls(big, e), 1 + 2 + (4 + 4 * 6) + 2 * 5);

  // An engine that runs the direct path on the caller's stream and marks relay lanes once:
  // start event, the direct copy, 4 pieces x 5 calls, 2 first-hop lanes fork, 2 relay lanes join.
  EngineShape caller = e;
  caller.direct_on_caller = true;
  caller.marks_per_piece = false;
  EXPECT_EQ(schedule_calls(p, caller), 1 + 1 + 20 + 2 + 2 * 2);
  EXPECT_FALSE(runs_on_lane(PathKind::Direct, caller));
  EXPECT_TRUE(runs_on_lane(PathKind::Direct, e));
  EXPECT_TRUE(runs_on_lane(PathKind::HostStaged, caller));

  // A replayed graph is one launch whatever the plan.
  EngineShape g = e;
  g.graphs = true;
  EXPECT_EQ(schedule_calls(p, g), 3);
  EXPECT_EQ(graph_copies(p, g), 1 + 2 * 4);  // the direct copy, two per staged piece
  EXPECT_EQ(graph_copies(p, e), 0);
  EXPECT_EQ(graph_copies(plain, g), 0);  // a plain copy is never captured
  Plan staged = p;
  staged.paths[1].kind = PathKind::GpuStaged;
  staged.paths[1].via = 2;
  EXPECT_EQ(graph_copies(staged, g), 1 + 2 * 4);  // an engine that replays GPU-staged plans too
  g.graphs_gpu_staged = false;
  EXPECT_EQ(graph_copies(staged, g), 0);  // one that enqueues them
  EXPECT_EQ(schedule_calls(staged, g), schedule_calls(staged, e));
  EXPECT_EQ(graph_copies(p, g), 1 + 2 * 4);
}

TEST(ModelSchedule, ShapeFromSettingsIsTheEngineAsItRuns) {
  ScopedEnv staging("GPUSTRIPE_HOST_STAGING", "64M");
  const EngineShape e = EngineShape::from_settings();
  const EngineOptions engine = EngineOptions::from_settings();
  EXPECT_TRUE(e.direct_on_caller);
  EXPECT_FALSE(e.marks_per_piece);
  EXPECT_EQ(e.host_lanes, engine.host_lanes);
  EXPECT_EQ(e.host_first_lanes, 1);
  EXPECT_EQ(e.graphs, engine.graphs);
  EXPECT_EQ(e.graphs_gpu_staged, engine.replay_gpu_staged);
  EXPECT_EQ(e.host_staging, 64ull << 20);
  EXPECT_EQ(engine.host_staging, 64ull << 20);
  EXPECT_EQ(e.gpu_staging, engine.gpu_staging);
  ScopedEnv bad("GPUSTRIPE_GPU_STAGING", "much");
  EXPECT_THROW(EngineShape::from_settings(), Error);
}

TEST(ModelSchedule, HostBoundPlansTakeTheHostsEnqueueTime) {
  Topology t = load_topology_file("h200x4");
  ModelParams fast = nominal_params(t), slow = fast;
  fast.host_call_us = 0;
  slow.host_call_us = 10;  // a slow host: 10 us per runtime call
  EngineShape e;
  MultipathModel mf(t, fast, e), ms(t, slow, e);
  Plan p = build_fixed_plan(mf, parse_plan_spec("direct,host0:0.1x4"), 0, 1, 4 << 20);
  Plan q = build_fixed_plan(ms, parse_plan_spec("direct,host0:0.1x4"), 0, 1, 4 << 20);
  const int calls = schedule_calls(q, e) + kPointerChecks;  // the schedule and the engine's pointer checks
  // Without a host cost: the slowest path plus the fork and join waits.
  double slowest = 0;
  for (const PathPlan& x : p.paths) slowest = std::max(slowest, x.predicted_us);
  EXPECT_NEAR(p.predicted_us, slowest + 2 * fast.epsilon_us, 1e-9);
  EXPECT_NE(p.bottleneck, "host_enqueue");
  // With one: copies issued back to back settle at one plan per enqueue time.
  ASSERT_GT(calls * 10.0, p.predicted_us);
  EXPECT_DOUBLE_EQ(q.predicted_us, calls * 10.0);
  EXPECT_EQ(q.bottleneck, "host_enqueue");
  // A plain copy costs one call: a large one is never host-bound.
  Plan d = build_fixed_plan(ms, parse_plan_spec("direct"), 0, 1, 64 << 20);
  EXPECT_NE(d.bottleneck, "host_enqueue");
  // Where calibration measured the engine's own cost per call (its bookkeeping between the
  // calls), that is what a call costs; the bare backend call's cost no longer counts.
  ModelParams engine = slow;
  engine.engine_call_us = 12;
  MultipathModel me(t, engine, e);
  EXPECT_DOUBLE_EQ(me.call_us(), 12.0);
  EXPECT_DOUBLE_EQ(ms.call_us(), 10.0);
  Plan r = build_fixed_plan(me, parse_plan_spec("direct,host0:0.1x4"), 0, 1, 4 << 20);
  EXPECT_DOUBLE_EQ(r.predicted_us, calls * 12.0);
  EXPECT_DOUBLE_EQ(me.enqueue_us(r), calls * 12.0);
}

TEST(ModelSchedule, ReplayedPlansStartLateAndWaitOnGraphDependencies) {
  Topology t = load_topology_file("h200x4");
  ModelParams p = nominal_params(t);
  p.host_call_us = 0;
  p.graph_launch_us = p.graph_node_us = 0;
  p.epsilon_us = 5;
  p.graph_start_us = 7;
  p.graph_epsilon_us = 1;
  EngineShape enqueued, replayed;
  replayed.graphs = true;
  replayed.graphs_gpu_staged = false;
  MultipathModel me(t, p, enqueued), mr(t, p, replayed);
  auto spec = parse_plan_spec("direct,host0:0.1x4");
  Plan e = build_fixed_plan(me, spec, 0, 1, 64 << 20), r = build_fixed_plan(mr, spec, 0, 1, 64 << 20);
  // The host path: 4 chunks, 3 relay waits more than its first; fork and join; the replay's start.
  EXPECT_NEAR(me.overhead_us(*me.node().route(0, 1, PathKind::HostStaged, 0), 4, false) -
                  mr.overhead_us(*mr.node().route(0, 1, PathKind::HostStaged, 0), 4, true),
              4 * (5 - 1), 1e-9);
  EXPECT_NEAR(mr.fork_join_us(PathKind::HostStaged, true), 2.0, 1e-12);
  EXPECT_TRUE(replays(r, replayed));
  EXPECT_FALSE(replays(r, enqueued));
  // A plan with a GPU-staged path is enqueued even with graphs on: no start, plain waits.
  Plan g = build_fixed_plan(mr, parse_plan_spec("direct,gpu2:0.2x4,host0:0.1x4"), 0, 1, 64 << 20);
  Plan g0 = build_fixed_plan(me, parse_plan_spec("direct,gpu2:0.2x4,host0:0.1x4"), 0, 1, 64 << 20);
  EXPECT_FALSE(replays(g, replayed));
  EXPECT_DOUBLE_EQ(g.predicted_us, g0.predicted_us);
  EXPECT_LT(r.predicted_us, e.predicted_us);
  // A plain copy is never replayed: no start latency.
  Plan d = build_fixed_plan(mr, parse_plan_spec("direct"), 0, 1, 64 << 20);
  Plan d0 = build_fixed_plan(me, parse_plan_spec("direct"), 0, 1, 64 << 20);
  EXPECT_DOUBLE_EQ(d.predicted_us, d0.predicted_us);
}

TEST(ModelSchedule, AHostTooSlowToEnqueueASplitKeepsThePlanDirect) {
  Topology t = load_topology_file("h200x4");
  ModelParams slow = nominal_params(t);
  slow.host_call_us = 50;
  ModelPlanner pl(t, slow, SearchOptions{}, EngineShape{});  // every call enqueued
  EXPECT_TRUE(pl.plan_exact(0, 1, 64 << 20).single_path()) << pl.plan_exact(0, 1, 64 << 20).describe();
  ModelPlanner fine(t, nominal_params(t), SearchOptions{});
  EXPECT_FALSE(fine.plan_exact(0, 1, 256 << 20).single_path());
}

TEST(ModelSchedule, TheCallerWaitsOnItsLanesInTurn) {
  Topology t = load_topology_file("h200x4");
  ModelParams p = nominal_params(t);
  p.host_call_us = 0;
  p.epsilon_us = 5;
  p.join_us = 2;
  EngineShape e;  // the engine's default: direct on the caller's stream, one relay lane per path
  e.direct_on_caller = true;
  e.marks_per_piece = false;
  e.host_lanes = e.host_first_lanes = 1;
  ModelParams none = p;
  none.join_us = 0;
  MultipathModel m(t, p, e), m0(t, none, e);
  // The direct copy finishes last: the caller then passes its three waits on lanes long
  // done, one after the other.
  auto spec = parse_plan_spec("direct,gpu2:0.01x1,gpu3:0.01x1,host0:0.01x1");
  Plan a = build_fixed_plan(m, spec, 0, 1, 256 << 20), a0 = build_fixed_plan(m0, spec, 0, 1, 256 << 20);
  ASSERT_EQ(a.paths.size(), 4u);
  EXPECT_EQ(final_lanes(a.paths[1], e), 1);
  EXPECT_EQ(final_lanes(a.paths[3], e), 1);
  EXPECT_EQ(final_lanes(a.paths[0], e), 0);  // on the caller's stream
  EXPECT_DOUBLE_EQ(a0.predicted_us, a0.paths[0].predicted_us);
  EXPECT_NEAR(a.predicted_us, a.paths[0].predicted_us + 3 * 2.0, 1e-9);
  // A lane that finishes last: its fork's wait, its copies, the caller's wake-up; a lane
  // the caller waits on after it, long done, still costs join_us.
  auto late = parse_plan_spec("direct:0.5,host0:0.4x1,gpu2:0.1x1");
  Plan b = build_fixed_plan(m, late, 0, 1, 64 << 20);
  const PathPlan* host = nullptr;
  for (const PathPlan& x : b.paths)
    if (x.kind == PathKind::HostStaged) host = &x;
  ASSERT_NE(host, nullptr);
  ASSERT_EQ(b.paths.back().kind, PathKind::GpuStaged);  // waited on after the host path
  ASSERT_GT(host->predicted_us, b.paths[0].predicted_us);
  ASSERT_GT(host->predicted_us, b.paths.back().predicted_us + 10);
  EXPECT_NEAR(b.predicted_us, host->predicted_us + 2 * 5.0 + 2.0, 1e-9);
  // A host path on two relay lanes is waited on twice.
  EngineShape two = e;
  two.host_lanes = 2;
  Plan c = build_fixed_plan(MultipathModel(t, p, two), parse_plan_spec("direct,host0:0.01x4"), 0, 1, 256 << 20);
  EXPECT_EQ(final_lanes(c.paths[1], two), 2);
  EXPECT_NEAR(c.predicted_us, c.paths[0].predicted_us + 2 * 2.0, 1e-9);
}

TEST(ModelPipeline, DrainFollowsTheChunksAndTheSlowerHop) {
  Topology t = load_topology_file("h200x4");
  ModelParams even = nominal_params(t), slow_relay = even, slow_first = even;
  even.hop(HopKind::D2H).beta_gbps = even.hop(HopKind::H2D).beta_gbps = 50;
  slow_relay.hop(HopKind::D2H).beta_gbps = 50;
  slow_relay.hop(HopKind::H2D).beta_gbps = 20;
  slow_first.hop(HopKind::D2H).beta_gbps = 25;
  slow_first.hop(HopKind::H2D).beta_gbps = 50;
  MultipathModel me(t, even), mr(t, slow_relay), mf(t, slow_first);
  const Route* host = me.node().route(0, 1, PathKind::HostStaged, 0);
  ASSERT_NE(host, nullptr);
  const uint64_t m = 64ull << 20;
  PathLoad flat{host, m, 8};
  PathLoad head = flat, tail = flat;
  head.taper_head = 3;  // chunks 1/8, 1/4, 1/2 of the steady one first
  tail.taper_tail = 3;
  auto first_chunk = [&](const PathLoad& l) {
    PathPlan p;
    p.bytes = l.bytes;
    p.chunks = l.chunks;
    p.taper_head = l.taper_head;
    p.taper_tail = l.taper_tail;
    std::vector<uint64_t> e = chunk_edges(p);
    return std::make_pair(static_cast<double>(e[1] - e[0]), static_cast<double>(e.back() - e[e.size() - 2]));
  };
  // Equal chunks at equal rates: one chunk, the closed form's (c + 1) / c.
  EXPECT_NEAR(me.drain_bytes(flat), m * (MultipathModel::fill_factor(*host, 8) - 1), 1.0);
  // Equal rates: the largest chunk drains, so a taper (which makes the steady chunks larger) costs.
  EXPECT_GT(me.drain_bytes(head), me.drain_bytes(flat));
  EXPECT_GT(me.drain_bytes(tail), me.drain_bytes(flat));
  // A slower relay drains what follows the first chunk's first hop: a small first chunk pays,
  // a small last one does not.
  EXPECT_NEAR(mr.drain_bytes(head), first_chunk(head).first * 20 / 50, 1.0);
  EXPECT_LT(mr.drain_bytes(head), mr.drain_bytes(flat));
  EXPECT_NEAR(mr.drain_bytes(tail), mr.drain_bytes(flat) * first_chunk(tail).first / first_chunk(flat).first, 1.0);
  // A slower first hop leaves the relay of the last chunk: a small last chunk pays.
  EXPECT_NEAR(mf.drain_bytes(tail), first_chunk(tail).second, 1.0);
  EXPECT_LT(mf.drain_bytes(tail), mf.drain_bytes(flat));
  EXPECT_GT(mf.drain_bytes(head), mf.drain_bytes(flat));
  // And a plan's prediction uses its tapers: slower relay, head taper, faster plan.
  Plan a = build_fixed_plan(mr, parse_plan_spec("direct,host0:0.1x8"), 0, 1, m);
  Plan b = build_fixed_plan(mr, parse_plan_spec("direct,host0:0.1x8h3"), 0, 1, m);
  EXPECT_LT(b.paths[1].predicted_us, a.paths[1].predicted_us);
}

// The emulated backend, counting the calls an engine schedule is made of.
class CountingBackend : public ForwardingBackend {
 public:
  using ForwardingBackend::ForwardingBackend;
  const char* name() const override { return "counting"; }
  void record_event(EventHandle e, StreamHandle s) override {
    ++calls;
    in_->record_event(e, s);
  }
  void wait_event(StreamHandle s, EventHandle e) override {
    ++calls;
    in_->wait_event(s, e);
  }
  void copy_async(void* dst, int dd, const void* src, int sd, size_t n, StreamHandle s) override {
    ++calls;
    in_->copy_async(dst, dd, src, sd, n, s);
  }
  int calls = 0;

 private:
};

TEST(ModelSchedule, CountsWhatTheEngineEnqueues) {
  // Small staging areas, so that chunks are cut into pieces and the ring wraps.
  ScopedEnv host_staging("GPUSTRIPE_HOST_STAGING", "1M");
  ScopedEnv gpu_staging("GPUSTRIPE_GPU_STAGING", "1M");
  Topology t = engine_test::small_node(4);
  CountingBackend b(make_emulated_backend(t));
  const uint64_t n = 4 << 20;
  void* src = b.alloc_device(0, n);
  void* dst = b.alloc_device(1, n);
  StreamHandle s = b.create_stream(0);
  // Every schedule enqueued: what the model counts is the enqueued schedule's calls.
  EngineShape shape = EngineShape::from_settings();
  shape.graphs = false;
  EngineOptions options = EngineOptions::from_settings();
  options.graphs = false;
  {
    Engine engine(b, t, nullptr, options);
    using engine_test::make_plan;
    std::vector<Plan> plans{
        make_plan(0, 1, n, {{PathKind::Direct, -1, 0.5, 1}}),
        make_plan(0, 1, n, {{PathKind::Direct, -1, 0.8, 1}, {PathKind::HostStaged, 0, 0.2, 4}}),
        make_plan(0, 1, n, {{PathKind::Direct, -1, 0.6, 2}, {PathKind::GpuStaged, 2, 0.4, 3}}),
        make_plan(0, 1, n, {{PathKind::Direct, -1, 0.4, 1}, {PathKind::GpuStaged, 2, 0.2, 2},
                            {PathKind::GpuStaged, 3, 0.2, 2}, {PathKind::HostStaged, 0, 0.2, 3}}),
        make_plan(0, 1, n, {{PathKind::HostStaged, 0, 1.0, 5}}),
    };
    for (const Plan& plan : plans) {
      // The first run creates lanes and staging; the second is what a loop of copies costs.
      engine.copy_with_plan(plan, dst, src, s);
      b.synchronize_stream(s);
      b.calls = 0;
      engine.copy_with_plan(plan, dst, src, s);
      const int seen = b.calls;
      b.synchronize_stream(s);
      uint64_t pieces = 0;
      for (const PathPlan& p : plan.paths)
        if (p.kind != PathKind::Direct)
          for (int c = 0; c < p.chunks; ++c) pieces += staged_pieces(p.bytes / p.chunks + 1, 1 << 20);
      // Waits for the staging bytes' last reader depend on where the ring stands: one per
      // piece in the model, 0-2 in the engine.
      EXPECT_NEAR(schedule_calls(plan, shape), seen, static_cast<double>(pieces) + 1) << plan.describe();
    }
  }
  b.destroy_stream(s);
  b.free_device(src);
  b.free_device(dst);
}

}  // namespace
}  // namespace gpustripe
