// p2p with device buffers across forked ranks on the emulated backend (each rank
// its own emulated GPU, memory in shared segments as CUDA IPC would map it):
// mapped rendezvous, mixed host/device ends, the mapping cache and a receive buffer
// freed and reallocated at the same address between messages.
#include <gtest/gtest.h>

#include <cstring>
#include <random>

#include "backend/backend.hpp"
#include "p2p/endpoint.hpp"
#include "test_ipc_ranks.hpp"
#include "test_util.hpp"
#include "topology/topology.hpp"

using namespace gpustripe;
using namespace gpustripe::p2p;

namespace {

constexpr uint64_t kComm = 3;

std::vector<unsigned char> pattern(int seed, size_t n) {
  std::vector<unsigned char> v(n);
  std::mt19937 rng(static_cast<unsigned>(seed));
  for (auto& b : v) b = static_cast<unsigned char>(rng());
  return v;
}

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
        auto data = pattern(seq++, n);
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

TEST(P2pDevice, MappingCacheReusesAndTruncationHolds) {
  EXPECT_RANKS_OK(run_ranks(2, [](int rank, ipc::Channel& ch) {
    auto be = emulated();
    Endpoint ep(ch, be.get());
    size_t n = 1 << 20;
    if (rank == 0) {
      void* src = be->alloc_device(0, n);
      for (int i = 0; i < 3; ++i) {
        to_device(*be, src, 0, pattern(i, n));
        ep.send(src, n, 1, 0, kComm);
      }
      auto s = ep.handle_cache()->stats();
      RANK_CHECK(s.misses == 1 && s.hits == 2 && s.stale_evictions == 0);
      ep.send(src, n, 1, 1, kComm);  // into a smaller buffer
      be->free_device(src);
    } else {
      void* dst = be->alloc_device(1, n);
      for (int i = 0; i < 3; ++i) {
        ep.recv(dst, n, 0, 0, kComm);
        RANK_CHECK(from_device(*be, dst, 1, n) == pattern(i, n));
      }
      P2pStatus st = ep.recv(static_cast<char*>(dst) + 4096, n / 2, 0, 1, kComm);
      RANK_CHECK(st.error == GPUSTRIPE_ERR_TRUNCATE && st.bytes == n / 2);
      auto got = from_device(*be, static_cast<char*>(dst) + 4096, 1, n / 2);
      auto want = pattern(2, n);  // the 4th message was the 3rd pattern again
      RANK_CHECK(std::equal(got.begin(), got.end(), want.begin()));
      be->free_device(dst);
    }
  }));
}

TEST(P2pDevice, BufferFreedAndReallocatedAtSameAddressIsNeverStale) {
  EXPECT_RANKS_OK(run_ranks(2, [](int rank, ipc::Channel& ch) {
    auto be = emulated();
    Endpoint ep(ch, be.get());
    size_t n = 2 << 20;
    constexpr int kRounds = 4;
    if (rank == 0) {
      void* src = be->alloc_device(0, n);
      for (int i = 0; i < kRounds; ++i) {
        to_device(*be, src, 0, pattern(100 + i, n));
        ep.send(src, n, 1, 0, kComm);
      }
      int reused = 0;
      ep.recv(&reused, sizeof reused, 1, 9, kComm);
      auto s = ep.handle_cache()->stats();
      // Every round the receiver had a new buffer: at a reused address it is a stale
      // eviction, at a new one a miss; never a hit.
      RANK_CHECK(s.hits == 0);
      RANK_CHECK(s.stale_evictions == static_cast<uint64_t>(reused));
      RANK_CHECK(s.misses + s.stale_evictions == kRounds);
      be->free_device(src);
    } else {
      void* prev = nullptr;
      int reused = 0;
      for (int i = 0; i < kRounds; ++i) {
        void* dst = be->alloc_device(1, n);
        if (dst == prev) ++reused;
        to_device(*be, dst, 1, std::vector<unsigned char>(n, 0));
        ep.recv(dst, n, 0, 0, kComm);
        RANK_CHECK(from_device(*be, dst, 1, n) == pattern(100 + i, n));
        be->free_device(dst);
        prev = dst;
      }
      std::fprintf(stderr, "[rank 1] receive buffer address reused in %d of %d rounds\n", reused, kRounds - 1);
      ep.send(&reused, sizeof reused, 0, 9, kComm);
    }
  }));
}

TEST(P2pDevice, FourRanksAnySourceDeviceRendezvous) {
  EXPECT_RANKS_OK(run_ranks(4, [](int rank, ipc::Channel& ch) {
    auto be = emulated();
    Endpoint ep(ch, be.get());
    size_t n = 600000;
    void* buf = be->alloc_device(rank, n);
    if (rank != 0) {
      to_device(*be, buf, rank, pattern(rank, n));
      ep.send(buf, n, 0, rank, kComm);
    } else {
      std::vector<bool> seen(4, false);
      for (int k = 0; k < 3; ++k) {
        P2pStatus st = ep.recv(buf, n, kAnySource, kAnyTag, kComm);
        RANK_CHECK(st.source == st.tag && !seen[st.source]);
        seen[st.source] = true;
        RANK_CHECK(from_device(*be, buf, 0, n) == pattern(st.source, n));
      }
    }
    be->free_device(buf);
  }));
}
