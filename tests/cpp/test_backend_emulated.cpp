// The emulated backend's contract: stream order, CUDA event semantics under
// injected jitter, the pointer table, checks that refuse bad pointers before
// anything is written, cross-process memory, pinned memory, timing, the factory.
#include <dirent.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <future>
#include <random>
#include <thread>
#include <vector>

#include "backend/backend.hpp"
#include "backend/emulated/emulated_backend.hpp"
#include "backend/emulated/shm_segment.hpp"
#include "common/error.hpp"
#include "common/shm_reclaim.hpp"
#include "test_util.hpp"
#include "topology/topology.hpp"

using namespace gpustripe;

namespace {

// A node built in code (no topology file): n GPUs, peer access as given (default all pairs).
Topology make_topology(int n, uint64_t memory_bytes = 0, bool all_peers = true) {
  Topology t;
  t.name = "test node";
  for (int i = 0; i < n; ++i) {
    GpuInfo g;
    g.index = i;
    g.name = "emulated";
    g.memory_bytes = memory_bytes;
    t.gpus.push_back(g);
  }
  t.peer_access.assign(n, std::vector<uint8_t>(n, 0));
  for (int i = 0; i < n; ++i)
    for (int j = 0; j < n; ++j) t.peer_access[i][j] = (i != j && (all_peers || (i ^ j) == 1)) ? 1 : 0;
  return t;
}

std::vector<unsigned char> random_bytes(size_t n, unsigned seed) {
  std::mt19937 rng(seed);
  std::vector<unsigned char> v(n);
  for (auto& b : v) b = static_cast<unsigned char>(rng());
  return v;
}

// A stream gate: work queued behind it waits until open() (the test's control of "not yet").
class Gate {
 public:
  void close_on(emu::EmulatedBackend& b, StreamHandle s) {
    auto f = opened_.get_future().share();
    b.enqueue_host_call(s, [f] { f.wait(); });
  }
  void open() { opened_.set_value(); }

 private:
  std::promise<void> opened_;
};

template <class F>
Status status_of(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.status();
  }
  return GPUSTRIPE_SUCCESS;
}

