// IPC of buffers shared by file descriptor, across forked ranks on the emulated backend:
// memfd memory stands for VMM / pool memory (Backend::IpcKind::VmmFd), private memory for
// the default pool (no handle). The descriptors travel over the ranks' Unix sockets
// (ipc/fd_exchange.hpp); the tests cover the exchange itself (offer, request, a freed
// buffer, a dead exporter), and p2p through it: pull and push, the mapping cache, a
// buffer freed and reallocated at the same address, the request path after an eviction,
// and the stream path of memory without a handle.
#include <gtest/gtest.h>
#include <signal.h>
#include <fcntl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <random>
#include <thread>

#include "backend/backend.hpp"
#include "ipc/fd_exchange.hpp"
#include "ipc/handle_cache.hpp"
#include "ipc/wait.hpp"
#include "p2p/endpoint.hpp"
#include "test_ipc_ranks.hpp"
#include "test_util.hpp"
#include "topology/topology.hpp"

using namespace gpustripe;
using namespace gpustripe::p2p;
using DeviceAlloc = Backend::DeviceAlloc;
using IpcKind = Backend::IpcKind;

namespace {

constexpr uint64_t kComm = 5;

std::unique_ptr<Backend> emulated() { return make_emulated_backend(load_topology_file("h200x4")); }

template <typename F>
gpustripe_status_t status_of(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.status();
  }
  return GPUSTRIPE_SUCCESS;
}

bool same_file(int a, int b) {
  struct stat x {}, y {};
  return fstat(a, &x) == 0 && fstat(b, &y) == 0 && x.st_dev == y.st_dev && x.st_ino == y.st_ino;
}

}  // namespace

TEST(IpcFd, EmulatedKindsExportAsTheyShould) {
  auto be = emulated();
  void* vmm = be->alloc_device_as(1, 3 << 20, DeviceAlloc::VmmFd);
  void* priv = be->alloc_device_as(1, 1 << 20, DeviceAlloc::NotShareable);
  void* plain = be->alloc_device_as(1, 1 << 20, DeviceAlloc::Plain);
  Backend::IpcMemHandle h = be->ipc_export(static_cast<char*>(vmm) + 4096);
  EXPECT_EQ(h.kind, IpcKind::VmmFd);
  EXPECT_EQ(h.base, reinterpret_cast<uintptr_t>(vmm));
  EXPECT_EQ(h.size, size_t{3} << 20);
  EXPECT_EQ(h.buffer_id, be->pointer_info(vmm).buffer_id);
  EXPECT_TRUE(be->ipc_open_needs_fd(h));
  int fd = be->ipc_export_fd(h);
  int fd2 = be->ipc_export_fd(h);
  EXPECT_GE(fd, 0);
  EXPECT_TRUE(same_file(fd, fd2));  // one allocation, one file
  close(fd);
  close(fd2);
  EXPECT_EQ(be->ipc_export(plain).kind, IpcKind::Legacy);
  EXPECT_EQ(status_of([&] { be->ipc_export(priv); }), GPUSTRIPE_ERR_NOT_SUPPORTED);
  be->free_device(vmm);
  // Freed: no descriptor of whatever comes next is handed out for the old handle.
  EXPECT_EQ(status_of([&] { be->ipc_export_fd(h); }), GPUSTRIPE_ERR_INVALID_POINTER);
  be->free_device(priv);
  be->free_device(plain);
}

TEST(IpcFd, OfferedDescriptorMapsInThePeerAndRequestsAreServed) {
  EXPECT_RANKS_OK(run_ranks(2, [](int rank, ipc::Channel& ch) {
    auto be = emulated();
    ipc::FdExchange fx(ch, *be);
    RANK_CHECK(fx.enabled());
    const size_t n = (1 << 20) + 17;
    const char go = 1;
    if (rank == 0) {
      void* a = be->alloc_device_as(0, n, DeviceAlloc::VmmFd);
      void* b = be->alloc_device_as(0, n, DeviceAlloc::VmmFd);
      device_put(*be, a, 0, seeded_bytes(1, n));
      device_put(*be, b, 0, seeded_bytes(2, n));
      Backend::IpcMemHandle ha = be->ipc_export(a), hb = be->ipc_export(b);
      RANK_CHECK(fx.offer(1, ha));
      RANK_CHECK(fx.offer(1, ha));  // once per peer and allocation
      // The handles go by the channel (plain bytes); b's descriptor is not offered: rank 1
      // asks for it and this rank answers from its progress loop (serve).
      while (!ch.try_send(1, &ha, sizeof ha, nullptr, 0)) std::this_thread::yield();
      while (!ch.try_send(1, &hb, sizeof hb, nullptr, 0)) std::this_thread::yield();
      size_t bytes = 0;
      ipc::Waiter w("rank 0 waiting for rank 1's done");
      while (!ch.peek(1, &bytes)) {
        fx.serve();
        w.pause();
      }
      ch.consume(1);
      auto s = fx.stats();
      RANK_CHECK(s.offered == 1 && s.served == 1);
      be->free_device(a);
      be->free_device(b);
    } else {
      Backend::IpcMemHandle h[2];
      for (auto& x : h) {
        size_t bytes = 0;
        const void* rec;
        ipc::Waiter w("rank 1 waiting for a handle");
        while (!(rec = ch.peek(0, &bytes))) w.pause();
        std::memcpy(&x, rec, sizeof x);
        ch.consume(0);
      }
      for (int i = 0; i < 2; ++i) {
        RANK_CHECK(h[i].kind == IpcKind::VmmFd);
        int fd = fx.take(0, h[i]);
        void* p = be->ipc_open(h[i], fd);
        close(fd);
        RANK_CHECK(device_get(*be, p, 0, n) == seeded_bytes(1 + i, n));
        be->ipc_close(p);
      }
      auto s = fx.stats();
      RANK_CHECK(s.received == 2 && s.taken == 2 && s.requested == 1);
      while (!ch.try_send(0, &go, 1, nullptr, 0)) std::this_thread::yield();
    }
  }));
}

