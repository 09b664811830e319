// p2p with device buffers across forked ranks on the emulated backend (each rank
// its own emulated GPU, memory in shared segments as CUDA IPC would map it):
// mapped rendezvous, mixed host/device ends, the mapping cache and a receive buffer
// freed and reallocated at the same address between messages.
#include <gtest/gtest.h>

#include <dirent.h>
#include <sys/mman.h>

#include <algorithm>
#include <atomic>

#include <cstdio>
#include <cstring>
#include <chrono>
#include <map>
#include <mutex>
#include <random>
#include <thread>

#include "backend/backend.hpp"
#include "common/text_file.hpp"
#include "engine/engine.hpp"
#include "engine_test_util.hpp"
#include "model/planner.hpp"
#include "forwarding_backend.hpp"
#include "recording_graph_backend.hpp"
#include "p2p/endpoint.hpp"
#include "test_ipc_ranks.hpp"
#include "test_util.hpp"
#include "topology/topology.hpp"

using namespace gpustripe;
using namespace gpustripe::p2p;

namespace {

constexpr uint64_t kComm = 3;

std::unique_ptr<Backend> emulated() { return make_emulated_backend(load_topology_file("h200x4")); }

void to_device(Backend& b, void* dst, int dev, const std::vector<unsigned char>& v) {
  if (v.empty()) return;
  StreamHandle s = b.create_stream(dev);
  b.copy_async(dst, dev, v.data(), kHostDevice, v.size(), s);
  b.synchronize_stream(s);
  b.destroy_stream(s);
}

std::vector<unsigned char> from_device(Backend& b, const void* src, int dev, size_t n) {
  std::vector<unsigned char> v(n);
  if (!n) return v;
  StreamHandle s = b.create_stream(dev);
  b.copy_async(v.data(), kHostDevice, src, dev, n, s);
  b.synchronize_stream(s);
  b.destroy_stream(s);
  return v;
}

}  // namespace

TEST(P2pDevice, DeviceAndHostEndsAllSizes) {
  EXPECT_RANKS_OK(run_ranks(2, [](int rank, ipc::Channel& ch) {
    auto be = emulated();
    Endpoint ep(ch, be.get());
    size_t e = eager_limit();
    int seq = 0;
    // (sender on device?, receiver on device?) for every mix
    for (int mix = 0; mix < 4; ++mix) {
      bool send_dev = mix & 1, recv_dev = mix & 2;
      for (size_t n : {size_t{0}, size_t{1}, e, e + 1, size_t{3 << 20} + 5}) {
        auto data = seeded_bytes(seq++, n);
        if (rank == 0) {
          void* dbuf = send_dev ? be->alloc_device(0, std::max<size_t>(n, 1)) : nullptr;
          if (send_dev) to_device(*be, dbuf, 0, data);
          ep.send(send_dev ? dbuf : data.data(), n, 1, mix, kComm);
          if (dbuf) be->free_device(dbuf);
        } else {
          void* dbuf = recv_dev ? be->alloc_device(1, n + 64) : nullptr;
          std::vector<unsigned char> hbuf(n + 64);
          P2pStatus st = ep.recv(recv_dev ? dbuf : hbuf.data(), n + 64, 0, mix, kComm);
          RANK_CHECK(st.error == GPUSTRIPE_SUCCESS && st.bytes == n);
          auto got = recv_dev ? from_device(*be, dbuf, 1, n) : std::vector<unsigned char>(hbuf.begin(), hbuf.begin() + n);
          RANK_CHECK(got == data);
          if (dbuf) be->free_device(dbuf);
        }
      }
    }
  }));
}

// A device buffer shorter than the message is refused at the send/receive call (the
// endpoint checks the range once; its eager copies then skip the backend's own checks),
// before anything moves; the endpoint stays usable.
TEST(P2pDevice, BufferRunningPastItsAllocationIsRefusedBeforeAnythingMoves) {
  EXPECT_RANKS_OK(run_ranks(2, [](int rank, ipc::Channel& ch) {
    auto be = emulated();
    Endpoint ep(ch, be.get());
    char* d = static_cast<char*>(be->alloc_device(rank, 4096));
    auto refused = [](auto&& call) {
      try {
        call();
      } catch (const Error& e) {
        return e.status() == GPUSTRIPE_ERR_INVALID_POINTER && std::strstr(e.what(), "runs past its allocation");
      }
      return false;
    };
    int peer = 1 - rank;
    RANK_CHECK(refused([&] { ep.isend(d + 4000, 200, peer, 1, kComm); }));  // eager size, 104 bytes too far
    RANK_CHECK(refused([&] { ep.irecv(d + 8, 4096, peer, 1, kComm); }));
    auto data = seeded_bytes(rank, 96);
    to_device(*be, d + 4000, rank, data);
    if (rank == 0) ep.send(d + 4000, 96, 1, 2, kComm);  // the last bytes of the allocation: fine
    else RANK_CHECK(ep.recv(d, 96, 0, 2, kComm).bytes == 96 && from_device(*be, d, 1, 96) == seeded_bytes(0, 96));
    be->free_device(d);
  }));
}

TEST(P2pDevice, MappingCacheReusesAndTruncationHolds) {
  // Device to device is a pull: the receiver maps the sender's buffer, once.
  EXPECT_RANKS_OK(run_ranks(2, [](int rank, ipc::Channel& ch) {
    auto be = emulated();
    Endpoint ep(ch, be.get());
    size_t n = 1 << 20;
    if (rank == 0) {
      void* src = be->alloc_device(0, n);
      for (int i = 0; i < 3; ++i) {
        to_device(*be, src, 0, seeded_bytes(i, n));
        ep.send(src, n, 1, 0, kComm);
      }
      ep.send(src, n, 1, 1, kComm);  // into a smaller buffer
      RANK_CHECK(ep.handle_cache()->size() == 0);  // the sender mapped nothing
      be->free_device(src);
    } else {
      void* dst = be->alloc_device(1, n);
      for (int i = 0; i < 3; ++i) {
        ep.recv(dst, n, 0, 0, kComm);
        RANK_CHECK(from_device(*be, dst, 1, n) == seeded_bytes(i, n));
      }
      auto s = ep.handle_cache()->stats();
      RANK_CHECK(s.misses == 1 && s.hits == 2 && s.stale_evictions == 0);
      P2pStatus st = ep.recv(static_cast<char*>(dst) + 4096, n / 2, 0, 1, kComm);
      RANK_CHECK(st.error == GPUSTRIPE_ERR_TRUNCATE && st.bytes == n / 2);
      auto got = from_device(*be, static_cast<char*>(dst) + 4096, 1, n / 2);
      auto want = seeded_bytes(2, n);  // the 4th message was the 3rd pattern again
      RANK_CHECK(std::equal(got.begin(), got.end(), want.begin()));
      be->free_device(dst);
    }
  }));
}

// The side whose buffer is exported frees it and allocates a new one each round
// (the allocator hands back the same address, typically): the mapping side must see
// the new buffer id and remap, never copy through the stale mapping.
//   pull: device -> device, the receiver maps the sender's (reallocated) buffer
//   push: host -> device, the sender maps the receiver's (reallocated) buffer
void freed_and_reallocated(bool pull) {
  EXPECT_RANKS_OK(run_ranks(2, [pull](int rank, ipc::Channel& ch) {
    auto be = emulated();
    Endpoint ep(ch, be.get());
    size_t n = 2 << 20;
    constexpr int kRounds = 4;
    bool exporter = pull ? rank == 0 : rank == 1;
    void* prev = nullptr;
    int reused = 0;
    for (int i = 0; i < kRounds; ++i) {
      auto data = seeded_bytes(100 + i, n);
      void* buf = nullptr;
      if (exporter || rank == 1) buf = be->alloc_device(rank, n);
      if (exporter && buf == prev) ++reused;
      prev = buf;
      if (rank == 0) {
        if (buf) to_device(*be, buf, 0, data);
        ep.send(buf ? buf : data.data(), n, 1, 0, kComm);
      } else {
        to_device(*be, buf, 1, std::vector<unsigned char>(n, 0));
        ep.recv(buf, n, 0, 0, kComm);
        RANK_CHECK(from_device(*be, buf, 1, n) == data);
      }
      if (buf) be->free_device(buf);
    }
    // The exporter tells the mapper how often its address came back.
    int mapper = exporter ? 1 - rank : rank;
    if (exporter) {
      std::fprintf(stderr, "[rank %d] exported buffer address reused in %d of %d rounds\n", rank, reused, kRounds - 1);
      ep.send(&reused, sizeof reused, mapper, 9, kComm);
    } else {
      ep.recv(&reused, sizeof reused, 1 - rank, 9, kComm);
      auto s = ep.handle_cache()->stats();
      RANK_CHECK(s.hits == 0);  // every round a new buffer: never served from the cache
      RANK_CHECK(s.stale_evictions == static_cast<uint64_t>(reused));
      RANK_CHECK(s.misses + s.stale_evictions == kRounds);
    }
  }));
}

TEST(P2pDevice, SendBufferFreedAndReallocatedAtSameAddressIsNeverStale) { freed_and_reallocated(true); }
TEST(P2pDevice, ReceiveBufferFreedAndReallocatedAtSameAddressIsNeverStale) { freed_and_reallocated(false); }

