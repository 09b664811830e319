// The p2p layer's own copy queues and the split of a copy that joins one (p2p/backlog.hpp).
#include <gtest/gtest.h>

#include "common/error.hpp"
#include "p2p/backlog.hpp"

using namespace gpustripe;
using namespace gpustripe::p2p;

namespace {

constexpr uint64_t kPage = 4096;

template <class F>
gpustripe_status_t status_of(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.status();
  }
  return GPUSTRIPE_SUCCESS;
}

// 256 MiB planned alone on 4x H200: direct 90.5%, host 9.5% in 8 tapered chunks.
Plan alone_256m() {
  Plan p;
  p.src = 0;
  p.dst = 1;
  p.bytes = 256ull << 20;
  PathPlan d;
  d.kind = PathKind::Direct;
  d.bytes = (p.bytes - p.bytes * 95 / 1000) / kPage * kPage;
  PathPlan h;
  h.kind = PathKind::HostStaged;
  h.via = 0;
  h.offset = d.bytes;
  h.bytes = p.bytes - d.bytes;
  h.chunks = 8;
  h.taper_head = 2;
  h.taper_tail = 1;
  p.paths = {d, h};
  p.source = "model";
  return p;
}

}  // namespace

TEST(P2pBacklog, QueuesCountBytesPerPairAndRefuseToGoNegative) {
  CopyQueues q;
  EXPECT_EQ(q.queued(0, 1).copies, 0);
  q.add(0, 1, 100);
  q.add(0, 1, 50);
  q.add(1, 0, 7);
  EXPECT_EQ(q.queued(0, 1).copies, 2);
  EXPECT_EQ(q.queued(0, 1).bytes, 150u);
  EXPECT_EQ(q.queued(1, 0).bytes, 7u);
  EXPECT_EQ(q.queued(0, 2).copies, 0);
  q.remove(0, 1, 100);
  EXPECT_EQ(q.queued(0, 1).bytes, 50u);
  EXPECT_EQ(status_of([&] { q.remove(0, 1, 51); }), GPUSTRIPE_ERR_INTERNAL);
  q.remove(0, 1, 50);
  EXPECT_EQ(q.queued(0, 1).copies, 0);
  EXPECT_EQ(status_of([&] { q.remove(0, 1, 1); }), GPUSTRIPE_ERR_INTERNAL);
}

TEST(P2pBacklog, QueuedSplitTakesTheQueuesShareInChunksOfTheLonePlan) {
  const Plan alone = alone_256m();
  ASSERT_TRUE(direct_plus_host(alone));
  const uint64_t chunk = alone.paths[1].bytes / 8;
  const Plan q = queued_split(alone, 0.11);
  EXPECT_NO_THROW(q.check());
  ASSERT_TRUE(direct_plus_host(q));
  EXPECT_EQ(q.bytes, alone.bytes);
  EXPECT_EQ(q.paths[1].bytes % kPage, 0u);
  EXPECT_EQ(host_staged_bytes(q), q.paths[1].bytes);
  EXPECT_NEAR(static_cast<double>(q.paths[1].bytes) / static_cast<double>(q.bytes), 0.11, 1e-4);
  // About the lone plan's chunk size, untapered: the pipeline is full already.
  const double per_chunk = static_cast<double>(q.paths[1].bytes) / q.paths[1].chunks;
  EXPECT_NEAR(per_chunk / static_cast<double>(chunk), 1.0, 0.1);
  EXPECT_GT(q.paths[1].chunks, 8);
  EXPECT_EQ(q.paths[1].taper_head, 0);
  EXPECT_EQ(q.paths[1].taper_tail, 0);
  EXPECT_EQ(q.paths[0].chunks, alone.paths[0].chunks);
  // Chunks of a given size instead (the chunks of windows of messages).
  const Plan fine = queued_split(alone, 0.11, chunk / 2);
  EXPECT_NO_THROW(fine.check());
  EXPECT_EQ(fine.paths[1].bytes, q.paths[1].bytes);
  EXPECT_NEAR(static_cast<double>(fine.paths[1].chunks) / q.paths[1].chunks, 2.0, 0.2);
  // A smaller share than planned alone works the same way.
  const Plan less = queued_split(alone, 0.05);
  EXPECT_NO_THROW(less.check());
  EXPECT_LT(less.paths[1].bytes, alone.paths[1].bytes);
  EXPECT_GE(less.paths[1].chunks, 1);
}

TEST(P2pBacklog, QueuedSplitKeepsBothPathsAndRefusesOtherShapes) {
  const Plan alone = alone_256m();
  // Extreme shares still leave a page per chunk on each path.
  for (double share : {1e-9, 0.999, 1.0, 5.0}) {
    const Plan q = queued_split(alone, share);
    EXPECT_NO_THROW(q.check()) << share;
    EXPECT_GE(q.paths[0].bytes, kPage) << share;
    EXPECT_GE(q.paths[1].bytes, kPage * q.paths[1].chunks) << share;
  }
  // No host share (the queue planned as one transfer took no host path): the lone plan.
  EXPECT_EQ(queued_split(alone, 0.0).paths[1].bytes, alone.paths[1].bytes);
  Plan direct = alone;
  direct.paths.resize(1);
  direct.paths[0].bytes = direct.bytes;
  EXPECT_FALSE(direct_plus_host(direct));
  EXPECT_EQ(status_of([&] { queued_split(direct, 0.1); }), GPUSTRIPE_ERR_INTERNAL);
  Plan gpu = alone;
  gpu.paths[1].kind = PathKind::GpuStaged;
  gpu.paths[1].via = 2;
  EXPECT_FALSE(direct_plus_host(gpu));
}