TEST(IpcFd, DescriptorOfAFreedBufferIsAClearError) {
  EXPECT_RANKS_OK(run_ranks(2, [](int rank, ipc::Channel& ch) {
    auto be = emulated();
    ipc::FdExchange fx(ch, *be);
    if (rank == 0) {
      void* a = be->alloc_device_as(0, 1 << 20, DeviceAlloc::VmmFd);
      Backend::IpcMemHandle h = be->ipc_export(a);
      be->free_device(a);  // before anyone asked
      while (!ch.try_send(1, &h, sizeof h, nullptr, 0)) std::this_thread::yield();
      size_t bytes = 0;
      ipc::Waiter w("rank 0 waiting for rank 1");
      while (!ch.peek(1, &bytes)) {
        fx.serve();
        w.pause();
      }
      ch.consume(1);
    } else {
      Backend::IpcMemHandle h;
      size_t bytes = 0;
      const void* rec;
      ipc::Waiter w("rank 1 waiting for the handle");
      while (!(rec = ch.peek(0, &bytes))) w.pause();
      std::memcpy(&h, rec, sizeof h);
      ch.consume(0);
      gpustripe_status_t st = GPUSTRIPE_SUCCESS;
      std::string msg;
      try {
        close(fx.take(0, h));
      } catch (const Error& e) {
        st = e.status();
        msg = e.what();
      }
      RANK_CHECK(st == GPUSTRIPE_ERR_INVALID_POINTER && msg.find("gone") != std::string::npos);
      const char done = 1;
      while (!ch.try_send(0, &done, 1, nullptr, 0)) std::this_thread::yield();
    }
  }));
}

TEST(IpcFd, ExporterDyingWhileAPeerWaitsForItsDescriptorEndsTheWaitAtOnce) {
  // Rank 1 asks rank 0 for a descriptor rank 0 never answers: rank 0 is killed. Rank 1's
  // wait ends in ERR_PEER_FAILED well within GPUSTRIPE_TIMEOUT (which would be 60 s).
  ScopedEnv timeout("GPUSTRIPE_TIMEOUT", "60");
  auto res = run_ranks(2, [](int rank, ipc::Channel& ch) {
    auto be = emulated();
    ipc::FdExchange fx(ch, *be);
    if (rank == 0) {
      void* a = be->alloc_device_as(0, 1 << 20, DeviceAlloc::VmmFd);
      Backend::IpcMemHandle h = be->ipc_export(a);
      while (!ch.try_send(1, &h, sizeof h, nullptr, 0)) std::this_thread::yield();
      std::this_thread::sleep_for(std::chrono::milliseconds(300));  // rank 1 is waiting now; no serve()
      raise(SIGKILL);
    }
    Backend::IpcMemHandle h;
    size_t bytes = 0;
    const void* rec;
    ipc::Waiter w("rank 1 waiting for the handle");
    while (!(rec = ch.peek(0, &bytes))) w.pause();
    std::memcpy(&h, rec, sizeof h);
    ch.consume(0);
    auto t0 = std::chrono::steady_clock::now();
    gpustripe_status_t st = GPUSTRIPE_SUCCESS;
    try {
      close(fx.take(0, h));
    } catch (const Error& e) {
      st = e.status();
      std::fprintf(stderr, "[rank 1] as expected: %s\n", e.what());
    }
    double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    RANK_CHECK(st == GPUSTRIPE_ERR_PEER_FAILED);
    RANK_CHECK(s < 30);  // the dead peer is seen, not the timeout
  }, 90);
  EXPECT_EQ(res[0].code, 128 + SIGKILL);
  EXPECT_EQ(res[1].code, 0);
  EXPECT_FALSE(res[1].timed_out);
}