TEST(P2pDevice, FourRanksAnySourceDeviceRendezvous) {
  EXPECT_RANKS_OK(run_ranks(4, [](int rank, ipc::Channel& ch) {
    auto be = emulated();
    Endpoint ep(ch, be.get());
    size_t n = 600000;
    void* buf = be->alloc_device(rank, n);
    if (rank != 0) {
      to_device(*be, buf, rank, seeded_bytes(rank, n));
      ep.send(buf, n, 0, rank, kComm);
    } else {
      std::vector<bool> seen(4, false);
      for (int k = 0; k < 3; ++k) {
        P2pStatus st = ep.recv(buf, n, kAnySource, kAnyTag, kComm);
        RANK_CHECK(st.source == st.tag && !seen[st.source]);
        seen[st.source] = true;
        RANK_CHECK(from_device(*be, buf, 0, n) == seeded_bytes(st.source, n));
      }
    }
    be->free_device(buf);
  }));
}

TEST(P2pDevice, EngineCopiesPlannedWithOtherRanksInFlight) {
  // Two pairs in both directions at once: each rendezvous copy is planned with the
  // others listed on the node's board (Planner::plan_concurrent) and must land intact.
  EXPECT_RANKS_OK(run_ranks(4, [](int rank, ipc::Channel& ch) {
    Topology topo = load_topology_file("h200x4");
    auto be = make_emulated_backend(topo);
    auto planner = make_planner(topo);
    Engine engine(*be, topo, planner.get());
    Endpoint ep(ch, be.get(), engine_copy(engine, &ch));
    size_t n = 8 << 20;
    int peer = rank ^ 1;
    void* out = be->alloc_device(rank, n);
    void* in = be->alloc_device(rank, n);
    for (int round = 0; round < 3; ++round) {
      to_device(*be, out, rank, seeded_bytes(rank * 10 + round, n));
      auto r = ep.irecv(in, n, peer, round, kComm);
      auto s = ep.isend(out, n, peer, round, kComm);
      ep.wait(s);
      ep.wait(r);
      RANK_CHECK(from_device(*be, in, rank, n) == seeded_bytes(peer * 10 + round, n));
    }
    RANK_CHECK(ch.transfers_of_others().size() <= 3);
    be->free_device(out);
    be->free_device(in);
  }));
}

namespace {
// rank -> (phase -> count) of the stamps in a trace directory; removes it.
std::map<int, std::map<std::string, int>> trace_phases(const std::string& dir) {
  std::map<int, std::map<std::string, int>> count;
  DIR* d = opendir(dir.c_str());
  if (!d) return count;
  while (dirent* e = readdir(d)) {
    std::string name = e->d_name;
    if (name.rfind("p2p-trace-", 0) != 0) continue;
    for (const std::string& line : split(read_text_file(dir + "/" + name), '\n')) {
      long long ns = 0;
      int r = 0, sender = 0;
      char phase[32] = {};
      unsigned long long a = 0, b = 0, bytes = 0;
      if (std::sscanf(line.c_str(), "%lld %d %31s %d %llu %llu %llu", &ns, &r, phase, &sender, &a, &b, &bytes) == 7)
        ++count[r][phase];
    }
    std::remove((dir + "/" + name).c_str());
  }
  closedir(d);
  rmdir(dir.c_str());
  return count;
}
}  // namespace

namespace {
// A window of messages to one peer, replayed (windows from 1M: GPUSTRIPE_TEST window_min) detached from
// the streams' earlier work, its first copy too (stamped p_window_first, the rest p_window); the
// data must land intact in every buffer. The receiver matches the whole window with no progress
// in between (the requests to send are already there), so no copy is seen complete before the
// last one starts.
void window_copies() {
  constexpr int kWindow = 6;
  char dir[] = "/tmp/gs-p2p-queue-XXXXXX";
  ASSERT_NE(mkdtemp(dir), nullptr);
  {
    ScopedEnv t("GPUSTRIPE_P2P_TRACE", dir);
    ScopedEnv test{"GPUSTRIPE_TEST", "window_min=1M,emu_jitter_us=5"};
    EXPECT_RANKS_OK(run_ranks(2, [](int rank, ipc::Channel& ch) {
      Topology topo = load_topology_file("h200x4");
      auto be = make_emulated_backend(topo);
      engine_test::FixedPlanner planner({{PathKind::Direct, -1, 0.9, 1}, {PathKind::HostStaged, 0, 0.1, 4}});
      Engine engine(*be, topo, &planner);
      const size_t n = (2u << 20) + 12345;
      std::vector<void*> bufs;
      for (int w = 0; w < kWindow; ++w) bufs.push_back(be->alloc_device(rank, n));
      {
        Endpoint ep(ch, be.get(), engine_copy(engine, &ch));
        char go = 1;
        if (rank == 0) {
          std::vector<RequestPtr> sends;
          for (int w = 0; w < kWindow; ++w) {
            to_device(*be, bufs[w], 0, seeded_bytes(40 + w, n));
            sends.push_back(ep.isend(bufs[w], n, 1, w, kComm));
          }
          ep.send(&go, 1, 1, 99, kComm);
          for (auto& s : sends) ep.wait(s);
        } else {
          ep.recv(&go, 1, 0, 99, kComm);  // the window's requests to send are in by now
          std::vector<RequestPtr> recvs;
          for (int w = 0; w < kWindow; ++w) recvs.push_back(ep.irecv(bufs[w], n, 0, w, kComm));
          for (auto& r : recvs) ep.wait(r);
          for (int w = 0; w < kWindow; ++w) RANK_CHECK(from_device(*be, bufs[w], 1, n) == seeded_bytes(40 + w, n));
        }
        ep.flush();
      }
      for (void* b : bufs) be->free_device(b);
    }));
  }
  std::map<std::string, int> phases = trace_phases(dir)[1];
  EXPECT_EQ(phases["r_started"], kWindow);
  EXPECT_EQ(phases["p_window_first"], 1);
  EXPECT_EQ(phases["p_window"], kWindow - 1);
  EXPECT_EQ(phases["p_lean"], 0);  // every size splits under this planner
}
}  // namespace

TEST(P2pDevice, WindowCopiesDetachedEachLandInTheirOwnBuffer) { window_copies(); }

namespace {
// `gpustripe bench mpi`'s window loop on one pair, with graphs (replays recorded and run in
// order) and windows replayed from 1M: per size, buffers allocated, one per direction shared by
// the whole window (as osu_bw does for large windows), two warm-up windows (the first message
// of a window is seen, then captured, then replayed), then windows checked; buffers freed before
// the next size. Every message must land intact, and no wait may name an event recorded inside a
// capture (CUDA refuses those).
// Returns the receiver's trace stamps.
std::map<std::string, int> bench_windows(int window, const std::vector<size_t>& sizes) {
  char dir[] = "/tmp/gs-p2p-windows-XXXXXX";
  if (!mkdtemp(dir)) {
    ADD_FAILURE() << "mkdtemp";
    return {};
  }
  ScopedEnv t("GPUSTRIPE_P2P_TRACE", dir);
  ScopedEnv test{"GPUSTRIPE_TEST", "window_min=1M,emu_jitter_us=5"};
  ScopedEnv h("GPUSTRIPE_HOST_STAGING", "1M");  // the staging rings wrap many times per window
  EXPECT_RANKS_OK(run_ranks(2, [window, sizes](int rank, ipc::Channel& ch) {
    Topology topo = load_topology_file("h200x4");
    auto* rec = new RecordingGraphBackend(make_emulated_backend(topo));
    std::unique_ptr<Backend> be(rec);
    engine_test::FixedPlanner planner({{PathKind::Direct, -1, 0.88, 1}, {PathKind::HostStaged, 0, 0.12, 6}});
    Engine engine(*be, topo, &planner);
    {
      Endpoint ep(ch, be.get(), engine_copy(engine, &ch));
      int seq = 0;
      for (size_t n : sizes) {
        void* buf = be->alloc_device(rank, n);
        for (int it = 0; it < 4; ++it, ++seq) {
          char go = 1;
          if (rank == 0) {
            to_device(*be, buf, 0, seeded_bytes(1000 + seq, n));
            ep.recv(&go, 1, 1, 98, kComm);  // the receives are posted
            std::vector<RequestPtr> sends;
            for (int w = 0; w < window; ++w) sends.push_back(ep.isend(buf, n, 1, 7, kComm));
            for (auto& s : sends) ep.wait(s);
            ep.recv(&go, 1, 1, 99, kComm);
          } else {
            std::vector<RequestPtr> recvs;
            for (int w = 0; w < window; ++w) recvs.push_back(ep.irecv(buf, n, 0, 7, kComm));
            ep.send(&go, 1, 0, 98, kComm);
            for (auto& r : recvs) ep.wait(r);
            for (auto& r : recvs) RANK_CHECK(r->status().error == GPUSTRIPE_SUCCESS && r->status().bytes == n);
            RANK_CHECK(from_device(*be, buf, 1, n) == seeded_bytes(1000 + seq, n));
            ep.send(&go, 1, 0, 99, kComm);
          }
        }
        be->free_device(buf);
      }
      ep.flush();
    }
    RANK_CHECK(rec->waits_on_captured_events == 0);
    if (rank == 1) RANK_CHECK(rec->launches > 0);
  }));
  // Copies from 1M joined the window: at most all of a window's but the first (4 windows a size;
  // fewer where a copy had finished before the next one's request arrived).
  const int from_1m = static_cast<int>(std::count_if(sizes.begin(), sizes.end(), [](size_t n) { return n >= (1u << 20); }));
  std::map<std::string, int> phases = trace_phases(dir)[1];
  EXPECT_GT(phases["p_window"], 0);
  EXPECT_LE(phases["p_window"], from_1m * 4 * (window - 1));
  return phases;
}
}  // namespace

// The queued copies replayed, alternating between two staging areas.
TEST(P2pDevice, BenchWindowsOf16ReplayedInTwoStagingAreas) {
  bench_windows(16, {512u << 10, 1u << 20, 2u << 20, (4u << 20) + 12345, 1u << 20});
}
TEST(P2pDevice, BenchWindowsOf64ReplayedInTwoStagingAreas) {
  bench_windows(64, {512u << 10, 1u << 20, 2u << 20, (4u << 20) + 12345, 1u << 20});
}

