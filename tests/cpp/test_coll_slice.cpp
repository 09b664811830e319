// The MPI interposer's slice runner (src/mpi/coll_slice.hpp) without MPI: threads play
// the ranks of one node, each running its part of one Program on its own emulated GPU,
// ordered across ranks only by the shared flags. A dependency the runner ignored would
// let a rank copy data its predecessor has not written yet: the checks see stale bytes.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <functional>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

#include "backend/backend.hpp"
#include "coll/reduce.hpp"
#include "coll/schedules.hpp"
#include "common/error.hpp"
#include "forwarding_backend.hpp"
#include "ipc/shm_segment.hpp"
#include "mpi/coll_calls.hpp"
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

// What a rank's runs left in the shared words: the hosts' barriers it reached, and the parts
// its streams announced done.
struct Met {
  uint64_t host_barriers = 0;
  uint32_t parts_done = 0;
};

// Runs `prog` with one thread per rank, each run after an entry exchange as the team's calls
// are (it orders a run after the previous one's edge resets on every rank); returns the first
// error of any rank ("" if none). `met`: where given, what each rank left in the words.
// `via`: the backend the ranks run on (default: the node's).
std::string run_ranks(Node& node, const Program& prog, int runs = 1, std::vector<Met>* met = nullptr,
                      Backend* via = nullptr) {
  Backend& backend = via ? *via : *node.backend;
  const int n = prog.nranks();
  std::vector<std::string> errors(n);
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r)
    threads.emplace_back([&, r] {
      try {
        auto reducer = coll::make_reducer(*node.backend);
        mpi::TeamFlags flags(ipc::ShmSegment::open(node.name));
        mpi::SliceRunner runner(backend, *reducer, r, n, flags, [] {});
        std::vector<int> all(n);
        for (int i = 0; i < runs; ++i) {
          runner.exchange(&i, sizeof i, all.data());
          runner.run(prog, r);
        }
        if (met) (*met)[r] = Met{flags.arrived(r).load(), flags.op(mpi::TeamFlags::kDoneWord + r).load()};
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

// The kernel schedules end with a Barrier op (their kernels write into the peers' buffers).
// The program's end would then be a second wait for every rank's part that orders nothing: a
// run of [copy by rank 0, barrier, copy by rank 1 of what rank 0's delivered, barrier] ends
// two parts per rank -- and the first still orders the second (the data checks it). The
// barriers are the GPUs' done words: the hosts never meet inside a run.
// A GPU backend as the runner sees CUDA's (not emulated: every copy goes within the rank's
// GPU), recording the devices each copy names; it forwards with the devices the memory
// belongs to.
class IssuedCopies : public ForwardingBackend {
 public:
  using ForwardingBackend::ForwardingBackend;
  const char* name() const override { return "issued-copies"; }
  bool emulated() const override { return false; }
  // CUDA's rule (the base class's), not the emulated backend's that names every owner.
  int ipc_named_device(int owner, int reader) const override { return Backend::ipc_named_device(owner, reader); }
  void copy_async_prechecked(void* dst, int dst_dev, const void* src, int src_dev, size_t bytes,
                             StreamHandle s) override {
    const int dst_owner = owner(dst), src_owner = owner(src);
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (dst_owner == kHostDevice || src_owner == kHostDevice) host_named.push_back({dst_dev, src_dev});
    }
    ForwardingBackend::copy_async(dst, dst_owner, src, src_owner, bytes, s);
  }
  std::vector<std::pair<int, int>> host_named;  // (dst, src) devices named by copies of host memory

 private:
  int owner(const void* p) {
    const PointerInfo i = pointer_info(p);
    return i.kind == MemoryKind::Device ? i.device : kHostDevice;
  }
  std::mutex mu_;
};

// The team's shared host staging across ranks: rank 0 copies D2H into host memory, rank 1 H2D
// out of it once rank 0's copy is done (a flag). On a GPU backend the copies of host memory
// still name it as host memory (a copy within one GPU would take it for device memory).
TEST(CollSlice, HostStagedCopiesNameHostMemory) {
  Node node;
  IssuedCopies gpu(make_emulated_backend(node.topo));
  Backend& b = gpu;
  const size_t n = 1 << 20;
  float* a0 = static_cast<float*>(b.alloc_device(0, n * sizeof(float)));
  float* a1 = static_cast<float*>(b.alloc_device(1, n * sizeof(float)));
  fill(b, a0, 0, n, 5.0f);
  fill(b, a1, 1, n, 0.0f);
  std::vector<float> host(n, -1.0f);
  Program p(2);
  const int d2h = p.copy(0, coll::kLaneD2H, host.data(), kHostDevice, a0, 0, n * sizeof(float));
  p.copy(1, coll::kLaneH2D, a1, 1, host.data(), kHostDevice, n * sizeof(float), {d2h});
  ASSERT_EQ(run_ranks(node, p, 1, nullptr, &gpu), "");
  std::vector<float> got = read(b, a1, 1, n);
  for (size_t i = 0; i < n; i += 4099) ASSERT_EQ(got[i], 5.0f) << i;
  ASSERT_EQ(gpu.host_named.size(), 2u);
  for (auto [dst, src] : gpu.host_named) EXPECT_TRUE(dst == kHostDevice || src == kHostDevice) << dst << " " << src;
  b.free_device(a0);
  b.free_device(a1);
}

TEST(CollSlice, AProgramsClosingBarrierIsItsEnd) {
  Node node;
  Backend& b = *node.backend;
  const size_t n = 1 << 20;
  float* a0 = static_cast<float*>(b.alloc_device(0, n * sizeof(float)));
  float* b1 = static_cast<float*>(b.alloc_device(1, n * sizeof(float)));
  float* c1 = static_cast<float*>(b.alloc_device(1, n * sizeof(float)));
  fill(b, a0, 0, n, 5.0f);
  fill(b, b1, 1, n, -1.0f);
  fill(b, c1, 1, n, -1.0f);
  Program p(2);
  p.copy(0, coll::kLaneOut, b1, 1, a0, 0, n * sizeof(float));
  p.barrier();
  p.copy(1, coll::kLaneLocal, c1, 1, b1, 1, n * sizeof(float));
  p.barrier();
  const int runs = 3;
  std::vector<Met> met(2);
  ASSERT_EQ(run_ranks(node, p, runs, &met), "");
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(met[r].parts_done, 2u * runs) << "rank " << r;
    EXPECT_EQ(met[r].host_barriers, 0u) << "rank " << r;
  }
  std::vector<float> got = read(b, c1, 1, n);
  for (size_t i = 0; i < n; i += 4099) ASSERT_EQ(got[i], 5.0f) << "element " << i;
  for (void* x : {static_cast<void*>(a0), static_cast<void*>(b1), static_cast<void*>(c1)}) b.free_device(x);
}

// Counts the copy kernels' launches of the reducer it wraps.
class LaunchCounter : public coll::Reducer {
 public:
  explicit LaunchCounter(Backend& b) : in_(coll::make_reducer(b)) {}
  void reduce_async(const coll::ReduceArgs& a, int dev, StreamHandle s) override { in_->reduce_async(a, dev, s); }
  void copy_async(const coll::CopyArgs& a, int dev, StreamHandle s) override {
    segments.push_back(a.segs.size());
    in_->copy_async(a, dev, s);
  }
  std::vector<size_t> segments;  // per launch

 private:
  std::unique_ptr<coll::Reducer> in_;
};

// The native exchanges' kernel copies (Op::by_kernel) run as the copy kernel, the copies of a
// lane that share their dependencies in one launch as the single-process executor runs them:
// rank 0's three independent blocks go in one kernel, the copy that reads one of them after it.
TEST(CollSlice, KernelCopiesOfALaneGoInOneLaunch) {
  Node node;
  Backend& b = *node.backend;
  const size_t n = 4096;
  std::vector<float*> src(3), dst(3);
  for (int k = 0; k < 3; ++k) {
    src[k] = static_cast<float*>(b.alloc_device(0, n * sizeof(float)));
    dst[k] = static_cast<float*>(b.alloc_device(1, n * sizeof(float)));
    fill(b, src[k], 0, n, 1.0f + k);
    fill(b, dst[k], 1, n, -1.0f);
  }
  float* again = static_cast<float*>(b.alloc_device(0, n * sizeof(float)));
  Program p(2);
  int last = -1;
  for (int k = 0; k < 3; ++k) last = p.kernel_copy(0, coll::kLaneOut, dst[k], 1, src[k], 0, n * sizeof(float));
  p.kernel_copy(0, coll::kLaneOut, again, 0, dst[2], 1, n * sizeof(float), {last});
  LaunchCounter counter(b);
  mpi::TeamFlags flags0(ipc::ShmSegment::open(node.name));
  std::string error;
  std::thread other([&] {  // rank 1 has no ops: it meets rank 0 at the end
    try {
      auto reducer = coll::make_reducer(b);
      mpi::TeamFlags flags(ipc::ShmSegment::open(node.name));
      mpi::SliceRunner runner(b, *reducer, 1, 2, flags, [] {});
      runner.run(p, 1);
    } catch (const std::exception& e) {
      error = e.what();
    }
  });
  mpi::SliceRunner runner(b, counter, 0, 2, flags0, [] {});
  runner.run(p, 0);
  other.join();
  EXPECT_EQ(error, "");
  EXPECT_EQ(counter.segments, (std::vector<size_t>{3, 1}));
  for (int k = 0; k < 3; ++k) EXPECT_EQ(read(b, dst[k], 1, n)[n - 1], 1.0f + k) << "block " << k;
  EXPECT_EQ(read(b, again, 0, n)[0], 3.0f);
  for (int k = 0; k < 3; ++k) {
    b.free_device(src[k]);
    b.free_device(dst[k]);
  }
  b.free_device(again);
}

using CallCounter = CallCountingBackend;

// Puts a CallCounter in front of the node's backend.
CallCounter& count_calls(Node& node) {
  auto counted = std::make_unique<CallCounter>(std::move(node.backend));
  CallCounter& counter = *counted;
  node.backend = std::move(counted);
  return counter;
}

// Runs rank(1) on a thread and rank(0) here; each rank's error ("" if none).
std::vector<std::string> on_two_ranks(const std::function<void(int)>& rank) {
  std::vector<std::string> errors(2);
  auto guarded = [&](int r) {
    try {
      rank(r);
    } catch (const std::exception& e) {
      errors[r] = e.what();
    }
  };
  std::thread other(guarded, 1);
  guarded(0);
  other.join();
  return errors;
}

// on_two_ranks, each rank with a runner of its own over the node's flags, on `b`.
std::vector<std::string> on_two_runners(Node& node, Backend& b,
                                        const std::function<void(int, mpi::SliceRunner&, mpi::TeamFlags&)>& rank) {
  return on_two_ranks([&](int r) {
    auto reducer = coll::make_reducer(b);
    mpi::TeamFlags flags(ipc::ShmSegment::open(node.name));
    mpi::SliceRunner runner(b, *reducer, r, 2, flags, [] {});
    rank(r, runner, flags);
  });
}

// A kernel schedule's parts (a kernel per rank on one stream, no waits between ranks) end
// without the hosts meeting: each rank's kernel writes its done word at its end, and every
// host returns once all the words are there -- no flag write, no event to record or poll, no
// host barrier. Rank 1's 16 MB copy into rank 0's buffer is
// complete whenever rank 0 returns, although rank 0's own part is a tiny copy: rank 0 waits
// for every rank's GPU, not only its own.
TEST(CollSlice, ACallEndsOnTheGpusDoneWordsWithoutAHostMeeting) {
  Node node;
  CallCounter& counter = count_calls(node);
  Backend& b = *node.backend;
  const size_t n = 4 << 20, small = 1024;
  float* big1 = static_cast<float*>(b.alloc_device(1, n * sizeof(float)));
  float* dst0 = static_cast<float*>(b.alloc_device(0, n * sizeof(float)));
  float* x0 = static_cast<float*>(b.alloc_device(0, small * sizeof(float)));
  float* y0 = static_cast<float*>(b.alloc_device(0, small * sizeof(float)));
  fill(b, x0, 0, small, 1.0f);
  Program p(2);
  p.kernel_copy(0, coll::kLaneOut, y0, 0, x0, 0, small * sizeof(float));
  p.kernel_copy(1, coll::kLaneOut, dst0, 0, big1, 1, n * sizeof(float));
  const int calls = 4;
  std::vector<Met> met(2);
  const std::vector<std::string> errors = on_two_runners(node, b, [&](int r, mpi::SliceRunner& runner, auto& flags) {
    int all[2];
    for (int i = 0; i < calls; ++i) {
      if (r == 1) fill(b, big1, 1, n, 10.0f + i);
      runner.exchange(&i, sizeof i, all);
      runner.run(p, r);
      if (r == 0) {
        std::vector<float> got = read(b, dst0, 0, n);
        for (size_t k = 0; k < n; k += 4099)
          if (got[k] != 10.0f + i) GS_THROW(GPUSTRIPE_ERR_INTERNAL, "call %d: element %zu is %g", i, k, got[k]);
        if (got[n - 1] != 10.0f + i) GS_THROW(GPUSTRIPE_ERR_INTERNAL, "call %d: the last element", i);
      }
    }
    met[r] = Met{flags.arrived(r).load(), flags.op(mpi::TeamFlags::kDoneWord + r).load()};
  });
  EXPECT_EQ(errors, (std::vector<std::string>{"", ""}));
  EXPECT_EQ(counter.writes.load(), 0);
  EXPECT_EQ(counter.records.load(), 0);
  EXPECT_EQ(counter.queries.load(), 0);
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(met[r].host_barriers, 0u) << "rank " << r;
    EXPECT_EQ(met[r].parts_done, static_cast<uint32_t>(calls)) << "rank " << r;
  }
  for (void* x : {static_cast<void*>(big1), static_cast<void*>(dst0), static_cast<void*>(x0), static_cast<void*>(y0)})
    b.free_device(x);
}

