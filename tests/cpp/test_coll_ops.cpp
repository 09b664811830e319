// Collectives on the emulated backend (CI): every op, type and operator on random
// data, 2-4 ranks, counts not divisible by the rank count, in place, every schedule.
#include <gtest/gtest.h>

#include "test_coll_harness.hpp"
#include "test_util.hpp"
#include "topology/topology.hpp"

namespace coll_test {
namespace {

struct EmuNode {
  explicit EmuNode(const char* topo_name) : topo(load_topology_file(topo_name)), backend(make_emulated_backend(topo)) {}
  std::unique_ptr<Comm> comm(int n, const Tuning& tuning = Tuning()) {
    std::vector<int> devs;
    for (int i = 0; i < n; ++i) devs.push_back(i);
    return Comm::create(*backend, topo, devs, nullptr, tuning);
  }
  Topology topo;
  std::unique_ptr<Backend> backend;
};

const std::vector<size_t> kCounts{1, 7, 1000, 4099};

// Small chunks make several pipeline chunks (and scratch slot reuse) out of test-sized data.
Tuning small_chunks() {
  Tuning t;
  t.chunk = 512;
  t.chain_chunk = 1 << 10;
  return t;
}

// Every type and operator, a few counts, in place or not, for one op on one schedule.
void sweep(Comm& comm, CollOp op, bool reduction, uint64_t seed) {
  for (DataType dt : all_dtypes())
    for (RedOp ro : reduction ? all_redops() : std::vector<RedOp>{GPUSTRIPE_SUM})
      for (size_t count : kCounts)
        for (bool in_place : {false, true}) {
          Case c{op, dt, ro, count, in_place, /*root*/ static_cast<int>(count % comm.size())};
          if (op == CollOp::Bcast && in_place) continue;  // bcast is in place by nature
          ASSERT_EQ(run_case(comm, c, seed++), 0u) << c.describe();
        }
}

struct OpCase {
  CollOp op;
  bool reduction;
  const char* algo;  // GPUSTRIPE_COLL_ALGO
};

class CollOps : public ::testing::TestWithParam<std::tuple<OpCase, int>> {};

TEST_P(CollOps, MatchesFloat64ReferenceOnEveryTypeAndCount) {
  auto [oc, n] = GetParam();
  ScopedEnv algo("GPUSTRIPE_COLL_ALGO", oc.algo);
  EmuNode node("h200x4");
  auto comm = node.comm(n, small_chunks());
  sweep(*comm, oc.op, oc.reduction, 1000 * n);
  EXPECT_NE(comm->last_schedule().find(oc.algo), std::string::npos) << comm->last_schedule();
}

const OpCase kOpCases[] = {
    {CollOp::AllToAll, false, "rounds"},           {CollOp::AllToAll, false, "all_at_once"},
    {CollOp::AllGather, false, "rounds"},          {CollOp::AllGather, false, "all_at_once"},
    {CollOp::ReduceScatter, true, "rs_copy"},      {CollOp::ReduceScatter, true, "rs_pull"},
    {CollOp::AllReduce, true, "oneshot"},          {CollOp::AllReduce, true, "rs_ag_copy"},
    {CollOp::AllReduce, true, "rs_ag_pull"},       {CollOp::AllReduce, true, "twoshot"},
    {CollOp::AllReduce, true, "ce_twoshot"},
    {CollOp::Bcast, false, "direct"},
    {CollOp::Bcast, false, "scatter_ag"},          {CollOp::Bcast, false, "chain"},
    {CollOp::Reduce, true, "reduce_copy"},
    {CollOp::Reduce, true, "reduce_pull"},
    {CollOp::AllToAll, false, "sm"},               {CollOp::AllGather, false, "sm"},
    {CollOp::Bcast, false, "sm"},
};

std::string case_name(const ::testing::TestParamInfo<std::tuple<OpCase, int>>& info) {
  auto [oc, n] = info.param;
  return std::string(coll_op_name(oc.op)) + "_" + oc.algo + "_" + std::to_string(n) + "ranks";
}

INSTANTIATE_TEST_SUITE_P(Emulated, CollOps, ::testing::Combine(::testing::ValuesIn(kOpCases), ::testing::Values(2, 3, 4)),
                         case_name);

// Two-shot with inputs pushed into the owners' scratch by kernels first (Tuning::push_min).
TEST(CollPush, PushedInputsMatchTheReference) {
  Tuning t;
  t.push_min = 0;
  ScopedEnv a("GPUSTRIPE_COLL_ALGO", "twoshot");
  EmuNode node("h200x4");
  for (int n : {3, 4}) {  // more than 2 ranks (2 keep the kernel reads)
    auto comm = node.comm(n, t);
    sweep(*comm, CollOp::AllReduce, true, 91 * n);
    EXPECT_NE(comm->last_schedule().find(" push"), std::string::npos) << comm->last_schedule();
  }
}

// Repeated calls reuse their schedule choice and buffer checks, but a settings change
// between two identical calls changes the choice, and a bad buffer is still refused.
TEST(CollRepeat, RememberedChoicesFollowTheSettings) {
  EmuNode node("h200x4");
  auto comm = node.comm(2);
  for (const char* algo : {"rounds", "all_at_once", "rounds"}) {
    ScopedEnv a("GPUSTRIPE_COLL_ALGO", algo);
    Case c{CollOp::AllGather, GPUSTRIPE_INT32, GPUSTRIPE_SUM, 1000, false, 0, false, 2};
    ASSERT_EQ(run_case(*comm, c, 3), 0u);
    EXPECT_NE(comm->last_schedule().find(std::string("allgather 8000 ") + algo), std::string::npos)
        << comm->last_schedule();
  }
  Backend& be = comm->backend();
  void* a = be.alloc_device(0, 4096);
  void* b = be.alloc_device(1, 4096);
  std::vector<void*> bufs{a, b};
  comm->bcast(bufs, 1024, GPUSTRIPE_INT32, 0);
  comm->bcast(bufs, 1024, GPUSTRIPE_INT32, 0);
  EXPECT_THROW(comm->bcast(bufs, 1025, GPUSTRIPE_INT32, 0), Error);  // past the allocations
  std::vector<void*> swapped{b, a};
  EXPECT_THROW(comm->bcast(swapped, 1024, GPUSTRIPE_INT32, 0), Error);  // wrong devices
  be.free_device(a);
  be.free_device(b);
}

// The same buffers called again with fresh data give fresh results (no stale scratch).
TEST(CollRepeat, SameBuffersFreshDataEverySchedule) {
  EmuNode node("h200x4");
  auto comm = node.comm(3, small_chunks());
  for (const OpCase& oc : kOpCases) {
    ScopedEnv algo("GPUSTRIPE_COLL_ALGO", oc.algo);
    for (bool in_place : {false, true}) {
      if (oc.op == CollOp::Bcast && in_place) continue;
      Case c{oc.op, GPUSTRIPE_INT32, GPUSTRIPE_SUM, 1001, in_place, 2, /*async*/ in_place, /*repeats*/ 3};
      ASSERT_EQ(run_case(*comm, c, 5), 0u) << oc.algo << " " << comm->last_schedule();
    }
  }
}

// A broadcast's tail through pinned host memory beside each NVLink form (copy kernels, direct,
// chain, scatter-allgather), at sizes that split unevenly into host chunks, from every root.
TEST(CollHostShare, BroadcastThroughPinnedHostIsExact) {
  Tuning t;
  t.bcast_host_share = 0.3;
  t.bcast_chunk = 4 << 10;
  EmuNode node("h200x4");
  for (int n : {2, 3}) {
    auto comm = node.comm(n, t);
    for (const char* algo : {"sm", "direct", "chain", "scatter_ag"}) {
      ScopedEnv a("GPUSTRIPE_COLL_ALGO", algo);
      for (size_t count : {size_t(1000), size_t(16411), size_t(75001)})
        for (int root = 0; root < n; ++root) {
          Case c{CollOp::Bcast, GPUSTRIPE_INT32, GPUSTRIPE_SUM, count, false, root};
          ASSERT_EQ(run_case(*comm, c, count + root), 0u) << algo << " n=" << n;
          EXPECT_NE(comm->last_schedule().find("host=30.0%"), std::string::npos) << comm->last_schedule();
        }
    }
  }
}

TEST(CollHostShare, ExchangesThroughPinnedHostAreExact) {
  Tuning t;
  t.host_share = 0.25;
  EmuNode node("h200x4");
  for (int n : {2, 3, 4}) {
    auto comm = node.comm(n, t);
    for (CollOp op : {CollOp::AllToAll, CollOp::AllGather})
      for (size_t count : {size_t(3), size_t(5000), size_t(70000)})
        for (bool in_place : {false, true}) {
          Case c{op, GPUSTRIPE_INT32, GPUSTRIPE_SUM, count, in_place};
          ASSERT_EQ(run_case(*comm, c, count + n), 0u);
          if (count * 4 >= 4096) EXPECT_NE(comm->last_schedule().find("host=25.0%"), std::string::npos)
              << comm->last_schedule();
        }
  }
}

// Broadcast by copy kernels in pieces, every root, 2-4 ranks, odd sizes, blocking and on
// streams, repeated on the same buffers.
TEST(CollKernelCopies, BroadcastInPiecesIsExact) {
  ScopedEnv algo("GPUSTRIPE_COLL_ALGO", "sm");
  EmuNode node("h200x4");
  for (int n : {2, 3, 4}) {
    auto comm = node.comm(n);
    for (int root = 0; root < n; ++root)
      for (DataType dt : {GPUSTRIPE_FLOAT16, GPUSTRIPE_INT64})
        for (size_t count : {size_t(1), size_t(5), size_t(4099)}) {
          Case c{CollOp::Bcast, dt, GPUSTRIPE_SUM, count, false, root, /*async*/ count == 5, /*repeats*/ 2};
          ASSERT_EQ(run_case(*comm, c, count + root), 0u) << "n=" << n;
          EXPECT_NE(comm->last_schedule().find("sm form=pieces"), std::string::npos) << comm->last_schedule();
        }
  }
}

TEST(CollHierarchical, AllreduceOnTwoSocketNodeUsesThreeStages) {
  Tuning t;
  t.chunk = 1 << 10;
  EmuNode node("mist-ac922");
  auto comm = node.comm(4, t);
  ASSERT_EQ(comm->resources().socket_groups.size(), 2u);
  for (DataType dt : all_dtypes())
    for (RedOp ro : all_redops())
      for (size_t count : {size_t(1), size_t(5), size_t(3001)})
        for (bool in_place : {false, true}) {
          Case c{CollOp::AllReduce, dt, ro, count, in_place};
          ASSERT_EQ(run_case(*comm, c, count * 7 + ro), 0u);
          EXPECT_EQ(comm->last_schedule().find("allreduce"), 0u);
          EXPECT_NE(comm->last_schedule().find(" hier "), std::string::npos) << comm->last_schedule();
        }
}

TEST(CollAsync, UserStreamsOrderTheCollective) {
  ScopedEnv jitter{"GPUSTRIPE_TEST", "emu_jitter_us=50"};
  EmuNode jittery("h200x4");  // streams finish in random order
  auto jcomm = jittery.comm(4);
  for (CollOp op : {CollOp::AllToAll, CollOp::AllGather, CollOp::ReduceScatter, CollOp::AllReduce, CollOp::Bcast,
                    CollOp::Reduce}) {
    Case c{op, GPUSTRIPE_FLOAT32, GPUSTRIPE_SUM, 2053, false, 1, /*async*/ true};
    ASSERT_EQ(run_case(*jcomm, c, 5), 0u);
    c.in_place = op != CollOp::Bcast;
    ASSERT_EQ(run_case(*jcomm, c, 6), 0u);
  }
}

TEST(CollLarge, DefaultSchedulesAtMegabyteSizes) {
  // The schedules auto picks above the small-size thresholds (copy engines, rounds, chunks).
  EmuNode node("h200x4");
  auto comm = node.comm(4);
  for (CollOp op : {CollOp::AllToAll, CollOp::AllGather, CollOp::ReduceScatter, CollOp::AllReduce, CollOp::Bcast,
                    CollOp::Reduce}) {
    Case c{op, GPUSTRIPE_FLOAT32, GPUSTRIPE_SUM, (40u << 20) / 4 + 3, false, 2};
    ASSERT_EQ(run_case(*comm, c, 11), 0u);
    std::string s = comm->last_schedule();
    if (op == CollOp::AllReduce) EXPECT_NE(s.find("twoshot"), std::string::npos) << s;
    if (op == CollOp::AllToAll || op == CollOp::AllGather) EXPECT_NE(s.find("rounds"), std::string::npos) << s;
    if (op == CollOp::Bcast) EXPECT_NE(s.find("sm form=pieces"), std::string::npos) << s;  // copy kernels at every size on 4 GPUs
  }
}

// The chunked copy-engine reductions with flags for their waits: every type and operator,
// several chunks, 2-4 ranks, in place or not.
TEST(CollLargeMessages, ChunkedCopyReductionsAreExact) {
  EmuNode node("h200x4");
  Tuning t;
  t.rs_order = Tuning::Order::Chunks;  // round-major: its own test
  t.chunk = 16 << 10;
  for (int n : {2, 3, 4}) {
    auto comm = node.comm(n, t);
    for (const OpCase& oc : {OpCase{CollOp::ReduceScatter, true, "rs_copy"}, OpCase{CollOp::AllReduce, true, "rs_ag_copy"},
                             OpCase{CollOp::Reduce, true, "reduce_copy"}, OpCase{CollOp::AllReduce, true, "ce_twoshot"}}) {
      ScopedEnv algo("GPUSTRIPE_COLL_ALGO", oc.algo);
      uint64_t seed = 500 * n;
      for (DataType dt : all_dtypes())
        for (RedOp ro : all_redops())
          for (size_t count : {size_t(7), size_t(4099), size_t(70001)})
            for (bool in_place : {false, true}) {
              Case c{oc.op, dt, ro, count, in_place, static_cast<int>(count % n)};
              ASSERT_EQ(run_case(*comm, c, seed++), 0u) << c.describe() << " " << comm->last_schedule();
              EXPECT_EQ(comm->last_schedule().find("by_round"), std::string::npos) << comm->last_schedule();
              if (n > 2) EXPECT_NE(comm->last_schedule().find(" flags"), std::string::npos) << comm->last_schedule();
            }
    }
  }
}

// Round-major copy-engine reductions (Tuning::rs_order): whole blocks per round folded into the
// output as they land, the last round in halving pieces down to a tail small enough that
// test-sized blocks get several; allreduce's blocks gathered whole, at 3 ranks with a host
// share: every type and operator, counts from one element to several pieces, 2-4 ranks, in
// place or not.
TEST(CollLargeMessages, RoundMajorReductionsAreExact) {
  EmuNode node("h200x4");
  for (int n : {2, 3, 4}) {
    Tuning t;
    t.rs_order = Tuning::Order::Rounds;
    t.rs_tail = 2 << 10;
    t.gather_host_share = n == 3 ? 0.1 : 0;
    auto comm = node.comm(n, t);
    for (const OpCase& oc : {OpCase{CollOp::ReduceScatter, true, "rs_copy"}, OpCase{CollOp::AllReduce, true, "rs_ag_copy"},
                             OpCase{CollOp::Reduce, true, "reduce_copy"}, OpCase{CollOp::AllReduce, true, "ce_twoshot"}}) {
      ScopedEnv algo("GPUSTRIPE_COLL_ALGO", oc.algo);
      uint64_t seed = 700 * n;
      for (DataType dt : all_dtypes())
        for (RedOp ro : all_redops())
          for (size_t count : {size_t(1), size_t(7), size_t(4099), size_t(70001)})
            for (bool in_place : {false, true}) {
              Case c{oc.op, dt, ro, count, in_place, static_cast<int>(count % n)};
              ASSERT_EQ(run_case(*comm, c, seed++), 0u) << c.describe() << " " << comm->last_schedule();
              EXPECT_NE(comm->last_schedule().find("by_round tail=2K"), std::string::npos) << comm->last_schedule();
              if (std::string(oc.algo) == "rs_ag_copy")
                EXPECT_NE(comm->last_schedule().find(n == 3 ? "gather=whole gather_host=10.0%" : "gather=whole"),
                          std::string::npos)
                    << comm->last_schedule();
            }
    }
  }
}

}  // namespace
}  // namespace coll_test