// A window's copies (its first one too: more receives from the peer posted behind it) run detached from the p2p
// streams' earlier work, direct paths back to back on the link's lane; every message still lands
// intact and completes only once both of its paths have.
TEST(P2pDevice, BenchWindowsDetachedFromTheStreamsEarlierWork) {
  std::map<std::string, int> phases = bench_windows(16, {512u << 10, 1u << 20, (2u << 20) + 4097, (4u << 20) + 12345});
  EXPECT_GT(phases["p_window_first"], 0);
}

namespace {
// A planner whose lone plan is the direct path alone below `split` bytes and direct + host from
// there (as the model's plans are: splitting pays only for large transfers).
class SplitFromPlanner : public engine_test::FixedPlanner {
 public:
  explicit SplitFromPlanner(uint64_t split)
      : FixedPlanner({{PathKind::Direct, -1, 0.9, 1}, {PathKind::HostStaged, 0, 0.1, 4}}),
        alone_({{PathKind::Direct, -1, 1.0, 1}}),
        split_(split) {}
  Plan plan(int src, int dst, uint64_t bytes) override {
    return bytes < split_ ? alone_.plan(src, dst, bytes) : FixedPlanner::plan(src, dst, bytes);
  }
  std::vector<Plan> plan_concurrent(const std::vector<TransferSpec>& t) override {
    std::vector<Plan> out;
    for (const auto& x : t) out.push_back(plan(x.src, x.dst, x.bytes));
    return out;
  }

 protected:
  engine_test::FixedPlanner alone_;

 private:
  uint64_t split_;
};
}  // namespace

// Messages whose lone plan is the direct path alone take one plain copy: stamped p_lean, none of
// them listed on the node's board or planned (no p_concurrent / p_direct / window stamps), every
// byte intact in both directions at once; messages from the size where the plan splits are
// planned as before (never p_lean). The threshold is the planner's, found per GPU pair.
TEST(P2pDevice, MessagesTheModelKeepsDirectTakeOnePlainCopy) {
  char dir[] = "/tmp/gs-p2p-lean-XXXXXX";
  ASSERT_NE(mkdtemp(dir), nullptr);
  const std::vector<size_t> lean = {4097, 64u << 10, (1u << 20) + 3};
  const std::vector<size_t> split = {(2u << 20) + 5, 3u << 20};
  {
    ScopedEnv t("GPUSTRIPE_P2P_TRACE", dir);
    ScopedEnv j{"GPUSTRIPE_TEST", "emu_jitter_us=5"};
    EXPECT_RANKS_OK(run_ranks(2, [&](int rank, ipc::Channel& ch) {
      Topology topo = load_topology_file("h200x4");
      auto be = make_emulated_backend(topo);
      SplitFromPlanner planner(2u << 20);
      Engine engine(*be, topo, &planner);
      const int peer = 1 - rank;
      {
        Endpoint ep(ch, be.get(), engine_copy(engine, &ch));
        int tag = 0;
        for (const auto* sizes : {&lean, &split})
          for (size_t n : *sizes) {
            void* out = be->alloc_device(rank, n);
            void* in = be->alloc_device(rank, n);
            to_device(*be, out, rank, seeded_bytes(300 + 2 * tag + rank, n));
            RequestPtr r = ep.irecv(in, n, peer, tag, kComm);
            RequestPtr s = ep.isend(out, n, peer, tag, kComm);
            ep.wait(r);
            ep.wait(s);
            RANK_CHECK(r->status().error == GPUSTRIPE_SUCCESS && r->status().bytes == n);
            RANK_CHECK(from_device(*be, in, rank, n) == seeded_bytes(300 + 2 * tag + peer, n));
            be->free_device(out);
            be->free_device(in);
            ++tag;
          }
        ep.flush();
      }
    }));
  }
  for (auto& [rank, phases] : trace_phases(dir)) {
    EXPECT_EQ(phases["p_lean"], static_cast<int>(lean.size())) << "rank " << rank;
    EXPECT_EQ(phases["r_started"], static_cast<int>(lean.size() + split.size())) << "rank " << rank;
  }
}

namespace {
// Records where a rank's GPU-to-GPU copies ran (the device of their stream) and the readers
// ipc_open mapped peers' buffers for.
class PlaceRecordingBackend : public ForwardingBackend {
 public:
  using ForwardingBackend::ForwardingBackend;
  const char* name() const override { return "recording-places"; }
  StreamHandle create_stream(int dev) override {
    StreamHandle s = in_->create_stream(dev);
    std::lock_guard<std::mutex> l(mu_);
    stream_dev_[s] = dev;
    return s;
  }
  void copy_async(void* dst, int dd, const void* src, int sd, size_t n, StreamHandle s) override {
    if (dd != kHostDevice && sd != kHostDevice) {
      std::lock_guard<std::mutex> l(mu_);
      copies.push_back(Copy{stream_dev_.count(s) ? stream_dev_[s] : -2, n});
    }
    in_->copy_async(dst, dd, src, sd, n, s);
  }
  void* ipc_open(const IpcMemHandle& h, int fd, int reader) override {
    readers.push_back(reader);
    if (refuse_readers && reader >= 0) GS_THROW(GPUSTRIPE_ERR_CUDA, "no mapping for GPU %d here", reader);
    return in_->ipc_open(h, fd, reader);
  }
  bool refuse_readers = false;  // as a driver that maps no peer's memory into another GPU's context
  struct Copy {
    int stream_dev;
    size_t bytes;
  };
  std::vector<Copy> copies;
  std::vector<int> readers;

 private:
  std::mutex mu_;
  std::map<StreamHandle, int> stream_dev_;
};
}  // namespace

namespace {
// Pulls of lean sizes and one the plan splits, between two ranks both ways, with a send buffer
// freed and reallocated between two messages; every byte checked. `refuse`: the backend maps no
// buffer for another GPU than its owner.
void plain_pulls(bool refuse) {
  ScopedEnv j{"GPUSTRIPE_TEST", "emu_jitter_us=5,offers=no"};
  const std::vector<size_t> lean = {4097, 64u << 10, (1u << 20) + 3};
  const size_t split = (2u << 20) + 5;
  EXPECT_RANKS_OK(run_ranks(2, [&](int rank, ipc::Channel& ch) {
    Topology topo = load_topology_file("h200x4");
    auto* rec = new PlaceRecordingBackend(make_emulated_backend(topo));
    rec->refuse_readers = refuse;
    std::unique_ptr<Backend> be(rec);
    SplitFromPlanner planner(2u << 20);
    Engine engine(*be, topo, &planner);
    const int peer = 1 - rank;
    {
      Endpoint ep(ch, be.get(), engine_copy(engine, &ch), engine_plain(engine));
      int tag = 0;
      std::vector<size_t> sizes = lean;
      sizes.push_back(lean.back());  // again, from a buffer freed and reallocated in between
      sizes.push_back(split);
      for (size_t n : sizes) {
        void* out = be->alloc_device(rank, n);
        void* in = be->alloc_device(rank, n);
        to_device(*be, out, rank, seeded_bytes(700 + 2 * tag + rank, n));
        RequestPtr r = ep.irecv(in, n, peer, tag, kComm);
        RequestPtr s = ep.isend(out, n, peer, tag, kComm);
        ep.wait(r);
        ep.wait(s);
        RANK_CHECK(r->status().error == GPUSTRIPE_SUCCESS && r->status().bytes == n);
        RANK_CHECK(from_device(*be, in, rank, n) == seeded_bytes(700 + 2 * tag + peer, n));
        be->free_device(in);
        be->free_device(out);
        ++tag;
      }
      ep.flush();
      const ipc::HandleCacheStats c = ep.handle_cache()->stats();
      // (a refused mapping counts as a miss)
      RANK_CHECK(c.hits == 0 && c.misses + c.stale_evictions == sizes.size() + (refuse ? 1 : 0));
    }
    // Every lean message's copy (its exact size) on this rank's GPU's streams, none on the peer's;
    // where the backend refused the mapping, on the peer's.
    for (size_t n : lean) {
      int here = 0, there = 0;
      for (const auto& c : rec->copies)
        if (c.bytes == n) (c.stream_dev == rank ? here : there)++;
      const int want = n == lean.back() ? 2 : 1;
      RANK_CHECK(refuse ? here == 0 && there == want : here == want && there == 0);
    }
    // The split message's copies run from the sender's GPU.
    int from_sender = 0;
    for (const auto& c : rec->copies) from_sender += c.stream_dev == peer;
    RANK_CHECK(from_sender > 0);
    // Mapped for this rank's GPU once per lean message, in the owner's context for the split one;
    // refused, asked once, then every buffer in the owner's context.
    const long for_me = std::count(rec->readers.begin(), rec->readers.end(), rank);
    RANK_CHECK(refuse ? for_me == 1 && rec->readers.size() == lean.size() + 3
                      : for_me == static_cast<long>(lean.size() + 1) && rec->readers.size() == lean.size() + 2);
  }));
}
}  // namespace

// A pull the model keeps on the direct path alone is one plain copy issued in the receiver's own
// GPU's context (as UCX's cuda_ipc pulls): the sender's buffer is mapped for the receiver's GPU
// and the copy runs on a stream of that GPU, not of the sender's; a message the plan splits is
// still the engine's copy, issued from the sender's GPU through the owner's mapping. A send
// buffer freed and reallocated at the same address between two messages is mapped anew (the
// cache's stale check holds for the receiver's mapping too), and every byte lands.
TEST(P2pDevice, PlainPullsRunInTheReceiversContextThroughItsOwnMapping) { plain_pulls(false); }

