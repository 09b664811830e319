// What the collectives' calls take from the caller's buffers (src/mpi/coll_calls.hpp): the GPU
// and allocations of a call's buffers, asked of the backend once per allocation and call. A
// call must never reuse what an earlier call found: a buffer freed and allocated again (at the
// same address or not) is a new allocation, whose id the mapping cache and exports key on.
#include <gtest/gtest.h>

#include <memory>

#include "forwarding_backend.hpp"
#include "mpi/coll_calls.hpp"
#include "p2p/mover.hpp"
#include "topology/topology.hpp"

using namespace gpustripe;

namespace {

class CountingBackend : public ForwardingBackend {
 public:
  using ForwardingBackend::ForwardingBackend;
  const char* name() const override { return "counting"; }
  PointerInfo pointer_info(const void* p) override {
    ++queries;
    return in_->pointer_info(p);
  }
  int queries = 0;
};

struct Fixture {
  Topology topo = load_topology_file("h200x4");
  CountingBackend backend{make_emulated_backend(topo)};
  p2p::Mover mover{&backend};
};

TEST(CollCalls, DeviceOfAsksOncePerAllocation) {
  Fixture f;
  char* a = static_cast<char*>(f.backend.alloc_device(1, 1 << 20));
  char* b = static_cast<char*>(f.backend.alloc_device(1, 1 << 20));
  {
    mpi::CollCall c;  // in place: the same buffer twice
    EXPECT_EQ(mpi::device_of(f.mover, c, {a, a}), 1);
    EXPECT_EQ(f.backend.queries, 1);
    ASSERT_EQ(c.located.size(), 1u);
    EXPECT_EQ(c.located[0].base, reinterpret_cast<uintptr_t>(a));
  }
  f.backend.queries = 0;
  {
    mpi::CollCall c;  // send and receive buffers cut from one allocation
    EXPECT_EQ(mpi::device_of(f.mover, c, {a, a + (1 << 19)}), 1);
    EXPECT_EQ(f.backend.queries, 1);
    EXPECT_EQ(c.located.size(), 1u);
  }
  f.backend.queries = 0;
  {
    mpi::CollCall c;  // two allocations: each asked
    EXPECT_EQ(mpi::device_of(f.mover, c, {a, b}), 1);
    EXPECT_EQ(f.backend.queries, 2);
    ASSERT_EQ(c.located.size(), 2u);
    EXPECT_NE(c.located[0].buffer_id, c.located[1].buffer_id);
  }
  f.backend.free_device(b);
  f.backend.free_device(a);
}

TEST(CollCalls, DeviceOfRefusesMixedGpusAndHostMemory) {
  Fixture f;
  void* a = f.backend.alloc_device(0, 4096);
  void* b = f.backend.alloc_device(2, 4096);
  std::unique_ptr<char[]> host(new char[4096]);
  mpi::CollCall c1, c2, c3;
  EXPECT_EQ(mpi::device_of(f.mover, c1, {a, b}), -1);
  EXPECT_EQ(mpi::device_of(f.mover, c2, {a, host.get()}), -1);
  EXPECT_EQ(mpi::device_of(f.mover, c3, {b, a, b}), -1);  // b located first, a on another GPU
  f.backend.free_device(b);
  f.backend.free_device(a);
}

TEST(CollCalls, EveryCallAsksAgainAfterAReallocation) {
  Fixture f;
  void* a = f.backend.alloc_device(0, 1 << 20);
  mpi::CollCall first;
  ASSERT_EQ(mpi::device_of(f.mover, first, {a, a}), 0);
  ASSERT_EQ(first.located.size(), 1u);
  const uint64_t old_id = first.located[0].buffer_id;
  f.backend.free_device(a);
  void* again = f.backend.alloc_device(0, 1 << 20);  // possibly at the same address
  f.backend.queries = 0;
  mpi::CollCall next;
  ASSERT_EQ(mpi::device_of(f.mover, next, {again, again}), 0);
  EXPECT_EQ(f.backend.queries, 1);
  ASSERT_EQ(next.located.size(), 1u);
  EXPECT_NE(next.located[0].buffer_id, old_id);
  EXPECT_EQ(next.located[0].base, reinterpret_cast<uintptr_t>(again));
  f.backend.free_device(again);
}

}  // namespace