// Counts the reducer's launches: its reductions' and its copy kernels'.
class AnyLaunchCounter : public coll::Reducer {
 public:
  explicit AnyLaunchCounter(Backend& b) : in_(coll::make_reducer(b)) {}
  void reduce_async(const coll::ReduceArgs& a, int dev, StreamHandle s) override {
    ++launches;
    in_->reduce_async(a, dev, s);
  }
  bool can_signal(const coll::ReduceArgs& a) const override { return in_->can_signal(a); }
  void copy_async(const coll::CopyArgs& a, int dev, StreamHandle s) override {
    ++launches;
    in_->copy_async(a, dev, s);
  }
  bool can_signal_copy(const coll::CopyArgs& a) const override { return in_->can_signal_copy(a); }
  int launches = 0;

 private:
  std::unique_ptr<coll::Reducer> in_;
};

// What a rank's part of each blocking form is at the sizes where a call's host path shows
// (1-16 MB per rank) on a pair of GPUs that map each other's memory (the 2x H100 and H200
// nodes): the schedules a team of two processes chooses there (two-shot allreduce, the pulled
// reduce-scatter, the copy kernels' exchanges and broadcast) are one kernel per rank, with no
// dependency between the ranks inside the call, that writes the part's done word itself. Per
// call a rank makes that one launch (the broadcast's root none) and no other driver call: no
// copy-engine copy, flag write or wait, event record or wait.
TEST(CollSlice, EachFormsPartOnAPairIsOneLaunchAndNoOtherDriverCall) {
  Node node;
  CallCounter& counter = count_calls(node);
  Backend& b = *node.backend;
  const coll::TeamResources res = mpi::team_resources(b, node.topo, 2);
  const size_t most = size_t(16) << 20;
  std::vector<char*> x(2), y(2);
  for (int r = 0; r < 2; ++r) {
    x[r] = static_cast<char*>(b.alloc_device(r, most));
    y[r] = static_cast<char*>(b.alloc_device(r, most));
  }
  const coll::Team team{{0, 1}, {0, 1}};
  coll::Scratch scratch(b, team.dev);
  struct Form {
    std::string what;
    Program prog{2};
    bool root_idle = false;  // the broadcast's root: nothing to run
  };
  std::vector<Form> forms;
  for (size_t bytes : {size_t(1) << 20, size_t(4) << 20, most}) {
    const size_t floats = bytes / sizeof(float);
    for (coll::CollOp op : {coll::CollOp::AllReduce, coll::CollOp::ReduceScatter, coll::CollOp::AllGather,
                            coll::CollOp::AllToAll, coll::CollOp::Bcast}) {
      mpi::CollCall c;  // as rank 0 describes it; rank 1's is the same over its own buffers
      switch (op) {
        case coll::CollOp::AllReduce: mpi::allreduce_call(c, x[0], y[0], floats, GPUSTRIPE_FLOAT32, GPUSTRIPE_SUM); break;
        case coll::CollOp::ReduceScatter:
          mpi::reduce_scatter_call(c, 2, x[0], y[0], floats / 2, GPUSTRIPE_FLOAT32, GPUSTRIPE_SUM);
          break;
        case coll::CollOp::AllGather: mpi::allgather_call(c, 2, x[0], y[0], bytes / 2); break;
        case coll::CollOp::AllToAll: mpi::alltoall_call(c, 2, x[0], y[0], bytes / 2); break;
        default: mpi::bcast_call(c, y[0], bytes, 0); break;
      }
      const coll::Choice choice = coll::choose_schedule(op, res, c.bytes, c.elem_size);
      Form f;
      c.build(f.prog, team, x, y, scratch, choice);
      f.what = std::string(coll::coll_op_name(op)) + " of " + std::to_string(bytes) + " bytes: " + choice.describe() +
               "; " + f.prog.summary();
      f.root_idle = op == coll::CollOp::Bcast;
      forms.push_back(std::move(f));
    }
  }
  const int calls = 2;
  std::vector<std::vector<int>> launches(2, std::vector<int>(forms.size(), 0));
  // Whether the runner said when the part's first driver call began (the phase trace's
  // coll_launch), before its end: -1 unset, 1 set in order.
  std::vector<std::vector<int>> stamped(2, std::vector<int>(forms.size(), 0));
  const std::vector<std::string> errors = on_two_ranks([&](int r) {
    AnyLaunchCounter reducer(b);
    mpi::TeamFlags flags(ipc::ShmSegment::open(node.name));
    mpi::SliceRunner runner(b, reducer, r, 2, flags, [] {});
    int all[2];
    for (size_t k = 0; k < forms.size(); ++k) {
      const int before = reducer.launches;
      for (int i = 0; i < calls; ++i) {
        runner.exchange(&i, sizeof i, all);
        runner.run(forms[k].prog, r);
      }
      launches[r][k] = reducer.launches - before;
      stamped[r][k] = runner.launched_at() == std::chrono::steady_clock::time_point{} ? -1
                      : runner.launched_at() <= runner.enqueued_at()                ? 1
                                                                                      : 0;
    }
  });
  ASSERT_EQ(errors, (std::vector<std::string>{"", ""}));
  for (size_t k = 0; k < forms.size(); ++k) {
    EXPECT_EQ(launches[0][k], forms[k].root_idle ? 0 : calls) << forms[k].what;
    EXPECT_EQ(launches[1][k], calls) << forms[k].what;
    EXPECT_EQ(stamped[0][k], forms[k].root_idle ? -1 : 1) << forms[k].what;
    EXPECT_EQ(stamped[1][k], 1) << forms[k].what;
  }
  EXPECT_EQ(counter.copies.load(), 0);
  EXPECT_EQ(counter.writes.load(), 0);
  EXPECT_EQ(counter.flag_waits.load(), 0);
  EXPECT_EQ(counter.records.load(), 0);
  EXPECT_EQ(counter.waits.load(), 0);
  for (int r = 0; r < 2; ++r) {
    b.free_device(x[r]);
    b.free_device(y[r]);
  }
}