// A device receive posted for one sender, with no other receive of that sender pending, is
// offered to it: the sender's matching small send copies straight into the receive buffer (the sender
// maps it; the receiver maps nothing), every byte lands, and a receive buffer freed and
// reallocated at the same address between two messages is mapped anew. A message the sender had
// already sent when the offer came is matched as before (pulled), the offer dropped.
TEST(P2pDevice, AnOfferedReceiveIsFilledByTheSendersCopy) {
  ScopedEnv j{"GPUSTRIPE_TEST", "emu_jitter_us=5"};
  EXPECT_RANKS_OK(run_ranks(2, [&](int rank, ipc::Channel& ch) {
    Topology topo = load_topology_file("h200x4");
    std::unique_ptr<Backend> be = make_emulated_backend(topo);
    SplitFromPlanner planner(2u << 20);
    Engine engine(*be, topo, &planner);
    Endpoint ep(ch, be.get(), engine_copy(engine, &ch), engine_plain(engine));
    const size_t n = 4000;  // within the device eager limit: larger sends are pulled
    char go = 0;
    for (int tag = 0; tag < 3; ++tag) {
      void* buf = be->alloc_device(rank, n);
      if (rank == 1) {  // receives: the offer goes out with the receive, then "go"
        RequestPtr r = ep.irecv(buf, n, 0, tag, kComm);
        ep.send(&go, 1, 0, 100 + tag, kComm);
        ep.wait(r);
        RANK_CHECK(r->status().error == GPUSTRIPE_SUCCESS && r->status().bytes == n && r->status().tag == tag);
        RANK_CHECK(from_device(*be, buf, rank, n) == seeded_bytes(900 + tag, n));
      } else {  // sends once "go" (behind the offer in the ring) has been read
        to_device(*be, buf, rank, seeded_bytes(900 + tag, n));
        ep.recv(&go, 1, 1, 100 + tag, kComm);
        ep.wait(ep.isend(buf, n, 1, tag, kComm));
      }
      be->free_device(buf);  // the next message's buffer may come back at this address
    }
    // A send already on its way when the offer is made: rank 0 sends first, rank 1 posts late.
    void* buf = be->alloc_device(rank, n);
    if (rank == 0) {
      to_device(*be, buf, rank, seeded_bytes(950, n));
      RequestPtr s = ep.isend(buf, n, 1, 7, kComm);
      ep.send(&go, 1, 1, 200, kComm);
      ep.wait(s);
    } else {
      ep.recv(&go, 1, 0, 200, kComm);  // the announcement is here (read into the unexpected queue)
      RequestPtr r = ep.irecv(buf, n, 0, 7, kComm);
      ep.wait(r);
      RANK_CHECK(from_device(*be, buf, rank, n) == seeded_bytes(950, n));
    }
    be->free_device(buf);
    // A receive larger than the device eager limit is not offered (a larger message would be
    // pulled anyway), even where the send that comes fits the limit: rank 1 pulls it.
    const size_t cap = 8192;
    buf = be->alloc_device(rank, cap);
    if (rank == 1) {
      RequestPtr r = ep.irecv(buf, cap, 0, 8, kComm);
      ep.send(&go, 1, 0, 300, kComm);
      ep.wait(r);
      RANK_CHECK(r->status().bytes == n && from_device(*be, buf, rank, n) == seeded_bytes(960, n));
    } else {
      to_device(*be, buf, rank, seeded_bytes(960, n));
      ep.recv(&go, 1, 1, 300, kComm);
      ep.wait(ep.isend(buf, n, 1, 8, kComm));
    }
    be->free_device(buf);
    ep.flush();
    const ipc::HandleCacheStats c = ep.handle_cache()->stats();
    // Rank 0 mapped each offered buffer (three, one address or not: never a stale hit); rank 1
    // mapped only the buffers it pulled from (two).
    if (rank == 0) RANK_CHECK(c.hits == 0 && c.misses + c.stale_evictions == 3);
    else RANK_CHECK(c.hits == 0 && c.misses + c.stale_evictions == 2);
  }));
}

// Cancelling an offered receive (MPI_Cancel): one its sender already pushed into is not cancelled
// and completes with the message; one withdrawn before the sender used the offer completes
// cancelled, and the sender's next message of that tag goes to the next receive -- the withdrawn
// buffer is never written.
TEST(P2pDevice, ACancelledOfferedReceiveIsEitherTakenOrNeverWritten) {
  EXPECT_RANKS_OK(run_ranks(2, [&](int rank, ipc::Channel& ch) {
    Topology topo = load_topology_file("h200x4");
    std::unique_ptr<Backend> be = make_emulated_backend(topo);
    SplitFromPlanner planner(2u << 20);
    Engine engine(*be, topo, &planner);
    Endpoint ep(ch, be.get(), engine_copy(engine, &ch), engine_plain(engine));
    const size_t n = 1000;
    void* a = be->alloc_device(rank, n);
    void* b = be->alloc_device(rank, n);
    char note = 0;
    if (rank == 1) {
      // Taken: the push's record is read (behind the offer's use) before the note that follows it.
      RequestPtr r = ep.irecv(a, n, 0, 1, kComm);
      ep.send(&note, 1, 0, 100, kComm);
      ep.recv(&note, 1, 0, 101, kComm);
      RANK_CHECK(!ep.cancel(r));
      ep.wait(r);
      RANK_CHECK(!r->status().cancelled && r->status().bytes == n);
      RANK_CHECK(from_device(*be, a, rank, n) == seeded_bytes(1, n));
      // Withdrawn: cancelled before the sender sends; its message goes to the next receive.
      to_device(*be, b, rank, std::vector<unsigned char>(n, 0x5a));
      r = ep.irecv(b, n, 0, 2, kComm);
      RANK_CHECK(ep.cancel(r));
      ep.send(&note, 1, 0, 102, kComm);
      ep.wait(r);
      RANK_CHECK(r->status().cancelled && r->status().bytes == 0);
      ep.recv(&note, 1, 0, 103, kComm);  // the message is announced by now (ahead of the note)
      RequestPtr next = ep.irecv(a, n, 0, 2, kComm);
      ep.wait(next);
      RANK_CHECK(!next->status().cancelled && from_device(*be, a, rank, n) == seeded_bytes(2, n));
      RANK_CHECK(from_device(*be, b, rank, n) == std::vector<unsigned char>(n, 0x5a));
    } else {
      to_device(*be, a, rank, seeded_bytes(1, n));
      ep.recv(&note, 1, 1, 100, kComm);
      ep.wait(ep.isend(a, n, 1, 1, kComm));
      ep.send(&note, 1, 1, 101, kComm);
      to_device(*be, b, rank, seeded_bytes(2, n));
      ep.recv(&note, 1, 1, 102, kComm);
      RequestPtr s = ep.isend(b, n, 1, 2, kComm);
      ep.send(&note, 1, 1, 103, kComm);
      ep.wait(s);
    }
    be->free_device(a);
    be->free_device(b);
    ep.flush();
    const ipc::HandleCacheStats c = ep.handle_cache()->stats();
    // The sender mapped the first offered buffer (its push) and no other.
    if (rank == 0) RANK_CHECK(c.misses + c.stale_evictions == 1);
  }));
}

// osu_bw's pattern, whose receives are offered about when the sender's next send goes out (the
// receiver posts them behind its acknowledgement): each message is pushed into its offered
// receive or, where the offer comes after the announcement, pulled (the offer dropped) -- the
// receiver posting late on purpose in the second half. Whichever way each message went, every
// byte lands in its own receive, in order.
TEST(P2pDevice, ReceivesOfferedAboutWhenTheirSendsGoOutGetEveryMessageInOrder) {
  ScopedEnv j{"GPUSTRIPE_TEST", "emu_jitter_us=2"};
  EXPECT_RANKS_OK(run_ranks(2, [&](int rank, ipc::Channel& ch) {
    Topology topo = load_topology_file("h200x4");
    std::unique_ptr<Backend> be = make_emulated_backend(topo);
    SplitFromPlanner planner(2u << 20);
    Engine engine(*be, topo, &planner);
    Endpoint ep(ch, be.get(), engine_copy(engine, &ch), engine_plain(engine));
    const size_t cap = 4096;
    void* buf = be->alloc_device(rank, cap);
    char ack = 0;
    for (int it = 0; it < 120; ++it) {
      const size_t n = 1 + (it * 37) % cap;
      if (rank == 1) {
        if (it >= 60) std::this_thread::sleep_for(std::chrono::microseconds(200));  // offers late
        RequestPtr r = ep.irecv(buf, cap, 0, it, kComm);
        ep.wait(r);
        RANK_CHECK(r->status().error == GPUSTRIPE_SUCCESS && r->status().bytes == n && r->status().tag == it);
        RANK_CHECK(from_device(*be, buf, rank, n) == seeded_bytes(3000 + it, n));
        ep.send(&ack, 1, 0, 10000 + it, kComm);
      } else {
        to_device(*be, buf, rank, seeded_bytes(3000 + it, n));
        ep.wait(ep.isend(buf, n, 1, it, kComm));
        ep.recv(&ack, 1, 1, 10000 + it, kComm);
      }
    }
    be->free_device(buf);
    ep.flush();
  }));
}

// A driver that will not map a peer's buffer for the receiver's GPU: asked once, then the plain
// pulls run from the sender's GPU through the owner's mapping, every byte intact.
TEST(P2pDevice, PlainPullsTheDriverWillNotMapForTheReceiverRunFromTheSendersGpu) { plain_pulls(true); }

