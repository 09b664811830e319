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

// A graph is keyed by its buffers' allocations, not only their addresses: after a free and
// an allocation of the same size (often at the same address), the call is not a replay.
TEST(CollGraphs, BuffersAllocatedAgainAreNotReplayed) {
  Topology topo = load_topology_file("h200x4");
  auto* rec = new RecordingGraphBackend(make_emulated_backend(topo));
  std::unique_ptr<Backend> backend(rec);
  auto comm = Comm::create(*backend, topo, {0, 1});
  const size_t count = 1000, bytes = count * 4 * 2;
  std::vector<StreamHandle> streams{backend->create_stream(0), backend->create_stream(1)};
  std::vector<const void*> send(2);
  std::vector<void*> recv(2);
  auto alloc = [&] {
    for (int r = 0; r < 2; ++r) {
      send[r] = backend->alloc_device(r, bytes);
      recv[r] = backend->alloc_device(r, bytes);
    }
  };
  auto release = [&] {
    for (int r = 0; r < 2; ++r) {
      backend->free_device(const_cast<void*>(send[r]));
      backend->free_device(recv[r]);
    }
  };
  auto call = [&] {
    comm->alltoall(send, recv, count, GPUSTRIPE_FLOAT32, streams);
    for (StreamHandle s : streams) backend->synchronize_stream(s);
  };
  alloc();
  for (int i = 0; i < 3; ++i) call();  // direct, captured (and launched), replayed
  EXPECT_EQ(rec->captures, 1);
  EXPECT_EQ(rec->launches, 2);
  const std::vector<void*> before{const_cast<void*>(send[0]), recv[0], const_cast<void*>(send[1]), recv[1]};
  release();
  alloc();
  call();  // new allocations: seen for the first time, run directly
  EXPECT_EQ(rec->launches, 2) << "a graph over freed memory was replayed (same addresses: "
                              << (before[0] == send[0] && before[1] == recv[0]) << ")";
  call();
  EXPECT_EQ(rec->captures, 2);
  release();
  for (StreamHandle s : streams) backend->destroy_stream(s);
}

}  // namespace
}  // namespace coll_test