// Runs `calls` calls of a two-rank program over x[r] (rank r's input, set to 1 + call + r
// before each) and y[r] on a fresh node whose flag writes are counted; `check(rank, call)` runs
// on each rank after each call. Returns the stream flag writes and the events recorded; both
// ranks' errors must be "".
std::pair<int, int> flag_writes_of(const std::function<Program(const std::vector<float*>& x, const std::vector<float*>& y,
                                               float* z)>& make,
                   const std::function<void(Backend&, const std::vector<float*>& y, float* z, int, int)>& check,
                   int calls, size_t n, bool nonblocking = false) {
  Node node;
  CallCounter& counter = count_calls(node);
  Backend& b = *node.backend;
  std::vector<float*> x(2), y(2);
  for (int r = 0; r < 2; ++r) {
    x[r] = static_cast<float*>(b.alloc_device(r, n * sizeof(float)));
    y[r] = static_cast<float*>(b.alloc_device(r, n * sizeof(float)));
  }
  float* z = static_cast<float*>(b.alloc_device(0, sizeof(float)));
  const Program p = make(x, y, z);
  std::vector<Met> met(2);
  const std::vector<std::string> errors = on_two_runners(node, b, [&](int r, mpi::SliceRunner& runner, auto& flags) {
    int all[2];
    for (int i = 0; i < calls; ++i) {
      fill(b, x[r], r, n, 1.0f + i + r);
      runner.exchange(&i, sizeof i, all);
      if (!nonblocking) {
        runner.run(p, r);
      } else {
        // A nonblocking collective's part: started, then polled until every rank's is done.
        if (!runner.start(p, r)) GS_THROW(GPUSTRIPE_ERR_INTERNAL, "the part could not start");
        const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(10);
        while (!runner.poll())
          if (std::chrono::steady_clock::now() > give_up) GS_THROW(GPUSTRIPE_ERR_TIMEOUT, "call %d: no end", i);
      }
      check(b, y, z, r, i);
    }
    met[r] = Met{flags.arrived(r).load(), flags.op(mpi::TeamFlags::kDoneWord + r).load()};
  });
  EXPECT_EQ(errors, (std::vector<std::string>{"", ""}));
  for (int r = 0; r < 2; ++r) EXPECT_EQ(met[r].parts_done, static_cast<uint32_t>(calls)) << "rank " << r;
  b.free_device(z);
  for (int r = 0; r < 2; ++r) {
    b.free_device(x[r]);
    b.free_device(y[r]);
  }
  return {counter.writes.load(), counter.records.load()};
}

// The one-shot allreduce's parts (one reduction per rank, reading every rank's input): the
// reduction announces the part's end itself, in the done word, so a call costs no flag write
// at all (a stream's write after the kernel is a driver call per rank and call), and every
// rank still returns only with both results complete -- blocking (run) and nonblocking
// (start, poll) alike.
TEST(CollSlice, AReductionEndingItsPartWritesTheDoneWordItself) {
  const size_t n = 1 << 16;
  const int calls = 3;
  auto oneshot = [&](const std::vector<float*>& x, const std::vector<float*>& y, float*) {
    Program p(2);
    for (int r = 0; r < 2; ++r) p.reduce(r, coll::kLaneLocal, y[r], {x[0], x[1]}, n, GPUSTRIPE_FLOAT32, GPUSTRIPE_SUM);
    return p;
  };
  auto both_done = [&](Backend& b, const std::vector<float*>& y, float*, int, int i) {
    for (int q = 0; q < 2; ++q) {
      const float got = read(b, y[q], q, n)[n - 1];
      if (got != 3.0f + 2 * i) GS_THROW(GPUSTRIPE_ERR_INTERNAL, "call %d: rank %d's result is %g", i, q, got);
    }
  };
  EXPECT_EQ(flag_writes_of(oneshot, both_done, calls, n), std::make_pair(0, 0));
  EXPECT_EQ(flag_writes_of(oneshot, both_done, calls, n, true), std::make_pair(0, 0));
}