namespace {
// A planner that, as the model does, plans a copy with traffic the other way in flight by that
// traffic: the direct path alone for a pair busy both ways below `split` bytes, direct + host
// from there and for every copy alone.
class TwoWayPlanner : public SplitFromPlanner {
 public:
  explicit TwoWayPlanner(uint64_t split) : SplitFromPlanner(0), split_(split) {}
  std::vector<Plan> plan_concurrent(const std::vector<TransferSpec>& t) override {
    std::vector<Plan> out;
    for (const auto& x : t) {
      const bool both_ways = std::any_of(t.begin(), t.end(), [&](const TransferSpec& y) { return y.src == x.dst && y.dst == x.src; });
      out.push_back(both_ways && x.bytes < split_ ? alone_.plan(x.src, x.dst, x.bytes) : plan(x.src, x.dst, x.bytes));
    }
    return out;
  }

 private:
  uint64_t split_;
};

// Two ranks exchange windows of `window` messages of each size both ways; every message is
// checked. Returns each rank's trace stamps. Sends are posted before the receives: the first copy
// of a size to start, on either rank, then has that rank's own send in flight the other way (a
// rank that finds its peer's copies done, its own send already completed, copies alone).
// `test_hooks`: GPUSTRIPE_TEST of the run.
std::map<int, std::map<std::string, int>> two_way_windows(int window, const std::vector<size_t>& sizes,
                                                          const char* test_hooks = "emu_jitter_us=5") {
  char dir[] = "/tmp/gs-p2p-twoway-XXXXXX";
  if (!mkdtemp(dir)) {
    ADD_FAILURE() << "mkdtemp";
    return {};
  }
  ScopedEnv t("GPUSTRIPE_P2P_TRACE", dir);
  ScopedEnv j{"GPUSTRIPE_TEST", test_hooks};
  EXPECT_RANKS_OK(run_ranks(2, [window, sizes](int rank, ipc::Channel& ch) {
    Topology topo = load_topology_file("h200x4");
    auto be = make_emulated_backend(topo);
    TwoWayPlanner planner(4u << 20);
    Engine engine(*be, topo, &planner);
    const int peer = 1 - rank;
    {
      Endpoint ep(ch, be.get(), engine_copy(engine, &ch));
      int tag = 0;
      for (size_t n : sizes) {
        std::vector<void*> out, in;
        std::vector<RequestPtr> reqs;
        for (int w = 0; w < window; ++w) {
          in.push_back(be->alloc_device(rank, n));
          out.push_back(be->alloc_device(rank, n));
          to_device(*be, out[w], rank, seeded_bytes(500 + 4 * (tag + w) + rank, n));
        }
        for (int w = 0; w < window; ++w) reqs.push_back(ep.isend(out[w], n, peer, tag + w, kComm));
        for (int w = 0; w < window; ++w) reqs.push_back(ep.irecv(in[w], n, peer, tag + w, kComm));
        for (auto& r : reqs) ep.wait(r);
        for (int w = 0; w < window; ++w) {
          const RequestPtr& r = reqs[window + w];
          RANK_CHECK(r->status().error == GPUSTRIPE_SUCCESS && r->status().bytes == n);
          RANK_CHECK(from_device(*be, in[w], rank, n) == seeded_bytes(500 + 4 * (tag + w) + peer, n));
          be->free_device(in[w]);
          be->free_device(out[w]);
        }
        tag += window;
      }
      ep.flush();
    }
  }));
  return trace_phases(dir);
}
}  // namespace

// A copy with traffic the other way in flight takes the plan the model makes with that traffic:
// the direct path alone where it keeps that (stamp p_direct), its split where the host path pays
// beside the reverse traffic (p_twoway), never the lone plan's split nor the direct path regardless.
TEST(P2pDevice, TwoWayCopiesTakeThePlanMadeWithTheReverseTraffic) {
  // Each size apart, so that each has a first copy with the reverse traffic in flight.
  for (size_t n : {(1u << 20) + 3, 3u << 20, (4u << 20) + 5, 6u << 20}) {
    auto phases = two_way_windows(1, {n});
    const bool split = n >= (4u << 20);
    int direct = 0, twoway = 0;
    for (int rank = 0; rank < 2; ++rank) {
      EXPECT_EQ(phases[rank]["r_started"], 1) << "rank " << rank << ", " << n << " bytes";
      direct += phases[rank]["p_direct"];
      twoway += phases[rank]["p_twoway"] + phases[rank]["p_twoway_window"];
    }
    EXPECT_EQ(direct > 0, !split) << n << " bytes";
    EXPECT_EQ(twoway > 0, split) << n << " bytes";
    EXPECT_EQ(direct + twoway > 0, true) << n << " bytes";
  }
}

// Two-way windows whose plan splits run as windows (detached, alternating staging areas) from
// the smallest size of a window (1M here: GPUSTRIPE_TEST window_min); every message lands intact.
TEST(P2pDevice, TwoWayWindowsOfSplitCopiesRunDetached) {
  auto phases = two_way_windows(6, {(4u << 20) + 5, (6u << 20) + 7}, "window_min=1M,emu_jitter_us=5");
  int windowed = 0;
  for (int rank = 0; rank < 2; ++rank) {
    EXPECT_EQ(phases[rank]["r_started"], 12) << "rank " << rank;
    windowed += phases[rank]["p_twoway_window"];
  }
  EXPECT_GT(windowed, 0);
}

// Two pairs of a 4-GPU node, 0-1 and 2-3, each exchanging both ways: a copy of pair 0-1 made while
// pair 2-3's long copies are listed on the board takes the direct path alone (stamp p_direct), where
// the planner splits a pair's two-way copies of this size (p_twoway when the pair is alone:
// TwoWayCopiesTakeThePlanMadeWithTheReverseTraffic); the same exchange again once pair 2-3 is done,
// nothing else in flight, keeps the direct path. Every message lands intact.
TEST(P2pDevice, TwoWayCopiesBesideAnotherPairsTrafficRunDirect) {
  char dir[] = "/tmp/gs-p2p-beside-XXXXXX";
  ASSERT_NE(mkdtemp(dir), nullptr);
  const size_t n = 6u << 20, held = 64u << 20;  // held: pair 2-3's copies, ~0.6 s at the emulated rate
  {
    ScopedEnv t("GPUSTRIPE_P2P_TRACE", dir);
    ScopedEnv j{"GPUSTRIPE_TEST", "emu_gbps=0.1"};
    EXPECT_RANKS_OK(run_ranks(4, [&](int rank, ipc::Channel& ch) {
      Topology topo = load_topology_file("h200x4");
      auto be = make_emulated_backend(topo);
      TwoWayPlanner planner(4u << 20);
      Engine engine(*be, topo, &planner);
      const int peer = rank ^ 1;
      {
        Endpoint ep(ch, be.get(), engine_copy(engine, &ch));
        struct Buffers {
          void* out;
          void* in;
          size_t bytes;
          int tag;
        };
        // Filled before the timed part: the emulated rate paces every copy, the fill too.
        auto prepare = [&](size_t bytes, int tag) {
          Buffers b{be->alloc_device(rank, bytes), be->alloc_device(rank, bytes), bytes, tag};
          to_device(*be, b.out, rank, seeded_bytes(700 + 4 * tag + rank, bytes));
          return b;
        };
        auto exchange = [&](const Buffers& b) {
          RequestPtr s = ep.isend(b.out, b.bytes, peer, b.tag, kComm);  // in flight the other way first
          RequestPtr r = ep.irecv(b.in, b.bytes, peer, b.tag, kComm);
          ep.wait(r);
          ep.wait(s);
          RANK_CHECK(r->status().error == GPUSTRIPE_SUCCESS && r->status().bytes == b.bytes);
          RANK_CHECK(from_device(*be, b.in, rank, b.bytes) == seeded_bytes(700 + 4 * b.tag + peer, b.bytes));
          be->free_device(b.out);
          be->free_device(b.in);
        };
        char note = 1;
        if (rank >= 2) {
          Buffers b = prepare(held, 0);
          ep.send(&note, 1, rank - 2, 8, kComm);  // pair 0-1 may start beside this exchange
          exchange(b);
          ep.send(&note, 1, rank - 2, 9, kComm);  // pair 0-1 may go on alone
        } else {
          Buffers beside = prepare(n, 1), alone = prepare(n, 2);
          ep.recv(&note, 1, rank + 2, 8, kComm);
          std::this_thread::sleep_for(std::chrono::milliseconds(100));  // pair 2-3's pulls are listed by then
          exchange(beside);
          ep.recv(&note, 1, rank + 2, 9, kComm);
          exchange(alone);
        }
        ep.flush();
      }
    }));
  }
  auto phases = trace_phases(dir);
  for (int rank = 0; rank < 2; ++rank) {
    EXPECT_EQ(phases[rank]["r_started"], 2) << "rank " << rank;
    EXPECT_EQ(phases[rank]["p_direct"], 2) << "rank " << rank;
    EXPECT_EQ(phases[rank]["p_twoway"] + phases[rank]["p_twoway_window"], 0) << "rank " << rank;
  }
}

TEST(P2pDevice, ReceiverPullsWhileTheSenderMakesNoProgress) {
  // A sender that posted a large device send and then blocks elsewhere (another MPI
  // call, compute) must not stall its receiver: the receiver copies the data itself.
  EXPECT_RANKS_OK(run_ranks(2, [](int rank, ipc::Channel& ch) {
    auto be = emulated();
    Endpoint ep(ch, be.get());
    size_t n = 4 << 20;
    void* buf = be->alloc_device(rank, n);
    if (rank == 0) {
      to_device(*be, buf, 0, seeded_bytes(5, n));
      auto s = ep.isend(buf, n, 1, 0, kComm);
      std::this_thread::sleep_for(std::chrono::seconds(4));  // no progress meanwhile
      ep.wait(s);
    } else {
      auto t0 = std::chrono::steady_clock::now();
      ep.recv(buf, n, 0, 0, kComm);
      double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      RANK_CHECK(s < 3.0);  // well before the sender wakes up
      RANK_CHECK(from_device(*be, buf, 1, n) == seeded_bytes(5, n));
    }
    be->free_device(buf);
  }));
}

