// Collectives on real GPUs (GS_REQUIRE_GPU; skipped where none is visible): the CUDA
// reduction kernels and every schedule against the float64 reference, and a graph replay.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

#include <algorithm>

#include "coll/reduce.hpp"
#include "coll/select.hpp"
#include "test_coll_harness.hpp"
#include "test_util.hpp"
#include "topology/topology.hpp"

namespace coll_test {
namespace {

struct GpuNode {
  GpuNode() : topo(detect_topology()), backend(make_cuda_backend()) {}
  std::unique_ptr<Comm> comm(int n, const Tuning& tuning = Tuning()) {
    std::vector<int> devs;
    for (int i = 0; i < n; ++i) devs.push_back(i);
    return Comm::create(*backend, topo, devs, nullptr, tuning);
  }
  Topology topo;
  std::unique_ptr<Backend> backend;
};

const char* kAlgos[] = {"rounds", "all_at_once", "rs_copy", "rs_pull", "oneshot", "twoshot", "rs_ag_copy", "rs_ag_pull",
                        "direct", "scatter_ag", "chain", "reduce_copy", "reduce_pull"};  // sm: its own test below

TEST(CollGpu, EveryScheduleTypeAndOperator) {
  GS_REQUIRE_GPU(2);
  GpuNode node;
  int most = std::min(4, cuda_device_count());
  for (int n = 2; n <= most; ++n) {
    Tuning t;
    t.chunk = 64 << 10;
    auto comm = node.comm(n, t);
    for (const char* algo : kAlgos) {
      ScopedEnv a("GPUSTRIPE_COLL_ALGO", algo);
      uint64_t seed = 1;
      for (CollOp op : {CollOp::AllToAll, CollOp::AllGather, CollOp::ReduceScatter, CollOp::AllReduce, CollOp::Bcast,
                        CollOp::Reduce}) {
        auto own = schedule_names(op);
        if (std::find(own.begin(), own.end(), algo) == own.end()) continue;
        bool red = op == CollOp::ReduceScatter || op == CollOp::AllReduce || op == CollOp::Reduce;
        for (DataType dt : all_dtypes())
          for (RedOp ro : red ? all_redops() : std::vector<RedOp>{GPUSTRIPE_SUM})
            for (size_t count : {size_t(1), size_t(4099), size_t(300001)})
              for (bool in_place : {false, true}) {
                if (op == CollOp::Bcast && in_place) continue;
                Case c{op, dt, ro, count, in_place, static_cast<int>(count % n)};
                ASSERT_EQ(run_case(*comm, c, seed++), 0u) << algo << " n=" << n;
              }
      }
    }
  }
}

TEST(CollGpu, DefaultSchedulesLargeAndRepeated) {
  GS_REQUIRE_GPU(2);
  GpuNode node;
  auto comm = node.comm(std::min(4, cuda_device_count()));
  for (CollOp op : {CollOp::AllToAll, CollOp::AllGather, CollOp::ReduceScatter, CollOp::AllReduce, CollOp::Bcast,
                    CollOp::Reduce})
    for (size_t count : {size_t(1) << 14, size_t(1) << 18, (size_t(64) << 20) / 4 + 5})
      for (int rep = 0; rep < 3; ++rep) {  // the second and third calls replay a captured graph
        Case c{op, GPUSTRIPE_FLOAT32, GPUSTRIPE_SUM, count, rep == 2, 0, /*async*/ rep == 1};
        ASSERT_EQ(run_case(*comm, c, count + rep), 0u) << comm->last_schedule();
      }
}

// Every schedule, called again and again on the same buffers with fresh data: the second
// call is captured into graphs, later ones replay them, through the caller's streams (per-rank
// graphs between the GPUs' barriers, waits between GPUs as flags where the schedule gains from
// them) and blocking (one graph over all GPUs), in place and not.
TEST(CollGpu, GraphReplaysOnFreshData) {
  GS_REQUIRE_GPU(2);
  GpuNode node;
  for (int n : {2, std::min(4, cuda_device_count())}) {
    Tuning t;
    t.chunk = 128 << 10;
    auto comm = node.comm(n, t);
    for (const char* algo : kAlgos) {
      ScopedEnv a("GPUSTRIPE_COLL_ALGO", algo);
      for (CollOp op : {CollOp::AllToAll, CollOp::AllGather, CollOp::ReduceScatter, CollOp::AllReduce, CollOp::Bcast,
                        CollOp::Reduce}) {
        auto own = schedule_names(op);
        if (std::find(own.begin(), own.end(), algo) == own.end()) continue;
        for (bool in_place : {false, true})
          for (bool async : {false, true}) {
            if (op == CollOp::Bcast && in_place) continue;
            // 1M per rank with 128K chunks: several pipeline chunks, and the whole test within ctest's
            // time.
            Case c{op, GPUSTRIPE_FLOAT32, GPUSTRIPE_SUM, (size_t(1) << 20) / 4 + 7, in_place, 1 % n, async, 4};
            // Progress on stderr, flushed: the last line names the case if the process dies.
            std::fprintf(stderr, "GraphReplays: n=%d %s %s\n", n, algo, c.describe().c_str());
            std::fflush(stderr);
            ASSERT_EQ(run_case(*comm, c, 77), 0u) << algo << " n=" << n << " " << comm->last_schedule();
          }
      }
    }
  }
}

// The GPUs' entry and exit barrier inside the reduction kernel (per-rank graphs of one
// reduction each, up to 512K results; larger ones with the barriers apart): every such schedule,
// every type, in place or not, replayed on fresh data, fused and unfused calls alternating on one
// communicator (they count the same barriers).
TEST(CollGpu, ReductionsWithTheBarrierInsideTheKernel) {
  GS_REQUIRE_GPU(2);
  GpuNode node;
  for (int n : {2, std::min(4, cuda_device_count())}) {
    auto comm = node.comm(n);
    for (const char* algo : {"rs_pull", "twoshot", "oneshot", "reduce_pull"}) {
      ScopedEnv a("GPUSTRIPE_COLL_ALGO", algo);
      uint64_t seed = 1;
      for (CollOp op : {CollOp::ReduceScatter, CollOp::AllReduce, CollOp::Reduce}) {
        auto own = schedule_names(op);
        if (std::find(own.begin(), own.end(), algo) == own.end()) continue;
        for (DataType dt : {GPUSTRIPE_FLOAT32, GPUSTRIPE_FLOAT16, GPUSTRIPE_INT32})
          for (size_t count : {size_t(1), size_t(4099), size_t(3 << 20) / 4 + 7})
            for (bool in_place : {false, true}) {
              Case c{op, dt, GPUSTRIPE_SUM, count, in_place, 1 % n, /*async*/ true, /*repeats*/ 3};
              ASSERT_EQ(run_case(*comm, c, seed++), 0u) << algo << " n=" << n << " " << comm->last_schedule();
            }
      }
    }
  }
}

// The sm schedules: copy kernels storing into the peers, in per-rank graphs one kernel per
// rank with the GPUs' barrier inside: every exchange and the broadcast in pieces, 2-byte
// elements at odd counts (unaligned segments) and 8-byte ones, in place or not, replayed on
// fresh data on streams, and blocking calls (one graph over all GPUs: a kernel per copy) mixed
// on one communicator (they count the same barriers).
TEST(CollGpu, KernelCopiesWithTheBarrierInside) {
  GS_REQUIRE_GPU(2);
  ScopedEnv a("GPUSTRIPE_COLL_ALGO", "sm");
  GpuNode node;
  for (int n : {2, std::min(4, cuda_device_count())}) {
    auto comm = node.comm(n);
    uint64_t seed = 3;
    for (CollOp op : {CollOp::AllToAll, CollOp::AllGather, CollOp::Bcast})
      for (DataType dt : {GPUSTRIPE_FLOAT16, GPUSTRIPE_INT64})
        for (size_t count : {size_t(1), size_t(4099), size_t(1 << 20) / 8 + 7})
          for (bool in_place : {false, true})
            for (bool async : {true, false}) {
              if (op == CollOp::Bcast && in_place) continue;
              if (dt == GPUSTRIPE_FLOAT16 && count > 4099) continue;  // the large case once, in 8-byte elements
              Case c{op, dt, GPUSTRIPE_SUM, count, in_place, 1 % n, async, /*repeats*/ 3};
              ASSERT_EQ(run_case(*comm, c, seed++), 0u) << "n=" << n << " " << comm->last_schedule();
              EXPECT_NE(comm->last_schedule().find(" sm"), std::string::npos) << comm->last_schedule();
            }
  }
}

// The copy kernel on one GPU, called as the schedules call it (Reducer::copy_async): every
// argument block it launches with -- segments and destinations within the small block, past it
// in either count, the most one launch takes, more than that (split into launches) -- at 16-,
// 4- and 1-byte alignment, with and without the kernel writing its done word. Every destination
// byte-exact, the bytes around each left as poisoned.
TEST(CollGpu, TheCopyKernelAtEveryArgumentBlock) {
  GS_REQUIRE_GPU(1);
  auto be = make_cuda_backend();
  auto reducer = make_reducer(*be);
  StreamHandle s = be->create_stream(0);
  // The done word as the interposer has it: host memory registered for the GPU.
  void* page = std::aligned_alloc(4096, 4096);
  std::memset(page, 0, 4096);
  uint32_t* done = be->register_host(page, 4096);
  ASSERT_NE(done, nullptr);
  constexpr size_t kGuard = 64;
  constexpr unsigned char kPoison = 0xA5;
  uint32_t value = 0;
  int seed = 1;
  const std::pair<int, int> shapes[] = {{1, 1}, {4, 4}, {5, 1}, {1, 5}, {16, 16}, {17, 3}, {2, 18}};
  for (const auto& [nseg, nd] : shapes)
    for (size_t misalign : {size_t(0), size_t(4), size_t(1)})
      for (bool announce : {false, true}) {
        CopyArgs shape;  // the counts alone: whether one launch takes them
        shape.segs.assign(nseg, CopySegment{nullptr, std::vector<void*>(nd, nullptr), 1});
        const bool one_launch = reducer->can_fuse_copy(shape);
        EXPECT_EQ(one_launch, nseg <= 16 && nd <= 16) << nseg << " x " << nd;
        if (announce && !one_launch) continue;  // a kernel announces its end only as one launch
        std::vector<size_t> bytes;
        for (int i = 0; i < nseg; ++i) bytes.push_back(i == 0 ? (size_t(1) << 20) + 3 : 1000 + 37 * size_t(i));
        std::vector<void*> bufs;
        std::vector<std::vector<unsigned char>> data;
        CopyArgs args;
        for (int i = 0; i < nseg; ++i) {
          data.push_back(seeded_bytes(seed++, bytes[i]));
          auto* src = static_cast<unsigned char*>(be->alloc_device(0, bytes[i] + misalign));
          bufs.push_back(src);
          be->copy_async(src + misalign, 0, data.back().data(), kHostDevice, bytes[i], s);
          CopySegment seg;
          seg.src = src + misalign;
          seg.bytes = bytes[i];
          seg.src_dev = 0;
          for (int d = 0; d < nd; ++d) {
            auto* dst = static_cast<unsigned char*>(be->alloc_device(0, bytes[i] + misalign + 2 * kGuard));
            bufs.push_back(dst);
            be->memset_async(dst, 0, kPoison, bytes[i] + misalign + 2 * kGuard, s);
            seg.dsts.push_back(dst + kGuard + misalign);
          }
          args.segs.push_back(seg);
        }
        if (announce) {
          args.done_word = done;
          args.done_value = ++value;
        }
        reducer->copy_async(args, 0, s);
        be->synchronize_stream(s);
        if (announce) EXPECT_EQ(*static_cast<volatile uint32_t*>(page), value);
        for (int i = 0; i < nseg; ++i)
          for (int d = 0; d < nd; ++d) {
            const size_t n = bytes[i] + misalign + 2 * kGuard;
            std::vector<unsigned char> got(n);
            const unsigned char* base = static_cast<unsigned char*>(args.segs[i].dsts[d]) - kGuard - misalign;
            be->copy_async(got.data(), kHostDevice, base, 0, n, s);
            be->synchronize_stream(s);
            const std::string where = "segments " + std::to_string(nseg) + " x " + std::to_string(nd) +
                                      " destinations, misaligned by " + std::to_string(misalign) +
                                      (announce ? ", announced" : "") + ": segment " + std::to_string(i) +
                                      " destination " + std::to_string(d);
            ASSERT_EQ(0, std::memcmp(got.data() + kGuard + misalign, data[i].data(), bytes[i])) << where;
            for (size_t k = 0; k < kGuard + misalign; ++k) ASSERT_EQ(got[k], kPoison) << where << ", byte " << k;
            for (size_t k = kGuard + misalign + bytes[i]; k < n; ++k) ASSERT_EQ(got[k], kPoison) << where << ", byte " << k;
          }
        for (void* b : bufs) be->free_device(b);
      }
  be->unregister_host(page);
  std::free(page);
  be->destroy_stream(s);
}

// Two-shot with inputs pushed into the owners' scratch by kernels first, blocking and replayed
// on streams (per-rank graphs with flags), in place or not.
TEST(CollGpu, PushedInputsOfTwoshot) {
  GS_REQUIRE_GPU(3);  // more than 2 ranks (2 keep the kernel reads)
  Tuning t;
  t.push_min = 0;
  ScopedEnv a("GPUSTRIPE_COLL_ALGO", "twoshot");
  GpuNode node;
  for (int n : {3, std::min(4, cuda_device_count())}) {
    auto comm = node.comm(n, t);
    uint64_t seed = 5;
    for (DataType dt : {GPUSTRIPE_FLOAT32, GPUSTRIPE_BFLOAT16, GPUSTRIPE_INT64})
      for (size_t count : {size_t(4099), size_t(300001)})
        for (bool in_place : {false, true})
          for (bool async : {false, true}) {
            Case c{CollOp::AllReduce, dt, GPUSTRIPE_SUM, count, in_place, 0, async, async ? 3 : 1};
            ASSERT_EQ(run_case(*comm, c, seed++), 0u) << "n=" << n << " " << comm->last_schedule();
          }
  }
}

// Exchanges with a host-path share, blocking (one graph over all GPUs) and on streams (the host
// path's waits as flags in per-rank graphs on more than 2 GPUs).
TEST(CollGpu, HostShareExchanges) {
  GS_REQUIRE_GPU(2);
  Tuning t;
  t.host_share = 0.1;
  GpuNode node;
  auto comm = node.comm(std::min(4, cuda_device_count()), t);
  for (CollOp op : {CollOp::AllToAll, CollOp::AllGather})
    for (bool in_place : {false, true})
      for (bool async : {false, true}) {
        Case c{op, GPUSTRIPE_INT32, GPUSTRIPE_SUM, (size_t(2) << 20) / 4 + 3, in_place, 0, async, 3};
        ASSERT_EQ(run_case(*comm, c, 3), 0u) << comm->last_schedule();
      }
}

// A broadcast's tail through pinned host memory (D2H by the root, H2D by every member) beside
// the copy kernels and the copy engines' forms, blocking and stream-ordered, replayed.
TEST(CollGpu, HostShareBroadcast) {
  GS_REQUIRE_GPU(2);
  Tuning t;
  t.bcast_host_share = 0.2;
  GpuNode node;
  auto comm = node.comm(std::min(4, cuda_device_count()), t);
  for (const char* algo : {"sm", "direct", "chain"}) {
    ScopedEnv a("GPUSTRIPE_COLL_ALGO", algo);
    for (bool async : {false, true}) {
      Case c{CollOp::Bcast, GPUSTRIPE_INT32, GPUSTRIPE_SUM, (size_t(8) << 20) / 4 + 3, false, 1, async, 3};
      ASSERT_EQ(run_case(*comm, c, 5), 0u) << algo << " " << comm->last_schedule();
    }
  }
}

// The chunked copy-engine reductions with flags in per-rank graphs (async, replayed) and the
// copy-engine two-shot whose kernels store into every member; in place or not.
TEST(CollGpu, ChunkedCopyEngineReductions) {
  GS_REQUIRE_GPU(2);
  Tuning t;
  t.rs_order = Tuning::Order::Chunks;  // round-major: its own test
  t.chunk = 256 << 10;
  GpuNode node;
  for (int n : {2, std::min(4, cuda_device_count())}) {
    auto comm = node.comm(n, t);
    uint64_t seed = 9;
    for (const char* algo : {"ce_twoshot", "rs_copy", "rs_ag_copy"}) {
      ScopedEnv a("GPUSTRIPE_COLL_ALGO", algo);
      const CollOp op = std::string(algo) == "rs_copy" ? CollOp::ReduceScatter : CollOp::AllReduce;
      for (DataType dt : {GPUSTRIPE_FLOAT32, GPUSTRIPE_BFLOAT16})
        for (size_t count : {size_t(4099), (size_t(2) << 20) / 4 + 3})
          for (bool in_place : {false, true})
            for (bool async : {false, true}) {
              Case c{op, dt, GPUSTRIPE_MAX, count, in_place, 0, async, async ? 3 : 1};
              ASSERT_EQ(run_case(*comm, c, seed++), 0u) << algo << " n=" << n << " " << comm->last_schedule();
            }
    }
  }
}

// A pair's large allreduce on the copy engines (Tuning::ar_ce_min_2, lowered to test sizes, then
// at the default): chosen by size, round-major without being asked, exact in place or not,
// blocking and replayed.
TEST(CollGpu, PairAllreduceOnCopyEngines) {
  GS_REQUIRE_GPU(2);
  Tuning t;
  t.ar_ce_min_2 = 1 << 20;
  t.rs_tail = 256 << 10;
  GpuNode node;
  auto comm = node.comm(2, t);
  uint64_t seed = 41;
  for (DataType dt : {GPUSTRIPE_FLOAT32, GPUSTRIPE_INT64})
    for (size_t bytes : {size_t(512) << 10, size_t(4) << 20})
      for (bool in_place : {false, true})
        for (bool async : {false, true}) {
          Case c{CollOp::AllReduce, dt, GPUSTRIPE_SUM, bytes / dtype_size(dt) + 3, in_place, 0, async, async ? 3 : 1};
          ASSERT_EQ(run_case(*comm, c, seed++), 0u) << comm->last_schedule();
          const std::string s = comm->last_schedule();
          if (bytes >= t.ar_ce_min_2)
            EXPECT_TRUE(s.find(" ce_twoshot ") != std::string::npos && s.find("by_round") != std::string::npos) << s;
          else
            EXPECT_EQ(s.find("ce_twoshot"), std::string::npos) << s;
        }
  // At the default crossover, at its real size: blocking, then replayed on streams.
  auto real = node.comm(2);
  for (bool async : {false, true}) {
    Case c{CollOp::AllReduce, GPUSTRIPE_FLOAT32, GPUSTRIPE_SUM, (size_t(256) << 20) / 4 + 5, false, 0, async, 2};
    ASSERT_EQ(run_case(*real, c, 43), 0u) << real->last_schedule();
    EXPECT_NE(real->last_schedule().find(" ce_twoshot "), std::string::npos) << real->last_schedule();
  }
}

// Round-major copy-engine reductions (Tuning::rs_order) on the GPUs: whole-block
// rounds folded in by kernels behind flags, the last round in halving pieces (a small tail so
// that test sizes get several), in place or not, blocking and replayed on streams; reduce-scatter,
// allreduce (blocks gathered whole by copy engines, a share through the host) and reduce.
TEST(CollGpu, RoundMajorReductions) {
  GS_REQUIRE_GPU(2);
  Tuning t;
  t.rs_order = Tuning::Order::Rounds;
  t.rs_tail = 64 << 10;
  GpuNode node;
  for (int n : {2, std::min(4, cuda_device_count())}) {
    auto comm = node.comm(n, t);
    uint64_t seed = 31;
    for (const char* algo : {"rs_copy", "rs_ag_copy", "reduce_copy", "ce_twoshot"}) {
      ScopedEnv a("GPUSTRIPE_COLL_ALGO", algo);
      const CollOp op = std::string(algo) == "rs_copy"       ? CollOp::ReduceScatter
                        : std::string(algo) == "reduce_copy" ? CollOp::Reduce
                                                             : CollOp::AllReduce;
      // Kept short (the GPU suite's long tests take ~100 s each): bfloat16 on reduce-scatter only.
      for (DataType dt : op == CollOp::ReduceScatter ? std::vector<DataType>{GPUSTRIPE_FLOAT32, GPUSTRIPE_BFLOAT16}
                                                     : std::vector<DataType>{GPUSTRIPE_FLOAT32})
        for (bool in_place : {false, true})
          for (bool async : {false, true}) {
            const size_t count = (size_t(2) << 20) / 4 + 3;  // several pieces of the last round
            Case c{op, dt, GPUSTRIPE_SUM, count, in_place, 1 % n, async, async ? 3 : 1};
            ASSERT_EQ(run_case(*comm, c, seed++), 0u) << algo << " n=" << n << " " << comm->last_schedule();
            EXPECT_NE(comm->last_schedule().find("by_round"), std::string::npos) << comm->last_schedule();
          }
    }
  }
}

}  // namespace
}  // namespace coll_test
