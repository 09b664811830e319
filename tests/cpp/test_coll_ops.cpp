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
  std::unique_ptr<Comm> comm(int n) {
    std::vector<int> devs;
    for (int i = 0; i < n; ++i) devs.push_back(i);
    return Comm::create(*backend, topo, devs);
  }
  Topology topo;
  std::unique_ptr<Backend> backend;
};

const std::vector<size_t> kCounts{1, 7, 1000, 4099};

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
  // Small chunks make several pipeline chunks (and scratch slot reuse) out of test-sized data.
  ScopedEnv algo("GPUSTRIPE_COLL_ALGO", oc.algo);
  ScopedEnv chunk("GPUSTRIPE_COLL_CHUNK", "512");
  ScopedEnv chain_chunk("GPUSTRIPE_COLL_CHAIN_CHUNK", "1K");
  EmuNode node("h200x4");
  auto comm = node.comm(n);
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

// Kernels and copy engines on parts of each block at once (GPUSTRIPE_COLL_CE_SHARE), the
// copies by the owners or by the senders, 2-4 ranks, every type and operator, in place or not.
TEST(CollCopyShare, KernelsAndCopyEnginesTogetherMatchTheReference) {
  ScopedEnv share("GPUSTRIPE_COLL_CE_SHARE", "0.3");
  ScopedEnv from("GPUSTRIPE_COLL_CE_SHARE_MIN", "0");
  EmuNode node("h200x4");
  for (int n : {2, 3, 4}) {
    auto comm = node.comm(n);
    for (const char* copies : {"receiver", "sender"}) {
      ScopedEnv by("GPUSTRIPE_COLL_CE_SHARE_COPIES", copies);
      ScopedEnv lanes("GPUSTRIPE_COLL_CE_SHARE_LANES", std::string(copies) == "sender" ? "1" : "0");
      for (const char* algo : {"rs_pull", "twoshot"}) {
        ScopedEnv a("GPUSTRIPE_COLL_ALGO", algo);
        sweep(*comm, std::string(algo) == "rs_pull" ? CollOp::ReduceScatter : CollOp::AllReduce, true, 77 * n);
        EXPECT_NE(comm->last_schedule().find(std::string("ce=30.0% copies=") + copies), std::string::npos)
            << comm->last_schedule();
      }
    }
  }
}