TEST(P2pDevice, PhaseTraceJoinsTheSendersAndTheReceiversStamps) {
  // GPUSTRIPE_P2P_TRACE: each rank writes its stamps when its endpoint goes away; one
  // rendezvous message is found in both files under (sender, send_id), its phases in the
  // order the protocol forces (across processes only where one record causes the other).
  char dir[] = "/tmp/gs-p2p-trace-XXXXXX";
  ASSERT_NE(mkdtemp(dir), nullptr);
  {
    ScopedEnv t("GPUSTRIPE_P2P_TRACE", dir);
    EXPECT_RANKS_OK(run_ranks(2, [](int rank, ipc::Channel& ch) {
      auto be = emulated();
      size_t n = 1 << 20;
      void* buf = be->alloc_device(rank, n);
      {
        Endpoint ep(ch, be.get());
        if (rank == 0) {
          to_device(*be, buf, 0, seeded_bytes(9, n));
          ep.send(buf, n, 1, 4, kComm);
        } else {
          ep.recv(buf, n, 0, 4, kComm);
          RANK_CHECK(from_device(*be, buf, 1, n) == seeded_bytes(9, n));
        }
        ep.flush();
      }
      be->free_device(buf);
    }));
  }
  std::map<std::string, long long> at;  // phase -> ns, for sender 0's message
  int files = 0;
  std::string ls = std::string(dir);
  DIR* d = opendir(dir);
  ASSERT_NE(d, nullptr);
  while (dirent* e = readdir(d)) {
    std::string name = e->d_name;
    if (name.rfind("p2p-trace-", 0) != 0) continue;
    ++files;
    std::string text = read_text_file(ls + "/" + name);
    for (const std::string& line : split(text, '\n')) {
      long long ns = 0;
      int r = 0, sender = 0;
      char phase[32] = {};
      unsigned long long send_id = 0, recv_id = 0, bytes = 0;
      if (std::sscanf(line.c_str(), "%lld %d %31s %d %llu %llu %llu", &ns, &r, phase, &sender, &send_id, &recv_id,
                      &bytes) != 7)
        continue;
      if (sender == 0 && bytes == (1u << 20)) at.emplace(phase, ns);
      std::remove((ls + "/" + name).c_str());
    }
  }
  closedir(d);
  rmdir(dir);
  EXPECT_EQ(files, 2);
  for (const char* p : {"s_post", "s_rts", "r_match", "r_mapped", "r_started", "r_copied", "s_done", "s_ret", "r_ret"})
    EXPECT_EQ(at.count(p), 1u) << "no " << p << " stamp";
  if (at.size() < 9) return;
  EXPECT_LE(at["s_post"], at["r_match"]);
  EXPECT_LE(at["r_match"], at["r_mapped"]);
  EXPECT_LE(at["r_mapped"], at["r_started"]);
  EXPECT_LE(at["r_started"], at["r_copied"]);
  EXPECT_LE(at["r_copied"], at["s_done"]);
  EXPECT_LE(at["s_done"], at["s_ret"]);
}


// A window of copies in flight is polled in stream order: within one pass, a stream whose oldest
// copy is still running is not asked again, so a pass costs at most one query per stream plus one
// per copy it finds complete (not one per copy in flight). copy_now finishes the earlier copies of
// its stream with it. Every copy lands intact.
TEST(P2pDevice, MoverPollsEachStreamInOrderOncePerPass) {
  ScopedEnv j{"GPUSTRIPE_TEST", "emu_jitter_us=200"};
  Topology topo = load_topology_file("h200x4");
  auto* counting = new CallCountingBackend(make_emulated_backend(topo));
  std::unique_ptr<Backend> be(counting);
  constexpr int kCopies = 24;
  const size_t n = (256u << 10) + 7;
  void* src = be->alloc_device(0, n * kCopies);
  void* dst = be->alloc_device(1, n * kCopies);
  to_device(*be, src, 0, seeded_bytes(77, n * kCopies));
  {
    Mover mover(be.get());
    std::vector<uint64_t> tickets;
    for (int k = 0; k < kCopies; ++k)
      tickets.push_back(mover.start(static_cast<char*>(dst) + k * n, 1, static_cast<char*>(src) + k * n, 0, n));
    std::vector<bool> done(kCopies, false);
    int left = kCopies, passes = 0;
    while (left > 0) {
      ASSERT_LT(++passes, 1000000);
      mover.new_pass();
      const int before = counting->queries.load();
      int finished = 0;
      for (int k = 0; k < kCopies; ++k)
        if (!done[k] && mover.done(tickets[k])) {
          done[k] = true;
          ++finished;
          --left;
        }
      EXPECT_LE(counting->queries.load() - before, 2 + finished) << "pass " << passes;
    }
    // copy_now behind copies still in flight on its stream finishes them with it: busy streams are
    // taken in turn, so copies 0 and 2 went on copy_now's stream.
    std::vector<uint64_t> more;
    for (int k = 0; k < 4; ++k)
      more.push_back(mover.start(static_cast<char*>(dst) + k * n, 1, static_cast<char*>(src) + k * n, 0, n));
    mover.copy_now(dst, 1, src, 0, n);
    const int before = counting->queries.load();
    EXPECT_TRUE(mover.done(more[0]));
    EXPECT_TRUE(mover.done(more[2]));
    EXPECT_EQ(counting->queries.load(), before);  // finished already: nothing to ask
    for (int k : {1, 3})
      while (!mover.done(more[k])) mover.new_pass();
  }
  EXPECT_EQ(from_device(*be, dst, 1, n * kCopies), seeded_bytes(77, n * kCopies));
  be->free_device(src);
  be->free_device(dst);
}

// A copy alone on its stream records no event (its stream's completion marks it: the record would
// sit in a small message's latency); one started behind it on the same stream first gives it its
// event, so each still completes on its own. Every copy lands intact.
TEST(P2pDevice, MoverMarksALoneCopyByItsStream) {
  ScopedEnv j{"GPUSTRIPE_TEST", "emu_jitter_us=200"};
  Topology topo = load_topology_file("h200x4");
  auto* counting = new CallCountingBackend(make_emulated_backend(topo));
  std::unique_ptr<Backend> be(counting);
  const size_t n = (64u << 10) + 3;
  void* src = be->alloc_device(0, 4 * n);
  void* dst = be->alloc_device(1, 4 * n);
  to_device(*be, src, 0, seeded_bytes(78, 4 * n));
  {
    Mover mover(be.get());
    auto at = [&](int k) { return mover.start(static_cast<char*>(dst) + k * n, 1, static_cast<char*>(src) + k * n, 0, n); };
    const uint64_t lone = at(0);
    EXPECT_EQ(counting->records.load(), 0);
    while (!mover.done(lone)) mover.new_pass();
    EXPECT_EQ(counting->records.load(), 0);
    EXPECT_GT(counting->stream_queries.load(), 0);
    // Copy 1 finds the lone copy's stream idle, copy 2 finds it busy and takes the other, copy 3
    // finds that busy and goes back: copies 1 and 3 share one stream, copy 2 has the other.
    const uint64_t first = at(1), alone = at(2), behind = at(3);
    EXPECT_EQ(counting->records.load(), 2);  // copy 1's event, sealed when copy 3 came, and copy 3's
    for (uint64_t t : {first, alone, behind})
      while (!mover.done(t)) mover.new_pass();
  }
  EXPECT_EQ(from_device(*be, dst, 1, 4 * n), seeded_bytes(78, 4 * n));
  be->free_device(src);
  be->free_device(dst);
}

// A copy that finds the stream of the copy before it idle goes there again (a lone small copy on
// another stream than its predecessor's completes later on the GPU: bench/probes/w1_floor.cu), so
// window-1 messages keep one stream; copies that find it busy take the other, so a window's
// copies overlap. Every copy lands intact.
TEST(P2pDevice, MoverKeepsLoneCopiesOnOneStreamAndSpreadsAWindow) {
  struct StreamRecording : ForwardingBackend {
    using ForwardingBackend::ForwardingBackend;
    const char* name() const override { return "recording-streams"; }
    void copy_async(void* dst, int dd, const void* src, int sd, size_t n, StreamHandle s) override {
      streams.push_back(s);
      in_->copy_async(dst, dd, src, sd, n, s);
    }
    std::vector<StreamHandle> streams;
  };
  ScopedEnv j{"GPUSTRIPE_TEST", "emu_jitter_us=200"};
  Topology topo = load_topology_file("h200x4");
  auto* rec = new StreamRecording(make_emulated_backend(topo));
  std::unique_ptr<Backend> be(rec);
  constexpr int kLone = 4, kWindow = 4;
  const size_t n = (64u << 10) + 5;
  void* src = be->alloc_device(0, (kLone + kWindow) * n);
  void* dst = be->alloc_device(1, (kLone + kWindow) * n);
  to_device(*be, src, 0, seeded_bytes(79, (kLone + kWindow) * n));
  rec->streams.clear();  // the mover's copies only
  {
    Mover mover(be.get());
    auto at = [&](int k) { return mover.start(static_cast<char*>(dst) + k * n, 1, static_cast<char*>(src) + k * n, 0, n); };
    for (int k = 0; k < kLone; ++k) {
      const uint64_t t = at(k);
      while (!mover.done(t)) mover.new_pass();
    }
    ASSERT_EQ(rec->streams.size(), size_t(kLone));
    for (int k = 1; k < kLone; ++k) EXPECT_EQ(rec->streams[k], rec->streams[0]) << "lone copy " << k;
    std::vector<uint64_t> window;
    for (int k = kLone; k < kLone + kWindow; ++k) window.push_back(at(k));
    ASSERT_EQ(rec->streams.size(), size_t(kLone + kWindow));
    EXPECT_EQ(rec->streams[kLone], rec->streams[0]);  // the window's first finds it idle
    for (int k = kLone + 1; k < kLone + kWindow; ++k)
      EXPECT_NE(rec->streams[k], rec->streams[k - 1]) << "window copy " << k - kLone;
    for (uint64_t t : window)
      while (!mover.done(t)) mover.new_pass();
  }
  EXPECT_EQ(from_device(*be, dst, 1, (kLone + kWindow) * n), seeded_bytes(79, (kLone + kWindow) * n));
  be->free_device(src);
  be->free_device(dst);
}

