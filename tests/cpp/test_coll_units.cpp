// The coll layer's parts: half/bfloat16 conversion, CPU reductions, schedule
// selection, the structure of the schedules, argument checks.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <set>
#include <vector>

#include "coll/coll_bench.hpp"
#include "coll/half.hpp"
#include "coll/executor.hpp"
#include "coll/program.hpp"
#include "coll/reduce.hpp"
#include "coll/reduce_ops.hpp"
#include "coll/schedules.hpp"
#include "coll/select.hpp"
#include "forwarding_backend.hpp"
#include "model/planner.hpp"
#include "test_coll_harness.hpp"
#include "test_util.hpp"
#include "topology/topology.hpp"

namespace coll_test {
namespace {

TEST(CollHalf, EveryHalfRoundTripsThroughFloat) {
  for (uint32_t h = 0; h < 65536; ++h) {
    float f = half_to_float(static_cast<uint16_t>(h));
    if (std::isnan(f)) continue;
    ASSERT_EQ(float_to_half(f), h) << "half 0x" << std::hex << h << " -> " << f;
  }
}

TEST(CollHalf, RoundsToNearestEven) {
  EXPECT_EQ(float_to_half(1.0f), 0x3c00);
  EXPECT_EQ(float_to_half(65504.0f), 0x7bff);
  EXPECT_EQ(float_to_half(65520.0f), 0x7c00);                 // rounds to infinity
  EXPECT_EQ(float_to_half(1.0f + 1.0f / 2048), 0x3c00);       // tie: to even
  EXPECT_EQ(float_to_half(1.0f + 3.0f / 2048), 0x3c02);       // tie: to even (up)
  EXPECT_EQ(float_to_half(5.96046448e-08f), 0x0001);          // smallest subnormal
  EXPECT_EQ(float_to_half(-2.0f), 0xc000);
  EXPECT_EQ(float_to_bf16(1.0f), 0x3f80);
  EXPECT_EQ(float_to_bf16(1.0f + 1.0f / 256), 0x3f80);        // tie: to even
  EXPECT_EQ(float_to_bf16(1.0f + 3.0f / 256), 0x3f82);
  for (uint32_t h = 0; h < 65536; h += 7) {
    float f = bf16_to_float(static_cast<uint16_t>(h));
    if (!std::isnan(f)) ASSERT_EQ(float_to_bf16(f), h);
  }
}

TEST(CollReduceHost, EveryTypeAndOperatorAgainstFloat64) {
  std::mt19937_64 rng(3);
  for (DataType dt : all_dtypes())
    for (RedOp op : all_redops()) {
      const size_t count = 333;
      std::vector<std::vector<uint8_t>> in;
      for (int s = 0; s < 5; ++s) in.push_back(random_buffer(dt, op, count, rng));
      std::vector<uint8_t> out(count * dtype_size(dt));
      ReduceArgs a;
      a.dst = out.data();
      for (auto& b : in) a.srcs.push_back(b.data());
      a.count = count;
      a.dtype = dt;
      a.op = op;
      reduce_host(a);
      for (size_t k = 0; k < count; ++k) {
        std::vector<double> xs;
        for (auto& b : in) xs.push_back(get(dt, b, k));
        double want = reference(op, xs);
        ASSERT_NEAR(get(dt, out, k), want, tolerance(dt, want, 5)) << dtype_name(dt) << " " << redop_name(op);
      }
      // In place: dst is the first source.
      a.dst = in[0].data();
      reduce_host(a);
      EXPECT_EQ(in[0], out) << dtype_name(dt) << " " << redop_name(op);
    }
}

TEST(CollReduceHost, IntegerSumWrapsAround) {
  int32_t a = INT32_MAX, b = 1, out = 0;
  ReduceArgs r;
  r.dst = &out;
  r.srcs = {&a, &b};
  r.count = 1;
  r.dtype = GPUSTRIPE_INT32;
  reduce_host(r);
  EXPECT_EQ(out, INT32_MIN);
}

// Two-shot allreduce in place: the destinations are the sources; every copy gets the result.
TEST(CollReduceHost, MoreDestinationsInPlace) {
  std::vector<float> a{1, 2, 3}, b{10, 20, 30}, c{100, 200, 300};
  ReduceArgs r;
  r.dst = a.data();
  r.more_dsts = {b.data(), c.data()};
  r.srcs = {a.data(), b.data(), c.data()};
  r.count = 3;
  reduce_host(r);
  for (const auto* v : {&a, &b, &c}) EXPECT_EQ(*v, (std::vector<float>{111, 222, 333}));
  r.more_dsts = {nullptr};
  EXPECT_THROW(reduce_host(r), Error);
}

// The CPU stand-in of the copy kernel: every segment to each of its destinations, byte exact.
TEST(CollCopyHost, EverySegmentToEveryDestination) {
  std::vector<uint8_t> a(37), b(5), x(37), y(37), z(5);
  for (size_t i = 0; i < a.size(); ++i) a[i] = static_cast<uint8_t>(7 * i + 1);
  for (size_t i = 0; i < b.size(); ++i) b[i] = static_cast<uint8_t>(200 + i);
  CopyArgs c;
  c.segs = {{a.data(), {x.data(), y.data()}, a.size()}, {b.data(), {z.data()}, b.size()}};
  copy_host(c);
  EXPECT_EQ(x, a);
  EXPECT_EQ(y, a);
  EXPECT_EQ(z, b);
  c.segs[1].dsts = {nullptr};
  EXPECT_THROW(copy_host(c), Error);
}

TEST(CollTypes, NamesAndBadValues) {
  EXPECT_EQ(parse_dtype("bfloat16"), GPUSTRIPE_BFLOAT16);
  EXPECT_EQ(parse_redop("max"), GPUSTRIPE_MAX);
  EXPECT_EQ(dtype_size(GPUSTRIPE_FLOAT16), 2u);
  try {
    parse_dtype("float8");
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.status(), GPUSTRIPE_ERR_INVALID_TYPE);
    EXPECT_NE(std::string(e.what()).find("float8"), std::string::npos);
  }
  EXPECT_THROW(dtype_size(static_cast<DataType>(GPUSTRIPE_DTYPE_COUNT)), Error);
  EXPECT_THROW(check_redop(static_cast<RedOp>(-1)), Error);
  EXPECT_EQ(parse_dtype("double_int"), GPUSTRIPE_DOUBLE_INT);
  EXPECT_EQ(dtype_size(GPUSTRIPE_DOUBLE_INT), 16u);  // the C struct {double; int}, padding included
  EXPECT_EQ(dtype_size(GPUSTRIPE_INT16_INT), 8u);
  EXPECT_EQ(parse_redop("maxloc"), GPUSTRIPE_MAXLOC);
}

TEST(CollTypes, WhichOpsApplyToWhichTypes) {
  EXPECT_TRUE(redop_applies(GPUSTRIPE_INT8, GPUSTRIPE_BXOR));
  EXPECT_TRUE(redop_applies(GPUSTRIPE_UINT64, GPUSTRIPE_LAND));
  EXPECT_TRUE(redop_applies(GPUSTRIPE_FLOAT16, GPUSTRIPE_MIN));
  EXPECT_TRUE(redop_applies(GPUSTRIPE_INT_INT, GPUSTRIPE_MINLOC));
  EXPECT_FALSE(redop_applies(GPUSTRIPE_FLOAT32, GPUSTRIPE_BAND));
  EXPECT_FALSE(redop_applies(GPUSTRIPE_FLOAT64, GPUSTRIPE_LOR));
  EXPECT_FALSE(redop_applies(GPUSTRIPE_INT32, GPUSTRIPE_MAXLOC));
  EXPECT_FALSE(redop_applies(GPUSTRIPE_FLOAT_INT, GPUSTRIPE_SUM));
  EXPECT_THROW(check_reduction(GPUSTRIPE_FLOAT32, GPUSTRIPE_BXOR), Error);
  // Sign-blind ops share the unsigned kernel; bitwise ones run on bytes; MIN keeps the sign.
  KernelKey k = kernel_key(GPUSTRIPE_INT32, GPUSTRIPE_SUM, 10, 4);
  EXPECT_EQ(k.dtype, GPUSTRIPE_UINT32);
  k = kernel_key(GPUSTRIPE_INT64, GPUSTRIPE_BOR, 10, 8);
  EXPECT_EQ(k.dtype, GPUSTRIPE_UINT8);
  EXPECT_EQ(k.count, 80u);
  EXPECT_EQ(kernel_key(GPUSTRIPE_INT16, GPUSTRIPE_MIN, 10, 2).dtype, GPUSTRIPE_INT16);
}

// The CPU loops of the integer, logical, bitwise and MINLOC/MAXLOC operators (the CUDA kernels
// share reduce_apply; the MPI tests run them across processes on every type).
TEST(CollReduceHost, IntegerLogicalBitwiseAndLocOps) {
  auto run = [](DataType dt, RedOp op, const void* a, const void* b, void* out, size_t n) {
    ReduceArgs r;
    r.dst = out;
    r.srcs = {a, b};
    r.count = n;
    r.dtype = dt;
    r.op = op;
    reduce_host(r);
  };
  const int8_t a8[3] = {100, -5, -128}, b8[3] = {100, 7, 1};
  int8_t o8[3];
  run(GPUSTRIPE_INT8, GPUSTRIPE_SUM, a8, b8, o8, 3);
  EXPECT_EQ(o8[0], static_cast<int8_t>(-56));  // wraps
  EXPECT_EQ(o8[1], 2);
  run(GPUSTRIPE_INT8, GPUSTRIPE_MIN, a8, b8, o8, 3);
  EXPECT_EQ(o8[2], -128);
  const uint8_t ua[2] = {200, 3}, ub[2] = {100, 250};
  uint8_t uo[2];
  run(GPUSTRIPE_UINT8, GPUSTRIPE_MAX, ua, ub, uo, 2);
  EXPECT_EQ(uo[0], 200);
  EXPECT_EQ(uo[1], 250);
  const int32_t la[4] = {0, 5, 0, -3}, lb[4] = {0, 0, 9, 2};
  int32_t lo[4];
  run(GPUSTRIPE_INT32, GPUSTRIPE_LAND, la, lb, lo, 4);
  EXPECT_EQ(std::vector<int32_t>(lo, lo + 4), (std::vector<int32_t>{0, 0, 0, 1}));
  run(GPUSTRIPE_INT32, GPUSTRIPE_LOR, la, lb, lo, 4);
  EXPECT_EQ(std::vector<int32_t>(lo, lo + 4), (std::vector<int32_t>{0, 1, 1, 1}));
  run(GPUSTRIPE_INT32, GPUSTRIPE_LXOR, la, lb, lo, 4);
  EXPECT_EQ(std::vector<int32_t>(lo, lo + 4), (std::vector<int32_t>{0, 1, 1, 0}));
  const uint16_t ba[1] = {0xF0F0}, bb[1] = {0xFF00};
  uint16_t bo[1];
  run(GPUSTRIPE_UINT16, GPUSTRIPE_BAND, ba, bb, bo, 1);
  EXPECT_EQ(bo[0], 0xF000);
  run(GPUSTRIPE_UINT16, GPUSTRIPE_BXOR, ba, bb, bo, 1);
  EXPECT_EQ(bo[0], 0x0FF0);
  struct FI {
    float v;
    int32_t i;
  };
  const FI pa[3] = {{1.0f, 4}, {2.0f, 9}, {5.0f, 1}}, pb[3] = {{1.0f, 2}, {3.0f, 0}, {-1.0f, 7}};
  FI po[3];
  run(GPUSTRIPE_FLOAT_INT, GPUSTRIPE_MINLOC, pa, pb, po, 3);
  EXPECT_EQ(po[0].i, 2);  // a tie takes the smaller index
  EXPECT_EQ(po[1].v, 2.0f);
  EXPECT_EQ(po[1].i, 9);
  EXPECT_EQ(po[2].i, 7);
  run(GPUSTRIPE_FLOAT_INT, GPUSTRIPE_MAXLOC, pa, pb, po, 3);
  EXPECT_EQ(po[0].i, 2);
  EXPECT_EQ(po[1].v, 3.0f);
  EXPECT_EQ(po[2].v, 5.0f);
  ReduceArgs bad;
  bad.dst = po;
  bad.srcs = {pa};
  bad.count = 1;
  bad.dtype = GPUSTRIPE_FLOAT_INT;
  bad.op = GPUSTRIPE_SUM;
  EXPECT_THROW(reduce_host(bad), Error);
}

TeamResources h200(int n) {
  Topology topo = load_topology_file("h200x4");
  TeamResources r;
  r.n = n;
  r.nvswitch = true;
  r.nvlink_gbps = topo.nvlink_egress_gbps(0);
  r.host_gbps = topo.host_link_gbps(0);
  return r;
}

TEST(CollSelect, SizeDecidesTheSchedule) {
  TeamResources r = h200(4);
  EXPECT_EQ(choose_schedule(CollOp::AllReduce, r, 64 << 10, 4).name, "oneshot");
  EXPECT_EQ(choose_schedule(CollOp::AllReduce, r, 256 << 10, 4).name, "oneshot");
  EXPECT_EQ(choose_schedule(CollOp::AllReduce, r, 2 << 20, 4).name, "twoshot");
  EXPECT_EQ(choose_schedule(CollOp::AllReduce, r, 16 << 20, 4).name, "twoshot");
  // Pushed inputs for two-shot allreduce from 32M to 64M per rank only, never reduce-scatter.
  EXPECT_FALSE(choose_schedule(CollOp::AllReduce, r, 16 << 20, 4).reduce.push);
  EXPECT_TRUE(choose_schedule(CollOp::AllReduce, r, 64 << 20, 4).reduce.push);
  EXPECT_FALSE(choose_schedule(CollOp::AllReduce, r, 256 << 20, 4).reduce.push);
  EXPECT_FALSE(choose_schedule(CollOp::ReduceScatter, r, 64 << 20, 4).reduce.push);
  EXPECT_FALSE(choose_schedule(CollOp::AllReduce, h200(2), 64 << 20, 4).reduce.push);
  EXPECT_FALSE(choose_schedule(CollOp::AllReduce, r, 256 << 20, 4).why.empty());
  {
    // The copy-engine allreduce from Tuning::ar_copy_min, over more than 2 GPUs, with flags.
    Tuning t;
    t.ar_copy_min = 32 << 20;
    t.rs_order = Tuning::Order::Chunks;
    EXPECT_EQ(choose_schedule(CollOp::AllReduce, r, 16 << 20, 4, t).name, "twoshot");
    Choice ar = choose_schedule(CollOp::AllReduce, r, 32 << 20, 4, t);
    EXPECT_EQ(ar.name, "rs_ag_copy");
    EXPECT_TRUE(ar.reduce.flags);
    EXPECT_GT(ar.reduce.chunks, 1);
    EXPECT_EQ(choose_schedule(CollOp::AllReduce, h200(2), 128 << 20, 4, t).name, "twoshot");
  }
  {
    // 2 GPUs that map each other: the copy engines' two-shot from Tuning::ar_ce_min_2,
    // round-major (one copy per input half), no flags; two-shot kernels below it.
    Choice ce = choose_schedule(CollOp::AllReduce, h200(2), 256 << 20, 4);
    EXPECT_EQ(ce.name, "ce_twoshot");
    EXPECT_TRUE(ce.reduce.by_round && ce.reduce.ag_stores && !ce.reduce.flags && !ce.reduce.pull);
    EXPECT_EQ(choose_schedule(CollOp::AllReduce, h200(2), 128 << 20, 4).name, "twoshot");
    Tuning lower;
    lower.ar_ce_min_2 = 32 << 20;
    EXPECT_EQ(choose_schedule(CollOp::AllReduce, h200(2), 32 << 20, 4, lower).name, "ce_twoshot");
    EXPECT_EQ(choose_schedule(CollOp::AllReduce, h200(2), 16 << 20, 4, lower).name, "twoshot");
    EXPECT_EQ(choose_schedule(CollOp::AllReduce, r, 64 << 20, 4, lower).name, "twoshot");  // 2 GPUs only
    Tuning chunks;
    chunks.rs_order = Tuning::Order::Chunks;
    EXPECT_FALSE(choose_schedule(CollOp::AllReduce, h200(2), 256 << 20, 4, chunks).reduce.by_round);
    TeamResources unmapped = h200(2);
    unmapped.all_peer = false;
    EXPECT_EQ(choose_schedule(CollOp::AllReduce, unmapped, 256 << 20, 4).name, "rs_ag_copy");
  }
  EXPECT_EQ(choose_schedule(CollOp::ReduceScatter, r, 1 << 20, 4).name, "rs_pull");
  // Kernels reading the peers up to 128M per rank; round-major copy engines into scratch from 256M,
  // with 1 block per SM per fold and an 8M tail, no host share of the inputs.
  Choice rs = choose_schedule(CollOp::ReduceScatter, r, 128 << 20, 4);
  EXPECT_EQ(rs.name, "rs_pull");
  EXPECT_EQ(rs.reduce.chunks, 1);
  Choice rs_big = choose_schedule(CollOp::ReduceScatter, r, 256 << 20, 4);
  EXPECT_EQ(rs_big.name, "rs_copy");
  EXPECT_TRUE(rs_big.reduce.by_round);
  EXPECT_EQ(rs_big.reduce.tail, size_t(8) << 20);
  EXPECT_EQ(rs_big.reduce.fold_blocks_per_sm, 1);
  EXPECT_TRUE(rs_big.reduce.flags);
  EXPECT_EQ(choose_schedule(CollOp::ReduceScatter, h200(2), size_t(1) << 30, 4).name, "rs_pull");
  // Allreduce: two-shot kernels below 128M, then the round-major reduce-scatter and each block
  // gathered whole by copy engines with 5% of it through the host.
  EXPECT_EQ(choose_schedule(CollOp::AllReduce, r, 64 << 20, 4).name, "twoshot");
  EXPECT_EQ(choose_schedule(CollOp::AllReduce, r, 128 << 20, 4).name, "rs_ag_copy");
  Choice ar_big = choose_schedule(CollOp::AllReduce, r, 256 << 20, 4);
  EXPECT_EQ(ar_big.name, "rs_ag_copy");
  EXPECT_TRUE(ar_big.reduce.by_round && ar_big.reduce.gather_whole && ar_big.reduce.flags);
  EXPECT_DOUBLE_EQ(ar_big.reduce.gather_host_share, 0.05);
  EXPECT_EQ(choose_schedule(CollOp::AllReduce, h200(2), size_t(1) << 30, 4).name, "ce_twoshot");
  {
    // Not where peers are unmapped (the MPI interposer's teams): chunks there, as before.
    TeamResources unmapped = r;
    unmapped.all_peer = false;
    Choice c = choose_schedule(CollOp::ReduceScatter, unmapped, 256 << 20, 4);
    EXPECT_EQ(c.name, "rs_copy");
    EXPECT_FALSE(c.reduce.by_round);
    Tuning chunks;
    chunks.rs_order = Tuning::Order::Chunks;
    EXPECT_FALSE(choose_schedule(CollOp::ReduceScatter, r, 256 << 20, 4, chunks).reduce.by_round);
  }
  // Copy kernels with the barrier inside up to Tuning::sm_max where peers are mapped.
  EXPECT_EQ(choose_schedule(CollOp::AllToAll, r, 256 << 10, 4).name, "sm");
  EXPECT_TRUE(choose_schedule(CollOp::AllGather, r, 16 << 20, 4).exchange.kernel);
  EXPECT_EQ(choose_schedule(CollOp::AllToAll, r, 128 << 20, 4).name, "sm");
  EXPECT_EQ(choose_schedule(CollOp::AllToAll, r, 256 << 20, 4).name, "rounds");
  EXPECT_EQ(choose_schedule(CollOp::AllGather, h200(2), 128 << 20, 4).name, "sm");  // a pair: the same crossover
  EXPECT_EQ(choose_schedule(CollOp::AllGather, h200(2), 256 << 20, 4).name, "rounds");
  Choice a2a = choose_schedule(CollOp::AllToAll, r, size_t(1) << 30, 4);
  EXPECT_EQ(a2a.name, "rounds");
  // Host share on a 4-GPU NVSwitch node: the measured shares from 64M blocks (256M per rank)
  // on, in 2 host chunks; none for smaller blocks (at 16M blocks every share measured lost).
  EXPECT_DOUBLE_EQ(a2a.exchange.host_share, 0.05);
  EXPECT_EQ(a2a.exchange.host_chunks, 2);
  EXPECT_DOUBLE_EQ(choose_schedule(CollOp::AllToAll, r, 256 << 20, 4).exchange.host_share, 0.05);
  EXPECT_DOUBLE_EQ(choose_schedule(CollOp::AllGather, r, 256 << 20, 4).exchange.host_share, 0.08);
  EXPECT_DOUBLE_EQ(choose_schedule(CollOp::AllGather, r, size_t(1) << 30, 4).exchange.host_share, 0.07);
  EXPECT_EQ(choose_schedule(CollOp::AllToAll, r, 64 << 20, 4).exchange.host_share, 0);
  EXPECT_EQ(choose_schedule(CollOp::AllToAll, r, 16 << 20, 4).exchange.host_share, 0);
  Choice b = choose_schedule(CollOp::Bcast, r, 8 << 20, 4);
  EXPECT_EQ(b.name, "sm");
  EXPECT_TRUE(b.bcast.kernel);
  EXPECT_EQ(choose_schedule(CollOp::Bcast, h200(2), 512 << 10, 4).name, "sm");
  EXPECT_EQ(choose_schedule(CollOp::Bcast, h200(2), size_t(1) << 30, 4).name, "direct");  // Tuning::bcast_sm_max_2
  EXPECT_EQ(choose_schedule(CollOp::Bcast, r, size_t(1) << 30, 4).name, "sm");
  {
    // Copy engines where peers are not mapped: chain from chain_min, scatter-allgather from rounds_min.
    TeamResources unmapped = r;
    unmapped.all_peer = false;
    EXPECT_EQ(choose_schedule(CollOp::Bcast, unmapped, 64 << 20, 4).name, "chain");
    EXPECT_EQ(choose_schedule(CollOp::Bcast, unmapped, 8 << 20, 4).name, "scatter_ag");
    EXPECT_EQ(choose_schedule(CollOp::Bcast, unmapped, 512 << 10, 4).name, "direct");
    Tuning t;
    t.bcast_sm_max_2 = 0;
    EXPECT_EQ(choose_schedule(CollOp::Bcast, h200(2), 64 << 20, 4, t).name, "direct");
  }
  {
    Tuning t;
    t.sm_max = 0;
    EXPECT_EQ(choose_schedule(CollOp::AllToAll, r, 256 << 10, 4, t).name, "all_at_once");
    t.rounds_min = 32 << 10;
    EXPECT_EQ(choose_schedule(CollOp::AllToAll, r, 256 << 10, 4, t).name, "rounds");
  }
}

// The copy-engine reductions from their thresholds: over more than 2 GPUs that map peers, with
// flags.
TEST(CollSelect, LargeMessageSchedulesFromTheirThresholds) {
  Tuning t;
  t.rs_copy_min = 128 << 20;
  TeamResources r = h200(4);
  Choice rsc = choose_schedule(CollOp::ReduceScatter, r, 128 << 20, 4, t);
  EXPECT_EQ(rsc.name, "rs_copy");
  EXPECT_TRUE(rsc.reduce.flags && !rsc.reduce.ag_stores);
  EXPECT_EQ(choose_schedule(CollOp::ReduceScatter, r, 64 << 20, 4, t).name, "rs_pull");
  EXPECT_EQ(choose_schedule(CollOp::ReduceScatter, h200(2), 256 << 20, 4, t).name, "rs_pull");
  {
    // ce_twoshot only by name.
    ScopedEnv algo("GPUSTRIPE_COLL_ALGO", "ce_twoshot");
    Choice big = choose_schedule(CollOp::AllReduce, r, 256 << 20, 4);
    EXPECT_EQ(big.name, "ce_twoshot");
    EXPECT_TRUE(big.reduce.ag_stores && big.reduce.flags && !big.reduce.pull);
  }
  TeamResources unmapped = r;
  unmapped.all_peer = false;
  EXPECT_NE(choose_schedule(CollOp::AllReduce, unmapped, 256 << 20, 4).name, "ce_twoshot");
}

TEST(CollSelect, PlannerShareIsCappedByTheNominalBound) {
  // Nodes the shares were not measured on (here 4 GPUs without NVSwitch): the planner's share
  // for one round, capped by the nominal bound.
  TeamResources r = h200(4);
  r.nvswitch = false;
  double bound = auto_host_share(CollOp::AllToAll, r);
  const size_t big = size_t(1) << 30;
  EXPECT_TRUE(wants_host_share(CollOp::AllToAll, r, big));
  EXPECT_FALSE(wants_host_share(CollOp::AllReduce, r, big));
  EXPECT_FALSE(wants_host_share(CollOp::AllToAll, r, 16 << 20));
  Choice low = choose_schedule(CollOp::AllToAll, r, big, 4, Tuning(), {0.01, 0});
  EXPECT_DOUBLE_EQ(low.exchange.host_share, 0.01);
  EXPECT_NE(low.why.find("planner"), std::string::npos) << low.why;
  EXPECT_DOUBLE_EQ(choose_schedule(CollOp::AllToAll, r, big, 4, Tuning(), {0.2, 0}).exchange.host_share, bound);
  EXPECT_DOUBLE_EQ(choose_schedule(CollOp::AllGather, r, big, 4, Tuning(), {0.0, 0}).exchange.host_share, 0.0);
}

// A broadcast's host share: the tuning's at any size and team; else, on 2 members, the planner's
// for the pair (share and chunks); none over more members or where the planner gives none.
TEST(CollSelect, BroadcastHostShareIsTheTuningsOrThePlannersForAPair) {
  const size_t big = size_t(1) << 30;
  EXPECT_TRUE(wants_bcast_host_share(h200(2)));
  EXPECT_FALSE(wants_bcast_host_share(h200(4)));
  Tuning forced;
  forced.bcast_host_share = 0.2;
  EXPECT_FALSE(wants_bcast_host_share(h200(2), forced));
  for (int n : {2, 4}) {
    Choice c = choose_schedule(CollOp::Bcast, h200(n), 300000, 1, forced, PlannedHost{0.05, 3});
    EXPECT_DOUBLE_EQ(c.bcast.host_share, 0.2) << n;
    EXPECT_GE(c.bcast.host_chunks, 2) << n;
    EXPECT_NE(c.describe().find("host=20.0%"), std::string::npos) << c.describe();
  }
  Choice pair = choose_schedule(CollOp::Bcast, h200(2), big, 1, Tuning(), PlannedHost{0.08, 6});
  EXPECT_DOUBLE_EQ(pair.bcast.host_share, 0.08);
  EXPECT_EQ(pair.bcast.host_chunks, 6);
  EXPECT_NE(pair.why.find("planner"), std::string::npos) << pair.why;
  EXPECT_DOUBLE_EQ(choose_schedule(CollOp::Bcast, h200(4), big, 1, Tuning(), PlannedHost{0.08, 6}).bcast.host_share, 0);
  EXPECT_DOUBLE_EQ(choose_schedule(CollOp::Bcast, h200(2), big, 1, Tuning(), PlannedHost{0, 0}).bcast.host_share, 0);
  EXPECT_DOUBLE_EQ(choose_schedule(CollOp::Bcast, h200(2), big, 1).bcast.host_share, 0);
  // Other collectives never take it.
  EXPECT_DOUBLE_EQ(choose_schedule(CollOp::AllReduce, h200(2), big, 4, forced).bcast.host_share, 0);
  // A description names the schedule's own fields only: no reduction's chunks and slots on a
  // broadcast or an exchange, with a host share or without.
  for (const Choice& c : {pair, choose_schedule(CollOp::Bcast, h200(2), 4 << 20, 1),
                          choose_schedule(CollOp::AllToAll, h200(4), big, 4)})
    EXPECT_EQ(c.describe().find("slots="), std::string::npos) << c.describe();
  EXPECT_NE(choose_schedule(CollOp::AllReduce, h200(4), big, 4).describe().find("slots="), std::string::npos);
}

// The threshold is the model's: no host path for a small message, the plan's share for a large
// one (the nominal H200 figures: NVLink beside one GPU's PCIe link).
TEST(CollSelect, BroadcastHostShareIsZeroBelowTheModelsThreshold) {
  ScopedEnv prof("GPUSTRIPE_PROFILE", nullptr);
  ScopedEnv cache("XDG_CACHE_HOME", "/nonexistent-gpustripe-test");
  ScopedEnv plan("GPUSTRIPE_PLAN", "model");
  std::unique_ptr<Planner> planner = make_planner(load_topology_file("h200x4"));
  const PlannedHost small = plan_pair_host(*planner, {0, 1, 2, 3}, 1 << 20);
  const PlannedHost large = plan_pair_host(*planner, {0, 1, 2, 3}, size_t(1) << 30);
  EXPECT_DOUBLE_EQ(small.share, 0);
  EXPECT_GT(large.share, 0);
  EXPECT_LT(large.share, 0.5);
  EXPECT_GE(large.chunks, 1);
  EXPECT_DOUBLE_EQ(choose_schedule(CollOp::Bcast, h200(2), 1 << 20, 1, Tuning(), small).bcast.host_share, 0);
  Choice c = choose_schedule(CollOp::Bcast, h200(2), size_t(1) << 30, 1, Tuning(), large);
  EXPECT_DOUBLE_EQ(c.bcast.host_share, large.share);
  EXPECT_EQ(c.bcast.host_chunks, std::clamp(large.chunks, 1, 32));
}

TEST(CollSelect, NoPeerAccessMeansCopyEngines) {
  TeamResources r = h200(4);
  r.all_peer = false;
  EXPECT_EQ(choose_schedule(CollOp::AllReduce, r, 64 << 10, 4).name, "rs_ag_copy");
  EXPECT_EQ(choose_schedule(CollOp::ReduceScatter, r, 64 << 10, 4).name, "rs_copy");
  // Copy kernels store into peers: not without the mappings.
  EXPECT_EQ(choose_schedule(CollOp::AllToAll, r, 256 << 10, 4).name, "all_at_once");
  EXPECT_EQ(choose_schedule(CollOp::Bcast, r, 512 << 10, 4).name, "direct");
  {
    ScopedEnv algo("GPUSTRIPE_COLL_ALGO", "sm");
    EXPECT_THROW(choose_schedule(CollOp::AllGather, r, 64 << 10, 4), Error);
    EXPECT_THROW(choose_schedule(CollOp::Bcast, r, 64 << 10, 4), Error);
  }
  ScopedEnv algo("GPUSTRIPE_COLL_ALGO", "rs_pull");
  EXPECT_THROW(choose_schedule(CollOp::ReduceScatter, r, 64 << 10, 4), Error);
}

// Round-major copy reductions where asked for, also on teams whose kernels cannot read peers
// (the MPI collectives' IPC mappings on CUDA).
TEST(CollSelect, RoundMajorCopyReductionsWhereAsked) {
  TeamResources r = h200(4);
  r.all_peer = false;
  EXPECT_FALSE(choose_schedule(CollOp::ReduceScatter, r, 256 << 20, 4).reduce.by_round);
  Tuning t;
  t.rs_order = Tuning::Order::Rounds;
  for (CollOp op : {CollOp::ReduceScatter, CollOp::AllReduce, CollOp::Reduce}) {
    Choice c = choose_schedule(op, r, 16 << 20, 4, t);
    EXPECT_TRUE(c.reduce.by_round) << c.describe();
    EXPECT_NE(c.name.find("copy"), std::string::npos) << c.describe();
  }
  t.rs_order = Tuning::Order::Chunks;
  EXPECT_FALSE(choose_schedule(CollOp::AllReduce, h200(4), 256 << 20, 4, t).reduce.by_round);
}

// Two members broadcast directly, or as a chain from Tuning::chain_min where the team asks
// for it (the MPI collectives: measured faster there from 32M).
TEST(CollSelect, ChainPairsBroadcastLargeMessagesAsAChain) {
  TeamResources r = h200(2);
  r.all_peer = false;
  EXPECT_EQ(choose_schedule(CollOp::Bcast, r, 64 << 20, 4).name, "direct");
  r.chain_pairs = true;
  EXPECT_EQ(choose_schedule(CollOp::Bcast, r, 16 << 20, 4).name, "direct");
  Choice c = choose_schedule(CollOp::Bcast, r, 64 << 20, 4);
  EXPECT_EQ(c.name, "chain");
  EXPECT_TRUE(c.bcast.chain);
  EXPECT_EQ(c.bcast.chunks, 8);
}

TEST(CollSelect, AHostPacedPairTimesItsBroadcastsFormsUpToTheChain) {
  using Forms = std::vector<std::string>;
  TeamResources r = h200(2);
  r.chain_pairs = true;  // as the interposer's teams
  EXPECT_TRUE(measured_candidates(CollOp::Bcast, r, 4 << 20, Tuning()).empty());  // not host-paced (NodeTeam)
  r.host_paced = true;
  EXPECT_EQ(measured_candidates(CollOp::Bcast, r, 4 << 20, Tuning()), (Forms{"sm", "direct"}));
  EXPECT_EQ(measured_candidates(CollOp::Bcast, r, 1, Tuning()), (Forms{"sm", "direct"}));
  EXPECT_TRUE(measured_candidates(CollOp::Bcast, r, 0, Tuning()).empty());
  // From Tuning::chain_min the copy-engine form is the chain: no trials.
  EXPECT_TRUE(measured_candidates(CollOp::Bcast, r, 32 << 20, Tuning()).empty());
  EXPECT_EQ(measured_candidates(CollOp::Bcast, r, (32 << 20) - 1, Tuning()), (Forms{"sm", "direct"}));
  EXPECT_TRUE(measured_candidates(CollOp::AllReduce, r, 4 << 20, Tuning()).empty());
  EXPECT_TRUE(measured_candidates(CollOp::Bcast, h200(3), 4 << 20, Tuning()).empty());
  TeamResources unmapped = r;
  unmapped.all_peer = false;
  EXPECT_TRUE(measured_candidates(CollOp::Bcast, unmapped, 4 << 20, Tuning()).empty());
  // The measured form is taken as it comes; without one, the size decides as before.
  EXPECT_EQ(choose_schedule(CollOp::Bcast, r, 4 << 20, 4).name, "sm");
  Choice d = choose_schedule(CollOp::Bcast, r, 4 << 20, 4, Tuning(), {}, "direct");
  EXPECT_EQ(d.name, "direct");
  EXPECT_FALSE(d.bcast.kernel);
  EXPECT_TRUE(choose_schedule(CollOp::Bcast, r, 4 << 20, 4, Tuning(), {}, "sm").bcast.kernel);
  EXPECT_THROW(choose_schedule(CollOp::Bcast, r, 4 << 20, 4, Tuning(), {}, "chain"), Error);
  {
    // A forced schedule skips the trials and wins over a measured form.
    ScopedEnv algo("GPUSTRIPE_COLL_ALGO", "direct");
    EXPECT_TRUE(measured_candidates(CollOp::Bcast, r, 4 << 20, Tuning()).empty());
    EXPECT_EQ(choose_schedule(CollOp::Bcast, r, 4 << 20, 4, Tuning(), {}, "sm").name, "direct");
  }
  {
    ScopedEnv algo("GPUSTRIPE_COLL_ALGO", "oneshot");  // another op's: the broadcast is still timed
    EXPECT_EQ(measured_candidates(CollOp::Bcast, r, 4 << 20, Tuning()), (Forms{"sm", "direct"}));
  }
}

TEST(CollSelect, SettingsForceAndAreChecked) {
  TeamResources r = h200(4);
  {
    ScopedEnv algo("GPUSTRIPE_COLL_ALGO", "all_at_once,rs_ag_pull");
    EXPECT_EQ(choose_schedule(CollOp::AllGather, r, 1 << 30, 4).name, "all_at_once");
    EXPECT_EQ(choose_schedule(CollOp::AllReduce, r, 1 << 30, 4).name, "rs_ag_pull");
    EXPECT_EQ(choose_schedule(CollOp::ReduceScatter, r, 64 << 20, 4).name, "rs_pull");  // not named: auto
  }
  {
    ScopedEnv algo("GPUSTRIPE_COLL_ALGO", "fastest");
    try {
      choose_schedule(CollOp::AllGather, r, 1 << 20, 4);
      FAIL();
    } catch (const Error& e) {
      EXPECT_EQ(e.status(), GPUSTRIPE_ERR_CONFIG);
      EXPECT_NE(std::string(e.what()).find("fastest"), std::string::npos);
    }
  }
  {
    Tuning t;
    t.host_share = 0.9;
    EXPECT_THROW(choose_schedule(CollOp::AllGather, r, 1 << 30, 4, t), Error);
    t.host_share = 0;
    EXPECT_EQ(choose_schedule(CollOp::AllGather, r, 1 << 30, 4, t).exchange.host_share, 0);
  }
}

// Tuning as text (the MPI test programs' processes get it so): every field by name, sizes with
// suffixes, unknown names and bad values refused.
TEST(CollSelect, TuningSetsFieldsByName) {
  Tuning t;
  t.set("chunk", "8K");
  t.set("max_chunks", "8");
  t.set("rs_order", "rounds");
  t.set("host_share", "0.25");
  t.set("graphs", "0");
  EXPECT_EQ(t.chunk, 8u << 10);
  EXPECT_EQ(t.max_chunks, 8);
  EXPECT_EQ(t.rs_order, Tuning::Order::Rounds);
  EXPECT_DOUBLE_EQ(t.host_share, 0.25);
  EXPECT_FALSE(t.graphs);
  EXPECT_THROW(t.set("chunks", "8K"), Error);
  EXPECT_THROW(t.set("rs_order", "sideways"), Error);
  EXPECT_THROW(t.set("chunk", "lots"), Error);
  t.chunk = 0;
  EXPECT_THROW(t.validate(), Error);
}

TEST(CollSelect, TwoSocketNodeGetsHierarchicalAllreduce) {
  Topology topo = load_topology_file("mist-ac922");
  auto backend = make_emulated_backend(topo);
  auto comm = Comm::create(*backend, topo, {0, 1, 2, 3});
  EXPECT_EQ(comm->resources().socket_groups.size(), 2u);
  EXPECT_EQ(choose_schedule(CollOp::AllReduce, comm->resources(), 256 << 20, 4).name, "hier");
  auto two = Comm::create(*backend, topo, {0, 1});  // one socket: flat
  EXPECT_TRUE(two->resources().socket_groups.empty());
}

// Fake per-rank pointers: the builders only do arithmetic on them.
std::vector<char*> fake(int n, uintptr_t base) {
  std::vector<char*> v;
  for (int i = 0; i < n; ++i) v.push_back(reinterpret_cast<char*>(base * (i + 1)));
  return v;
}

// The staged slots `s` for a rank whose buffers are host memory: copy engines store and copy out
// its parts, its own reduced in its temporary buffer `temp`.
Staged on_host(Staged s, char* temp) {
  s.direct = false;
  s.send_dev = s.recv_dev = kHostDevice;
  s.temp = temp;
  return s;
}

// Four members of the h200x4 emulation with fake buffers: what the exchange builders take.
struct Exchange4 {
  static constexpr int n = 4;
  Topology topo = load_topology_file("h200x4");
  std::unique_ptr<Backend> backend = make_emulated_backend(topo);
  Scratch scratch{*backend, {0, 1, 2, 3}};
  Team t{{0, 1, 2, 3}, {0, 1, 2, 3}};
  std::vector<char*> send = fake(n, 1 << 30);
  std::vector<const char*> csend = std::vector<const char*>(send.begin(), send.end());
  std::vector<char*> recv = fake(n, 1ull << 40);
};

TEST(CollSchedules, PermutationRoundsSendAndReceiveOneBlockPerRound) {
  const int n = 4;
  Topology topo = load_topology_file("h200x4");
  auto backend = make_emulated_backend(topo);
  Scratch scratch(*backend, {0, 1, 2, 3});
  Team t{{0, 1, 2, 3}, {0, 1, 2, 3}};
  Program p(n);
  auto send = fake(n, 1 << 30);
  std::vector<const char*> csend(send.begin(), send.end());
  build_alltoall(p, t, csend, fake(n, 1ull << 40), 1 << 20, ExchangeOpts{}, scratch);
  // Per sender, the peer copies on its out lane go to (i+1), (i+2), (i+3) in that order:
  // in round r every GPU has exactly one destination and one source.
  std::map<int, std::vector<int>> dests;
  for (const Op& op : p.ops())
    if (op.kind == Op::Copy && op.lane == kLaneOut) dests[op.rank].push_back(op.dst_dev);
  for (int i = 0; i < n; ++i) {
    ASSERT_EQ(dests[i].size(), 3u);
    for (int r = 0; r < 3; ++r) EXPECT_EQ(dests[i][r], (i + r + 1) % n);
  }
  for (int r = 0; r < 3; ++r) {
    std::set<int> receivers;
    for (int i = 0; i < n; ++i) receivers.insert(dests[i][r]);
    EXPECT_EQ(receivers.size(), size_t(n)) << "round " << r;
  }
  EXPECT_EQ(p.copy_bytes(), size_t(n) * n << 20);  // n-1 peer blocks + 1 local per rank
}

// The sm exchanges: every block (own and peers') one kernel copy by its sender, no deps, no
// host path; per rank the copies form one segment per source (allgather: one, read once).
TEST(CollSchedules, KernelExchangesCopyEveryBlockOnceBySender) {
  Exchange4 x;
  const int n = Exchange4::n;
  Scratch& scratch = x.scratch;
  const Team& t = x.t;
  const std::vector<const char*>& csend = x.csend;
  const std::vector<char*>& recv = x.recv;
  const size_t block = 1000 * 4 + 3;
  ExchangeOpts o;
  o.kernel = true;
  o.host_share = 0.25;  // ignored: kernels store over NVLink only
  for (bool gather : {false, true}) {
    Program p(n);
    if (gather) build_allgather(p, t, csend, recv, block, o, scratch);
    else build_alltoall(p, t, csend, recv, block, o, scratch);
    ASSERT_EQ(p.size(), size_t(n * n));
    std::map<int, std::vector<const Op*>> by_rank;
    for (const Op& op : p.ops()) {
      ASSERT_EQ(op.kind, Op::Copy);
      EXPECT_TRUE(op.by_kernel);
      EXPECT_TRUE(op.deps.empty());
      EXPECT_EQ(op.bytes, block);
      EXPECT_NE(op.dst_dev, kHostDevice);
      EXPECT_EQ(op.src_dev, op.rank);
      EXPECT_EQ(op.dst, recv[op.dst_dev] + op.rank * block);
      EXPECT_EQ(op.src, gather ? csend[op.rank] : csend[op.rank] + op.dst_dev * block);
      by_rank[op.rank].push_back(&op);
    }
    for (int i = 0; i < n; ++i) {
      ASSERT_EQ(by_rank[i].size(), size_t(n));
      EXPECT_EQ(by_rank[i][0]->dst_dev, i);  // the own block first
      std::vector<CopySegment> segs = copy_segments(by_rank[i]);
      ASSERT_EQ(segs.size(), gather ? 1u : size_t(n));
      EXPECT_EQ(segs[0].dsts.size(), gather ? size_t(n) : 1u);
      EXPECT_EQ(segs[0].src_dev, i);  // pushes: the sender's own memory
    }
  }
}

// Broadcast by copy kernels: pieces tile the message, each read once from the root by its
// member and stored into every non-root member.
TEST(CollSchedules, KernelBroadcastInPieces) {
  Team t{{0, 1, 2, 3}, {0, 1, 2, 3}};
  auto bufs = fake(4, 1 << 30);
  const size_t bytes = 10000 + 1;
  const int root = 2;
  {
    BcastOpts o;
    o.kernel = true;
    Program p(4);
    build_bcast(p, t, bufs, bytes, root, o);
    std::map<int, size_t> got;  // bytes each member receives
    std::map<int, std::vector<const Op*>> by_rank;
    for (const Op& op : p.ops()) {
      ASSERT_EQ(op.kind, Op::Copy);
      EXPECT_TRUE(op.by_kernel);
      EXPECT_TRUE(op.deps.empty());
      EXPECT_EQ(op.src_dev, root);
      EXPECT_NE(op.dst_dev, root);
      EXPECT_EQ(static_cast<const char*>(op.src) - bufs[root], static_cast<char*>(op.dst) - bufs[op.dst_dev]);
      got[op.dst_dev] += op.bytes;
      by_rank[op.rank].push_back(&op);
    }
    for (int k : {0, 1, 3}) EXPECT_EQ(got[k], bytes) << " member " << k;
    EXPECT_EQ(by_rank.count(root), 0u);
    size_t read = 0;  // bytes read from the root, over all members
    for (auto& [rank, ops] : by_rank) {
      std::vector<CopySegment> segs = copy_segments(ops);
      ASSERT_EQ(segs.size(), 1u);
      EXPECT_EQ(segs[0].dsts.size(), 3u);
      read += segs[0].bytes;
    }
    EXPECT_EQ(read, bytes);
  }
}

// A host share: every member's buffer is written exactly once over [0, bytes) -- the NVLink form
// up to the tail, the tail by H2D copies of the root's D2H chunks (each H2D waits for its chunk's
// D2H), on the host lanes, through the scratch's host buffer.
TEST(CollSchedules, BroadcastHostTailGoesD2HByTheRootAndH2DByEveryMember) {
  Topology topo = load_topology_file("h200x4");
  auto backend = make_emulated_backend(topo);
  for (int n : {2, 3}) {
    for (int root : {0, 1}) {
      for (bool kernel : {false, true}) {
        Team t;
        for (int r = 0; r < n; ++r) t.rank.push_back(r), t.dev.push_back(r);
        Scratch scratch(*backend, t.dev);
        auto bufs = fake(n, 1 << 30);
        BcastOpts o;
        o.kernel = kernel;
        o.scatter_allgather = n > 2;
        o.chunks = 2;
        o.host_share = 0.3;
        o.host_chunks = 5;
        const size_t bytes = 100003;
        const size_t host_bytes = size_t(bytes * 0.3) / 256 * 256, nv = bytes - host_bytes;
        Program p(n);
        build_bcast(p, t, bufs, bytes, root, o, &scratch);
        std::map<int, std::vector<std::pair<size_t, size_t>>> written;  // member -> [off, end)
        size_t d2h = 0, d2h_bytes = 0;
        std::set<const void*> staged;
        for (const Op& op : p.ops()) {
          ASSERT_EQ(op.kind, Op::Copy);
          if (op.dst_dev == kHostDevice) {
            EXPECT_EQ(op.rank, root);
            EXPECT_EQ(op.lane, kLaneD2H);
            EXPECT_EQ(op.src_dev, root);
            EXPECT_GE(static_cast<const char*>(op.src) - bufs[root], static_cast<ptrdiff_t>(nv));
            ++d2h;
            d2h_bytes += op.bytes;
            staged.insert(op.dst);
            continue;
          }
          const size_t off = static_cast<char*>(op.dst) - bufs[op.dst_dev];
          written[op.dst_dev].push_back({off, off + op.bytes});
          if (op.src_dev == kHostDevice) {
            EXPECT_EQ(op.rank, op.dst_dev);
            EXPECT_EQ(op.lane, kLaneH2D);
            EXPECT_GE(off, nv);
            ASSERT_EQ(op.deps.size(), 1u);
            const Op& from = p.ops()[op.deps[0]];
            EXPECT_EQ(from.dst, op.src);
            EXPECT_EQ(from.bytes, op.bytes);
            EXPECT_EQ(static_cast<const char*>(from.src) - bufs[root], static_cast<ptrdiff_t>(off));
          } else {
            EXPECT_LE(off + op.bytes, nv);
          }
        }
        EXPECT_EQ(d2h, 5u);
        EXPECT_EQ(d2h_bytes, host_bytes);
        EXPECT_EQ(staged.count(scratch.host(0)), 1u);
        EXPECT_EQ(written.count(root), 0u);
        for (int k = 0; k < n; ++k) {
          if (k == root) continue;
          auto w = written[k];
          std::sort(w.begin(), w.end());
          size_t at = 0;
          for (auto [b, e] : w) {
            EXPECT_EQ(b, at) << "member " << k << " n " << n << " root " << root << " kernel " << kernel;
            at = e;
          }
          EXPECT_EQ(at, bytes) << "member " << k;
        }
      }
    }
  }
}

TEST(CollSchedules, ChainBroadcastSendsEveryChunkOnceAlongTheMembers) {
  const int n = 4, root = 2, chunks = 5;
  Team t{{0, 1, 2, 3}, {0, 1, 2, 3}};
  auto bufs = fake(n, 1 << 30);
  BcastOpts o;
  o.chain = true;
  o.chunks = chunks;
  const size_t bytes = (10 << 20) + 12345;
  Program p(n);
  build_bcast(p, t, bufs, bytes, root, o);
  // Hops root->3->0->1; per hop the chunks tile the message; each hop's copy of a chunk
  // waits for the previous hop's copy of it; chunks alternate between two lanes.
  const std::vector<int> order{2, 3, 0, 1};
  std::map<int, size_t> covered;  // sender -> bytes sent
  for (size_t i = 0; i < p.size(); ++i) {
    const Op& op = p.ops()[i];
    ASSERT_EQ(op.kind, Op::Copy);
    const int hop = static_cast<int>(std::find(order.begin(), order.end(), op.rank) - order.begin());
    ASSERT_LT(hop, 3) << "the last member forwards nothing";
    EXPECT_EQ(op.dst_dev, order[hop + 1]);
    const size_t off = static_cast<const char*>(op.src) - bufs[op.rank];
    EXPECT_EQ(static_cast<const char*>(op.dst) - bufs[op.dst_dev], static_cast<ptrdiff_t>(off));
    covered[op.rank] += op.bytes;
    const int chunk = static_cast<int>(off / ((bytes / chunks + 255) / 256 * 256));
    EXPECT_EQ(op.lane, chunk % 2 == 0 ? kLaneOut : kLaneOut2);
    if (hop == 0) {
      EXPECT_TRUE(op.deps.empty());
    } else {
      ASSERT_EQ(op.deps.size(), 1u);
      const Op& prev = p.ops()[op.deps[0]];
      EXPECT_EQ(prev.rank, order[hop - 1]);
      EXPECT_EQ(prev.dst, op.src);
      EXPECT_EQ(prev.bytes, op.bytes);
    }
  }
  for (int r : {2, 3, 0}) EXPECT_EQ(covered[r], bytes) << "rank " << r;
}

// With flag lanes, waits sit on their own lane and every op that needed one depends on it;
// signals sit on another lane, right behind (by a dependency) the op they stand for.
TEST(CollSchedules, PerRankSplitPutsFlagsOnLanesOfTheirOwn) {
  const int n = 4;
  Team t{{0, 1, 2, 3}, {0, 1, 2, 3}};
  Program p(n);
  auto buf = fake(n, 1 << 30);
  BcastOpts o;
  o.chain = true;
  o.chunks = 5;
  build_bcast(p, t, buf, 5 << 20, 1, o);
  std::vector<Program> parts = split_per_rank(p, /*flag_lanes*/ true);
  std::map<std::pair<int, int>, int> signals, waits;
  for (int r = 0; r < n; ++r) {
    const auto& ops = parts[r].ops();
    for (const Op& op : ops) {
      if (op.kind == Op::Signal) {
        EXPECT_EQ(op.lane, kLaneSignal);
        ASSERT_EQ(op.deps.size(), 1u);
        EXPECT_EQ(ops[op.deps[0]].kind, Op::Copy);
        ++signals[{op.dst_dev, static_cast<int>(op.count)}];
      } else if (op.kind == Op::Wait) {
        EXPECT_EQ(op.lane, kLaneWait);
        ++waits[{r, static_cast<int>(op.count)}];
      } else {
        EXPECT_NE(op.lane, kLaneWait);
        EXPECT_NE(op.lane, kLaneSignal);
        for (int d : op.deps) EXPECT_TRUE(ops[d].kind == Op::Wait || ops[d].kind == Op::Copy);
      }
    }
  }
  // The chain's first hop waits for nothing; every later hop's copy waits for one flag.
  EXPECT_EQ(waits.size(), size_t(5 * 2));
  for (auto& [key, count] : waits) {
    EXPECT_EQ(count, 1);
    EXPECT_EQ(signals[key], 1) << "rank " << key.first << " slot " << key.second;
  }
  EXPECT_EQ(signals.size(), waits.size());
}

TEST(CollSchedules, PipelinedAllreduceMovesTheBusbwBytes) {
  const int n = 4;
  Topology topo = load_topology_file("h200x4");
  auto backend = make_emulated_backend(topo);
  Scratch scratch(*backend, {0, 1, 2, 3});
  Team t{{0, 1, 2, 3}, {0, 1, 2, 3}};
  Program p(n);
  auto buf = fake(n, 1 << 30);
  std::vector<const char*> cbuf(buf.begin(), buf.end());
  ReduceOpts o;
  o.chunks = 8;
  const size_t count = 1 << 20;  // float32: 4 MB per rank
  build_allreduce_rs_ag(p, t, cbuf, buf, count, GPUSTRIPE_FLOAT32, GPUSTRIPE_SUM, o, scratch);
  // Ring-optimal traffic: each rank sends 2(n-1)/n of the message over NVLink.
  size_t peer = 0;
  for (const Op& op : p.ops())
    if (op.kind == Op::Copy && op.src_dev != op.dst_dev) peer += op.bytes;
  EXPECT_EQ(peer, size_t(2) * (n - 1) * count * 4);
  EXPECT_EQ(p.reductions(), size_t(n) * 8);
  // Every allgather copy waits for the reduction of the chunk it sends.
  for (const Op& op : p.ops())
    if (op.kind == Op::Copy && op.lane == kLaneOut2) {
      ASSERT_EQ(op.deps.size(), 1u);
      EXPECT_EQ(p.ops()[op.deps[0]].kind, Op::Reduce);
    }
  // Scratch holds `slots` chunks per peer, not the whole message.
  EXPECT_LT(scratch.device_bytes(0), count * 4);
}

// Two-shot: one reduction per rank over its block of every input into every output; no
// copies and nothing waited for across ranks (per-rank graphs without flags).
TEST(CollSchedules, TwoshotIsOneKernelPerRankOverItsBlock) {
  const int n = 4;
  Team t{{0, 1, 2, 3}, {0, 1, 2, 3}};
  Program p(n);
  auto buf = fake(n, 1 << 30);
  std::vector<const char*> cbuf(buf.begin(), buf.end());
  const size_t count = (1 << 20) + 3;
  Topology topo = load_topology_file("h200x4");
  auto backend = make_emulated_backend(topo);
  Scratch scratch(*backend, {0, 1, 2, 3});
  build_allreduce_twoshot(p, t, cbuf, buf, count, GPUSTRIPE_FLOAT32, GPUSTRIPE_SUM, ReduceOpts{}, scratch);
  ASSERT_EQ(p.size(), size_t(n));
  size_t covered = 0;
  for (int j = 0; j < n; ++j) {
    const Op& op = p.ops()[j];
    EXPECT_EQ(op.kind, Op::Reduce);
    EXPECT_EQ(op.rank, j);
    EXPECT_TRUE(op.deps.empty());
    ASSERT_EQ(op.srcs.size(), size_t(n));
    ASSERT_EQ(op.more_dsts.size(), size_t(n - 1));
    const size_t at = static_cast<const char*>(op.dst) - buf[j];
    EXPECT_EQ(op.srcs[0], cbuf[j] + at);  // its own input first (the first fold accumulates into it)
    for (int q = 1; q < n; ++q) EXPECT_EQ(op.more_dsts[q - 1], buf[(j + q) % n] + at);
    covered += op.count;
  }
  EXPECT_EQ(covered, count);
  EXPECT_EQ(split_per_rank(p)[0].size(), 1u);
}

// Staged calls: this rank's ops only; before the GPUs' barrier its kernel stores what each peer
// needs into that peer's slot for it, after it a kernel reduces its own part with its slots in rank
// order (the same sum on every rank); buffers the kernels may not use go by copy engines, the
// result through the temporary buffer.
TEST(CollSchedules, StagedCallsStoreIntoThePeersSlotsThenReduceTheirOwn) {
  const int n = 3, me = 1;
  Staged s;
  s.me = me;
  s.n = n;
  s.dev = 1;
  s.areas = fake(n, 1 << 26);
  s.area_dev = {0, 1, 2};
  s.unit = staged_unit(size_t(1) << 20, n);
  EXPECT_EQ(s.unit, size_t(1) << 19);
  EXPECT_EQ(staged_unit(1000, 3) % 256, 0u);
  EXPECT_EQ(staged_unit(size_t(1) << 20, 1), 0u);
  // Every (receiver, sender) pair has a slot of its own inside the receiver's area.
  std::set<char*> slots;
  for (int r = 0; r < n; ++r)
    for (int q = 0; q < n; ++q)
      if (q != r) {
        EXPECT_GE(s.slot(r, q), s.areas[r]);
        EXPECT_LE(s.slot(r, q) + s.unit, s.areas[r] + (n - 1) * s.unit);
        slots.insert(s.slot(r, q));
      }
  EXPECT_EQ(slots.size(), size_t(n * (n - 1)));
  s.send_dev = s.recv_dev = 1;
  auto mine = fake(2, 1 << 22);  // this rank's send and recv
  const size_t count = 1000;
  auto barrier_at = [](const Program& p) {
    for (size_t i = 0; i < p.size(); ++i)
      if (p.ops()[i].kind == Op::Barrier) return i;
    return p.size();
  };
  auto stores = [&](const Program& p, size_t upto, size_t at_of_peer2, size_t at_of_peer0) {
    ASSERT_EQ(upto, 2u);
    for (size_t i = 0; i < upto; ++i) {
      const Op& op = p.ops()[i];
      EXPECT_EQ(op.kind, Op::Copy);
      EXPECT_TRUE(op.by_kernel);  // device memory: the SMs store it
      EXPECT_EQ(op.rank, me);
    }
    EXPECT_EQ(p.ops()[0].dst, s.slot(2, me));
    EXPECT_EQ(p.ops()[0].dst_dev, 2);
    EXPECT_EQ(p.ops()[0].src, mine[0] + at_of_peer2);
    EXPECT_EQ(p.ops()[1].dst, s.slot(0, me));
    EXPECT_EQ(p.ops()[1].src, mine[0] + at_of_peer0);
  };
  {
    Program p(n);
    build_staged_allreduce(p, s, mine[0], mine[1], count, GPUSTRIPE_FLOAT32, GPUSTRIPE_SUM);
    stores(p, barrier_at(p), 0, 0);
    ASSERT_EQ(p.size(), 4u);
    const Op& red = p.ops()[3];
    EXPECT_EQ(red.kind, Op::Reduce);
    EXPECT_EQ(red.rank, me);
    EXPECT_EQ(red.dst, mine[1]);
    EXPECT_EQ(red.srcs, (std::vector<const void*>{s.slot(me, 0), mine[0], s.slot(me, 2)}));
  }
  {
    Program p(n);
    build_staged_reduce_scatter(p, s, mine[0], mine[1], count, GPUSTRIPE_FLOAT32, GPUSTRIPE_SUM);
    const size_t block = count * 4;
    stores(p, barrier_at(p), 2 * block, 0);
    ASSERT_EQ(p.size(), 4u);
    EXPECT_EQ(p.ops()[0].bytes, block);
    EXPECT_EQ(p.ops()[3].srcs, (std::vector<const void*>{s.slot(me, 0), mine[0] + block, s.slot(me, 2)}));
  }
  {
    Program p(n);
    build_staged_allgather(p, s, mine[0], mine[1], count);
    const size_t b = barrier_at(p);
    ASSERT_EQ(b, 3u);  // the stores and its own block's copy, then the barrier
    EXPECT_EQ(p.ops()[2].dst, mine[1] + me * count);
    std::set<const void*> copied;
    for (size_t i = b + 1; i < p.size(); ++i) {
      const Op& op = p.ops()[i];
      EXPECT_EQ(op.rank, me);
      const size_t r = (static_cast<const char*>(op.dst) - mine[1]) / count;
      EXPECT_EQ(op.src, s.slot(me, static_cast<int>(r)));
      copied.insert(op.src);
    }
    EXPECT_EQ(copied, (std::set<const void*>{s.slot(me, 0), s.slot(me, 2)}));
  }
  {
    // Peer q's slot gets block q of send, its own block goes straight to recv, and after the
    // barrier each slot r goes to block r of recv.
    Program p(n);
    build_staged_alltoall(p, s, mine[0], mine[1], count);
    const size_t b = barrier_at(p);
    stores(p, 2, 2 * count, 0);
    ASSERT_EQ(b, 3u);
    EXPECT_EQ(p.ops()[2].src, mine[0] + me * count);
    EXPECT_EQ(p.ops()[2].dst, mine[1] + me * count);
    ASSERT_EQ(p.size(), b + 3);
    for (size_t i = b + 1; i < p.size(); ++i) {
      const Op& op = p.ops()[i];
      const size_t r = (static_cast<const char*>(op.dst) - mine[1]) / count;
      EXPECT_EQ(op.src, s.slot(me, static_cast<int>(r)));
      EXPECT_NE(r, static_cast<size_t>(me));
    }
    // Buffers its kernels may not use (host memory, overlapping ones): its own block through
    // temp, into recv only after the barrier.
    const Staged h = on_host(s, mine[0] + (1 << 21));
    Program q(n);
    build_staged_alltoall(q, h, mine[0], mine[1], count);
    const size_t hb = barrier_at(q);
    ASSERT_EQ(hb, 3u);
    EXPECT_EQ(q.ops()[2].dst, h.temp);
    EXPECT_EQ(q.ops()[hb + 1].src, h.temp);
    EXPECT_EQ(q.ops()[hb + 1].dst, mine[1] + me * count);
  }
  {
    // Host buffers: copy engines store them, its own part goes through temp, reduced there and
    // copied out.
    const Staged h = on_host(s, mine[0] + (1 << 21));
    Program p(n);
    build_staged_allreduce(p, h, mine[0], mine[1], count, GPUSTRIPE_FLOAT32, GPUSTRIPE_SUM);
    const size_t b = barrier_at(p);
    ASSERT_EQ(b, 3u);
    for (size_t i = 0; i < b; ++i) EXPECT_FALSE(p.ops()[i].by_kernel);
    EXPECT_EQ(p.ops()[0].src_dev, kHostDevice);
    EXPECT_NE(p.ops()[0].lane, p.ops()[1].lane);  // a copy engine's lane per peer
    EXPECT_EQ(p.ops()[2].dst, h.temp);
    const Op& red = p.ops()[b + 1];
    EXPECT_EQ(red.srcs, (std::vector<const void*>{s.slot(me, 0), h.temp, s.slot(me, 2)}));
    EXPECT_EQ(red.dst, h.temp);
    EXPECT_EQ(p.ops()[b + 2].dst, mine[1]);
    EXPECT_EQ(p.ops()[b + 2].dst_dev, kHostDevice);
    EXPECT_EQ(p.ops()[b + 2].deps, (std::vector<int>{static_cast<int>(b + 1)}));
  }
  {
    // More than a slot holds is a bug of the caller's.
    Program p(n);
    EXPECT_THROW(build_staged_allreduce(p, s, mine[0], mine[1], s.unit / 4 + 1, GPUSTRIPE_FLOAT32, GPUSTRIPE_SUM),
                 Error);
  }
}

// A staged allreduce from twoshot_min on: peer q gets block q of the input in its slot, this rank
// reduces its own block into its output and every peer's slot's second half, and after the second
// barrier copies each peer's result out of its own slot. Below twoshot_min, or where a block would
// not fit a half slot, one shot.
TEST(CollSchedules, AStagedAllreduceFromItsTwoShotSizeReducesOnlyItsBlockAndStoresTheResultIntoThePeersSlots) {
  const int n = 3, me = 1;
  Staged s;
  s.me = me;
  s.n = n;
  s.dev = s.send_dev = s.recv_dev = 1;
  s.areas = fake(n, 1 << 26);
  s.area_dev = {0, 1, 2};
  s.unit = size_t(1) << 16;
  s.twoshot_min = 4096;
  auto mine = fake(2, 1 << 22);
  const size_t count = 3001;  // not a multiple of the blocks' alignment: the last block is shorter
  const size_t half = staged_half(s);
  EXPECT_EQ(half, s.unit / 2);
  const Blocks b = staged_blocks(s, count, GPUSTRIPE_FLOAT32);
  EXPECT_EQ(b.off, (std::vector<size_t>{0, 1024, 2048}));
  EXPECT_EQ(b.cnt, (std::vector<size_t>{1024, 1024, 953}));
  Program p(n);
  build_staged_allreduce(p, s, mine[0], mine[1], count, GPUSTRIPE_FLOAT32, GPUSTRIPE_SUM);
  const auto& ops = p.ops();
  ASSERT_EQ(ops.size(), 7u);  // two stores, barrier, reduction, barrier, two copies out
  for (size_t i : {0u, 1u, 4u, 5u, 6u}) EXPECT_EQ(ops[i].kind, i == 4 ? Op::Barrier : Op::Copy);
  EXPECT_EQ(ops[2].kind, Op::Barrier);
  EXPECT_EQ(ops[0].dst, s.slot(2, me));
  EXPECT_EQ(ops[0].src, mine[0] + 2048 * 4);
  EXPECT_EQ(ops[0].bytes, 953u * 4);
  EXPECT_EQ(ops[1].dst, s.slot(0, me));
  EXPECT_EQ(ops[1].src, mine[0]);
  const Op& red = ops[3];
  EXPECT_EQ(red.kind, Op::Reduce);
  EXPECT_EQ(red.count, 1024u);
  EXPECT_EQ(red.dst, mine[1] + 1024 * 4);
  EXPECT_EQ(red.srcs, (std::vector<const void*>{s.slot(me, 0), mine[0] + 1024 * 4, s.slot(me, 2)}));
  EXPECT_EQ(red.more_dsts, (std::vector<void*>{s.slot(2, me) + half, s.slot(0, me) + half}));
  EXPECT_EQ(ops[5].src, s.slot(me, 2) + half);
  EXPECT_EQ(ops[5].dst, mine[1] + 2048 * 4);
  EXPECT_EQ(ops[5].bytes, 953u * 4);
  EXPECT_EQ(ops[6].src, s.slot(me, 0) + half);
  EXPECT_EQ(ops[6].dst, mine[1]);
  for (size_t i : {0u, 1u, 5u, 6u}) EXPECT_TRUE(ops[i].by_kernel);
  {
    // Below the size, one shot.
    Program one(n);
    build_staged_allreduce(one, s, mine[0], mine[1], 1000, GPUSTRIPE_FLOAT32, GPUSTRIPE_SUM);
    EXPECT_EQ(one.size(), 4u);
    EXPECT_FALSE(staged_twoshot(s, 1000, GPUSTRIPE_FLOAT32));
  }
  {
    // A block past a half slot: one shot (the whole input still fits the slot).
    const size_t big = s.unit / 4;  // floats: the whole slot
    Staged two = s;
    two.n = 2;
    two.areas.resize(2);
    two.area_dev.resize(2);
    two.me = 1;
    EXPECT_TRUE(staged_twoshot(two, big, GPUSTRIPE_FLOAT32));  // two halves of a slot each
    EXPECT_FALSE(staged_twoshot(two, big + 64, GPUSTRIPE_FLOAT32));
    // A rank without a block (fewer elements than the blocks' alignment): one shot, so that every
    // rank's program has the same barriers.
    two.twoshot_min = 0;
    EXPECT_FALSE(staged_twoshot(two, 16, GPUSTRIPE_FLOAT32));
    EXPECT_TRUE(staged_twoshot(two, 65, GPUSTRIPE_FLOAT32));
  }
  {
    // Host buffers: copy engines store and copy out, the own block reduced in temp and copied out
    // after the reduction; the same barriers as a direct rank's.
    const Staged h = on_host(s, mine[0] + (1 << 21));
    Program hp(n);
    build_staged_allreduce(hp, h, mine[0], mine[1], count, GPUSTRIPE_FLOAT32, GPUSTRIPE_SUM);
    const auto& o = hp.ops();
    ASSERT_EQ(o.size(), 9u);
    EXPECT_EQ(o[2].dst, h.temp);
    EXPECT_EQ(o[3].kind, Op::Barrier);
    EXPECT_EQ(o[4].dst, h.temp);
    EXPECT_EQ(o[4].srcs[1], h.temp);
    EXPECT_EQ(o[5].dst, mine[1] + 1024 * 4);
    EXPECT_EQ(o[5].deps, (std::vector<int>{4}));
    EXPECT_EQ(o[6].kind, Op::Barrier);
    for (size_t i : {0u, 1u, 7u, 8u}) EXPECT_FALSE(o[i].by_kernel);
    EXPECT_EQ(o[7].dst_dev, kHostDevice);
  }
}

// Per-rank graphs under the GPUs' barrier: a broadcast's forwards wait on flags that the
// root's copies set; every wait has its signal, right after the op it stands for.
TEST(CollSchedules, PerRankSplitTurnsCrossRankWaitsIntoFlags) {
  const int n = 4;
  Team t{{0, 1, 2, 3}, {0, 1, 2, 3}};
  Program p(n);
  auto buf = fake(n, 1 << 30);
  BcastOpts o;
  o.chunks = 3;
  build_bcast(p, t, buf, 3 << 20, 0, o);
  size_t crossing = 0;
  for (const Op& op : p.ops())
    for (int d : op.deps) crossing += p.ops()[d].rank != op.rank;
  ASSERT_GT(crossing, 0u);
  std::vector<Program> parts = split_per_rank(p);
  ASSERT_EQ(parts.size(), size_t(n));
  std::map<std::pair<int, int>, int> signals, waits;  // (rank flagged, slot) -> count
  size_t copies = 0;
  for (int r = 0; r < n; ++r) {
    const auto& ops = parts[r].ops();
    for (size_t i = 0; i < ops.size(); ++i) {
      const Op& op = ops[i];
      EXPECT_EQ(op.rank, r);
      for (int d : op.deps) EXPECT_EQ(ops[d].rank, r);
      if (op.kind == Op::Copy) ++copies;
      if (op.kind == Op::Signal) {
        ++signals[{op.dst_dev, static_cast<int>(op.count)}];
        ASSERT_EQ(op.deps.size(), 1u);  // right after the op it stands for, on its lane
        EXPECT_EQ(ops[op.deps[0]].lane, op.lane);
      }
      if (op.kind == Op::Wait) {
        ++waits[{r, static_cast<int>(op.count)}];
        ASSERT_LT(i + 1, ops.size());  // before an op of its lane
        bool later = false;
        for (size_t k = i + 1; k < ops.size(); ++k) later = later || ops[k].lane == op.lane;
        EXPECT_TRUE(later);
      }
    }
  }
  EXPECT_EQ(copies, p.ops().size());
  EXPECT_FALSE(waits.empty());
  for (auto& [key, count] : waits) EXPECT_EQ(signals[key], 1) << "rank " << key.first << " slot " << key.second;
  EXPECT_EQ(signals.size(), waits.size());
}

// Round-major copy-engine reduce-scatter: one whole-block copy per sender and round but the last,
// whose block goes in pieces that halve down to the tail; every byte of every block moved once,
// by its sender; each fold waits for its copy (on another GPU) and reads two sources.
TEST(CollSchedules, RoundMajorReduceScatterMovesWholeBlocksThenHalvingPieces) {
  ReduceOpts o;
  o.by_round = true;
  o.tail = 4 << 10;
  Blocks one;
  one.off = {0};
  one.cnt = {(64u << 10) / 4};
  Pieces pc = pieces_of(one, o, 4);
  ASSERT_EQ(pc.count(), 4);  // 36K, 16K, 8K, 4K of a 64K block (float32)
  const size_t mb = (1 << 10) / 4;
  EXPECT_EQ(pc.of(one.cnt[0], 0), std::make_pair(size_t(0), 36 * mb));
  EXPECT_EQ(pc.of(one.cnt[0], 1), std::make_pair(36 * mb, 16 * mb));
  EXPECT_EQ(pc.of(one.cnt[0], 3), std::make_pair(60 * mb, 4 * mb));
  EXPECT_EQ(pc.of(30 * mb, 1), std::make_pair(30 * mb, size_t(0)));  // a shorter block: clipped
  o.tail = 0;
  EXPECT_EQ(pieces_of(one, o, 4).count(), 1);
  o.tail = 4 << 10;

  Topology topo = load_topology_file("h200x4");
  auto backend = make_emulated_backend(topo);
  for (int n : {2, 3, 4}) {
    Team t;
    for (int i = 0; i < n; ++i) {
      t.rank.push_back(i);
      t.dev.push_back(i);
    }
    std::vector<int> devs(t.dev);
    Scratch scratch(*backend, devs);
    auto buf = fake(n, 1 << 30);
    std::vector<const char*> cbuf(buf.begin(), buf.end());
    Blocks b = split_blocks(n * one.cnt[0] - 5, n, 64);  // the last block a little shorter
    std::vector<char*> out(n);
    for (int j = 0; j < n; ++j) out[j] = buf[j] + b.off[j] * 4;
    Program p(n);
    auto done = build_reduce_scatter(p, t, cbuf, out, b, GPUSTRIPE_FLOAT32, GPUSTRIPE_SUM, o, scratch);
    ASSERT_EQ(done.size(), 4u);
    size_t moved = 0, folded = 0;
    std::vector<int> copies(n, 0), folds(n, 0);
    for (const Op& op : p.ops()) {
      if (op.kind == Op::Copy) {
        EXPECT_EQ(op.lane, kLaneOut);
        EXPECT_EQ(op.src_dev, op.rank);  // pushed by the sender
        moved += op.bytes;
        ++copies[op.rank];
      } else if (op.kind == Op::Reduce) {
        EXPECT_EQ(op.srcs.size(), 2u);
        bool waits_for_peer = false;
        for (int d : op.deps) waits_for_peer = waits_for_peer || p.ops()[d].rank != op.rank;
        EXPECT_TRUE(waits_for_peer);
        if (op.dst >= out[op.rank] && op.dst < out[op.rank] + b.cnt[op.rank] * 4) folded += op.count;
        ++folds[op.rank];
      }
    }
    size_t all = 0;
    for (size_t cnt : b.cnt) all += cnt;
    EXPECT_EQ(moved, (n - 1) * all * 4);
    EXPECT_EQ(folded, (n - 1) * all);  // every element folded once per peer
    for (int i = 0; i < n; ++i) {
      EXPECT_EQ(copies[i], (n - 2) + 4) << "rank " << i;
      EXPECT_EQ(folds[i], (n - 2) + 4) << "rank " << i;
    }
    for (int c = 0; c < 4; ++c)
      for (int j = 0; j < n; ++j)
        if (pc.of(b.cnt[j], c).second > 0) EXPECT_GE(done[c][j], 0);
  }
}

TEST(CollSplit, BlocksCoverCountAligned) {
  Blocks b = split_blocks(1001, 4, 64);
  size_t sum = 0;
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(b.off[i], sum);
    sum += b.cnt[i];
    if (i < 3) EXPECT_EQ(b.off[i] % 64, 0u);
  }
  EXPECT_EQ(sum, 1001u);
  Blocks tiny = split_blocks(3, 4, 64);
  EXPECT_EQ(tiny.cnt[0], 3u);
  EXPECT_EQ(tiny.cnt[3], 0u);
}

