// Graph mode of the collectives' executor, without a GPU (recording_graph_backend.hpp): the
// sequence of CollGpu.GraphReplaysOnFreshData (blocking calls, then calls on the caller's
// streams, each case on buffers freed and allocated again, often at the same addresses).
#include <gtest/gtest.h>

#include "recording_graph_backend.hpp"
#include "test_coll_harness.hpp"
#include "test_util.hpp"
#include "topology/topology.hpp"

namespace coll_test {
namespace {

TEST(CollGraphs, BlockingThenStreamCallsOnBuffersAllocatedAgain) {
  Topology topo = load_topology_file("h200x4");
  auto* rec = new RecordingGraphBackend(make_emulated_backend(topo));
  std::unique_ptr<Backend> backend(rec);
  for (int n : {2, 4}) {
    auto comm = Comm::create(*backend, topo, n == 2 ? std::vector<int>{0, 1} : std::vector<int>{0, 1, 2, 3});
    for (const char* algo : {"rounds", "all_at_once", "direct", "scatter_ag", "chain"})
      for (CollOp op : {CollOp::AllToAll, CollOp::AllGather, CollOp::Bcast}) {
        ScopedEnv a("GPUSTRIPE_COLL_ALGO", algo);
        auto own = schedule_names(op);
        if (std::find(own.begin(), own.end(), algo) == own.end()) continue;
        for (bool in_place : {false, true})
          for (bool async : {false, true}) {
            if (op == CollOp::Bcast && in_place) continue;
            Case c{op, GPUSTRIPE_FLOAT32, GPUSTRIPE_SUM, size_t(1000) + 7, in_place, 1 % n, async, 4};
            ASSERT_EQ(run_case(*comm, c, 77), 0u) << algo << " n=" << n << " " << c.describe();
          }
      }
  }
  EXPECT_GT(rec->captures, 0);
  EXPECT_GT(rec->launches, rec->captures);
  EXPECT_EQ(rec->waits_on_captured_events, 0);
}

}  // namespace
}  // namespace coll_test