// Small device messages go eager, so a blocking send completes without the peer's receive: two
// ranks that both send first and receive after (MPI_Send then MPI_Recv both ways) must not
// deadlock, at every small size, with the receive posted after or before the message arrives,
// into device and host buffers; truncation still holds.
TEST(P2pDevice, SmallDeviceSendsBothWaysFirstCompleteWithoutTheReceive) {
  ScopedEnv to("GPUSTRIPE_TIMEOUT", "20");  // a deadlock fails the wait instead of hanging
  ScopedEnv j{"GPUSTRIPE_TEST", "emu_jitter_us=5"};
  EXPECT_RANKS_OK(run_ranks(2, [](int rank, ipc::Channel& ch) {
    Topology topo = load_topology_file("h200x4");
    auto be = make_emulated_backend(topo);
    const int peer = 1 - rank;
    Endpoint ep(ch, be.get());
    int tag = 0;
    for (size_t n : {size_t(1), size_t(8), size_t(1000), size_t(4096)}) {
      for (bool into_device : {true, false}) {
        void* out = be->alloc_device(rank, n);
        void* in = be->alloc_device(rank, n);
        std::vector<uint8_t> host(n);
        to_device(*be, out, rank, seeded_bytes(500 + 2 * tag + rank, n));
        ep.send(out, n, peer, tag, kComm);  // the peer is in its own send: nothing posted there
        P2pStatus st = ep.recv(into_device ? in : static_cast<void*>(host.data()), n, peer, tag, kComm);
        RANK_CHECK(st.error == GPUSTRIPE_SUCCESS && st.bytes == n);
        std::vector<uint8_t> got = into_device ? from_device(*be, in, rank, n) : host;
        RANK_CHECK(got == seeded_bytes(500 + 2 * tag + peer, n));
        // Posted first, then sent.
        RequestPtr r = ep.irecv(in, n, peer, tag + 1000, kComm);
        char token = 1;
        ep.send(&token, 1, peer, tag + 2000, kComm);  // host, eager: "my receive is posted"
        ep.recv(&token, 1, peer, tag + 2000, kComm);
        ep.send(out, n, peer, tag + 1000, kComm);
        ep.wait(r);
        RANK_CHECK(from_device(*be, in, rank, n) == seeded_bytes(500 + 2 * tag + peer, n));
        be->free_device(out);
        be->free_device(in);
        ++tag;
      }
    }
    // Truncated: a buffered 4 KB message into a 100-byte receive.
    void* out = be->alloc_device(rank, 4096);
    void* in = be->alloc_device(rank, 4096);
    to_device(*be, out, rank, seeded_bytes(900 + rank, 4096));
    ep.send(out, 4096, peer, 7777, kComm);
    P2pStatus st = ep.recv(in, 100, peer, 7777, kComm);
    RANK_CHECK(st.error == GPUSTRIPE_ERR_TRUNCATE && st.bytes == 100);
    std::vector<uint8_t> want = seeded_bytes(900 + peer, 4096);
    want.resize(100);
    RANK_CHECK(from_device(*be, in, rank, 100) == want);
    be->free_device(out);
    be->free_device(in);
    ep.flush();
  }));
}

namespace {
// The largest number of copies the receiver's mover enqueued in one batch (trace phase c_batch,
// whose byte count is the batch's number of copies), per rank; the trace files are removed.
std::map<int, unsigned long long> largest_batches(const std::string& dir) {
  std::map<int, unsigned long long> most;
  DIR* d = opendir(dir.c_str());
  if (!d) return most;
  while (dirent* e = readdir(d)) {
    std::string name = e->d_name;
    if (name.rfind("p2p-trace-", 0) != 0) continue;
    for (const std::string& line : split(read_text_file(dir + "/" + name), '\n')) {
      long long ns = 0;
      int r = 0, sender = 0;
      char phase[32] = {};
      unsigned long long a = 0, b = 0, n = 0;
      if (std::sscanf(line.c_str(), "%lld %d %31s %d %llu %llu %llu", &ns, &r, phase, &sender, &a, &b, &n) == 7 &&
          std::string(phase) == "c_batch")
        most[r] = std::max(most[r], n);
    }
    std::remove((dir + "/" + name).c_str());
  }
  closedir(d);
  rmdir(dir.c_str());
  return most;
}
}  // namespace

// A window of 64 pulled messages of mixed sizes (plain copies and, at 2 MB+, planned ones), one of
// them truncated by a short receive: the announcements read in one progress pass are enqueued
// together (one backend call per stream) and complete by one event per stream. Every receive that
// reports done has its bytes in place at that moment (asked in a shuffled order, checked at once:
// one event per batch must not complete a copy early), the truncated one delivers its prefix with
// ERR_TRUNCATE, the others every byte, and the senders learn the bytes granted.
TEST(P2pDevice, WindowOfPulledMessagesBatchedPerPassCompletesEachWithItsData) {
  char dir[] = "/tmp/gs-p2p-batch-XXXXXX";
  ASSERT_NE(mkdtemp(dir), nullptr);
  constexpr int kWindow = 64, kTruncated = 37;
  std::vector<size_t> sizes;
  for (int k = 0; k < kWindow; ++k) sizes.push_back(k % 16 == 5 ? (2u << 20) + 5 : 4097 + (size_t(k) * 7919 % 300000));
  {
    ScopedEnv t("GPUSTRIPE_P2P_TRACE", dir);
    ScopedEnv j("GPUSTRIPE_EMU_JITTER_US", "50");
    EXPECT_RANKS_OK(run_ranks(2, [&](int rank, ipc::Channel& ch) {
      Topology topo = load_topology_file("h200x4");
      auto be = make_emulated_backend(topo);
      SplitFromPlanner planner(2u << 20);
      Engine engine(*be, topo, &planner);
      {
        Endpoint ep(ch, be.get(), engine_copy(engine, &ch));
        std::vector<void*> bufs;
        for (int k = 0; k < kWindow; ++k) bufs.push_back(be->alloc_device(rank, sizes[k]));
        char token = 1;
        if (rank == 0) {
          for (int k = 0; k < kWindow; ++k) to_device(*be, bufs[k], 0, seeded_bytes(700 + k, sizes[k]));
          ep.recv(&token, 1, 1, 9999, kComm);  // the receives are posted
          std::vector<RequestPtr> sends;
          for (int k = 0; k < kWindow; ++k) sends.push_back(ep.isend(bufs[k], sizes[k], 1, k, kComm));
          ep.send(&token, 1, 1, 9998, kComm);  // behind every announcement in the ring
          for (int k = 0; k < kWindow; ++k) {
            ep.wait(sends[k]);
            RANK_CHECK(sends[k]->status().bytes == (k == kTruncated ? sizes[k] / 2 : sizes[k]));
          }
        } else {
          std::vector<RequestPtr> recvs;
          for (int k = 0; k < kWindow; ++k) {
            to_device(*be, bufs[k], 1, std::vector<unsigned char>(sizes[k], 0));
            recvs.push_back(ep.irecv(bufs[k], k == kTruncated ? sizes[k] / 2 : sizes[k], 0, k, kComm));
          }
          ep.send(&token, 1, 0, 9999, kComm);
          ep.recv(&token, 1, 0, 9998, kComm);  // one pass reads the whole window's announcements
          std::vector<int> order(kWindow);
          for (int k = 0; k < kWindow; ++k) order[k] = k;
          std::shuffle(order.begin(), order.end(), std::mt19937(5));
          std::vector<bool> seen(kWindow, false);
          for (int left = kWindow; left > 0;) {
            ep.progress();
            for (int k : order) {
              if (seen[k] || !ep.done_now(recvs[k])) continue;
              seen[k] = true;
              --left;
              const size_t n = k == kTruncated ? sizes[k] / 2 : sizes[k];
              std::vector<unsigned char> want = seeded_bytes(700 + k, sizes[k]);
              want.resize(n);
              RANK_CHECK(from_device(*be, bufs[k], 1, n) == want);
              RANK_CHECK(recvs[k]->status().bytes == n);
              RANK_CHECK(recvs[k]->status().error == (k == kTruncated ? GPUSTRIPE_ERR_TRUNCATE : GPUSTRIPE_SUCCESS));
            }
          }
        }
        for (void* b : bufs) be->free_device(b);
        ep.flush();
      }
    }));
  }
  // The receiver enqueued several plain copies in one call (not one per message).
  EXPECT_GE(largest_batches(dir)[1], 2u);
}