template <class F>
std::string message_of(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

// Polls until pred holds or 10 s pass (a broken wait must fail the test, not hang it).
template <class P>
bool eventually(P&& pred) {
  auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (std::chrono::steady_clock::now() < until) {
    if (pred()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return false;
}

class Emulated : public ::testing::Test {
 protected:
  void SetUp() override { make(4); }
  void make(int n, uint64_t memory = 0) {
    be.reset();
    be = make_emulated_backend(make_topology(n, memory));
    emu = dynamic_cast<emu::EmulatedBackend*>(be.get());
    ASSERT_NE(emu, nullptr);
  }
  std::unique_ptr<Backend> be;
  emu::EmulatedBackend* emu = nullptr;
};

}  // namespace

TEST_F(Emulated, Identity) {
  EXPECT_STREQ(be->name(), "emulated");
  EXPECT_TRUE(be->emulated());
  EXPECT_EQ(be->device_count(), 4);
  EXPECT_FALSE(be->supports_graphs());
}

TEST_F(Emulated, StreamRunsInOrder) {
  const size_t n = 1 << 20;
  auto data = random_bytes(n, 1);
  std::vector<unsigned char> out(n, 0xAB);
  void* a = be->alloc_device(0, n);
  void* b = be->alloc_device(1, n);
  StreamHandle s = be->create_stream(0);
  // Each step depends on the one before it; only in-order execution yields `data`.
  be->copy_async(a, 0, data.data(), kHostDevice, n, s);
  be->memset_async(b, 1, 0, n, s);
  be->copy_async(b, 1, a, 0, n, s);
  be->memset_async(a, 0, 0x5A, n, s);
  be->copy_async(out.data(), kHostDevice, b, 1, n, s);
  be->synchronize_stream(s);
  EXPECT_EQ(out, data);
  be->destroy_stream(s);
  be->free_device(a);
  be->free_device(b);
}

// Step i on device i%4: take everything the previous step's buffer holds, then add
// slice i. The final buffer is the whole of `data` only if every step saw its
// predecessor's result, which only the event waits guarantee.
static bool chain_is_exact(Backend& be, bool with_waits) {
  const int steps = 100;
  const size_t slice = 4096, n = steps * slice;
  auto data = random_bytes(n, 2);
  void* buf[4];
  StreamHandle st[4];
  EventHandle ev[4];
  for (int d = 0; d < 4; ++d) {
    buf[d] = be.alloc_device(d, n);
    st[d] = be.create_stream(d);
    ev[d] = be.create_event(d, false);
    be.memset_async(buf[d], d, 0, n, st[d]);
  }
  for (int d = 0; d < 4; ++d) be.synchronize_stream(st[d]);
  for (int i = 0; i < steps; ++i) {
    int cur = i % 4, prev = (i + 3) % 4;
    if (i > 0) {
      if (with_waits) be.wait_event(st[cur], ev[prev]);
      be.copy_async(buf[cur], cur, buf[prev], prev, n, st[cur]);
    }
    be.copy_async(static_cast<char*>(buf[cur]) + i * slice, cur, data.data() + i * slice, kHostDevice, slice, st[cur]);
    be.record_event(ev[cur], st[cur]);
  }
  for (int d = 0; d < 4; ++d) be.synchronize_stream(st[d]);
  int last = (steps - 1) % 4;
  std::vector<unsigned char> out(n, 0xAB);
  be.copy_async(out.data(), kHostDevice, buf[last], last, n, st[last]);
  be.synchronize_stream(st[last]);
  for (int d = 0; d < 4; ++d) {
    be.destroy_event(ev[d]);
    be.destroy_stream(st[d]);
    be.free_device(buf[d]);
  }
  return out == data;
}

TEST_F(Emulated, JitteredChainAcrossFourDevicesIsByteExact) {
  ScopedEnv jitter{"GPUSTRIPE_TEST", "emu_jitter_us=200"};
  make(4);
  ASSERT_EQ(emu->delay().jitter_us(), 200);
  EXPECT_TRUE(chain_is_exact(*be, true));
}

// The control: the same chain without the waits comes out wrong, so the test above
// proves the waits order the work (99 handoffs all landing in order by luck is
// vanishingly unlikely with 0..200 us of jitter per operation).
TEST_F(Emulated, JitteredChainWithoutWaitsBreaks) {
  ScopedEnv jitter{"GPUSTRIPE_TEST", "emu_jitter_us=200"};
  make(4);
  EXPECT_FALSE(chain_is_exact(*be, false));
}

TEST_F(Emulated, WaitEventHoldsBackLaterWorkOnly) {
  const size_t n = 64 << 10;
  auto data = random_bytes(n, 3);
  void* a = be->alloc_device(0, n);
  void* b = be->alloc_device(1, n);
  StreamHandle s0 = be->create_stream(0), s1 = be->create_stream(1);
  EventHandle e = be->create_event(0, false), done_with_wait = be->create_event(1, false);
  EventHandle done_without = be->create_event(1, false);

  Gate gate;
  gate.close_on(*emu, s0);
  be->copy_async(a, 0, data.data(), kHostDevice, n, s0);
  be->record_event(e, s0);
  EXPECT_FALSE(be->query_event(e));

  be->wait_event(s1, e);
  be->copy_async(b, 1, a, 0, n, s1);
  be->record_event(done_with_wait, s1);
  // While the gate holds s0, s1 is stuck behind its wait.
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_FALSE(be->query_event(done_with_wait));

  // A stream without the wait runs ahead: what the wait prevents is real.
  StreamHandle s2 = be->create_stream(1);
  be->record_event(done_without, s2);
  EXPECT_TRUE(eventually([&] { return be->query_event(done_without); }));
  EXPECT_FALSE(be->query_event(done_with_wait));

  gate.open();
  be->synchronize_event(done_with_wait);
  std::vector<unsigned char> out(n);
  be->copy_async(out.data(), kHostDevice, b, 1, n, s1);
  be->synchronize_stream(s1);
  EXPECT_EQ(out, data);
  for (EventHandle x : {e, done_with_wait, done_without}) be->destroy_event(x);
  for (StreamHandle x : {s0, s1, s2}) be->destroy_stream(x);
  be->free_device(a);
  be->free_device(b);
}

TEST_F(Emulated, NeverRecordedEventIsCompleteAndDoesNotBlock) {
  StreamHandle s0 = be->create_stream(0), s1 = be->create_stream(1);
  EventHandle never = be->create_event(0, false), after = be->create_event(1, false);
  EXPECT_TRUE(be->query_event(never));
  be->synchronize_event(never);  // returns at once
  Gate gate;
  gate.close_on(*emu, s0);  // s0 busy: a wait that wrongly tied to s0 would block
  be->wait_event(s1, never);
  be->record_event(after, s1);
  EXPECT_TRUE(eventually([&] { return be->query_event(after); }));
  gate.open();
  be->synchronize_stream(s0);
  be->destroy_event(never);
  be->destroy_event(after);
  be->destroy_stream(s0);
  be->destroy_stream(s1);
}

TEST_F(Emulated, ReRecordDoesNotMoveAnEarlierWait) {
  StreamHandle s0 = be->create_stream(0), s1 = be->create_stream(1);
  EventHandle e = be->create_event(0, false), after = be->create_event(1, false);
  Gate first, second;
  first.close_on(*emu, s0);
  be->record_event(e, s0);  // mark 1
  be->wait_event(s1, e);    // waits for mark 1
  be->record_event(after, s1);
  second.close_on(*emu, s0);
  be->record_event(e, s0);  // mark 2: must not concern the wait above
  std::this_thread::sleep_for(std::chrono::milliseconds(10));
  EXPECT_FALSE(be->query_event(after));
  first.open();
  EXPECT_TRUE(eventually([&] { return be->query_event(after); }));
  EXPECT_FALSE(be->query_event(e));  // the event now means mark 2, still held by the second gate
  second.open();
  be->synchronize_event(e);
  EXPECT_TRUE(be->query_event(e));
  be->destroy_event(e);
  be->destroy_event(after);
  be->destroy_stream(s0);
  be->destroy_stream(s1);
}

TEST_F(Emulated, RecordNeedsEventAndStreamOfOneDevice) {
  StreamHandle s = be->create_stream(1);
  EventHandle e = be->create_event(0, false);
  EXPECT_EQ(status_of([&] { be->record_event(e, s); }), GPUSTRIPE_ERR_INVALID_ARGUMENT);
  be->destroy_event(e);
  be->destroy_stream(s);
}

TEST_F(Emulated, PointerInfo) {
  void* p = be->alloc_device(2, 1000);
  PointerInfo i = be->pointer_info(static_cast<char*>(p) + 999);
  EXPECT_EQ(i.kind, MemoryKind::Device);
  EXPECT_EQ(i.device, 2);
  EXPECT_EQ(i.base, reinterpret_cast<uintptr_t>(p));
  EXPECT_EQ(i.size, 1000u);
  EXPECT_NE(i.buffer_id, 0u);
  EXPECT_EQ(be->pointer_info(p).buffer_id, i.buffer_id);
  EXPECT_EQ(be->pointer_info(static_cast<char*>(p) + 1000).kind, MemoryKind::Unknown);  // one past the end
  int local = 0;
  PointerInfo h = be->pointer_info(&local);
  EXPECT_EQ(h.kind, MemoryKind::Unknown);
  EXPECT_EQ(h.base, 0u);
  EXPECT_EQ(h.buffer_id, 0u);

  // A new allocation never reuses an id, also at a freed address (mmap tends to hand it back).
  uint64_t old_id = i.buffer_id;
  be->free_device(p);
  EXPECT_EQ(be->pointer_info(p).kind, MemoryKind::Unknown);
  void* q = be->alloc_device(2, 1000);
  EXPECT_NE(be->pointer_info(q).buffer_id, old_id);
  if (q == p) std::printf("note: reallocation landed at the freed address, buffer id changed\n");
  be->free_device(q);
}

TEST_F(Emulated, BadPointersAreRefusedAndNothingIsWritten) {
  const size_t n = 4096;
  void* d0 = be->alloc_device(0, n);
  void* d1 = be->alloc_device(1, n);
  StreamHandle s = be->create_stream(0);
  std::vector<unsigned char> host(n, 0x11), poison(n, 0xEE);
  be->copy_async(d0, 0, poison.data(), kHostDevice, n, s);
  be->copy_async(d1, 1, poison.data(), kHostDevice, n, s);
  be->synchronize_stream(s);

  auto refused = [&](Status want, auto&& call) {
    std::string msg = message_of(call);
    EXPECT_EQ(status_of(call), want) << msg;
    return msg;
  };
  // d1 is GPU 1's memory, named as GPU 0's.
  std::string m = refused(GPUSTRIPE_ERR_INVALID_POINTER, [&] { be->copy_async(d1, 0, host.data(), kHostDevice, n, s); });
  EXPECT_NE(m.find("GPU 1"), std::string::npos) << m;
  EXPECT_NE(m.find("GPU 0"), std::string::npos) << m;
  // One byte past the allocation.
  m = refused(GPUSTRIPE_ERR_INVALID_POINTER,
              [&] { be->copy_async(static_cast<char*>(d0) + 1, 0, host.data(), kHostDevice, n, s); });
  EXPECT_NE(m.find("runs past"), std::string::npos) << m;
  EXPECT_NE(m.find(format("0x%zx", reinterpret_cast<size_t>(d0))), std::string::npos) << m;
  // A host pointer named as device memory, and device memory named as host.
  refused(GPUSTRIPE_ERR_INVALID_POINTER, [&] { be->copy_async(host.data(), 0, d0, 0, n, s); });
  refused(GPUSTRIPE_ERR_INVALID_POINTER, [&] { be->copy_async(d0, kHostDevice, host.data(), kHostDevice, n, s); });
  // The source is checked as strictly as the destination.
  refused(GPUSTRIPE_ERR_INVALID_POINTER, [&] { be->copy_async(d0, 0, d1, 0, n, s); });
  refused(GPUSTRIPE_ERR_INVALID_POINTER, [&] { be->copy_async(d0, 0, nullptr, 1, n, s); });
  // Devices that do not exist.
  refused(GPUSTRIPE_ERR_INVALID_DEVICE, [&] { be->copy_async(d0, 4, host.data(), kHostDevice, n, s); });
  refused(GPUSTRIPE_ERR_INVALID_DEVICE, [&] { be->copy_async(d0, 0, host.data(), -2, n, s); });
  refused(GPUSTRIPE_ERR_INVALID_DEVICE, [&] { be->alloc_device(4, n); });
  refused(GPUSTRIPE_ERR_INVALID_DEVICE, [&] { be->create_stream(-1); });
  refused(GPUSTRIPE_ERR_INVALID_DEVICE, [&] { be->can_access_peer(0, 9); });
  // memset checks the same way.
  refused(GPUSTRIPE_ERR_INVALID_POINTER, [&] { be->memset_async(d1, 0, 0, n, s); });
  refused(GPUSTRIPE_ERR_INVALID_POINTER, [&] { be->memset_async(d0, 0, 0, n + 1, s); });
  // Streams and events that are not ours.
  refused(GPUSTRIPE_ERR_INVALID_ARGUMENT, [&] { be->copy_async(d0, 0, host.data(), kHostDevice, n, nullptr); });
  int bogus = 0;
  refused(GPUSTRIPE_ERR_INVALID_ARGUMENT, [&] { be->copy_async(d0, 0, host.data(), kHostDevice, n, &bogus); });
  refused(GPUSTRIPE_ERR_INVALID_ARGUMENT, [&] { be->query_event(&bogus); });
  // Frees of what is not an allocation's start.
  refused(GPUSTRIPE_ERR_INVALID_POINTER, [&] { be->free_device(static_cast<char*>(d0) + 8); });
  refused(GPUSTRIPE_ERR_INVALID_POINTER, [&] { be->free_device(host.data()); });
  refused(GPUSTRIPE_ERR_INVALID_POINTER, [&] { be->free_pinned(d0); });
  refused(GPUSTRIPE_ERR_INVALID_SIZE, [&] { be->alloc_device(0, 0); });

  // Zero bytes is a valid no-op, also with null pointers.
  be->copy_async(nullptr, 0, nullptr, 1, 0, s);

  std::vector<unsigned char> out0(n), out1(n);
  be->copy_async(out0.data(), kHostDevice, d0, 0, n, s);
  be->copy_async(out1.data(), kHostDevice, d1, 1, n, s);
  be->synchronize_stream(s);
  EXPECT_EQ(out0, poison);
  EXPECT_EQ(out1, poison);
  be->destroy_stream(s);
  be->free_device(d0);
  be->free_device(d1);
}

TEST_F(Emulated, ErrorInsideAWorkerSurfacesAtTheNextSynchronize) {
  StreamHandle s = be->create_stream(0);
  emu->enqueue_host_call(s, [] { GS_THROW(GPUSTRIPE_ERR_INTERNAL, "injected failure"); });
  std::string m = message_of([&] { be->synchronize_stream(s); });
  EXPECT_NE(m.find("injected failure"), std::string::npos) << m;
  be->synchronize_stream(s);  // reported once
  be->destroy_stream(s);
}

TEST_F(Emulated, PinnedMemory) {
  const size_t n = 100000;
  auto data = random_bytes(n, 4);
  char* pin = static_cast<char*>(be->alloc_pinned(n));
  PointerInfo i = be->pointer_info(pin + 10);
  EXPECT_EQ(i.kind, MemoryKind::PinnedHost);
  EXPECT_EQ(i.device, kHostDevice);
  EXPECT_EQ(i.base, reinterpret_cast<uintptr_t>(pin));
  EXPECT_EQ(i.size, n);
  void* d = be->alloc_device(3, n);
  StreamHandle s = be->create_stream(3);
  std::memcpy(pin, data.data(), n);
  be->copy_async(d, 3, pin, kHostDevice, n, s);
  be->memset_async(pin, kHostDevice, 0, n, s);
  be->copy_async(pin, kHostDevice, d, 3, n, s);
  be->synchronize_stream(s);
  EXPECT_EQ(std::memcmp(pin, data.data(), n), 0);
  EXPECT_EQ(status_of([&] { be->copy_async(d, 3, pin + 1, kHostDevice, n, s); }), GPUSTRIPE_ERR_INVALID_POINTER);
  EXPECT_EQ(status_of([&] { be->free_device(pin); }), GPUSTRIPE_ERR_INVALID_POINTER);
  be->destroy_stream(s);
  be->free_device(d);
  be->free_pinned(pin);
}

TEST_F(Emulated, ElapsedTimeIsMonotonic) {
  const size_t n = 8 << 20;
  void* a = be->alloc_device(0, n);
  void* b = be->alloc_device(0, n);
  StreamHandle s = be->create_stream(0);
  EventHandle e[3];
  for (auto& x : e) x = be->create_event(0, true);
  EventHandle untimed = be->create_event(0, false);
  EXPECT_EQ(status_of([&] { be->elapsed_ms(e[0], e[1]); }), GPUSTRIPE_ERR_INVALID_ARGUMENT);  // never recorded
  be->record_event(e[0], s);
  be->copy_async(b, 0, a, 0, n, s);
  be->record_event(e[1], s);
  be->copy_async(a, 0, b, 0, n, s);
  be->record_event(e[2], s);
  be->record_event(untimed, s);
  be->synchronize_stream(s);
  float t01 = be->elapsed_ms(e[0], e[1]), t02 = be->elapsed_ms(e[0], e[2]), t12 = be->elapsed_ms(e[1], e[2]);
  EXPECT_GT(t01, 0.0f);
  EXPECT_GE(t02, t01);
  EXPECT_NEAR(t02, t01 + t12, 1e-3);
  EXPECT_EQ(status_of([&] { be->elapsed_ms(e[0], untimed); }), GPUSTRIPE_ERR_INVALID_ARGUMENT);
  for (auto x : e) be->destroy_event(x);
  be->destroy_event(untimed);
  be->destroy_stream(s);
  be->free_device(a);
  be->free_device(b);
}

TEST_F(Emulated, BandwidthThrottle) {
  ScopedEnv gbps{"GPUSTRIPE_TEST", "emu_gbps=1"};
  make(2);
  const size_t n = 16 << 20;  // 16.8 ms at 1 GB/s
  void* a = be->alloc_device(0, n);
  void* b = be->alloc_device(1, n);
  StreamHandle s = be->create_stream(0);
  auto t0 = std::chrono::steady_clock::now();
  be->copy_async(b, 1, a, 0, n, s);
  be->synchronize_stream(s);
  double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_GE(ms, 16.0);
  be->destroy_stream(s);
  be->free_device(a);
  be->free_device(b);
}

TEST_F(Emulated, BadDelaySettingsAreConfigErrors) {
  for (const char* bad : {"emu_jitter_us=lots", "emu_gbps=-1", "emu_jitter=20", "emu_jitter_us"}) {
    ScopedEnv test{"GPUSTRIPE_TEST", bad};
    EXPECT_EQ(status_of([&] { make_emulated_backend(make_topology(1)); }), GPUSTRIPE_ERR_CONFIG) << bad;
  }
}

TEST_F(Emulated, ManyThreadsOnOneStreamKeepEachThreadsOrder) {
  ScopedEnv jitter{"GPUSTRIPE_TEST", "emu_jitter_us=20"};
  make(2);
  const int threads = 8, rounds = 50;
  const size_t slot = 1024;
  void* d = be->alloc_device(1, threads * slot);
  StreamHandle s = be->create_stream(1);
  std::vector<std::vector<unsigned char>> last(threads);
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&, t] {
      // Each thread overwrites its slot round after round; only in-order execution leaves the last round there.
      std::vector<std::vector<unsigned char>> rounds_data;
      for (int r = 0; r < rounds; ++r) rounds_data.push_back(random_bytes(slot, 1000 * t + r));
      for (int r = 0; r < rounds; ++r)
        be->copy_async(static_cast<char*>(d) + t * slot, 1, rounds_data[r].data(), kHostDevice, slot, s);
      be->synchronize_stream(s);  // rounds_data must outlive the copies
      last[t] = rounds_data.back();
    });
  }
  for (auto& th : pool) th.join();
  std::vector<unsigned char> out(threads * slot);
  be->copy_async(out.data(), kHostDevice, d, 1, out.size(), s);
  be->synchronize_stream(s);
  for (int t = 0; t < threads; ++t)
    EXPECT_EQ(std::memcmp(out.data() + t * slot, last[t].data(), slot), 0) << "thread " << t;
  be->destroy_stream(s);
  be->free_device(d);
}

