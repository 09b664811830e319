// The MPI interposer's slice runner (src/mpi/coll_slice.hpp) without MPI: threads play
// the ranks of one node, each running its part of one Program on its own emulated GPU,
// ordered across ranks only by the shared flags. A dependency the runner ignored would
// let a rank copy data its predecessor has not written yet: the checks see stale bytes.
#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <thread>
#include <vector>

#include "backend/backend.hpp"
#include "coll/reduce.hpp"
#include "common/error.hpp"
#include "ipc/shm_segment.hpp"
#include "mpi/coll_slice.hpp"
#include "test_util.hpp"
#include "topology/topology.hpp"

using namespace gpustripe;
using coll::Program;

namespace {

struct Node {
  Topology topo = load_topology_file("h200x4");
  std::unique_ptr<Backend> backend = make_emulated_backend(topo);
  std::string name = ipc::unique_shm_name("slice-test");
  ipc::ShmSegment seg = ipc::ShmSegment::create(name, mpi::TeamFlags::segment_bytes());
  ~Node() { seg.unlink(); }
};

void fill(Backend& b, void* dev_buf, int dev, size_t n, float v) {
  std::vector<float> h(n, v);
  StreamHandle s = b.create_stream(dev);
  b.copy_async(dev_buf, dev, h.data(), kHostDevice, n * sizeof(float), s);
  b.synchronize_stream(s);
  b.destroy_stream(s);
}

std::vector<float> read(Backend& b, const void* dev_buf, int dev, size_t n) {
  std::vector<float> h(n);
  StreamHandle s = b.create_stream(dev);
  b.copy_async(h.data(), kHostDevice, dev_buf, dev, n * sizeof(float), s);
  b.synchronize_stream(s);
  b.destroy_stream(s);
  return h;
}

// Runs `prog` with one thread per rank; returns the first error of any rank ("" if none).
std::string run_ranks(Node& node, const Program& prog, int runs = 1) {
  const int n = prog.nranks();
  std::vector<std::string> errors(n);
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r)
    threads.emplace_back([&, r] {
      try {
        auto reducer = coll::make_reducer(*node.backend);
        mpi::TeamFlags flags(ipc::ShmSegment::open(node.name));
        mpi::SliceRunner runner(*node.backend, *reducer, r, n, flags, [] {});
        for (int i = 0; i < runs; ++i) runner.run(prog, r);
      } catch (const std::exception& e) {
        errors[r] = e.what();
      }
    });
  for (auto& t : threads) t.join();
  for (auto& e : errors)
    if (!e.empty()) return e;
  return "";
}

}  // namespace

// A relay 0 -> 1 -> 2 -> 0 of large copies, each driven by another rank and waiting for the
// previous one, then a reduction on rank 0 over all three ranks' buffers.
TEST(CollSlice, CrossRankDependenciesHoldAcrossThreads) {
  Node node;
  Backend& b = *node.backend;
  const size_t n = 4 << 20;  // 16 MB per copy: long enough that an early start reads stale data
  std::vector<float*> a(3), c(3);
  for (int r = 0; r < 3; ++r) {
    a[r] = static_cast<float*>(b.alloc_device(r, n * sizeof(float)));
    c[r] = static_cast<float*>(b.alloc_device(r, n * sizeof(float)));
    fill(b, a[r], r, n, -1.0f);
    fill(b, c[r], r, n, 0.0f);
  }
  fill(b, a[0], 0, n, 7.0f);
  Program p(3);
  int s1 = p.copy(0, coll::kLaneOut, a[1], 1, a[0], 0, n * sizeof(float));
  int s2 = p.copy(1, coll::kLaneOut, a[2], 2, a[1], 1, n * sizeof(float), {s1});
  int s3 = p.copy(2, coll::kLaneOut, c[0], 0, a[2], 2, n * sizeof(float), {s2});
  p.reduce(0, coll::kLaneLocal, c[0], {c[0], a[1], a[2]}, n, GPUSTRIPE_FLOAT32,
           GPUSTRIPE_SUM, {s3, s2});
  p.barrier();
  // After the barrier every rank reads what rank 0 reduced.
  for (int r = 1; r < 3; ++r) p.copy(r, coll::kLaneLocal, c[r], r, c[0], 0, n * sizeof(float));
  ASSERT_EQ(run_ranks(node, p, 3), "");
  for (int r = 0; r < 3; ++r) {
    std::vector<float> got = read(b, c[r], r, n);
    for (size_t i = 0; i < n; i += 4099) ASSERT_EQ(got[i], 21.0f) << "rank " << r << " element " << i;
  }
  for (int r = 0; r < 3; ++r) {
    b.free_device(a[r]);
    b.free_device(c[r]);
  }
}

// A rank waiting for a step of a rank that never runs ends with the peer check's error.
TEST(CollSlice, MissingRankEndsInThePeerCheck) {
  Node node;
  Backend& b = *node.backend;
  float* x = static_cast<float*>(b.alloc_device(0, 4096));
  float* y = static_cast<float*>(b.alloc_device(1, 4096));
  Program p(2);
  int s = p.copy(0, coll::kLaneOut, y, 1, x, 0, 4096);
  p.copy(1, coll::kLaneLocal, y, 1, y, 1, 0, {s});  // empty: not added
  p.copy(1, coll::kLaneOut, x, 0, y, 1, 4096, {s});
  auto reducer = coll::make_reducer(b);
  mpi::TeamFlags flags(ipc::ShmSegment::open(node.name));
  std::atomic<int> checks{0};
  mpi::SliceRunner runner(b, *reducer, 1, 2, flags, [&] {
    if (++checks > 3) GS_THROW(GPUSTRIPE_ERR_PEER_FAILED, "rank 0 is gone");
  });
  try {
    runner.run(p, 1);
    FAIL() << "returned although rank 0 never ran";
  } catch (const Error& e) {
    EXPECT_EQ(e.status(), GPUSTRIPE_ERR_PEER_FAILED) << e.what();
  }
  b.free_device(x);
  b.free_device(y);
}