namespace {

// Rank 0 sends `rounds` messages to rank 1, both ends of the `how` kinds. With
// `realloc_exporter`, the exported side frees its buffer and allocates a new one each round
// (typically at the same address): the mapping side must remap, never serve stale data.
// Returns nothing; checks on the ranks. `check` runs on rank 1 with its cache and exchange.
void send_rounds(DeviceAlloc send_how, DeviceAlloc recv_how, bool send_on_host, int rounds, bool realloc_exporter,
                 const std::function<void(int rank, Endpoint&, int reused)>& check) {
  EXPECT_RANKS_OK(run_ranks(2, [=](int rank, ipc::Channel& ch) {
    auto be = emulated();
    int reused = 0;
    {
      Endpoint ep(ch, be.get());
      const size_t n = (2 << 20) + 4093;
      void* buf = nullptr;
      void* prev = nullptr;
      std::vector<unsigned char> host(n);
      for (int i = 0; i < rounds; ++i) {
        auto data = seeded_bytes(300 + i, n);
        if (!buf || realloc_exporter) {
          if (buf) be->free_device(buf);
          buf = (rank == 0 && send_on_host) ? nullptr : be->alloc_device_as(rank, n, rank == 0 ? send_how : recv_how);
          if (buf && buf == prev) ++reused;
          if (buf) prev = buf;
        }
        if (rank == 0) {
          if (buf) device_put(*be, buf, 0, data);
          else host = data;
          ep.send(buf ? buf : host.data(), n, 1, i, kComm);
        } else {
          device_put(*be, buf, 1, std::vector<unsigned char>(n, 0));
          P2pStatus st = ep.recv(buf, n, 0, i, kComm);
          RANK_CHECK(st.error == GPUSTRIPE_SUCCESS && st.bytes == n);
          RANK_CHECK(device_get(*be, buf, 1, n) == data);
        }
      }
      // The exporter tells the other side how often its address came back.
      int exporter = send_on_host ? 1 : 0;
      if (rank == exporter) ep.send(&reused, sizeof reused, 1 - rank, 999, kComm);
      else ep.recv(&reused, sizeof reused, 1 - rank, 999, kComm);
      check(rank, ep, reused);
      ep.flush();
      if (buf) be->free_device(buf);
    }
  }));
}

}  // namespace

TEST(IpcFd, PullFromVmmMemoryMapsOnceThroughTheDescriptor) {
  send_rounds(DeviceAlloc::VmmFd, DeviceAlloc::VmmFd, false, 3, false, [](int rank, Endpoint& ep, int) {
    auto c = ep.handle_cache()->stats();
    auto f = ep.fd_exchange()->stats();
    if (rank == 1) {  // the receiver pulled from the sender's buffer: one mapping, by descriptor
      RANK_CHECK(c.misses == 1 && c.hits == 2 && c.fd_opens == 1 && c.stale_evictions == 0);
      RANK_CHECK(f.received == 1 && f.taken == 1 && f.requested == 0);
    } else {
      RANK_CHECK(f.offered == 1 && c.misses == 0);
    }
  });
}

TEST(IpcFd, PushIntoVmmMemoryFromHost) {
  send_rounds(DeviceAlloc::Plain, DeviceAlloc::VmmFd, true, 2, false, [](int rank, Endpoint& ep, int) {
    auto c = ep.handle_cache()->stats();
    if (rank == 0) RANK_CHECK(c.misses == 1 && c.hits == 1 && c.fd_opens == 1);  // the sender mapped the receiver's
    else RANK_CHECK(ep.fd_exchange()->stats().offered == 1);
  });
}

TEST(IpcFd, VmmSendBufferFreedAndReallocatedIsNeverStale) {
  send_rounds(DeviceAlloc::VmmFd, DeviceAlloc::Plain, false, 4, true, [](int rank, Endpoint& ep, int reused) {
    if (rank != 1) return;
    auto c = ep.handle_cache()->stats();
    std::fprintf(stderr, "[rank 1] exporter's address came back in %d of 3 rounds\n", reused);
    RANK_CHECK(c.hits == 0);  // a new allocation every round
    RANK_CHECK(c.stale_evictions == static_cast<uint64_t>(reused));
    RANK_CHECK(c.misses + c.stale_evictions == 4 && c.fd_opens == 4);
  });
}

TEST(IpcFd, VmmReceiveBufferFreedAndReallocatedIsNeverStale) {
  send_rounds(DeviceAlloc::Plain, DeviceAlloc::VmmFd, true, 4, true, [](int rank, Endpoint& ep, int reused) {
    if (rank != 0) return;
    auto c = ep.handle_cache()->stats();
    RANK_CHECK(c.hits == 0 && c.stale_evictions == static_cast<uint64_t>(reused) && c.fd_opens == 4);
  });
}

TEST(IpcFd, MemoryWithoutAHandleStreams) {
  // Both ends private (the default pool's stand-in): nothing is mapped, the data streams.
  send_rounds(DeviceAlloc::NotShareable, DeviceAlloc::NotShareable, false, 2, false, [](int, Endpoint& ep, int) {
    RANK_CHECK(ep.handle_cache()->size() == 0 && ep.handle_cache()->stats().misses == 0);
    RANK_CHECK(ep.fd_exchange()->stats().offered == 0);
  });
}

TEST(IpcFd, AnEvictedMappingIsMappedAgainByAskingTheExporter) {
  // One cache entry: two buffers sent in turn evict each other's mapping, and the
  // receiver asks the sender for the descriptor again each time (the sender offers once).
  ScopedEnv entries("GPUSTRIPE_IPC_CACHE_ENTRIES", "1");
  EXPECT_RANKS_OK(run_ranks(2, [](int rank, ipc::Channel& ch) {
    auto be = emulated();
    Endpoint ep(ch, be.get());
    const size_t n = 1 << 20;
    void* buf[2];
    for (auto& b : buf) b = be->alloc_device_as(rank, n, DeviceAlloc::VmmFd);
    for (int i = 0; i < 6; ++i) {
      if (rank == 0) {
        device_put(*be, buf[i % 2], 0, seeded_bytes(i, n));
        ep.send(buf[i % 2], n, 1, i, kComm);
      } else {
        ep.recv(buf[0], n, 0, i, kComm);
        RANK_CHECK(device_get(*be, buf[0], 1, n) == seeded_bytes(i, n));
      }
    }
    auto f = ep.fd_exchange()->stats();
    if (rank == 0) RANK_CHECK(f.offered == 2 && f.served == 4);
    else RANK_CHECK(f.requested == 4 && ep.handle_cache()->stats().capacity_evictions == 5);
    ep.flush();
    for (auto& b : buf) be->free_device(b);
  }));
}