// A part whose last kernel is followed by an edge flag, or by work on another stream, ends with
// the stream's write of the done word: rank 1's reduction feeds a copy of rank 0's (its stream
// writes the edge flag, then the word); rank 0's part spans two streams (its reduction, the copy).
TEST(CollSlice, APartNotEndedByOneKernelKeepsTheStreamsWrite) {
  const size_t n = 1 << 12;
  const int calls = 3;
  auto fed = [&](const std::vector<float*>& x, const std::vector<float*>& y, float* z) {
    Program p(2);
    p.reduce(0, coll::kLaneLocal, y[0], {x[0], x[1]}, n, GPUSTRIPE_FLOAT32, GPUSTRIPE_SUM);
    const int r1 = p.reduce(1, coll::kLaneLocal, y[1], {x[0], x[1]}, n, GPUSTRIPE_FLOAT32, GPUSTRIPE_SUM);
    p.copy(0, coll::kLaneOut, z, 0, y[1], 1, sizeof(float), {r1});
    return p;
  };
  auto copied = [&](Backend& b, const std::vector<float*>&, float* z, int r, int i) {
    if (r == 0 && read(b, z, 0, 1)[0] != 3.0f + 2 * i) GS_THROW(GPUSTRIPE_ERR_INTERNAL, "call %d: the copy", i);
  };
  // Rank 0 joins its copy's stream into its reduction's with an event per call.
  EXPECT_EQ(flag_writes_of(fed, copied, calls, n), std::make_pair(3 * calls, calls));
}

// Calls of a pair, each its own buffers: x[r][i], rank r's input of call i (10 * r + i), copied by
// rank r's kernel into y[1 - r][i] (a kernel schedule's shape: one copy kernel per rank).
struct PairCopies {
  Backend& b;
  static constexpr size_t n = 4096;
  std::vector<float*> x[2], y[2];
  std::vector<Program> progs;
  // by_kernel: kernel copies (a kernel schedule's shape; an emulated kernel runs on the host once
  // its stream gets there, so its enqueue waits), else copy-engine copies (enqueued without a wait)
  PairCopies(Backend& backend, int calls, bool by_kernel = true) : b(backend) {
    for (int r = 0; r < 2; ++r)
      for (int i = 0; i < calls; ++i) {
        x[r].push_back(static_cast<float*>(b.alloc_device(r, n * sizeof(float))));
        y[r].push_back(static_cast<float*>(b.alloc_device(r, n * sizeof(float))));
        fill(b, x[r][i], r, n, 10.0f * r + i);
      }
    for (int i = 0; i < calls; ++i) {
      Program p(2);
      if (by_kernel) {
        p.kernel_copy(0, coll::kLaneOut, y[1][i], 1, x[0][i], 0, n * sizeof(float));
        p.kernel_copy(1, coll::kLaneOut, y[0][i], 0, x[1][i], 1, n * sizeof(float));
      } else {
        p.copy(0, coll::kLaneOut, y[1][i], 1, x[0][i], 0, n * sizeof(float));
        p.copy(1, coll::kLaneOut, y[0][i], 0, x[1][i], 1, n * sizeof(float));
      }
      progs.push_back(std::move(p));
    }
  }
  ~PairCopies() {
    for (int r = 0; r < 2; ++r)
      for (size_t i = 0; i < x[r].size(); ++i) {
        b.free_device(x[r][i]);
        b.free_device(y[r][i]);
      }
  }
  // Throws unless rank r's output of call i holds the peer's input (read on `s`, else on a stream of its own).
  void check(int r, int i, StreamHandle s = nullptr) const {
    std::vector<float> got(n);
    if (s) {
      b.copy_async(got.data(), kHostDevice, y[r][i], r, n * sizeof(float), s);
      b.synchronize_stream(s);
    } else {
      got = read(b, y[r][i], r, n);
    }
    if (got[0] != 10.0f * (1 - r) + i || got[n - 1] != got[0])
      GS_THROW(GPUSTRIPE_ERR_INTERNAL, "rank %d, call %d: %g", r, i, got[0]);
  }
};

// A rank's part on one lane (a copy kernel per rank: a kernel schedule's shape) runs on the
// origin stream itself. Per call the host records one event on the caller's stream, the origin
// stream waits for it, and the GPUs' entry and exit barriers are one call each: no fork to a
// lane and join back (two records and two waits more), no end event per call (settle() marks
// the end of every call before it once). Calls enqueued back to back, each into buffers of its
// own, all hold once settled.
TEST(CollSlice, AStreamOrderedOneLanePartRunsOnTheOriginStreamWithoutForkOrJoin) {
  Node node;
  CallCounter& counter = count_calls(node);
  Backend& b = *node.backend;
  const int calls = 3;
  PairCopies c(b, calls);
  const std::vector<std::string> errors = on_two_runners(node, b, [&](int r, mpi::SliceRunner& runner, auto&) {
    StreamHandle caller = b.create_stream(r);
    for (int i = 0; i < calls; ++i) runner.run_ordered(c.progs[i], r, caller);
    runner.settle();
    for (int i = 0; i < calls; ++i) c.check(r, i);
    b.destroy_stream(caller);
  });
  EXPECT_EQ(errors, (std::vector<std::string>{"", ""}));
  EXPECT_EQ(counter.records.load(), 2 * calls + 2);  // per rank: the caller's stream per call, the end once
  EXPECT_EQ(counter.waits.load(), 2 * calls);        // the origin stream's wait for the caller's
  EXPECT_EQ(counter.barriers.load(), 2 * 2 * calls);  // entry and exit
  EXPECT_EQ(counter.writes.load() + counter.flag_waits.load(), 0);
}

// A run on the caller's stream itself (on_after: a blocking call's end) needs no event or wait
// between the streams: runs back to back on one caller stream cost their barriers and their part
// alone (their end is their exit barrier's count, nothing recorded on a stream the caller may
// destroy). A run on another stream than the one before waits for it: the origin stream after a
// caller's (nothing more where the caller's event, recorded after that run, covers it), a second
// caller stream after the origin's (its event), the first caller stream again after the second's
// (this rank's barrier word). Every call's data holds, each rank's streams reading the other's
// inputs; the caller's stream, joined to nothing, sees its runs' results; settle() waits for the
// words.
TEST(CollSlice, ARunOnTheCallersStreamNeedsNoEventBetweenStreamsAndFollowsTheRunBefore) {
  Node node;
  CallCounter& counter = count_calls(node);
  Backend& b = *node.backend;
  const int calls = 5;  // on A, on A, on the origin (after A), on B, on A
  PairCopies c(b, calls);
  const std::vector<std::string> errors = on_two_runners(node, b, [&](int r, mpi::SliceRunner& runner, auto&) {
    StreamHandle a = b.create_stream(r), other = b.create_stream(r);
    runner.run_ordered(c.progs[0], r, a, nullptr, nullptr, true);
    runner.run_ordered(c.progs[1], r, a, nullptr, nullptr, true);
    runner.run_ordered(c.progs[2], r, a);
    runner.run_ordered(c.progs[3], r, other, nullptr, nullptr, true);
    runner.run_ordered(c.progs[4], r, a, nullptr, nullptr, true);
    runner.join_ordered(r, a);  // the latest run ran on a: nothing to enqueue
    // The caller's stream alone, no settle: what a blocking caller reads next.
    for (int i : {0, 1, 4}) c.check(r, i, a);
    runner.settle();
    for (int i = 0; i < calls; ++i) c.check(r, i);
    b.destroy_stream(a);
    b.destroy_stream(other);
  });
  EXPECT_EQ(errors, (std::vector<std::string>{"", ""}));
  // Per rank: the origin run the caller's event (1), B's run the origin's end (1). Waits: the
  // origin on the caller's event (1), B on the origin's end (1); A after B on this rank's word
  // (1); none for the runs back to back on A, nor for the join.
  EXPECT_EQ(counter.records.load(), 2 * 2);
  EXPECT_EQ(counter.waits.load(), 2 * 2);
  EXPECT_EQ(counter.flag_waits.load(), 2 * 1);
  EXPECT_EQ(counter.barriers.load(), 2 * 2 * calls);
}

