// The IPC mapping cache (src/ipc/handle_cache.hpp) and the GPU a mapping is opened for. A
// legacy CUDA handle maps into one GPU's context, and only that GPU's kernels can use the
// mapping: the collectives map the other ranks' buffers for their own GPU, the p2p layer for
// the owner's. So a legacy handle mapped for two readers is two mappings, each closed on its
// own; handles of the other kinds are mapped once for every reader (their memory is granted to
// every GPU). A recording backend stands in for the driver: no memory is touched.
#include <gtest/gtest.h>

#include <utility>
#include <vector>

#include "forwarding_backend.hpp"
#include "ipc/handle_cache.hpp"
#include "test_util.hpp"
#include "topology/topology.hpp"

using namespace gpustripe;

namespace {

const Topology& node() {
  static const Topology t = load_topology_file("h200x4");
  return t;
}

class OpenRecorder : public ForwardingBackend {
 public:
  OpenRecorder() : ForwardingBackend(make_emulated_backend(node())) {}
  const char* name() const override { return "open-recorder"; }
  bool ipc_open_needs_fd(const IpcMemHandle&) override { return false; }
  void* ipc_open(const IpcMemHandle& h, int, int reader) override {
    opens.emplace_back(h.buffer_id, reader);
    return reinterpret_cast<void*>(static_cast<uintptr_t>(opens.size()) << 20);
  }
  void ipc_close(void* base) override { closes.push_back(base); }
  std::vector<std::pair<uint64_t, int>> opens;  // (buffer id, reader)
  std::vector<void*> closes;
};

Backend::IpcMemHandle handle(Backend::IpcKind kind, uint64_t base, uint64_t buffer_id) {
  Backend::IpcMemHandle h;
  h.kind = kind;
  h.device = 1;
  h.base = base;
  h.size = 4096;
  h.buffer_id = buffer_id;
  h.share_id = buffer_id;
  return h;
}

}  // namespace

TEST(HandleCache, LegacyHandlesMapOncePerReaderOtherKindsOnce) {
  OpenRecorder b;
  ipc::HandleCache cache(b, 16);
  const int peer = 1;
  const auto legacy = handle(Backend::IpcKind::Legacy, 0x10000, 7);
  void* for0 = cache.map(peer, legacy.base, legacy, 0);
  EXPECT_EQ(cache.map(peer, legacy.base, legacy, 0), for0);  // a hit
  void* for2 = cache.map(peer, legacy.base, legacy, 2);
  void* owner = cache.map(peer, legacy.base, legacy);
  EXPECT_NE(for0, for2);
  EXPECT_NE(for0, owner);
  ASSERT_EQ(b.opens, (std::vector<std::pair<uint64_t, int>>{{7, 0}, {7, 2}, {7, -1}}));

  const auto vmm = handle(Backend::IpcKind::VmmFd, 0x20000, 8);
  void* v = cache.map(peer, vmm.base, vmm, 0);
  EXPECT_EQ(cache.map(peer, vmm.base, vmm, 2), v);
  EXPECT_EQ(cache.map(peer, vmm.base, vmm), v);
  ASSERT_EQ(b.opens.size(), 4u);
  EXPECT_EQ(b.opens.back(), std::make_pair(uint64_t(8), -1));
  EXPECT_EQ(cache.size(), 4u);

  // The owner's new buffer at the old address: only the reader's stale mapping goes.
  const auto fresh = handle(Backend::IpcKind::Legacy, 0x10000, 9);
  void* again = cache.map(peer, fresh.base, fresh, 0);
  EXPECT_EQ(b.closes, std::vector<void*>{for0});
  EXPECT_EQ(b.opens.back(), std::make_pair(uint64_t(9), 0));
  EXPECT_EQ(cache.map(peer, legacy.base, legacy, 2), for2);  // still the other reader's
  EXPECT_NE(again, for0);

  cache.evict_peer(peer);
  EXPECT_EQ(cache.size(), 0u);
  EXPECT_EQ(b.closes.size(), 5u);
}