// Two-shot with inputs pushed into the owners' scratch by kernels first (GPUSTRIPE_COLL_PUSH_MIN).
TEST(CollPush, PushedInputsMatchTheReference) {
  ScopedEnv from("GPUSTRIPE_COLL_PUSH_MIN", "0");
  ScopedEnv a("GPUSTRIPE_COLL_ALGO", "twoshot");
  EmuNode node("h200x4");
  for (int n : {3, 4}) {  // more than 2 ranks (2 keep the kernel reads)
    auto comm = node.comm(n);
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
  ScopedEnv chunk("GPUSTRIPE_COLL_CHUNK", "512");
  ScopedEnv chain_chunk("GPUSTRIPE_COLL_CHAIN_CHUNK", "1K");
  EmuNode node("h200x4");
  auto comm = node.comm(3);
  for (const char* variant : {"receiver", "sender"}) {
    // Also the senders' copy engines for reduction inputs.
    ScopedEnv copies("GPUSTRIPE_COLL_RS_COPIES", variant);
    for (const OpCase& oc : kOpCases) {
      ScopedEnv algo("GPUSTRIPE_COLL_ALGO", oc.algo);
      for (bool in_place : {false, true}) {
        if (oc.op == CollOp::Bcast && in_place) continue;
        Case c{oc.op, GPUSTRIPE_INT32, GPUSTRIPE_SUM, 1001, in_place, 2, /*async*/ in_place, /*repeats*/ 3};
        ASSERT_EQ(run_case(*comm, c, 5), 0u) << oc.algo << " " << variant << " " << comm->last_schedule();
      }
    }
  }
}

TEST(CollHostShare, ExchangesThroughPinnedHostAreExact) {
  ScopedEnv share("GPUSTRIPE_COLL_HOST_SHARE", "0.25");
  EmuNode node("h200x4");
  for (int n : {2, 4}) {
    auto comm = node.comm(n);
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

// The exchange variants: the own block by a copy kernel (a one-source reduction), each peer
// block split over several lanes per round, with and without a host share.
TEST(CollExchangeVariants, LocalKernelAndRoundLanesAreExact) {
  EmuNode node("h200x4");
  ScopedEnv rounds("GPUSTRIPE_COLL_ALGO", "rounds");
  for (const char* share : {"0", "0.25"})
    for (const char* lanes : {"1", "3"}) {
      ScopedEnv h("GPUSTRIPE_COLL_HOST_SHARE", share);
      ScopedEnv l("GPUSTRIPE_COLL_ROUND_LANES", lanes);
      ScopedEnv k("GPUSTRIPE_COLL_LOCAL_COPY", "kernel");
      for (int n : {2, 3, 4}) {
        auto comm = node.comm(n);
        for (CollOp op : {CollOp::AllToAll, CollOp::AllGather})
          for (DataType dt : {GPUSTRIPE_INT32, GPUSTRIPE_FLOAT16})
            for (size_t count : {size_t(1), size_t(3), size_t(5000)})
              for (bool in_place : {false, true}) {
                Case c{op, dt, GPUSTRIPE_SUM, count, in_place};
                ASSERT_EQ(run_case(*comm, c, count + n), 0u) << share << " " << lanes;
                EXPECT_NE(comm->last_schedule().find("local=kernel"), std::string::npos) << comm->last_schedule();
                if (std::string(lanes) == "3")
                  EXPECT_NE(comm->last_schedule().find("lanes=3"), std::string::npos) << comm->last_schedule();
              }
      }
    }
}

// Broadcast by copy kernels in each form (pieces, pull, push), with and without a host-path
// share, every root, 2-4 ranks, odd sizes, blocking and on streams, repeated on the same buffers.
TEST(CollKernelCopies, EveryBroadcastFormIsExact) {
  ScopedEnv algo("GPUSTRIPE_COLL_ALGO", "sm");
  ScopedEnv host_min("GPUSTRIPE_COLL_BCAST_HOST_MIN", "0");
  ScopedEnv host_chunks("GPUSTRIPE_COLL_BCAST_HOST_CHUNKS", "3");
  EmuNode node("h200x4");
  for (const char* form : {"pieces", "pull", "push"})
  for (const char* share : {"0", "0.3"}) {
    ScopedEnv f("GPUSTRIPE_COLL_BCAST_SM_FORM", form);
    ScopedEnv h("GPUSTRIPE_COLL_BCAST_HOST_SHARE", share);
    for (int n : {2, 3, 4}) {
      auto comm = node.comm(n);
      for (int root = 0; root < n; ++root)
        for (DataType dt : {GPUSTRIPE_FLOAT16, GPUSTRIPE_INT64})
          for (size_t count : {size_t(1), size_t(5), size_t(4099)}) {
            Case c{CollOp::Bcast, dt, GPUSTRIPE_SUM, count, false, root, /*async*/ count == 5, /*repeats*/ 2};
            ASSERT_EQ(run_case(*comm, c, count + root), 0u) << form << " n=" << n;
            EXPECT_NE(comm->last_schedule().find(std::string("sm form=") + form), std::string::npos)
                << comm->last_schedule();
            EXPECT_EQ(comm->last_schedule().find("host=30.0%") != std::string::npos, std::string(share) != "0")
                << comm->last_schedule();
          }
    }
  }
}

TEST(CollHierarchical, AllreduceOnTwoSocketNodeUsesThreeStages) {
  ScopedEnv chunk("GPUSTRIPE_COLL_CHUNK", "1K");
  EmuNode node("mist-ac922");
  auto comm = node.comm(4);
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
    if (op == CollOp::Bcast) EXPECT_NE(s.find("sm form=pieces"), std::string::npos) << s;  // 40M <= BCAST_SM_MAX
  }
}

// Large-message variants (session 3): an SM share of every exchange peer block (copy kernels
// beside the copy-engine rounds), alone and with a host share, 2-4 ranks, odd counts, in place.
TEST(CollLargeMessages, SmShareOfExchangesIsExact) {
  EmuNode node("h200x4");
  ScopedEnv rounds("GPUSTRIPE_COLL_ALGO", "rounds");
  ScopedEnv sm("GPUSTRIPE_COLL_SM_SHARE", "0.3");
  ScopedEnv from("GPUSTRIPE_COLL_SM_SHARE_MIN", "0");
  for (const char* share : {"0", "0.2"}) {
    ScopedEnv h("GPUSTRIPE_COLL_HOST_SHARE", share);
    for (int n : {2, 3, 4}) {
      auto comm = node.comm(n);
      for (CollOp op : {CollOp::AllToAll, CollOp::AllGather})
        for (DataType dt : {GPUSTRIPE_INT32, GPUSTRIPE_FLOAT16, GPUSTRIPE_FLOAT64})
          for (size_t count : {size_t(1), size_t(3), size_t(5000), size_t(70001)})
            for (bool in_place : {false, true}) {
              Case c{op, dt, GPUSTRIPE_SUM, count, in_place};
              ASSERT_EQ(run_case(*comm, c, count + n), 0u) << share << " " << comm->last_schedule();
              EXPECT_NE(comm->last_schedule().find("sm=30.0%"), std::string::npos) << comm->last_schedule();
            }
    }
  }
}

// The copy-engine reductions with a host share of every piece (D2H by the sender, H2D by the
// owner into its slot; ce_twoshot also for the tail of each result), an SM share of every piece
// (the sender's copy kernel) and flags for their waits: every type and operator, pieces large enough
// for a host part, several chunks, 2-4 ranks, in place or not.
TEST(CollLargeMessages, CopyReductionsWithHostShareAreExact) {
  EmuNode node("h200x4");
  ScopedEnv chunks("GPUSTRIPE_COLL_RS_ORDER", "chunks");  // the chunked form (round-major: its own test)
  ScopedEnv h("GPUSTRIPE_COLL_RS_HOST_SHARE", "0.2");
  ScopedEnv ag("GPUSTRIPE_COLL_AG_HOST_SHARE", "0.1");
  ScopedEnv chunk("GPUSTRIPE_COLL_CHUNK", "16K");
  ScopedEnv sm("GPUSTRIPE_COLL_RS_SM_SHARE", "0.3");
  for (int n : {2, 3, 4}) {
    auto comm = node.comm(n);
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
              EXPECT_NE(comm->last_schedule().find("host=20.0%"), std::string::npos) << comm->last_schedule();
              EXPECT_NE(comm->last_schedule().find("sm=30.0%"), std::string::npos) << comm->last_schedule();
              if (n > 2) EXPECT_NE(comm->last_schedule().find(" flags"), std::string::npos) << comm->last_schedule();
              if (std::string(oc.algo) == "ce_twoshot")
                EXPECT_NE(comm->last_schedule().find("ag_host=10.0%"), std::string::npos) << comm->last_schedule();
            }
    }
  }
}