// A run without the entry barrier (a staged call's: it touches nothing a peer may still produce)
// starts once the run before it has ended on every rank: on another stream than a caller-stream
// run before it, its stream waits for every rank's barrier word past that run's exit (not only
// this rank's, which the entry barrier would have completed). It costs its exit barrier alone.
// Every call's data holds.
TEST(CollSlice, ARunWithoutEntryBarrierWaitsForEveryRanksExitOfTheRunBefore) {
  Node node;
  CallCounter& counter = count_calls(node);
  Backend& b = *node.backend;
  const int calls = 3;  // on A with its entry, on B without, on the origin without
  PairCopies c(b, calls);
  const std::vector<std::string> errors = on_two_runners(node, b, [&](int r, mpi::SliceRunner& runner, auto&) {
    StreamHandle a = b.create_stream(r), other = b.create_stream(r);
    runner.run_ordered(c.progs[0], r, a, nullptr, nullptr, true);
    runner.run_ordered(c.progs[1], r, other, nullptr, nullptr, true, /*entry=*/false);
    runner.run_ordered(c.progs[2], r, a, nullptr, nullptr, false, /*entry=*/false);
    runner.settle();
    for (int i = 0; i < calls; ++i) c.check(r, i);
    b.destroy_stream(a);
    b.destroy_stream(other);
  });
  EXPECT_EQ(errors, (std::vector<std::string>{"", ""}));
  // Per rank: B waits for both ranks' words past A's exit (2), the origin for both past B's (2);
  // the origin run records and waits for A's event (1 and 1); settle() records the origin's end (1).
  EXPECT_EQ(counter.flag_waits.load(), 2 * 4);
  EXPECT_EQ(counter.records.load(), 2 * 2);
  EXPECT_EQ(counter.waits.load(), 2 * 1);
  EXPECT_EQ(counter.barriers.load(), 2 * (2 + 1 + 1));
}

// Whether a run was enqueued while the run before it still ran on some rank's GPU (what the
// torch backend's review asks of a call: its host time then kept no GPU waiting): rank 1 makes
// no run until rank 0 has enqueued its first two, so rank 0's first run cannot have ended (its
// exit barrier waits for rank 1) when its second is enqueued (copy-engine copies: their enqueue
// does not wait for the stream to get there). A run after settle() finds every rank past the one
// before; the first run of a runner has none before it.
TEST(CollSlice, ARunKnowsWhetherTheRunBeforeItStillRanWhenItWasEnqueued) {
  Node node;
  Backend& b = *node.backend;
  const int calls = 3;
  PairCopies c(b, calls, /*by_kernel=*/false);
  std::atomic<bool> go{false};
  std::vector<std::vector<bool>> behind(2);
  const std::vector<std::string> errors = on_two_runners(node, b, [&](int r, mpi::SliceRunner& runner, auto&) {
    StreamHandle caller = b.create_stream(r);
    if (r == 1) {
      const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(20);
      while (!go.load() && std::chrono::steady_clock::now() < until) std::this_thread::yield();
    }
    for (int i = 0; i < 2; ++i) {
      runner.run_ordered(c.progs[i], r, caller);
      behind[r].push_back(runner.enqueued_behind());
    }
    go.store(true);
    runner.settle();
    runner.run_ordered(c.progs[2], r, caller);
    behind[r].push_back(runner.enqueued_behind());
    runner.settle();
    for (int i = 0; i < calls; ++i) c.check(r, i);
    b.destroy_stream(caller);
  });
  EXPECT_EQ(errors, (std::vector<std::string>{"", ""}));
  EXPECT_EQ(behind[0], (std::vector<bool>{false, true, false}));
  EXPECT_FALSE(behind[1][0]);
  EXPECT_FALSE(behind[1][2]);
}

// The emulated stand-in for coll::MappedBarrier's kernels: a barrier of the two ranks' streams
// on a word of each, counted.
class WordBarrier : public coll::MappedBarrier {
 public:
  WordBarrier(Backend& b, uint32_t* mine, const uint32_t* other, std::atomic<int>& arrivals)
      : b_(b), mine_(mine), other_(other), arrivals_(arrivals) {}
  void arrive_and_wait(StreamHandle s) override {
    ++arrivals_;
    b_.stream_flag_barrier(s, mine_, &other_, 1, ++count_);
  }
  const coll::FusedBarrier* fused(const std::vector<coll::BarrierCopy>&, const std::vector<coll::BarrierCopy>&,
                                  uint32_t*, uint32_t) override {
    return nullptr;  // the emulated reducer runs no barrier inside its kernels
  }
  void check() override {}

 private:
  Backend& b_;
  uint32_t* mine_;
  const uint32_t* other_;
  std::atomic<int>& arrivals_;
  uint32_t count_ = 0;
};

// Two ranks' staged calls on the emulated GPUs 0 and 1: each rank's slot area (its one peer's slot
// of `unit` bytes), input and output, and rank r's view of them.
struct StagedPair {
  Backend& b;
  size_t unit;
  std::vector<char*> areas;
  std::vector<float*> send, recv;
  StagedPair(Backend& backend, size_t send_bytes, size_t recv_bytes, size_t unit_bytes) : b(backend), unit(unit_bytes) {
    for (int r = 0; r < 2; ++r) {
      areas.push_back(static_cast<char*>(b.alloc_device(r, unit)));
      send.push_back(static_cast<float*>(b.alloc_device(r, send_bytes)));
      recv.push_back(static_cast<float*>(b.alloc_device(r, recv_bytes)));
    }
  }
  ~StagedPair() {
    for (int r = 0; r < 2; ++r) {
      b.free_device(areas[r]);
      b.free_device(send[r]);
      b.free_device(recv[r]);
    }
  }
  coll::Staged view(int r) const {
    coll::Staged s;
    s.me = r;
    s.n = 2;
    s.dev = s.send_dev = s.recv_dev = r;
    s.areas = areas;
    s.area_dev = {0, 1};
    s.unit = unit;
    return s;
  }
  const char* in(int r) const { return reinterpret_cast<const char*>(send[r]); }
  char* out(int r) const { return reinterpret_cast<char*>(recv[r]); }
  // Rank r's input of call `call`, every element its own value, into its send buffer (n floats).
  static float value(int r, size_t k, int call) { return static_cast<float>(k % 1000 + 3000 * r + 7 * call); }
  void put(int r, int call, size_t n, StreamHandle s) const {
    std::vector<float> h(n);
    for (size_t k = 0; k < n; ++k) h[k] = value(r, k, call);
    b.copy_async(send[r], r, h.data(), kHostDevice, n * sizeof(float), s);
    b.synchronize_stream(s);
  }
  // Throws unless `result` (n floats of rank r's) holds both ranks' sum of call `call`'s inputs.
  void check_sum(int r, int call, const float* result, size_t n) const {
    const std::vector<float> got = read(b, result, r, n);
    for (size_t k = 0; k < n; ++k)
      if (got[k] != value(0, k, call) + value(1, k, call))
        GS_THROW(GPUSTRIPE_ERR_INTERNAL, "rank %d, call %d, element %zu: %g", r, call, k, got[k]);
  }
};

// A staged run on the GPUs' mapped flags (a staged call's: coll::MappedBarrier) makes its
// Barrier op and its exit there, not on the runner's stream flags, and marks its end in this
// rank's barrier word (one stream write), which settle() reads: every call's sum is there once
// it returns, on both ranks.
TEST(CollSlice, AStagedRunOnMappedFlagsBarriersThereAndMarksItsEndInItsBarrierWord) {
  Node node;
  CallCounter& counter = count_calls(node);
  Backend& b = *node.backend;
  const size_t n = 4096, bytes = n * sizeof(float);
  const int calls = 3;
  StagedPair c(b, bytes, bytes, bytes);
  uint32_t words[2] = {0, 0};
  std::atomic<int> arrivals{0};
  const std::vector<std::string> errors = on_two_runners(node, b, [&](int r, mpi::SliceRunner& runner, auto&) {
    WordBarrier gpus(b, &words[r], &words[1 - r], arrivals);
    Program p(2);
    coll::build_staged_allreduce(p, c.view(r), c.in(r), c.out(r), n, GPUSTRIPE_FLOAT32, GPUSTRIPE_SUM);
    StreamHandle st = b.create_stream(r);
    for (int i = 0; i < calls; ++i) {
      fill(b, c.send[r], r, n, 1.0f + r + 10.0f * i);
      runner.run_ordered(p, r, st, nullptr, nullptr, true, /*entry=*/false, &gpus);
      runner.settle();
      const std::vector<float> got = read(b, c.recv[r], r, n);
      if (got[0] != 3.0f + 20.0f * i || got[n - 1] != got[0])
        GS_THROW(GPUSTRIPE_ERR_INTERNAL, "rank %d, call %d: %g", r, i, got[0]);
    }
    b.destroy_stream(st);
  });
  EXPECT_EQ(errors, (std::vector<std::string>{"", ""}));
  // Per rank and call: the ranks' arrival on the runner's stream flags, then the Barrier op and
  // the exit on the mapped flags (the stand-in's stream barriers), the end's write.
  EXPECT_EQ(arrivals.load(), 2 * calls * 2);
  EXPECT_EQ(counter.barriers.load(), arrivals.load() + 2 * calls);
  EXPECT_EQ(counter.writes.load(), 2 * calls);
}