TEST_F(Emulated, DestroyingAStreamDrainsIt) {
  ScopedEnv jitter{"GPUSTRIPE_TEST", "emu_jitter_us=100"};
  make(2);
  const size_t n = 1 << 16;
  auto data = random_bytes(n, 5);
  std::vector<unsigned char> out(n, 0);
  void* d = be->alloc_device(0, n);
  StreamHandle s = be->create_stream(0);
  be->copy_async(d, 0, data.data(), kHostDevice, n, s);
  be->copy_async(out.data(), kHostDevice, d, 0, n, s);
  be->destroy_stream(s);
  EXPECT_EQ(out, data);
  be->free_device(d);
}

TEST_F(Emulated, PeerAccessFollowsTheTopology) {
  be = make_emulated_backend(make_topology(4, 0, /*all_peers=*/false));  // pairs (0,1) and (2,3) only
  EXPECT_TRUE(be->can_access_peer(0, 1));
  EXPECT_TRUE(be->can_access_peer(3, 2));
  EXPECT_FALSE(be->can_access_peer(0, 2));
  EXPECT_FALSE(be->can_access_peer(1, 1));
  be->enable_peer_access(0, 1);
  be->enable_peer_access(0, 1);  // idempotent
  EXPECT_EQ(status_of([&] { be->enable_peer_access(1, 2); }), GPUSTRIPE_ERR_NOT_SUPPORTED);
}