class CollArgs : public ::testing::Test {
 protected:
  void SetUp() override {
    topo = load_topology_file("h200x4");
    backend = make_emulated_backend(topo);
    comm = Comm::create(*backend, topo, {0, 1});
    for (int r = 0; r < 2; ++r) {
      a[r] = backend->alloc_device(r, 4096);
      b[r] = backend->alloc_device(r, 4096);
    }
  }
  void TearDown() override {
    comm.reset();
    for (int r = 0; r < 2; ++r) {
      backend->free_device(a[r]);
      backend->free_device(b[r]);
    }
  }
  static Status status_of(const std::function<void()>& f) {
    try {
      f();
    } catch (const Error& e) {
      return e.status();
    }
    return GPUSTRIPE_SUCCESS;
  }
  Topology topo;
  std::unique_ptr<Backend> backend;
  std::unique_ptr<Comm> comm;
  void* a[2];
  void* b[2];
};

TEST_F(CollArgs, BadArgumentsAreRejectedBeforeAnythingRuns) {
  const std::vector<const void*> send{a[0], a[1]};
  const std::vector<void*> recv{b[0], b[1]};
  EXPECT_EQ(status_of([&] { comm->allreduce({a[0], nullptr}, recv, 16, GPUSTRIPE_FLOAT32, GPUSTRIPE_SUM); }),
            GPUSTRIPE_ERR_INVALID_POINTER);
  // Rank 1's buffer on device 0.
  EXPECT_EQ(status_of([&] { comm->allreduce({a[0], a[0]}, recv, 16, GPUSTRIPE_FLOAT32, GPUSTRIPE_SUM); }),
            GPUSTRIPE_ERR_INVALID_POINTER);
  // Past the allocation: 2 * 1024 floats of 4096 bytes.
  EXPECT_EQ(status_of([&] { comm->allgather(send, recv, 1024, GPUSTRIPE_FLOAT32); }), GPUSTRIPE_ERR_INVALID_SIZE);
  EXPECT_EQ(status_of([&] { comm->allreduce(send, recv, 16, GPUSTRIPE_DTYPE_COUNT, GPUSTRIPE_SUM); }),
            GPUSTRIPE_ERR_INVALID_TYPE);
  EXPECT_EQ(status_of([&] { comm->allreduce(send, recv, 16, GPUSTRIPE_FLOAT32, GPUSTRIPE_REDOP_COUNT); }),
            GPUSTRIPE_ERR_INVALID_TYPE);
  EXPECT_EQ(status_of([&] { comm->allreduce(send, recv, 16, GPUSTRIPE_FLOAT32, GPUSTRIPE_BAND); }),
            GPUSTRIPE_ERR_INVALID_TYPE);
  EXPECT_EQ(status_of([&] { comm->bcast(recv, 16, GPUSTRIPE_FLOAT32, 2); }), GPUSTRIPE_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(status_of([&] { comm->allreduce({a[0]}, recv, 16, GPUSTRIPE_FLOAT32, GPUSTRIPE_SUM); }),
            GPUSTRIPE_ERR_INVALID_ARGUMENT);
  // Overlapping without being in place.
  char* a0 = static_cast<char*>(a[0]);
  EXPECT_EQ(status_of([&] {
              comm->allreduce({a0, a[1]}, {a0 + 4, b[1]}, 16, GPUSTRIPE_FLOAT32, GPUSTRIPE_SUM);
            }),
            GPUSTRIPE_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(status_of([&] { Comm::create(*backend, topo, {0, 0}); }), GPUSTRIPE_ERR_INVALID_DEVICE);
  EXPECT_EQ(status_of([&] { Comm::create(*backend, topo, {0, 9}); }), GPUSTRIPE_ERR_INVALID_DEVICE);
  EXPECT_EQ(status_of([&] { Comm::create(*backend, topo, {}); }), GPUSTRIPE_ERR_INVALID_ARGUMENT);
  // Count 0 is a no-op, and the reduce's non-root receive buffer may be NULL.
  EXPECT_EQ(status_of([&] { comm->allreduce(send, recv, 0, GPUSTRIPE_FLOAT32, GPUSTRIPE_SUM); }), GPUSTRIPE_SUCCESS);
  EXPECT_EQ(status_of([&] { comm->reduce(send, {b[0], nullptr}, 16, GPUSTRIPE_FLOAT32, GPUSTRIPE_SUM, 0); }),
            GPUSTRIPE_SUCCESS);
}

// Counts the host's waits for streams.
class SyncCountingBackend : public ForwardingBackend {
 public:
  using ForwardingBackend::ForwardingBackend;
  const char* name() const override { return "counting-syncs"; }
  void synchronize_stream(StreamHandle s) override {
    ++syncs;
    in_->synchronize_stream(s);
  }
  int syncs = 0;
};

// The blocking pace waits for every rank's stream after every timed call; nccl-tests' pace waits
// once per batch.
TEST(CollBench, WaitEachWaitsForEveryRanksStreamAfterEveryCall) {
  Topology topo = load_topology_file("h200x4");
  SyncCountingBackend backend(make_emulated_backend(topo));
  auto comm = Comm::create(backend, topo, {0, 1});
  const int warmup = 1, iters = 3, trials = 2;
  for (CollOp op : {CollOp::AllReduce, CollOp::AllToAll}) {
    backend.syncs = 0;
    CollTiming loose = time_collective(*comm, op, 4096, GPUSTRIPE_FLOAT32, GPUSTRIPE_SUM, warmup, iters, trials);
    const int loose_syncs = backend.syncs;
    backend.syncs = 0;
    CollTiming paced = time_collective(*comm, op, 4096, GPUSTRIPE_FLOAT32, GPUSTRIPE_SUM, warmup, iters, trials,
                                       CallPacing::WaitEach);
    EXPECT_EQ(backend.syncs - loose_syncs, iters * trials * comm->size()) << coll_op_name(op);
    EXPECT_GT(paced.us, 0);
    EXPECT_EQ(paced.schedule, loose.schedule);  // the same collective, only the pace differs
  }
}

}  // namespace
}  // namespace coll_test