// Receives posted back to back after their announcements reached the ring (the sender was ahead, as
// in a bandwidth window): posting runs no progress pass, so the announcements are read and matched
// by the first wait's pass, and their copies start together, one backend call per stream, instead
// of one by one as each receive took its message from the unexpected queue. Every receive lands
// intact.
TEST(P2pDevice, ReceivesPostedBehindTheirAnnouncementsStartTheirCopiesTogether) {
  char dir[] = "/tmp/gs-p2p-posted-XXXXXX";
  ASSERT_NE(mkdtemp(dir), nullptr);
  constexpr int kWindow = 16;
  const size_t n = (64u << 10) + 11;
  // Set by the sender once every announcement is in the ring (shared by the forked ranks).
  auto* sent = static_cast<std::atomic<int>*>(
      mmap(nullptr, sizeof(std::atomic<int>), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0));
  ASSERT_NE(static_cast<void*>(sent), MAP_FAILED);
  new (sent) std::atomic<int>(0);
  {
    ScopedEnv t("GPUSTRIPE_P2P_TRACE", dir);
    EXPECT_RANKS_OK(run_ranks(2, [&](int rank, ipc::Channel& ch) {
      Topology topo = load_topology_file("h200x4");
      auto be = make_emulated_backend(topo);
      SplitFromPlanner planner(2u << 20);
      Engine engine(*be, topo, &planner);
      {
        Endpoint ep(ch, be.get(), engine_copy(engine, &ch));
        std::vector<void*> bufs;
        for (int k = 0; k < kWindow; ++k) bufs.push_back(be->alloc_device(rank, n));
        if (rank == 0) {
          for (int k = 0; k < kWindow; ++k) to_device(*be, bufs[k], 0, seeded_bytes(900 + k, n));
          std::vector<RequestPtr> sends;
          for (int k = 0; k < kWindow; ++k) sends.push_back(ep.isend(bufs[k], n, 1, k, kComm));
          sent->store(1);
          for (auto& s : sends) ep.wait(s);
        } else {
          const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
          while (sent->load() == 0) {
            RANK_CHECK(std::chrono::steady_clock::now() < deadline);
            std::this_thread::sleep_for(std::chrono::microseconds(100));
          }
          std::vector<RequestPtr> recvs;
          for (int k = 0; k < kWindow; ++k) recvs.push_back(ep.irecv(bufs[k], n, 0, k, kComm));
          for (int k = 0; k < kWindow; ++k) {
            ep.wait(recvs[k]);
            RANK_CHECK(from_device(*be, bufs[k], 1, n) == seeded_bytes(900 + k, n));
          }
        }
        for (void* b : bufs) be->free_device(b);
        ep.flush();
      }
    }));
  }
  munmap(sent, sizeof(std::atomic<int>));
  // Two streams take the copies in turn: half the window in one call each.
  EXPECT_GE(largest_batches(dir)[1], unsigned(kWindow / 2));
}

// Inside one window, a send buffer completes, is freed and allocated again (typically at the same
// address, a new buffer id) and sent from again while the window's other messages are in flight
// and batched: the receiver maps the new buffer, never the stale mapping, and every message of
// the window lands intact.
TEST(P2pDevice, BufferFreedAndReallocatedInsideABatchedWindowIsNeverStale) {
  ScopedEnv j("GPUSTRIPE_EMU_JITTER_US", "20");
  EXPECT_RANKS_OK(run_ranks(2, [](int rank, ipc::Channel& ch) {
    Topology topo = load_topology_file("h200x4");
    auto be = make_emulated_backend(topo);
    SplitFromPlanner planner(2u << 20);
    Engine engine(*be, topo, &planner);
    Endpoint ep(ch, be.get(), engine_copy(engine, &ch));
    constexpr int kOthers = 16, kRounds = 4;
    const size_t n = 96u << 10, reused_n = 200u << 10;
    std::vector<void*> others;
    for (int k = 0; k < kOthers; ++k) others.push_back(be->alloc_device(rank, n));
    if (rank == 0) {
      for (int k = 0; k < kOthers; ++k) to_device(*be, others[k], 0, seeded_bytes(800 + k, n));
      std::vector<RequestPtr> sends;
      int reused = 0;
      void* prev = nullptr;
      for (int i = 0; i < kRounds; ++i) {
        void* b = be->alloc_device(0, reused_n);
        if (b == prev) ++reused;
        prev = b;
        to_device(*be, b, 0, seeded_bytes(900 + i, reused_n));
        RequestPtr s = ep.isend(b, reused_n, 1, 100 + i, kComm);
        for (int k = i * kOthers / kRounds; k < (i + 1) * kOthers / kRounds; ++k)
          sends.push_back(ep.isend(others[k], n, 1, k, kComm));
        ep.wait(s);  // the window's other messages still in flight
        be->free_device(b);
      }
      for (auto& s : sends) ep.wait(s);
      ep.send(&reused, sizeof reused, 1, 999, kComm);
    } else {
      std::vector<void*> into;
      std::vector<RequestPtr> recvs;
      for (int i = 0; i < kRounds; ++i) {
        into.push_back(be->alloc_device(1, reused_n));
        recvs.push_back(ep.irecv(into.back(), reused_n, 0, 100 + i, kComm));
      }
      for (int k = 0; k < kOthers; ++k) recvs.push_back(ep.irecv(others[k], n, 0, k, kComm));
      for (auto& r : recvs) ep.wait(r);
      for (int i = 0; i < kRounds; ++i) {
        RANK_CHECK(from_device(*be, into[i], 1, reused_n) == seeded_bytes(900 + i, reused_n));
        be->free_device(into[i]);
      }
      for (int k = 0; k < kOthers; ++k) RANK_CHECK(from_device(*be, others[k], 1, n) == seeded_bytes(800 + k, n));
      int reused = 0;
      ep.recv(&reused, sizeof reused, 0, 999, kComm);
      auto s = ep.handle_cache()->stats();
      RANK_CHECK(s.stale_evictions >= static_cast<uint64_t>(reused));  // each reuse remapped
    }
    for (void* b : others) be->free_device(b);
    ep.flush();
  }));
}


// Copies started within one batch are one group per stream, marked at the batch's end: by the
// stream itself while the group is alone there, else by one event; a group with copies behind it
// gets its event before they are enqueued. Outside a batch each copy is a group of its own. A copy
// asked about before its batch ends is closed then (nothing waits on an unmarked group). Every copy
// lands intact and none reports done early.
TEST(P2pDevice, MoverRecordsOneEventPerStreamForABatch) {
  ScopedEnv j("GPUSTRIPE_EMU_JITTER_US", "100");
  ScopedEnv st("GPUSTRIPE_P2P_STREAMS", "2");
  Topology topo = load_topology_file("h200x4");
  auto* counting = new CallCountingBackend(make_emulated_backend(topo));
  std::unique_ptr<Backend> be(counting);
  constexpr int kCopies = 24;
  const size_t n = (64u << 10) + 3;
  void* src = be->alloc_device(0, n * kCopies);
  void* dst = be->alloc_device(1, n * kCopies);
  to_device(*be, src, 0, seeded_bytes(78, n * kCopies));
  {
    Mover mover(be.get());
    mover.begin_batch();
    std::vector<uint64_t> tickets;
    for (int k = 0; k < kCopies; ++k)
      tickets.push_back(mover.start(static_cast<char*>(dst) + k * n, 1, static_cast<char*>(src) + k * n, 0, n));
    EXPECT_EQ(counting->records.load(), 0);
    mover.end_batch();
    EXPECT_EQ(counting->records.load(), 0);  // each stream's group is alone on it
    // A second batch behind the first, not polled in between: the first batch's groups get their
    // events when the second's copies come, and the second's groups one each at its end.
    mover.begin_batch();
    for (int k = 0; k < kCopies; ++k)
      tickets.push_back(mover.start(static_cast<char*>(dst) + k * n, 1, static_cast<char*>(src) + k * n, 0, n));
    EXPECT_EQ(counting->records.load(), 2);
    mover.end_batch();
    EXPECT_EQ(counting->records.load(), 4);
    const std::vector<unsigned char> want = seeded_bytes(78, n * kCopies);
    std::vector<bool> done(tickets.size(), false);
    for (int left = static_cast<int>(tickets.size()); left > 0;) {
      mover.new_pass();
      for (int i = static_cast<int>(tickets.size()) - 1; i >= 0; --i)
        if (!done[i] && mover.done(tickets[i])) {
          done[i] = true;
          --left;
          const int k = i % kCopies;
          EXPECT_EQ(from_device(*be, static_cast<char*>(dst) + k * n, 1, n),
                    std::vector<unsigned char>(want.begin() + k * n, want.begin() + (k + 1) * n));
        }
    }
    // Asked before the batch ends: closed then (alone on its stream: no event), complete in time.
    mover.begin_batch();
    uint64_t t = mover.start(dst, 1, src, 0, n);
    const int before = counting->records.load();
    while (!mover.done(t)) mover.new_pass();
    mover.end_batch();
    EXPECT_EQ(counting->records.load(), before);  // nothing left to mark
    // Outside a batch: a group per copy, each alone on its stream once the one before completed.
    for (int k = 0; k < 3; ++k) mover.copy_now(dst, 1, src, 0, n);
    EXPECT_EQ(counting->records.load(), before);
    // Two in flight on one stream (the streams are taken in turn): the first gets an event.
    const uint64_t a = mover.start(dst, 1, src, 0, n), b = mover.start(dst, 1, src, 0, n),
                   c = mover.start(dst, 1, src, 0, n);
    EXPECT_EQ(counting->records.load(), before + 2);
    for (uint64_t x : {a, b, c})
      while (!mover.done(x)) mover.new_pass();
  }
  EXPECT_EQ(from_device(*be, dst, 1, n * kCopies), seeded_bytes(78, n * kCopies));
  be->free_device(src);
  be->free_device(dst);
}