TEST_F(Emulated, DeviceMemoryIsBoundedByTheTopology) {
  make(2, 1 << 20);
  void* a = be->alloc_device(0, 768 << 10);
  EXPECT_EQ(status_of([&] { be->alloc_device(0, 512 << 10); }), GPUSTRIPE_ERR_NO_MEMORY);
  void* b = be->alloc_device(1, 512 << 10);  // other device, own budget
  be->free_device(a);
  void* c = be->alloc_device(0, 512 << 10);  // freed memory is available again
  be->free_device(b);
  be->free_device(c);
}

TEST_F(Emulated, IpcHandleOpensInAForkedChild) {
  const size_t n = 1 << 20;
  auto data = random_bytes(n, 6), reply = random_bytes(n, 7);
  void* d = be->alloc_device(1, n);
  StreamHandle s = be->create_stream(1);
  be->copy_async(d, 1, data.data(), kHostDevice, n, s);
  be->synchronize_stream(s);
  Backend::IpcMemHandle h = be->ipc_export(static_cast<char*>(d) + 100);  // an interior pointer names the allocation
  EXPECT_EQ(h.device, 1);
  EXPECT_EQ(h.size, n);
  EXPECT_EQ(h.buffer_id, be->pointer_info(d).buffer_id);
  EXPECT_EQ(status_of([&] { be->ipc_open(h); }), GPUSTRIPE_ERR_INVALID_ARGUMENT);  // as CUDA: not in its own process

  pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    // The child: its own backend (threads do not survive fork). Exit codes say what failed.
    int code = 0;
    try {
      auto child = make_emulated_backend(make_topology(4));
      char* p = static_cast<char*>(child->ipc_open(h));
      if (child->ipc_open(h) != p) code = 10;  // the same handle maps once
      // Opened for another GPU's streams and kernels (the reader, as a device window's pushed
      // puts and the collectives open it): every emulated GPU reads host memory, so the same
      // mapping, counted, still memory of the owner's GPU; a reader that is no GPU is refused.
      char* q = static_cast<char*>(child->ipc_open(h, -1, 2));
      if (q != p || child->pointer_info(q).device != 1) code = 15;
      child->ipc_close(q);
      if (status_of([&] { child->ipc_open(h, -1, 4); }) != GPUSTRIPE_ERR_INVALID_DEVICE) code = 16;
      PointerInfo i = child->pointer_info(p + n - 1);
      if (i.kind != MemoryKind::Device || i.device != 1 || i.buffer_id != h.buffer_id || i.size != n) code = 11;
      StreamHandle cs = child->create_stream(1);
      std::vector<unsigned char> seen(n);
      child->copy_async(seen.data(), kHostDevice, p, 1, n, cs);
      child->synchronize_stream(cs);
      if (seen != data) code = 12;
      child->copy_async(p, 1, reply.data(), kHostDevice, n, cs);
      child->synchronize_stream(cs);
      child->destroy_stream(cs);
      child->ipc_close(p);
      if (child->pointer_info(p).kind != MemoryKind::Device) code = 13;  // still open once
      child->ipc_close(p);
      if (child->pointer_info(p).kind != MemoryKind::Unknown) code = 14;
    } catch (const std::exception& e) {
      std::fprintf(stderr, "child: %s\n", e.what());
      code = 20;
    }
    _exit(code);
  }
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status));
  ASSERT_EQ(WEXITSTATUS(status), 0);
  std::vector<unsigned char> out(n);
  be->copy_async(out.data(), kHostDevice, d, 1, n, s);
  be->synchronize_stream(s);
  EXPECT_EQ(out, reply);
  be->destroy_stream(s);
  be->free_device(d);
}