// A staged allreduce in two shots runs its two Barrier ops and its exit on the mapped flags; every
// element is the sum of both ranks' (blocks of both ranks reduced, the peer's copied out), in place
// too.
TEST(CollSlice, AStagedAllreduceInTwoShotsSumsEveryElementOnBothRanks) {
  Node node;
  Backend& b = *node.backend;
  const size_t n = 4099, bytes = n * sizeof(float);
  StagedPair c(b, bytes, bytes, 4 * bytes);
  uint32_t words[2] = {0, 0};
  std::atomic<int> arrivals{0};
  const std::vector<std::string> errors = on_two_runners(node, b, [&](int r, mpi::SliceRunner& runner, auto&) {
    WordBarrier gpus(b, &words[r], &words[1 - r], arrivals);
    coll::Staged view = c.view(r);
    view.twoshot_min = 0;
    GS_REQUIRE(coll::staged_twoshot(view, n, GPUSTRIPE_FLOAT32), GPUSTRIPE_ERR_INTERNAL, "not two shots");
    StreamHandle st = b.create_stream(r);
    for (int call = 0; call < 4; ++call) {
      const bool in_place = call % 2 == 1;
      float* out = in_place ? c.send[r] : c.recv[r];
      c.put(r, call, n, st);
      Program p(2);
      coll::build_staged_allreduce(p, view, c.in(r), reinterpret_cast<char*>(out), n, GPUSTRIPE_FLOAT32,
                                   GPUSTRIPE_SUM);
      runner.run_ordered(p, r, st, nullptr, nullptr, true, /*entry=*/false, &gpus);
      runner.settle();
      c.check_sum(r, call, out, n);
    }
    b.destroy_stream(st);
  });
  EXPECT_EQ(errors, (std::vector<std::string>{"", ""}));
  EXPECT_EQ(arrivals.load(), 2 * 4 * 3);  // per rank and call: two Barrier ops and the exit
}

#if GPUSTRIPE_HAVE_CUDA
// Two ranks' meeting of host threads (the stand-in's barrier inside a kernel).
class HostMeeting {
 public:
  void meet() {
    const uint64_t round = arrived_.fetch_add(1) / 2;
    while (arrived_.load() < 2 * (round + 1)) std::this_thread::yield();
  }

 private:
  std::atomic<uint64_t> arrived_{0};
};

// The stand-in for the CUDA reducer's kernels with a barrier inside (FusedBarrier), on the emulated
// backend: after the stream, the copies before the entry, the entry (a meeting of the two ranks'
// threads), the host reduction or copies, the exit, and the end's word; counts what it was given.
class FusingReducer : public coll::Reducer {
 public:
  FusingReducer(Backend& b, HostMeeting& meeting) : b_(b), host_(coll::make_reducer(b)), meeting_(meeting) {}
  bool can_fuse_barrier(const coll::ReduceArgs&) const override { return true; }
  bool can_fuse_copy(const coll::CopyArgs&) const override { return true; }
  void reduce_async(const coll::ReduceArgs& a, int dev, StreamHandle s) override {
    around(a, s, [&](const coll::ReduceArgs& plain) { host_->reduce_async(plain, dev, s); });
  }
  void copy_async(const coll::CopyArgs& a, int dev, StreamHandle s) override {
    around(a, s, [&](const coll::CopyArgs& plain) { host_->copy_async(plain, dev, s); });
  }
  std::vector<int> launches;  // each fused launch's copies before its entry
  std::vector<int> posts;     // and after its mid barrier
  std::vector<std::chrono::steady_clock::time_point> started;  // when each fused launch began to run

 private:
  // The host's step `run`, inside the barrier where `a` has one.
  template <class Args, class Run>
  void around(const Args& a, StreamHandle s, Run run) {
    if (!a.barrier) return run(a);
    enter(*a.barrier, s);
    Args plain = a;
    plain.barrier = nullptr;
    run(plain);
    leave(*a.barrier);
  }
  void enter(const coll::FusedBarrier& f, StreamHandle s) {
    b_.synchronize_stream(s);
    started.push_back(std::chrono::steady_clock::now());
    launches.push_back(f.npre);
    for (int i = 0; i < f.npre; ++i) std::memcpy(f.pre[i].dst, f.pre[i].src, f.pre[i].bytes);
    meeting_.meet();
  }
  void leave(const coll::FusedBarrier& f) {
    meeting_.meet();
    posts.push_back(f.npost);
    if (f.npost > 0) {
      for (int i = 0; i < f.npost; ++i) std::memcpy(f.post[i].dst, f.post[i].src, f.post[i].bytes);
      meeting_.meet();
    }
    if (f.end_word) reinterpret_cast<std::atomic<uint32_t>*>(f.end_word)->store(f.end_value, std::memory_order_release);
  }
  Backend& b_;
  std::unique_ptr<coll::Reducer> host_;
  HostMeeting& meeting_;
};

// Hands out the kernel's barrier (its own words are the stand-in reducer's meeting); counts the
// barrier kernels, which a staged run whose part after the Barrier op is one kernel never makes.
class FusingBarrier : public coll::MappedBarrier {
 public:
  void arrive_and_wait(StreamHandle) override { ++arrivals; }
  const coll::FusedBarrier* fused(const std::vector<coll::BarrierCopy>& pre, const std::vector<coll::BarrierCopy>& post,
                                  uint32_t* end_word, uint32_t end_value) override {
    f_ = coll::FusedBarrier{};
    for (size_t i = 0; i < pre.size(); ++i) f_.pre[i] = pre[i];
    f_.npre = static_cast<int>(pre.size());
    for (size_t i = 0; i < post.size(); ++i) f_.post[i] = post[i];
    f_.npost = static_cast<int>(post.size());
    f_.end_word = end_word;
    f_.end_value = end_value;
    return &f_;
  }
  void check() override {}
  int arrivals = 0;

 private:
  coll::FusedBarrier f_;
};