// Round-major copy-engine reductions (GPUSTRIPE_COLL_RS_ORDER=rounds): whole blocks per round
// folded into the output as they land, the last round in halving pieces down to a tail small
// enough that test-sized blocks get several: every type and operator, counts from one element
// to several pieces, 2-4 ranks, in place or not.
TEST(CollLargeMessages, RoundMajorReductionsAreExact) {
  EmuNode node("h200x4");
  ScopedEnv order("GPUSTRIPE_COLL_RS_ORDER", "rounds");
  ScopedEnv tail("GPUSTRIPE_COLL_RS_TAIL", "2K");
  for (int n : {2, 3, 4}) {
    // 3 ranks: every round's block also through pinned host memory (its end, which the last pieces hold).
    ScopedEnv host("GPUSTRIPE_COLL_RS_ROUNDS_HOST_SHARE", n == 3 ? "0.15" : "0");
    ScopedEnv lanes("GPUSTRIPE_COLL_RS_ROUNDS_LANES", n == 4 ? "2" : "1");  // 4 ranks: copies on two lanes in turn
    // Allreduce: blocks gathered whole after their last fold (2 and 3 ranks; at 3 with a host share).
    ScopedEnv gather("GPUSTRIPE_COLL_AR_GATHER", n < 4 ? "whole" : "pieces");
    ScopedEnv gather_host("GPUSTRIPE_COLL_AR_GATHER_HOST_SHARE", n == 3 ? "0.1" : "0");
    auto comm = node.comm(n);
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
              if (n == 3) EXPECT_NE(comm->last_schedule().find("host=15.0%"), std::string::npos) << comm->last_schedule();
              if (n == 4) EXPECT_NE(comm->last_schedule().find("copy_lanes=2"), std::string::npos) << comm->last_schedule();
              if (n == 3 && std::string(oc.algo) == "rs_ag_copy")
                EXPECT_NE(comm->last_schedule().find("gather=whole gather_host=10.0%"), std::string::npos)
                    << comm->last_schedule();
            }
    }
  }
}

}  // namespace
}  // namespace coll_test
