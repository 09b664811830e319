// Collectives on real GPUs (GS_REQUIRE_GPU; skipped where none is visible): the CUDA
// reduction kernels and every schedule against the float64 reference, and a graph replay.
#include <gtest/gtest.h>

#include <cstdio>

#include <algorithm>

#include "coll/select.hpp"
#include "test_coll_harness.hpp"
#include "test_util.hpp"
#include "topology/topology.hpp"

namespace coll_test {
namespace {

struct GpuNode {
  GpuNode() : topo(detect_topology()), backend(make_cuda_backend()) {}
  std::unique_ptr<Comm> comm(int n) {
    std::vector<int> devs;
    for (int i = 0; i < n; ++i) devs.push_back(i);
    return Comm::create(*backend, topo, devs);
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
    auto comm = node.comm(n);
    for (const char* algo : kAlgos) {
      ScopedEnv a("GPUSTRIPE_COLL_ALGO", algo);
      ScopedEnv chunk("GPUSTRIPE_COLL_CHUNK", "64K");
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
// call is captured into graphs, later ones replay them, through the caller's streams and
// blocking, in place and not: one graph over all GPUs; per-rank graphs between the GPUs'
// barriers (calls on streams); and those with waits between GPUs turned into flags.
TEST(CollGpu, GraphReplaysOnFreshData) {
  GS_REQUIRE_GPU(2);
  GpuNode node;
  for (const char* mode : {"events", "barrier", "flags"})
  for (int n : {2, std::min(4, cuda_device_count())}) {
    const char* gpu_barrier = std::string(mode) == "events" ? "0" : "1";
    ScopedEnv b("GPUSTRIPE_COLL_GPU_BARRIER", gpu_barrier);
    ScopedEnv f("GPUSTRIPE_COLL_GPU_FLAGS", std::string(mode) == "flags" ? "1" : "0");
    auto comm = node.comm(n);
    for (const char* algo : kAlgos) {
      ScopedEnv a("GPUSTRIPE_COLL_ALGO", algo);
      ScopedEnv chunk("GPUSTRIPE_COLL_CHUNK", "128K");
      for (CollOp op : {CollOp::AllToAll, CollOp::AllGather, CollOp::ReduceScatter, CollOp::AllReduce, CollOp::Bcast,
                        CollOp::Reduce}) {
        auto own = schedule_names(op);
        if (std::find(own.begin(), own.end(), algo) == own.end()) continue;
        for (bool in_place : {false, true})
          for (bool async : {false, true}) {
            if (op == CollOp::Bcast && in_place) continue;
            // 1M per rank with 128K chunks: several pipeline chunks, and the whole test within ctest's
            // time (3M took more than 200 s on 4 H200 with every schedule of session 2).
            Case c{op, GPUSTRIPE_FLOAT32, GPUSTRIPE_SUM, (size_t(1) << 20) / 4 + 7, in_place, 1 % n, async, 4};
            // Progress on stderr, flushed: the last line names the case if the process dies.
            std::fprintf(stderr, "GraphReplays: %s n=%d %s %s\n", mode, n, algo, c.describe().c_str());
            std::fflush(stderr);
            ASSERT_EQ(run_case(*comm, c, 77), 0u)
                << algo << " n=" << n << " " << mode << " " << comm->last_schedule();
          }
      }
    }
  }
}

// The GPUs' entry and exit barrier inside the reduction kernel (per-rank graphs of one
// reduction each): every such schedule, every type, in place or not, replayed on fresh data,
// with fused and unfused calls alternating on one communicator (they count the same barriers).
TEST(CollGpu, ReductionsWithTheBarrierInsideTheKernel) {
  GS_REQUIRE_GPU(2);
  ScopedEnv most("GPUSTRIPE_COLL_FUSED_MAX", "64G");  // every size of these cases
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
            for (bool in_place : {false, true})
              for (const char* fused : {"1", "0", "1"}) {
                ScopedEnv f("GPUSTRIPE_COLL_FUSED_BARRIER", fused);
                Case c{op, dt, GPUSTRIPE_SUM, count, in_place, 1 % n, /*async*/ true, /*repeats*/ 3};
                ASSERT_EQ(run_case(*comm, c, seed++), 0u) << algo << " n=" << n << " fused=" << fused << " "
                                                         << comm->last_schedule();
              }
      }
    }
  }
}

// The sm schedules: copy kernels storing into the peers, in per-rank graphs one kernel per
// rank with the GPUs' barrier inside: every exchange and broadcast form, 2-byte elements at odd
// counts (unaligned segments) and 8-byte ones, in place or not, replayed on fresh data, with
// fused and unfused calls mixed on one communicator (they count the same barriers), and
// blocking calls (one graph over all GPUs: a kernel per copy).
TEST(CollGpu, KernelCopiesWithTheBarrierInside) {
  GS_REQUIRE_GPU(2);
  ScopedEnv a("GPUSTRIPE_COLL_ALGO", "sm");
  GpuNode node;
  for (int n : {2, std::min(4, cuda_device_count())}) {
    auto comm = node.comm(n);
    uint64_t seed = 3;
    for (const char* form : {"pieces", "pull", "push"}) {
      ScopedEnv bf("GPUSTRIPE_COLL_BCAST_SM_FORM", form);
      for (CollOp op : {CollOp::AllToAll, CollOp::AllGather, CollOp::Bcast}) {
        if (op != CollOp::Bcast && std::string(form) != "pieces") continue;
        for (DataType dt : {GPUSTRIPE_FLOAT16, GPUSTRIPE_INT64})
          for (size_t count : {size_t(1), size_t(4099), size_t(1 << 20) / 8 + 7})
            for (bool in_place : {false, true})
              for (int mode = 0; mode < 3; ++mode) {  // fused, not fused (per-rank graphs); blocking calls
                if (op == CollOp::Bcast && in_place) continue;
                if (dt == GPUSTRIPE_FLOAT16 && count > 4099) continue;  // the large case once, in 8-byte elements
                const char* fused = mode == 1 ? "0" : "1";
                ScopedEnv f("GPUSTRIPE_COLL_FUSED_COPIES", fused);
                Case c{op, dt, GPUSTRIPE_SUM, count, in_place, 1 % n, /*async*/ mode < 2, /*repeats*/ 3};
                ASSERT_EQ(run_case(*comm, c, seed++), 0u) << form << " n=" << n << " fused=" << fused << " "
                                                         << comm->last_schedule();
                EXPECT_NE(comm->last_schedule().find(" sm"), std::string::npos) << comm->last_schedule();
              }
      }
    }
  }
}

// Broadcast by copy kernels with a host-path share (root D2H, members H2D, waits between GPUs as
// flags in per-rank graphs), every form, blocking and replayed on streams.
TEST(CollGpu, KernelBroadcastWithHostShare) {
  GS_REQUIRE_GPU(2);
  ScopedEnv a("GPUSTRIPE_COLL_ALGO", "sm");
  ScopedEnv share("GPUSTRIPE_COLL_BCAST_HOST_SHARE", "0.2");
  ScopedEnv from("GPUSTRIPE_COLL_BCAST_HOST_MIN", "0");
  GpuNode node;
  for (int n : {2, std::min(4, cuda_device_count())}) {
    auto comm = node.comm(n);
    uint64_t seed = 21;
    for (const char* form : {"pieces", "pull", "push"}) {
      ScopedEnv bf("GPUSTRIPE_COLL_BCAST_SM_FORM", form);
      for (size_t count : {size_t(4099), size_t(1 << 20) / 4 + 7})
        for (bool async : {true, false}) {
          Case c{CollOp::Bcast, GPUSTRIPE_FLOAT32, GPUSTRIPE_SUM, count, false, 1 % n, async, /*repeats*/ 3};
          ASSERT_EQ(run_case(*comm, c, seed++), 0u) << form << " n=" << n << " " << comm->last_schedule();
          EXPECT_NE(comm->last_schedule().find("host=20.0%"), std::string::npos) << comm->last_schedule();
        }
    }
  }
}

// Kernels and copy engines on parts of each block at once (GPUSTRIPE_COLL_CE_SHARE), the
// copies by the owners or by the senders, blocking and replayed on streams, in place or not.
TEST(CollGpu, CopyEngineShareOfPulledReductions) {
  GS_REQUIRE_GPU(2);
  ScopedEnv share("GPUSTRIPE_COLL_CE_SHARE", "0.3");
  ScopedEnv from("GPUSTRIPE_COLL_CE_SHARE_MIN", "0");
  GpuNode node;
  for (int n : {2, std::min(4, cuda_device_count())}) {
    auto comm = node.comm(n);
    for (const char* copies : {"receiver", "sender"}) {
      ScopedEnv by("GPUSTRIPE_COLL_CE_SHARE_COPIES", copies);
      ScopedEnv lanes("GPUSTRIPE_COLL_CE_SHARE_LANES", std::string(copies) == "sender" ? "1" : "0");
      for (const char* algo : {"rs_pull", "twoshot"}) {
        ScopedEnv a("GPUSTRIPE_COLL_ALGO", algo);
        const CollOp op = std::string(algo) == "rs_pull" ? CollOp::ReduceScatter : CollOp::AllReduce;
        uint64_t seed = 9;
        for (DataType dt : {GPUSTRIPE_FLOAT64, GPUSTRIPE_BFLOAT16})
          for (size_t count : {size_t(4099), size_t(300001)})
            for (bool in_place : {false, true})
              for (bool async : {false, true}) {
                Case c{op, dt, GPUSTRIPE_SUM, count, in_place, 0, async, async ? 3 : 1};
                ASSERT_EQ(run_case(*comm, c, seed++), 0u) << algo << " " << copies << " n=" << n << " "
                                                         << comm->last_schedule();
              }
      }
    }
  }
}

// Two-shot with inputs pushed into the owners' scratch by kernels first, blocking and replayed
// on streams (per-rank graphs with flags and without), in place or not.
TEST(CollGpu, PushedInputsOfTwoshot) {
  GS_REQUIRE_GPU(3);  // more than 2 ranks (2 keep the kernel reads)
  ScopedEnv from("GPUSTRIPE_COLL_PUSH_MIN", "0");
  ScopedEnv a("GPUSTRIPE_COLL_ALGO", "twoshot");
  GpuNode node;
  for (const char* flags : {"0", "1"}) {
    ScopedEnv f("GPUSTRIPE_COLL_GPU_FLAGS", flags);
    for (int n : {3, std::min(4, cuda_device_count())}) {
      auto comm = node.comm(n);
      uint64_t seed = 5;
      for (DataType dt : {GPUSTRIPE_FLOAT32, GPUSTRIPE_BFLOAT16, GPUSTRIPE_INT64})
        for (size_t count : {size_t(4099), size_t(300001)})
          for (bool in_place : {false, true})
            for (bool async : {false, true}) {
              Case c{CollOp::AllReduce, dt, GPUSTRIPE_SUM, count, in_place, 0, async, async ? 3 : 1};
              ASSERT_EQ(run_case(*comm, c, seed++), 0u) << "flags=" << flags << " n=" << n << " "
                                                       << comm->last_schedule();
            }
    }
  }
}

TEST(CollGpu, HostShareExchanges) {
  GS_REQUIRE_GPU(2);
  ScopedEnv share("GPUSTRIPE_COLL_HOST_SHARE", "0.1");
  ScopedEnv chunks("GPUSTRIPE_COLL_HOST_CHUNKS", "4");
  GpuNode node;
  for (const char* gpu_barrier : {"0", "1"}) {  // 1 (with flags): the host path's waits in per-rank graphs
    ScopedEnv b("GPUSTRIPE_COLL_GPU_BARRIER", gpu_barrier);
    ScopedEnv f("GPUSTRIPE_COLL_GPU_FLAGS", gpu_barrier);
    auto comm = node.comm(std::min(4, cuda_device_count()));
    for (CollOp op : {CollOp::AllToAll, CollOp::AllGather})
      for (bool in_place : {false, true}) {
        Case c{op, GPUSTRIPE_INT32, GPUSTRIPE_SUM, (size_t(2) << 20) / 4 + 3, in_place, 0, in_place, 3};
        ASSERT_EQ(run_case(*comm, c, 3), 0u) << "gpu barrier " << gpu_barrier << " " << comm->last_schedule();
      }
  }
}

// Large-message schedules (session 3): copy-engine reductions with a host share and flags in
// per-rank graphs (async, replayed), the copy-engine two-shot whose kernels store into every
// member, and exchanges with an SM share beside the copy engines; in place or not.
TEST(CollGpu, LargeMessageSchedules) {
  GS_REQUIRE_GPU(2);
  ScopedEnv chunks("GPUSTRIPE_COLL_RS_ORDER", "chunks");  // the chunked form's shares (round-major: its own test)
  ScopedEnv host("GPUSTRIPE_COLL_RS_HOST_SHARE", "0.1");
  ScopedEnv ag_host("GPUSTRIPE_COLL_AG_HOST_SHARE", "0.1");
  ScopedEnv rs_sm("GPUSTRIPE_COLL_RS_SM_SHARE", "0.2");
  ScopedEnv chunk("GPUSTRIPE_COLL_CHUNK", "256K");
  ScopedEnv sm("GPUSTRIPE_COLL_SM_SHARE", "0.3");
  ScopedEnv sm_from("GPUSTRIPE_COLL_SM_SHARE_MIN", "0");
  GpuNode node;
  for (int n : {2, std::min(4, cuda_device_count())}) {
    auto comm = node.comm(n);
    uint64_t seed = 9;
    for (const char* algo : {"ce_twoshot", "rs_copy", "rs_ag_copy", "rounds"}) {
      ScopedEnv a("GPUSTRIPE_COLL_ALGO", algo);
      const bool exchange = std::string(algo) == "rounds";
      for (CollOp op : exchange ? std::vector<CollOp>{CollOp::AllToAll, CollOp::AllGather}
                                : std::vector<CollOp>{std::string(algo) == "rs_copy" ? CollOp::ReduceScatter
                                                                                     : CollOp::AllReduce})
        for (DataType dt : {GPUSTRIPE_FLOAT32, GPUSTRIPE_BFLOAT16})
          for (size_t count : {size_t(4099), (size_t(2) << 20) / 4 + 3})
            for (bool in_place : {false, true})
              for (bool async : {false, true}) {
                Case c{op, dt, exchange ? GPUSTRIPE_SUM : GPUSTRIPE_MAX, count, in_place, 0, async, async ? 3 : 1};
                ASSERT_EQ(run_case(*comm, c, seed++), 0u) << algo << " n=" << n << " " << comm->last_schedule();
              }
    }
  }
}

// Round-major copy-engine reductions (GPUSTRIPE_COLL_RS_ORDER=rounds) on the GPUs: whole-block
// rounds folded in by kernels behind flags, the last round in halving pieces (a small tail so
// that test sizes get several), in place or not, blocking and replayed on streams; reduce-scatter,
// allreduce (pieces gathered by copy engines) and reduce.
TEST(CollGpu, RoundMajorReductions) {
  GS_REQUIRE_GPU(2);
  ScopedEnv order("GPUSTRIPE_COLL_RS_ORDER", "rounds");
  ScopedEnv tail("GPUSTRIPE_COLL_RS_TAIL", "64K");
  GpuNode node;
  for (int n : {2, std::min(4, cuda_device_count())}) {
    auto comm = node.comm(n);
    uint64_t seed = 31;
    for (const char* algo : {"rs_copy", "rs_ag_copy", "reduce_copy"}) {
      ScopedEnv a("GPUSTRIPE_COLL_ALGO", algo);
      const CollOp op = std::string(algo) == "rs_copy"      ? CollOp::ReduceScatter
                        : std::string(algo) == "rs_ag_copy" ? CollOp::AllReduce
                                                            : CollOp::Reduce;
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