TEST(IpcFd, PeerWithoutADescriptorSocketGetsTheDataStreamed) {
  // Rank 1's endpoint has no backend (host memory only), so no socket: rank 0's offer of its
  // VMM buffer gives up after the short grace and the message streams, intact.
  EXPECT_RANKS_OK(run_ranks(2, [](int rank, ipc::Channel& ch) {
    const size_t n = (1 << 20) + 5;
    if (rank == 0) {
      auto be = emulated();
      Endpoint ep(ch, be.get());
      void* buf = be->alloc_device_as(0, n, DeviceAlloc::VmmFd);
      device_put(*be, buf, 0, seeded_bytes(77, n));
      ep.send(buf, n, 1, 0, kComm);
      RANK_CHECK(ep.fd_exchange()->stats().offered == 0);
      ep.flush();
      be->free_device(buf);
    } else {
      Endpoint ep(ch, nullptr);
      std::vector<unsigned char> host(n);
      RANK_CHECK(ep.recv(host.data(), n, 0, 0, kComm).bytes == n);
      RANK_CHECK(host == seeded_bytes(77, n));
    }
  }));
}

TEST(IpcFd, PoolDescriptorIsPassedOnceAndReallocatedPoolBuffersAreNeverStale) {
  // Pool memory (PoolFd): the pool's descriptor goes to the peer once; every buffer after
  // that maps by its offset alone. A freed buffer's range comes back for the next buffer of
  // that size (typically at the same address too): a new buffer id, so a new mapping. Pool
  // imports are leased per message: closed once the copy is done, before the sender hears of
  // it (CUDA: importers free before the exporter does), so every message imports anew.
  send_rounds(DeviceAlloc::PoolFd, DeviceAlloc::Plain, false, 5, true, [](int rank, Endpoint& ep, int reused) {
    auto c = ep.handle_cache()->stats();
    auto f = ep.fd_exchange()->stats();
    if (rank == 0) {
      RANK_CHECK(f.offered == 1);
      return;
    }
    std::fprintf(stderr, "[rank 1] pool buffer address came back in %d of 4 rounds\n", reused);
    RANK_CHECK(c.fd_opens == 1 && f.taken == 1);
    RANK_CHECK(c.hits == 0 && c.misses == 5 && c.stale_evictions == 0 && c.leases_closed == 5);
    RANK_CHECK(ep.handle_cache()->size() == 0);  // nothing of the exporter's pool held between messages
  });
}

TEST(IpcFd, EmulatedPoolExportsByOffsetInOneDescriptor) {
  auto be = emulated();
  void* a = be->alloc_device_as(2, 100000, DeviceAlloc::PoolFd);
  void* b = be->alloc_device_as(2, 100000, DeviceAlloc::PoolFd);
  Backend::IpcMemHandle ha = be->ipc_export(a), hb = be->ipc_export(static_cast<char*>(b) + 10);
  EXPECT_EQ(ha.kind, IpcKind::PoolFd);
  EXPECT_EQ(ha.share_id, hb.share_id);  // one pool
  EXPECT_NE(ha.buffer_id, hb.buffer_id);
  EXPECT_EQ(hb.base, reinterpret_cast<uintptr_t>(b));
  int fa = be->ipc_export_fd(ha), fb = be->ipc_export_fd(hb);
  EXPECT_TRUE(same_file(fa, fb));
  close(fa);
  close(fb);
  be->free_device(a);
  void* c = be->alloc_device_as(2, 100000, DeviceAlloc::PoolFd);  // a's range again
  EXPECT_NE(be->pointer_info(c).buffer_id, ha.buffer_id);
  be->free_device(b);
  be->free_device(c);
}