TEST_F(Emulated, IpcOfFreedMemoryOrForeignHandlesIsRefused) {
  void* d = be->alloc_device(0, 4096);
  Backend::IpcMemHandle h = be->ipc_export(d);
  be->free_device(d);
  int x = 0;
  EXPECT_EQ(status_of([&] { be->ipc_export(&x); }), GPUSTRIPE_ERR_INVALID_POINTER);
  Backend::IpcMemHandle foreign;
  std::memset(foreign.bytes, 0x42, sizeof foreign.bytes);
  foreign.device = 0;
  foreign.size = 4096;
  EXPECT_EQ(status_of([&] { be->ipc_open(foreign); }), GPUSTRIPE_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(status_of([&] { be->ipc_close(&x); }), GPUSTRIPE_ERR_INVALID_POINTER);
  pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    auto child = make_emulated_backend(make_topology(1));
    _exit(status_of([&] { child->ipc_open(h); }) == GPUSTRIPE_ERR_INVALID_ARGUMENT ? 0 : 1);
  }
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}

// Segments in /dev/shm whose names carry `pid`.
static int segments_of(pid_t pid) {
  std::string prefix = format("gpustripe.%d.", static_cast<int>(pid));
  int count = 0;
  if (DIR* dir = opendir("/dev/shm")) {
    while (struct dirent* e = readdir(dir)) count += std::strncmp(e->d_name, prefix.c_str(), prefix.size()) == 0;
    closedir(dir);
  }
  return count;
}