// Where this rank's staged program is kernel stores, the Barrier op and one kernel, the run is
// that one launch: the stores go in as the copies before its entry (allreduce: the input to the
// peer's slot; allgather: that and the own block into the output), both barriers inside it, and
// the kernel marks the run's end in the rank's barrier word (no barrier kernel, no stream write),
// which settle() reads. Every call's result holds.
TEST(CollSlice, AStagedRunWhosePartsFitIsOneLaunchWithItsStoresBarriersAndEndInside) {
  Node node;
  CallCounter& counter = count_calls(node);
  Backend& b = *node.backend;
  const size_t n = 4096, bytes = n * sizeof(float);
  const int calls = 3;
  StagedPair c(b, bytes, 2 * bytes, 2 * bytes);
  HostMeeting meeting;
  std::vector<std::vector<int>> launches(2);
  std::vector<int> arrivals(2);
  const std::vector<std::string> errors = on_two_ranks([&](int r) {
    FusingReducer reducer(b, meeting);
    mpi::TeamFlags flags(ipc::ShmSegment::open(node.name));
    mpi::SliceRunner runner(b, reducer, r, 2, flags, [] {});
    FusingBarrier gpus;
    Program allreduce(2), allgather(2);
    coll::build_staged_allreduce(allreduce, c.view(r), c.in(r), c.out(r), n, GPUSTRIPE_FLOAT32, GPUSTRIPE_SUM);
    coll::build_staged_allgather(allgather, c.view(r), c.in(r), c.out(r), bytes);
    StreamHandle st = b.create_stream(r);
    for (int i = 0; i < calls; ++i) {
      fill(b, c.send[r], r, n, 1.0f + r + 10.0f * i);
      runner.run_ordered(allreduce, r, st, nullptr, nullptr, true, /*entry=*/false, &gpus);
      runner.settle();
      std::vector<float> got = read(b, c.recv[r], r, n);
      if (got[0] != 3.0f + 20.0f * i || got[n - 1] != got[0])
        GS_THROW(GPUSTRIPE_ERR_INTERNAL, "rank %d, allreduce %d: %g", r, i, got[0]);
      runner.run_ordered(allgather, r, st, nullptr, nullptr, true, /*entry=*/false, &gpus);
      runner.settle();
      got = read(b, c.recv[r], r, 2 * n);
      for (int q = 0; q < 2; ++q)
        if (got[q * n] != 1.0f + q + 10.0f * i || got[q * n + n - 1] != got[q * n])
          GS_THROW(GPUSTRIPE_ERR_INTERNAL, "rank %d, allgather %d, block %d: %g", r, i, q, got[q * n]);
    }
    b.destroy_stream(st);
    launches[r] = reducer.launches;
    arrivals[r] = gpus.arrivals;
  });
  EXPECT_EQ(errors, (std::vector<std::string>{"", ""}));
  for (int r = 0; r < 2; ++r) {
    std::vector<int> want;
    for (int i = 0; i < calls; ++i) want.insert(want.end(), {1, 2});
    EXPECT_EQ(launches[r], want) << "rank " << r;
    EXPECT_EQ(arrivals[r], 0) << "rank " << r;
  }
  EXPECT_EQ(counter.barriers.load(), 2 * 2 * calls);  // the ranks' arrival before each run, no other
  EXPECT_EQ(counter.writes.load(), 0);
}

// A two-shot staged allreduce is one launch too: its store before the entry, the reduction, the
// mid barrier, its copy out of the slot, the exit, the end's word; every element the sum.
TEST(CollSlice, AStagedAllreduceInTwoShotsIsOneLaunchWithItsCopiesAndThreeBarriersInside) {
  Node node;
  CallCounter& counter = count_calls(node);
  Backend& b = *node.backend;
  const size_t n = 4099, bytes = n * sizeof(float);
  const int calls = 3;
  StagedPair c(b, bytes, bytes, 4 * bytes);
  HostMeeting meeting;
  std::vector<std::vector<int>> launches(2), posts(2);
  std::vector<int> arrivals(2);
  const std::vector<std::string> errors = on_two_ranks([&](int r) {
    FusingReducer reducer(b, meeting);
    mpi::TeamFlags flags(ipc::ShmSegment::open(node.name));
    mpi::SliceRunner runner(b, reducer, r, 2, flags, [] {});
    FusingBarrier gpus;
    coll::Staged view = c.view(r);
    view.twoshot_min = 0;
    Program p(2);
    coll::build_staged_allreduce(p, view, c.in(r), c.out(r), n, GPUSTRIPE_FLOAT32, GPUSTRIPE_SUM);
    StreamHandle st = b.create_stream(r);
    for (int i = 0; i < calls; ++i) {
      c.put(r, i, n, st);
      runner.run_ordered(p, r, st, nullptr, nullptr, true, /*entry=*/false, &gpus);
      runner.settle();
      c.check_sum(r, i, c.recv[r], n);
    }
    b.destroy_stream(st);
    launches[r] = reducer.launches;
    posts[r] = reducer.posts;
    arrivals[r] = gpus.arrivals;
  });
  EXPECT_EQ(errors, (std::vector<std::string>{"", ""}));
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(launches[r], std::vector<int>(calls, 1)) << "rank " << r;
    EXPECT_EQ(posts[r], std::vector<int>(calls, 1)) << "rank " << r;
    EXPECT_EQ(arrivals[r], 0) << "rank " << r;
  }
  EXPECT_EQ(counter.barriers.load(), 2 * calls);  // the ranks' arrival before each run, no other
  EXPECT_EQ(counter.writes.load(), 0);
}

// A staged run's kernel starts only once the other rank's stream has reached the run: a rank whose
// program comes late keeps its peer's stream waiting on the arrival words, before its kernel,
// whose blocks would otherwise hold their SMs while they wait inside for it.
TEST(CollSlice, AStagedRunsKernelStartsOnceEveryRanksStreamHasArrived) {
  Node node;
  Backend& b = *node.backend;
  const size_t n = 4096, bytes = n * sizeof(float);
  const int calls = 3;
  const auto late = std::chrono::milliseconds(30);
  StagedPair c(b, bytes, bytes, bytes);
  HostMeeting meeting;
  std::vector<std::chrono::steady_clock::time_point> posted(calls);  // rank 1's calls
  std::vector<std::chrono::steady_clock::time_point> started(calls);  // rank 0's kernels
  const std::vector<std::string> errors = on_two_ranks([&](int r) {
    FusingReducer reducer(b, meeting);
    mpi::TeamFlags flags(ipc::ShmSegment::open(node.name));
    mpi::SliceRunner runner(b, reducer, r, 2, flags, [] {});
    FusingBarrier gpus;
    Program p(2);
    coll::build_staged_allreduce(p, c.view(r), c.in(r), c.out(r), n, GPUSTRIPE_FLOAT32, GPUSTRIPE_SUM);
    StreamHandle st = b.create_stream(r);
    for (int i = 0; i < calls; ++i) {
      c.put(r, i, n, st);
      if (r == 1) {
        std::this_thread::sleep_for(late);
        posted[i] = std::chrono::steady_clock::now();
      }
      runner.run_ordered(p, r, st, nullptr, nullptr, true, /*entry=*/false, &gpus);
      runner.settle();
      c.check_sum(r, i, c.recv[r], n);
    }
    b.destroy_stream(st);
    if (r == 0) std::copy(reducer.started.begin(), reducer.started.end(), started.begin());
  });
  EXPECT_EQ(errors, (std::vector<std::string>{"", ""}));
  for (int i = 0; i < calls; ++i) EXPECT_GE(started[i], posted[i]) << "call " << i;
}
#endif