TEST(IpcFd, SendsNeverWaitForAPeersFullDescriptorQueue) {
  // Rank 0 posts more sends of fresh VMM buffers than a Unix datagram queue holds
  // (net.unix.max_dgram_qlen, 10 by default) while rank 1 is busy elsewhere (waiting for a
  // file, outside gpustripe). The isends must all return; the offers that did not fit are
  // dropped, and rank 1 asks for those descriptors when it maps the buffers.
  char flag[] = "/tmp/gs-ipc-fd-flag-XXXXXX";
  int ffd = mkstemp(flag);
  ASSERT_GE(ffd, 0);
  close(ffd);
  std::remove(flag);
  const std::string path = flag;
  EXPECT_RANKS_OK(run_ranks(2, [&path](int rank, ipc::Channel& ch) {
    auto be = emulated();
    Endpoint ep(ch, be.get());
    constexpr int kSends = 40;
    const size_t n = 64 << 10;
    std::vector<void*> bufs;
    for (int i = 0; i < kSends; ++i) bufs.push_back(be->alloc_device_as(rank, n, DeviceAlloc::VmmFd));
    if (rank == 0) {
      std::vector<RequestPtr> sends;
      for (int i = 0; i < kSends; ++i) {
        device_put(*be, bufs[i], 0, seeded_bytes(500 + i, n));
        sends.push_back(ep.isend(bufs[i], n, 1, i, kComm));
      }
      FILE* f = std::fopen(path.c_str(), "w");  // all posted: rank 1 may start
      RANK_CHECK(f);
      std::fclose(f);
      for (auto& s : sends) ep.wait(s);
      RANK_CHECK(ep.fd_exchange()->stats().deferred > 0);
    } else {
      ipc::Waiter w("rank 1 waiting for rank 0's sends to be posted");
      while (access(path.c_str(), F_OK) != 0) w.pause();
      std::vector<RequestPtr> recvs;
      for (int i = 0; i < kSends; ++i) recvs.push_back(ep.irecv(bufs[i], n, 0, i, kComm));
      for (auto& r : recvs) ep.wait(r);
      for (int i = 0; i < kSends; ++i) RANK_CHECK(device_get(*be, bufs[i], 1, n) == seeded_bytes(500 + i, n));
      RANK_CHECK(ep.fd_exchange()->stats().requested > 0);
      std::remove(path.c_str());
    }
    ep.flush();
    for (void* b : bufs) be->free_device(b);
  }));
}

// ---------------------------------------------------------------- buffers over several VMM allocations
// (PyTorch's expandable segments: one reservation mapped with several allocations). The emulated
// vmm_multi memory tiles a reserved range with 64 KiB memfd pieces (20 MiB past 20 MiB).

TEST(IpcFd, VmmMultiRangeExportsOneHandleOverItsPieces) {
  auto be = emulated();
  const size_t piece = 64 << 10, n = 1 << 20;
  EXPECT_EQ(vmm_multi_piece(n, piece), piece);
  EXPECT_EQ(vmm_multi_piece(size_t(256) << 20, size_t(2) << 20), size_t(20) << 20);  // PyTorch's page
  char* p = static_cast<char*>(be->alloc_device_as(1, n, DeviceAlloc::VmmMulti));
  Backend::IpcMemHandle one = be->ipc_export(p + 5);
  EXPECT_EQ(one.kind, IpcKind::VmmFd);  // each piece is an allocation of its own
  EXPECT_EQ(one.size, piece);
  EXPECT_EQ(be->ipc_export_range(p + 5, 100).kind, IpcKind::VmmFd);  // inside one piece: its handle
  Backend::IpcMemHandle h = be->ipc_export_range(p + piece + 7, n - piece - 7);
  EXPECT_EQ(h.kind, IpcKind::VmmMulti);
  EXPECT_EQ(h.base, reinterpret_cast<uintptr_t>(p + piece));  // from the piece holding the start
  EXPECT_EQ(h.size, n - piece);
  EXPECT_EQ(h.device, 1);
  std::vector<Backend::IpcPiece> ps = be->ipc_pieces(h);
  ASSERT_EQ(ps.size(), 15u);
  EXPECT_EQ(ps[3].offset, 3 * piece);
  EXPECT_EQ(ps[3].buffer_id, be->pointer_info(p + 4 * piece).buffer_id);
  EXPECT_NO_THROW(ipc_check_pieces(h, ps));
  std::vector<Backend::IpcPiece> tampered = ps;
  tampered[2].buffer_id ^= 1;
  EXPECT_EQ(status_of([&] { ipc_check_pieces(h, tampered); }), GPUSTRIPE_ERR_INVALID_ARGUMENT);
  tampered = ps;
  tampered.pop_back();
  EXPECT_EQ(status_of([&] { ipc_check_pieces(h, tampered); }), GPUSTRIPE_ERR_INVALID_ARGUMENT);
  std::vector<Backend::IpcPiece> got;
  std::vector<int> fds = be->ipc_export_fds(h, &got);
  EXPECT_EQ(fds.size(), 15u);
  EXPECT_EQ(got.size(), 15u);
  for (int fd : fds) close(fd);
  // A piece replaced at its address: the exported handle is gone, a new export differs.
  be->remap_piece(p + 6 * piece);
  EXPECT_EQ(status_of([&] { be->ipc_pieces(h); }), GPUSTRIPE_ERR_INVALID_POINTER);
  EXPECT_EQ(status_of([&] { be->ipc_export_fds(h, &got); }), GPUSTRIPE_ERR_INVALID_POINTER);
  Backend::IpcMemHandle h2 = be->ipc_export_range(p + piece + 7, n - piece - 7);
  EXPECT_EQ(h2.base, h.base);
  EXPECT_NE(h2.share_id, h.share_id);
  EXPECT_EQ(status_of([&] { be->free_device(p + piece); }), GPUSTRIPE_ERR_INVALID_POINTER);  // not its start
  be->free_device(p);
  EXPECT_EQ(be->pointer_info(p + 3 * piece).kind, MemoryKind::Unknown);  // every piece released
}