TEST_F(Emulated, SegmentsOfDeadProcessesAreRemoved) {
  pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    auto child = make_emulated_backend(make_topology(1));
    child->alloc_device(0, 4096);
    _exit(0);  // dies without freeing, as a killed process would
  }
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  ASSERT_EQ(segments_of(pid), 1);
  reclaim_dead_segments();
  EXPECT_EQ(segments_of(pid), 0);
  void* mine = be->alloc_device(0, 4096);  // a live process's segments stay
  reclaim_dead_segments();
  EXPECT_EQ(be->pointer_info(mine).kind, MemoryKind::Device);
  EXPECT_EQ(segments_of(getpid()), 1);
  be->free_device(mine);
}

TEST(BackendFactory, KindsAndSetting) {
  Topology t = make_topology(2);
  {
    ScopedEnv env("GPUSTRIPE_BACKEND", "emulated");
    EXPECT_EQ(resolve_backend_kind(), "emulated");
    EXPECT_STREQ(make_backend(t)->name(), "emulated");
  }
  {
    ScopedEnv env("GPUSTRIPE_BACKEND", nullptr);
    EXPECT_EQ(resolve_backend_kind("auto"), cuda_device_count() > 0 ? "cuda" : "emulated");
    EXPECT_STREQ(make_backend(t, "emulated")->name(), "emulated");
    EXPECT_EQ(status_of([&] { resolve_backend_kind("opencl"); }), GPUSTRIPE_ERR_INVALID_ARGUMENT);
  }
  {
    ScopedEnv env("GPUSTRIPE_BACKEND", "metal");
    EXPECT_EQ(status_of([&] { resolve_backend_kind(); }), GPUSTRIPE_ERR_CONFIG);
  }
  if (cuda_device_count() == 0) {
    EXPECT_EQ(status_of([&] { make_cuda_backend(); }), GPUSTRIPE_ERR_NOT_SUPPORTED);
    EXPECT_EQ(status_of([&] { make_backend(t, "cuda"); }), GPUSTRIPE_ERR_NOT_SUPPORTED);
  }
}

TEST(BackendFactory, OptionalPartsRefuseClearly) {
  auto be = make_emulated_backend(make_topology(1));
  StreamHandle s = be->create_stream(0);
  std::string m = message_of([&] { be->begin_capture(s); });
  EXPECT_NE(m.find("emulated"), std::string::npos) << m;
  EXPECT_EQ(status_of([&] { be->begin_capture(s); }), GPUSTRIPE_ERR_NOT_SUPPORTED);
  EXPECT_EQ(status_of([&] { be->end_capture(s); }), GPUSTRIPE_ERR_NOT_SUPPORTED);
  EXPECT_EQ(status_of([&] { be->launch_graph(nullptr, s); }), GPUSTRIPE_ERR_NOT_SUPPORTED);
  be->destroy_stream(s);
}