// A handle that names each thread's own stream (CUDA's per-thread default stream) is not one
// stream to the runner: a run asked on it goes on the origin stream after it, and the stream
// joins the run's end (per call: the caller's event and the origin's wait, the origin's event
// and the caller's wait), so its later work still sees the results.
TEST(CollSlice, ARunAskedOnAThreadsOwnStreamGoesOnTheOriginAndIsJoined) {
  Node node;
  CallCounter& counter = count_calls(node);
  Backend& b = *node.backend;
  const int calls = 2;
  PairCopies c(b, calls);
  std::vector<StreamHandle> streams = {b.create_stream(0), b.create_stream(1)};
  counter.name_thread_streams(streams[0]);  // rank 0's; rank 1's is a plain caller's stream
  const std::vector<std::string> errors = on_two_runners(node, b, [&](int r, mpi::SliceRunner& runner, auto&) {
    for (int i = 0; i < calls; ++i) runner.run_ordered(c.progs[i], r, streams[r], nullptr, nullptr, true);
    for (int i = 0; i < calls; ++i) c.check(r, i, streams[r]);
    runner.settle();
  });
  EXPECT_EQ(errors, (std::vector<std::string>{"", ""}));
  // Rank 1 records and waits for nothing; rank 0 two records and two waits a call, and settle()
  // its origin stream's end once.
  EXPECT_EQ(counter.records.load(), 2 * calls + 1);
  EXPECT_EQ(counter.waits.load(), 2 * calls);
  EXPECT_EQ(counter.barriers.load(), 2 * 2 * calls);
  for (StreamHandle s : streams) b.destroy_stream(s);
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

// A host stuck inside an enqueue behind a flag that a dead rank will never set
// (here the emulated reduction, which synchronizes its stream before reading; on CUDA a full
// stream queue) is released by the call's watchdog, and the call ends with the watchdog's
// error: the peer's death (check_alive) or, with no liveness check, GPUSTRIPE_TIMEOUT.
void expect_blocked_enqueue_released(const std::function<void()>& check_alive, Status want) {
  Node node;
  Backend& b = *node.backend;
  const size_t n = 1024;
  float* x = static_cast<float*>(b.alloc_device(0, n * sizeof(float)));
  float* y = static_cast<float*>(b.alloc_device(1, n * sizeof(float)));
  Program p(2);
  int s = p.copy(0, coll::kLaneOut, y, 1, x, 0, n * sizeof(float));
  p.reduce(1, coll::kLaneLocal, y, {y, y}, n, GPUSTRIPE_FLOAT32, GPUSTRIPE_SUM, {s});
  auto reducer = coll::make_reducer(b);
  mpi::TeamFlags flags(ipc::ShmSegment::open(node.name));
  // The host's own polls never see the peer's death: only the watchdog can end this call.
  mpi::SliceRunner runner(b, *reducer, 1, 2, flags, [] {}, check_alive);
  try {
    runner.run(p, 1);
    FAIL() << "returned although rank 0 never ran";
  } catch (const Error& e) {
    EXPECT_EQ(e.status(), want) << e.what();
  }
  b.free_device(x);
  b.free_device(y);
}

TEST(CollSlice, EnqueueBlockedBehindADeadRankIsReleasedByTheWatchdog) {
  std::atomic<int> checks{0};
  expect_blocked_enqueue_released(
      [&] {
        if (++checks > 3) GS_THROW(GPUSTRIPE_ERR_PEER_FAILED, "rank 0 (pid 1) died");
      },
      GPUSTRIPE_ERR_PEER_FAILED);
  EXPECT_GT(checks.load(), 3);
}

TEST(CollSlice, EnqueueBlockedBehindASilentRankEndsAtTheTimeout) {
  ScopedEnv timeout("GPUSTRIPE_TIMEOUT", "0.5");
  expect_blocked_enqueue_released({}, GPUSTRIPE_ERR_TIMEOUT);
}

// Started parts that hold their waits for other ranks on the host (host_waits: a call started
// while another of the process is pending). One thread plays every rank, starting them in the
// order that would block it otherwise: rank 0 first, whose reduction (on the emulated backend a
// host reduction that waits for its stream) needs rank 2's copy, which needs rank 1's, which
// needs rank 0's. With its waits on its streams rank 0's start would wait for ranks that have
// not started (until the watchdog's timeout fails it); held on the host it returns, and poll()
// enqueues each step once the flag it needs is set. Rank 1 keeps its waits on its streams: the
// owners' flags serve both kinds of waiter. The relay's large copies catch a step run early.
TEST(CollSlice, HostWaitsStartWithoutWaitingAndHoldEveryDependency) {
  ScopedEnv timeout("GPUSTRIPE_TIMEOUT", "20");
  Node node;
  Backend& b = *node.backend;
  const size_t n = 4 << 20;
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
  p.reduce(0, coll::kLaneLocal, c[0], {c[0], a[1], a[2]}, n, GPUSTRIPE_FLOAT32, GPUSTRIPE_SUM, {s3, s2});
  auto reducer = coll::make_reducer(b);
  std::vector<std::unique_ptr<mpi::TeamFlags>> flags;
  std::vector<std::unique_ptr<mpi::SliceRunner>> runners;
  for (int r = 0; r < 3; ++r) {
    flags.push_back(std::make_unique<mpi::TeamFlags>(ipc::ShmSegment::open(node.name)));
    runners.push_back(std::make_unique<mpi::SliceRunner>(b, *reducer, r, 3, *flags[r], [] {}));
  }
  for (int round = 0; round < 2; ++round) {
    fill(b, c[0], 0, n, 0.0f);
    for (int r : {0, 1, 2}) ASSERT_TRUE(runners[r]->start(p, r, nullptr, r != 1)) << "rank " << r;
    EXPECT_FALSE(runners[0]->poll());  // its reduction waits for rank 2's copy
    std::vector<bool> done(3, false);
    const auto limit = std::chrono::steady_clock::now() + std::chrono::seconds(60);  // a hang guard
    while (!(done[0] && done[1] && done[2])) {
      ASSERT_LT(std::chrono::steady_clock::now(), limit) << "the started parts never completed";
      for (int r = 0; r < 3; ++r)
        if (!done[r]) done[r] = runners[r]->poll();
      std::this_thread::yield();
    }
    std::vector<float> got = read(b, c[0], 0, n);
    for (size_t i = 0; i < n; i += 4099) ASSERT_EQ(got[i], 21.0f) << "round " << round << " element " << i;
  }
  runners.clear();
  for (int r = 0; r < 3; ++r) {
    b.free_device(a[r]);
    b.free_device(c[r]);
  }
}

// The entry exchange hands every rank every other rank's message of the same call, call
// after call, although ranks run ahead of each other by up to one call (two slots per rank).
TEST(CollSlice, ExchangeGivesEveryRankTheSameCallsMessages) {
  Node node;
  const int n = 4, calls = 200;
  std::vector<std::string> errors(n);
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r)
    threads.emplace_back([&, r] {
      try {
        auto reducer = coll::make_reducer(*node.backend);
        mpi::TeamFlags flags(ipc::ShmSegment::open(node.name));
        mpi::SliceRunner runner(*node.backend, *reducer, r, n, flags, [] {});
        for (int c = 0; c < calls; ++c) {
          uint64_t mine[3] = {static_cast<uint64_t>(c), static_cast<uint64_t>(r), static_cast<uint64_t>(c * 31 + r)};
          uint64_t all[n][3];
          if ((c + r) % 7 == 0) std::this_thread::sleep_for(std::chrono::microseconds(200));
          runner.exchange(mine, sizeof mine, all);
          for (int q = 0; q < n; ++q)
            if (all[q][0] != static_cast<uint64_t>(c) || all[q][1] != static_cast<uint64_t>(q) ||
                all[q][2] != static_cast<uint64_t>(c * 31 + q))
              GS_THROW(GPUSTRIPE_ERR_INTERNAL, "call %d: rank %d got rank %d's message of call %d", c, r, q,
                       static_cast<int>(all[q][0]));
        }
      } catch (const std::exception& e) {
        errors[r] = e.what();
      }
    });
  for (auto& t : threads) t.join();
  for (int r = 0; r < n; ++r) EXPECT_EQ(errors[r], "") << "rank " << r;
}

// A message is as long as its sender posted it: a call whose messages are short (a collective
// without per-peer layouts) moves only those bytes through the slots, and the rest of every
// rank's entry keeps what the receiver had there -- not the longer message of an earlier call
// in the same slot.
TEST(CollSlice, ExchangeCopiesEachMessageAsLongAsItsSenderPostedIt) {
  Node node;
  const int n = 2;
  const std::vector<std::string> errors = on_two_ranks([&](int r) {
    auto reducer = coll::make_reducer(*node.backend);
    mpi::TeamFlags flags(ipc::ShmSegment::open(node.name));
    mpi::SliceRunner runner(*node.backend, *reducer, r, n, flags, [] {});
    // Calls 1 and 2 fill both slots of each rank with long messages; calls 3 and 4 reuse them.
    for (int c = 1; c <= 4; ++c) {
      const size_t words = c <= 2 ? 8 : 2 + r;  // rank r's message, in words
      std::vector<uint64_t> mine(words, 100 * c + r), all(n * 8, 7);
      const uint64_t call = runner.post(mine.data(), words * sizeof(uint64_t));
      const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(10);
      while (!runner.collect(call, 8 * sizeof(uint64_t), all.data())) {
        if (std::chrono::steady_clock::now() > give_up) GS_THROW(GPUSTRIPE_ERR_TIMEOUT, "call %d: no exchange", c);
        std::this_thread::yield();
      }
      for (int q = 0; q < n; ++q) {
        const size_t sent = c <= 2 ? 8 : 2 + q;
        for (size_t k = 0; k < 8; ++k) {
          const uint64_t want = k < sent ? 100 * c + q : 7;
          if (all[q * 8 + k] != want)
            GS_THROW(GPUSTRIPE_ERR_INTERNAL, "call %d: rank %d's word %zu of rank %d is %llu, not %llu", c, r, k, q,
                     static_cast<unsigned long long>(all[q * 8 + k]), static_cast<unsigned long long>(want));
        }
      }
    }
  });
  EXPECT_EQ(errors, (std::vector<std::string>{"", ""}));
}