TEST(IpcFd, VmmMultiBeyondThePieceCapHasNoHandle) {
  auto be = emulated();
  const size_t piece = 64 << 10;
  char* p = static_cast<char*>(be->alloc_device_as(0, (Backend::kMaxIpcPieces + 4) * piece, DeviceAlloc::VmmMulti));
  EXPECT_EQ(be->ipc_export_range(p, Backend::kMaxIpcPieces * piece).kind, IpcKind::VmmMulti);  // the cap itself
  EXPECT_EQ(status_of([&] { be->ipc_export_range(p, (Backend::kMaxIpcPieces + 1) * piece); }),
            GPUSTRIPE_ERR_NOT_SUPPORTED);
  be->free_device(p);
  // A range that runs past a VMM allocation into other memory has no one handle either.
  void* v = be->alloc_device_as(0, piece, DeviceAlloc::VmmFd);
  EXPECT_EQ(status_of([&] { be->ipc_export_range(v, 2 * piece); }), GPUSTRIPE_ERR_NOT_SUPPORTED);
  be->free_device(v);
}

TEST(IpcFd, PullFromAVmmMultiBufferMapsAllItsPiecesFromOneMessage) {
  send_rounds(DeviceAlloc::VmmMulti, DeviceAlloc::Plain, false, 3, false, [](int rank, Endpoint& ep, int) {
    auto c = ep.handle_cache()->stats();
    auto f = ep.fd_exchange()->stats();
    if (rank == 1) {  // (2 MiB + 4093) bytes = 33 pieces of 64 KiB, one datagram, one mapping
      RANK_CHECK(c.misses == 1 && c.hits == 2 && c.multi_opens == 1 && c.pieces_mapped == 33);
      RANK_CHECK(f.received == 1 && f.taken == 1 && f.requested == 0);
    } else {
      RANK_CHECK(f.offered == 1 && c.misses == 0);
    }
  });
}

TEST(IpcFd, PushIntoAVmmMultiBufferFromHost) {
  send_rounds(DeviceAlloc::Plain, DeviceAlloc::VmmMulti, true, 2, false, [](int rank, Endpoint& ep, int) {
    auto c = ep.handle_cache()->stats();
    if (rank == 0) RANK_CHECK(c.misses == 1 && c.hits == 1 && c.multi_opens == 1);  // the sender mapped the receiver's
    else RANK_CHECK(ep.fd_exchange()->stats().offered == 1);
  });
}

TEST(IpcFd, VmmMultiSendBufferFreedAndReallocatedIsNeverStale) {
  send_rounds(DeviceAlloc::VmmMulti, DeviceAlloc::Plain, false, 4, true, [](int rank, Endpoint& ep, int reused) {
    if (rank != 1) return;
    auto c = ep.handle_cache()->stats();
    std::fprintf(stderr, "[rank 1] exporter's address came back in %d of 3 rounds\n", reused);
    RANK_CHECK(c.hits == 0 && c.stale_evictions == static_cast<uint64_t>(reused));
    RANK_CHECK(c.misses + c.stale_evictions == 4 && c.multi_opens == 4);
  });
}

TEST(IpcFd, APieceReallocatedAtItsAddressIsNeverServedStale) {
  // Rank 0 sends one vmm_multi buffer three times; before the second message one piece in the
  // middle is replaced at its address (an expandable segment unmapping a page and mapping a new
  // one), and written again. Rank 1 must see the new bytes: its mapping is stale (the layout's
  // digest changed) and is mapped anew; the third message hits the new mapping.
  EXPECT_RANKS_OK(run_ranks(2, [](int rank, ipc::Channel& ch) {
    auto be = emulated();
    Endpoint ep(ch, be.get());
    const size_t piece = 64 << 10, n = 20 * piece + 333;
    void* buf = be->alloc_device_as(rank, n, rank == 0 ? DeviceAlloc::VmmMulti : DeviceAlloc::Plain);
    for (int i = 0; i < 3; ++i) {
      auto data = seeded_bytes(900 + i, n);
      if (rank == 0) {
        if (i == 1) be->remap_piece(static_cast<char*>(buf) + 7 * piece);
        device_put(*be, buf, 0, data);
        ep.send(buf, n, 1, i, kComm);
      } else {
        device_put(*be, buf, 1, std::vector<unsigned char>(n, 0));
        RANK_CHECK(ep.recv(buf, n, 0, i, kComm).bytes == n);
        RANK_CHECK(device_get(*be, buf, 1, n) == data);
      }
    }
    if (rank == 1) {
      auto c = ep.handle_cache()->stats();
      RANK_CHECK(c.misses == 1 && c.stale_evictions == 1 && c.hits == 1 && c.multi_opens == 2);
    }
    ep.flush();
    be->free_device(buf);
  }));
}

TEST(IpcFd, AVmmMultiBufferOverMorePiecesThanTheCapStreams) {
  EXPECT_RANKS_OK(run_ranks(2, [](int rank, ipc::Channel& ch) {
    auto be = emulated();
    Endpoint ep(ch, be.get());
    const size_t n = (Backend::kMaxIpcPieces + 8) * (64 << 10) - 99;  // 72 pieces
    void* buf = be->alloc_device_as(rank, n, DeviceAlloc::VmmMulti);
    auto data = seeded_bytes(31, n);
    if (rank == 0) {
      device_put(*be, buf, 0, data);
      ep.send(buf, n, 1, 0, kComm);
    } else {
      RANK_CHECK(ep.recv(buf, n, 0, 0, kComm).bytes == n);
      RANK_CHECK(device_get(*be, buf, 1, n) == data);
    }
    // Neither side could export its buffer: nothing mapped, nothing offered, the data streamed.
    RANK_CHECK(ep.handle_cache()->stats().misses == 0 && ep.fd_exchange()->stats().offered == 0);
    ep.flush();
    be->free_device(buf);
  }));
}

