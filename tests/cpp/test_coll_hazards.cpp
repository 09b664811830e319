// Every schedule the communicator builds is free of data races by construction: when two
// ops touch overlapping bytes and one of them writes, the later one is ordered after the
// earlier one (a dependency path, the same lane, or a barrier). This catches orderings the
// emulated backend cannot show (it runs reductions synchronously), e.g. a copy that must
// wait for a reduction.
#include <gtest/gtest.h>

#include <algorithm>

#include "coll/program.hpp"
#include "coll/select.hpp"
#include "test_coll_harness.hpp"
#include "test_util.hpp"
#include "topology/topology.hpp"

namespace coll_test {
namespace {

struct Range {
  uintptr_t lo, hi;
  bool overlaps(const Range& o) const { return lo < o.hi && o.lo < hi; }
};

struct Access {
  std::vector<Range> reads, writes;
};

Access access_of(const Op& op) {
  Access a;
  auto r = [](const void* p, size_t n) { return Range{reinterpret_cast<uintptr_t>(p), reinterpret_cast<uintptr_t>(p) + n}; };
  if (op.kind == Op::Copy) {
    a.reads.push_back(r(op.src, op.bytes));
    a.writes.push_back(r(op.dst, op.bytes));
  } else if (op.kind == Op::Reduce) {
    size_t n = op.count * dtype_size(op.dtype);
    for (const void* s : op.srcs) a.reads.push_back(r(s, n));
    a.writes.push_back(r(op.dst, n));
  }
  return a;
}

bool conflict(const Access& a, const Access& b) {
  for (auto& w : a.writes) {
    for (auto& x : b.writes) if (w.overlaps(x)) return true;
    for (auto& x : b.reads) if (w.overlaps(x)) return true;
  }
  for (auto& r : a.reads)
    for (auto& x : b.writes) if (r.overlaps(x)) return true;
  return false;
}

// Returns a description of the first unordered conflicting pair, or "".
std::string find_race(const Program& p) {
  const auto& ops = p.ops();
  const size_t n = ops.size();
  std::vector<std::vector<bool>> before(n, std::vector<bool>(n, false));  // before[b][a]: a happens before b
  std::map<std::pair<int, int>, size_t> last_on_lane;
  long last_barrier = -1;
  for (size_t b = 0; b < n; ++b) {
    auto inherit = [&](size_t a) {
      before[b][a] = true;
      for (size_t k = 0; k < a; ++k)
        if (before[a][k]) before[b][k] = true;
    };
    if (ops[b].kind == Op::Barrier) {
      for (size_t a = 0; a < b; ++a) before[b][a] = true;
      last_barrier = static_cast<long>(b);
      continue;
    }
    for (int d : ops[b].deps) inherit(d);
    auto lane = std::make_pair(ops[b].rank, ops[b].lane);
    auto it = last_on_lane.find(lane);
    if (it != last_on_lane.end()) inherit(it->second);
    if (last_barrier >= 0) inherit(static_cast<size_t>(last_barrier));
    last_on_lane[lane] = b;
  }
  std::vector<Access> acc(n);
  for (size_t i = 0; i < n; ++i) acc[i] = access_of(ops[i]);
  for (size_t b = 0; b < n; ++b)
    for (size_t a = 0; a < b; ++a)
      if (!before[b][a] && conflict(acc[a], acc[b]))
        return "ops " + std::to_string(a) + " and " + std::to_string(b) + " (" + p.summary() + ")";
  return "";
}

TEST(CollHazards, EveryScheduleOrdersEveryConflictingAccess) {
  for (const char* topo_name : {"h200x4", "mist-ac922"}) {
    Topology topo = load_topology_file(topo_name);
    auto backend = make_emulated_backend(topo);
    const bool sockets = std::string(topo_name) == "mist-ac922";  // hier, on its 4 GPUs
    for (int n : sockets ? std::vector<int>{4} : std::vector<int>{2, 3, 4}) {
      std::vector<int> devs;
      for (int i = 0; i < n; ++i) devs.push_back(i);
      // Two passes: copy-engine reductions chunk by chunk, then round-major (whole blocks per
      // round, the last in pieces, each allreduce block gathered whole with a host share);
      // small chunks, and a host share of every exchange block, at test sizes.
      for (bool rounds : {false, true}) {
        Tuning t;
        t.chunk = 512;
        t.chain_chunk = 1 << 10;
        t.host_share = 0.2;
        t.rs_order = rounds ? Tuning::Order::Rounds : Tuning::Order::Chunks;
        t.rs_tail = 1 << 10;
        t.gather_host_share = 0.2;
        auto comm = Comm::create(*backend, topo, devs, nullptr, t);
        size_t programs = 0;
        std::string race;
        comm->set_program_observer([&](const Program& p) {
          ++programs;
          if (race.empty()) race = find_race(p);
        });
        for (CollOp op : {CollOp::AllToAll, CollOp::AllGather, CollOp::ReduceScatter, CollOp::AllReduce,
                          CollOp::Bcast, CollOp::Reduce})
          for (const std::string& algo : schedule_names(op)) {
            if ((algo == "hier") != sockets) continue;
            ScopedEnv a("GPUSTRIPE_COLL_ALGO", algo.c_str());
            for (bool in_place : {false, true}) {
              if (op == CollOp::Bcast && in_place) continue;
              Case c{op, GPUSTRIPE_FLOAT32, GPUSTRIPE_SUM, 3001, in_place, n - 1};
              race.clear();
              ASSERT_EQ(run_case(*comm, c, 9), 0u);
              EXPECT_EQ(race, "") << topo_name << " " << c.describe() << " " << comm->last_schedule();
              if (rounds && (algo == "rs_copy" || algo == "rs_ag_copy" || algo == "reduce_copy" || algo == "ce_twoshot"))
                EXPECT_NE(comm->last_schedule().find("by_round"), std::string::npos) << comm->last_schedule();
            }
          }
        EXPECT_GT(programs, 0u);
      }
    }
  }
}

// The checker itself finds a race: a reduction and a copy out of its result, unordered.
TEST(CollHazards, CheckerSeesAMissingDependency) {
  Program p(2);
  char* a = reinterpret_cast<char*>(1 << 20);
  char* b = reinterpret_cast<char*>(2 << 20);
  int red = p.reduce(0, kLaneLocal, a, {a, b}, 16, GPUSTRIPE_FLOAT32, GPUSTRIPE_SUM);
  p.copy(0, kLaneOut2, b + 4096, 1, a, 0, 64);
  EXPECT_NE(find_race(p), "");
  Program q(2);
  red = q.reduce(0, kLaneLocal, a, {a, b}, 16, GPUSTRIPE_FLOAT32, GPUSTRIPE_SUM);
  q.copy(0, kLaneOut2, b + 4096, 1, a, 0, 64, {red});
  EXPECT_EQ(find_race(q), "");
}

}  // namespace
}  // namespace coll_test