TEST(IpcFd, ExporterDyingWhileAPeerWaitsForItsPiecesEndsTheWaitAtOnce) {
  // As for one descriptor: rank 1 asks for a vmm-multi buffer's descriptors and rank 0 dies
  // instead of answering; the wait ends in ERR_PEER_FAILED, not in the 60 s timeout, and
  // nothing is left mapped.
  ScopedEnv timeout("GPUSTRIPE_TIMEOUT", "60");
  auto res = run_ranks(2, [](int rank, ipc::Channel& ch) {
    auto be = emulated();
    ipc::FdExchange fx(ch, *be);
    ipc::HandleCache cache(*be, 4, &fx);
    if (rank == 0) {
      void* a = be->alloc_device_as(0, 1 << 20, DeviceAlloc::VmmMulti);
      Backend::IpcMemHandle h = be->ipc_export_range(a, 1 << 20);
      RANK_CHECK(h.kind == IpcKind::VmmMulti);
      while (!ch.try_send(1, &h, sizeof h, nullptr, 0)) std::this_thread::yield();
      std::this_thread::sleep_for(std::chrono::milliseconds(300));  // rank 1 is waiting now; no serve()
      raise(SIGKILL);
    }
    Backend::IpcMemHandle h;
    size_t bytes = 0;
    const void* rec;
    ipc::Waiter w("rank 1 waiting for the handle");
    while (!(rec = ch.peek(0, &bytes))) w.pause();
    std::memcpy(&h, rec, sizeof h);
    ch.consume(0);
    auto t0 = std::chrono::steady_clock::now();
    gpustripe_status_t st = status_of([&] { cache.map(0, h.base, h); });
    double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    RANK_CHECK(st == GPUSTRIPE_ERR_PEER_FAILED);
    RANK_CHECK(s < 30);  // the dead peer is seen, not the timeout
    RANK_CHECK(cache.size() == 0 && cache.stats().multi_opens == 0);
  }, 90);
  EXPECT_EQ(res[0].code, 128 + SIGKILL);
  EXPECT_EQ(res[1].code, 0);
  EXPECT_FALSE(res[1].timed_out);
}

TEST(IpcFd, APoolImportOverlappingAnOlderOneOfThatPoolClosesTheOlderFirst) {
  // A pool hands a freed range to a new buffer that need not start where the old one did; the
  // importer's older import then overlaps the new buffer and names freed memory. It must be
  // closed before the new import (imports of one pool share its address range here). The
  // emulated pool reuses ranges of equal size only, so the overlap is stated through the base
  // the cache is given: buffer c "lives" half way into buffer a.
  EXPECT_RANKS_OK(run_ranks(2, [](int rank, ipc::Channel& ch) {
    auto be = emulated();
    ipc::FdExchange fx(ch, *be);
    const size_t n = 128 << 10;
    if (rank == 0) {
      void* a = be->alloc_device_as(0, n, DeviceAlloc::PoolFd);
      void* b = be->alloc_device_as(0, n, DeviceAlloc::PoolFd);
      void* c = be->alloc_device_as(0, n / 2, DeviceAlloc::PoolFd);
      Backend::IpcMemHandle h[3] = {be->ipc_export(a), be->ipc_export(b), be->ipc_export(c)};
      RANK_CHECK(fx.offer(1, h[0]));
      for (auto& x : h) while (!ch.try_send(1, &x, sizeof x, nullptr, 0)) std::this_thread::yield();
      size_t bytes = 0;
      ipc::Waiter w("rank 0 waiting for rank 1");
      while (!ch.peek(1, &bytes)) {
        fx.serve();
        w.pause();
      }
      ch.consume(1);
      for (void* p : {a, b, c}) be->free_device(p);
    } else {
      ipc::HandleCache cache(*be, 8, &fx);
      Backend::IpcMemHandle h[3];
      for (auto& x : h) {
        size_t bytes = 0;
        const void* rec;
        ipc::Waiter w("rank 1 waiting for a handle");
        while (!(rec = ch.peek(0, &bytes))) w.pause();
        std::memcpy(&x, rec, sizeof x);
        ch.consume(0);
      }
      cache.map(0, h[0].base, h[0]);
      cache.map(0, h[1].base, h[1]);  // beside a: both stay
      RANK_CHECK(cache.size() == 2 && cache.stats().stale_evictions == 0);
      cache.map(0, h[0].base + n / 2, h[2]);  // overlaps a's second half (and not b)
      auto s = cache.stats();
      RANK_CHECK(cache.size() == 2 && s.stale_evictions == 1 && s.misses == 3);
      cache.map(0, h[1].base, h[1]);
      RANK_CHECK(cache.stats().hits == 1);  // b was kept
      const char done = 1;
      while (!ch.try_send(0, &done, 1, nullptr, 0)) std::this_thread::yield();
    }
  }));
}

TEST(IpcFd, AMappingSpansAtMostTheWireFormatsPieces) {
  auto be = emulated();
  const size_t piece = 64 << 10, most = Backend::kMaxIpcPieces;
  char* p = static_cast<char*>(be->alloc_device_as(0, (most + 1) * piece, DeviceAlloc::VmmMulti));
  EXPECT_EQ(be->ipc_export_range(p, most * piece).kind, IpcKind::VmmMulti);
  EXPECT_EQ(status_of([&] { be->ipc_export_range(p, most * piece + 1); }), GPUSTRIPE_ERR_NOT_SUPPORTED);
  be->free_device(p);
}

TEST(IpcFd, DescriptorsBeyondTheOpenFileLimitAreAClearErrorNotATimeout) {
  // Rank 1 can open only a few more files than it has open; rank 0 offers a 16-piece buffer.
  // The kernel installs what fits and cuts the rest: rank 1's wait for the descriptors ends at
  // once in ERR_IO naming the open-file limit (GPUSTRIPE_TIMEOUT would be 60 s).
  ScopedEnv timeout("GPUSTRIPE_TIMEOUT", "60");
  EXPECT_RANKS_OK(run_ranks(2, [](int rank, ipc::Channel& ch) {
    auto be = emulated();
    ipc::FdExchange fx(ch, *be);
    const char done = 1;
    if (rank == 0) {
      void* a = be->alloc_device_as(0, 1 << 20, DeviceAlloc::VmmMulti);
      Backend::IpcMemHandle h = be->ipc_export_range(a, 1 << 20);
      RANK_CHECK(h.kind == IpcKind::VmmMulti && fx.offer(1, h));
      while (!ch.try_send(1, &h, sizeof h, nullptr, 0)) std::this_thread::yield();
      size_t bytes = 0;
      ipc::Waiter w("rank 0 waiting for rank 1");
      while (!ch.peek(1, &bytes)) {
        fx.serve();
        w.pause();
      }
      ch.consume(1);
      be->free_device(a);
      return;
    }
    int limit = 0;  // the lowest limit that leaves 4 free descriptor numbers (new ones take the lowest)
    for (int fd = 0, free = 0; free < 4; ++fd) {
      if (fcntl(fd, F_GETFD) == -1) ++free;
      limit = fd + 1;
    }
    rlimit lim{};
    getrlimit(RLIMIT_NOFILE, &lim);
    lim.rlim_cur = static_cast<rlim_t>(limit);
    RANK_CHECK(setrlimit(RLIMIT_NOFILE, &lim) == 0);
    Backend::IpcMemHandle h;
    size_t bytes = 0;
    const void* rec;
    ipc::Waiter w("rank 1 waiting for the handle");
    while (!(rec = ch.peek(0, &bytes))) w.pause();
    std::memcpy(&h, rec, sizeof h);
    ch.consume(0);
    auto t0 = std::chrono::steady_clock::now();
    std::string msg;
    gpustripe_status_t st = GPUSTRIPE_SUCCESS;
    try {
      fx.take_all(0, h);
    } catch (const Error& e) {
      st = e.status();
      msg = e.what();
    }
    double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::fprintf(stderr, "[rank 1] as expected: %s: %s\n", status_name(st), msg.c_str());
    while (!ch.try_send(0, &done, 1, nullptr, 0)) std::this_thread::yield();
    RANK_CHECK(st == GPUSTRIPE_ERR_IO && msg.find("open-file limit") != std::string::npos);
    RANK_CHECK(s < 30);
  }));
}

TEST(IpcFd, APoolBufferInTwoMessagesAtOnceIsClosedWhenBothAreDone) {
  // The same pool buffer sent twice before the receiver copies either: both pulls may share
  // one import (two leases) or import in turn; either way nothing stays imported afterwards.
  EXPECT_RANKS_OK(run_ranks(2, [](int rank, ipc::Channel& ch) {
    auto be = emulated();
    Endpoint ep(ch, be.get());
    const size_t n = (1 << 20) + 9;
    void* buf = be->alloc_device_as(rank, n, DeviceAlloc::PoolFd);
    void* second = rank == 1 ? be->alloc_device_as(1, n, DeviceAlloc::Plain) : nullptr;
    if (rank == 0) {
      device_put(*be, buf, 0, seeded_bytes(61, n));
      RequestPtr a = ep.isend(buf, n, 1, 0, kComm), b = ep.isend(buf, n, 1, 1, kComm);
      ep.wait(a);
      ep.wait(b);
    } else {
      RequestPtr a = ep.irecv(buf, n, 0, 0, kComm), b = ep.irecv(second, n, 0, 1, kComm);
      ep.wait(a);
      ep.wait(b);
      RANK_CHECK(device_get(*be, buf, 1, n) == seeded_bytes(61, n) && device_get(*be, second, 1, n) == seeded_bytes(61, n));
      auto c = ep.handle_cache()->stats();
      RANK_CHECK(c.misses + c.hits == 2 && c.leases_closed == c.misses && ep.handle_cache()->size() == 0);
    }
    ep.flush();
    be->free_device(buf);
    if (second) be->free_device(second);
  }));
}
