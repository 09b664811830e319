// Small device messages through eager slots (p2p/eager_slots.hpp), across forked ranks on
// the emulated backend: which sends take them (blocking ones; nonblocking ones are pulled),
// windows both ways, any source, unexpected messages, more messages in flight than slots,
// truncation, windows mixed with rendezvous messages, the copies of a window enqueued in one
// backend call per side, and a rank killed while slots are held or before its copy into one landed.
#include <gtest/gtest.h>

#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <thread>
#include <vector>

#include "backend/backend.hpp"
#include "forwarding_backend.hpp"
#include "p2p/endpoint.hpp"
#include "test_ipc_ranks.hpp"
#include "test_util.hpp"
#include "topology/topology.hpp"

using namespace gpustripe;
using namespace gpustripe::p2p;

namespace {

constexpr uint64_t kComm = 5;
constexpr size_t kMax = 4096;  // the device eager limit these tests run with

std::unique_ptr<Backend> emulated() { return make_emulated_backend(load_topology_file("h200x4")); }

// Sizes from 1 byte to the limit, both ends included.
size_t size_of(int i) { return i == 0 ? 1 : i == 1 ? kMax : 1 + (static_cast<size_t>(i) * 977) % kMax; }

// A send the way a blocking one goes (Endpoint::isend's `blocking`: small device messages take a
// slot), without its wait: posted back to back, many hold slots at once, as the sends of a sender
// running ahead of its receiver do.
RequestPtr slot_send(Endpoint& ep, const void* buf, size_t n, int dst, int tag, bool synchronous = false) {
  return ep.isend(buf, n, dst, tag, kComm, synchronous, nullptr, /*blocking=*/true);
}

bool shm_exists(const std::string& name) { return access(("/dev/shm" + name).c_str(), F_OK) == 0; }

// Blocks the calling rank, without any progress of its endpoint, until the other writes.
void block_on(int fd) {
  char c = 0;
  RANK_CHECK(read(fd, &c, 1) == 1);
}
void unblock(int fd) {
  char c = 1;
  RANK_CHECK(write(fd, &c, 1) == 1);
}

// Whether `f` throws an Error saying the peer failed.
template <typename F>
bool fails_with_peer_failed(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.status() == GPUSTRIPE_ERR_PEER_FAILED;
  }
  return false;
}
void wait_until_dead(ipc::Channel& ch, int peer) {
  ipc::PeerState st = ch.peer_state(peer);
  for (int i = 0; i < 5000 && st != ipc::PeerState::Dead; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
    st = ch.peer_state(peer);
  }
  RANK_CHECK(st == ipc::PeerState::Dead);
  RANK_CHECK(ch.peer_state(peer) == ipc::PeerState::Dead);  // and stays so, reaped or not
}

// Counts the backend calls that enqueue the eager slots' copies: one call per copy, or one per
// batch of copies, per direction (into host memory: a sender's copy into its slot).
class CopyCallCountingBackend : public ForwardingBackend {
 public:
  using ForwardingBackend::ForwardingBackend;
  const char* name() const override { return "copy-call-counting"; }
  void copy_async_prechecked(void* dst, int dst_dev, const void* src, int src_dev, size_t bytes,
                             StreamHandle s) override {
    ++(dst_dev == kHostDevice ? single_out : single_in);
    Backend::copy_async_prechecked(dst, dst_dev, src, src_dev, bytes, s);
  }
  void copy_batch_prechecked(const BatchCopy* copies, size_t n, StreamHandle s) override {
    for (size_t i = 0; i < n; ++i) {
      const bool out = copies[i].dst_dev == kHostDevice;
      if (i == 0) ++(out ? batches_out : batches_in);
      ++(out ? batched_out : batched_in);
      Backend::copy_async_prechecked(copies[i].dst, copies[i].dst_dev, copies[i].src, copies[i].src_dev,
                                     copies[i].bytes, s);
    }
  }
  int single_out = 0, single_in = 0;    // copy_async_prechecked calls
  int batches_out = 0, batches_in = 0;  // copy_batch_prechecked calls
  int batched_out = 0, batched_in = 0;  // the copies in them
};

}  // namespace

// Which way a small device message goes. Nonblocking sends are pulled: the receiver maps the
// sender's buffer, no slot is taken, and they cannot complete while the receiver makes no
// progress. Blocking ones take a slot, map nothing and complete while the receiver is away; a
// synchronous blocking one is pulled (it waits for the receiver anyway). Every byte lands.
TEST(P2pEagerSlots, NonblockingSendsArePulledBlockingOnesTakeASlot) {
  ScopedEnv to("GPUSTRIPE_TIMEOUT", "20");
  int first[2], second[2];
  ASSERT_EQ(pipe(first), 0);
  ASSERT_EQ(pipe(second), 0);
  EXPECT_RANKS_OK(run_ranks(2, [&](int rank, ipc::Channel& ch) {
    auto be = emulated();
    Endpoint ep(ch, be.get());
    const size_t sizes[] = {1, 100, kMax};
    char* buf = static_cast<char*>(be->alloc_device(rank, 3 * kMax));
    auto maps = [&] {
      const ipc::HandleCacheStats st = ep.handle_cache()->stats();
      return st.hits + st.misses + st.stale_evictions;
    };
    if (rank == 0) {
      for (int i = 0; i < 3; ++i) device_put(*be, buf + i * kMax, 0, seeded_bytes(10 + i, sizes[i]));
      std::vector<RequestPtr> sends;
      for (int i = 0; i < 3; ++i) sends.push_back(ep.isend(buf + i * kMax, sizes[i], 1, i, kComm));
      bool any_done = false;
      for (int k = 0; k < 200; ++k)
        for (auto& r : sends) any_done = ep.test(r) || any_done;
      unblock(first[1]);  // before the checks: a failing one must not leave the receiver blocked
      RANK_CHECK(!any_done && ep.eager_slots()->taken() == 0);
      for (auto& r : sends) ep.wait(r);
      block_on(second[0]);  // the receiver has them all and makes no progress now
      for (int i = 0; i < 3; ++i) ep.send(buf + i * kMax, sizes[i], 1, 10 + i, kComm);
      const uint64_t taken = ep.eager_slots()->taken();
      unblock(first[1]);
      RANK_CHECK(taken == 3);
      device_put(*be, buf, 0, seeded_bytes(20, kMax));
      ep.send(buf, kMax, 1, 20, kComm, /*synchronous=*/true);
      RANK_CHECK(ep.eager_slots()->taken() == 3);
    } else {
      block_on(first[0]);
      char* in = static_cast<char*>(be->alloc_device(1, kMax));
      const uint64_t before = maps();
      for (int i = 0; i < 3; ++i) {
        P2pStatus st = ep.recv(in, kMax, 0, i, kComm);
        RANK_CHECK(st.bytes == sizes[i] && device_get(*be, in, 1, st.bytes) == seeded_bytes(10 + i, sizes[i]));
      }
      const uint64_t pulled = maps() - before;
      unblock(second[1]);
      block_on(first[0]);  // the blocking sends are complete
      for (int i = 0; i < 3; ++i) {
        P2pStatus st = ep.recv(in, kMax, 0, 10 + i, kComm);
        RANK_CHECK(st.bytes == sizes[i] && device_get(*be, in, 1, st.bytes) == seeded_bytes(10 + i, sizes[i]));
      }
      RANK_CHECK(pulled == 3 && maps() - before == 3);
      P2pStatus st = ep.recv(in, kMax, 0, 20, kComm);
      RANK_CHECK(st.bytes == kMax && device_get(*be, in, 1, kMax) == seeded_bytes(20, kMax) && maps() - before == 4);
      be->free_device(in);
    }
    be->free_device(buf);
    ep.flush();
  }));
  for (int fd : {first[0], first[1], second[0], second[1]}) close(fd);
}

// A window of 64 small device sends posted back to back (the blocking way, through slots) has its
// copies into the slots enqueued in one backend call at the wait's first pass; the receiver, whose receives were posted and who
// reads all 64 records in one pass, enqueues its 64 copies out of the slots in one call too. Every
// byte lands, and a blocking send afterwards still enqueues and completes within its call.
TEST(P2pEagerSlots, AWindowsCopiesGoToTheBackendInOneCallPerSide) {
  ScopedEnv jitter("GPUSTRIPE_TEST", "emu_jitter_us=5");
  ScopedEnv to("GPUSTRIPE_TIMEOUT", "20");
  int fds[2], posted[2];  // no progress pass on either side between the posts and the waits
  ASSERT_EQ(pipe(fds), 0);
  ASSERT_EQ(pipe(posted), 0);
  EXPECT_RANKS_OK(run_ranks(2, [&](int rank, ipc::Channel& ch) {
    auto* counting = new CopyCallCountingBackend(emulated());
    std::unique_ptr<Backend> be(counting);
    Endpoint ep(ch, be.get());
    constexpr int kWindow = 64;
    char* buf = static_cast<char*>(be->alloc_device(rank, kWindow * kMax));
    if (rank == 0) {
      for (int i = 0; i < kWindow; ++i) device_put(*be, buf + i * kMax, rank, seeded_bytes(300 + i, size_of(i)));
      block_on(posted[0]);  // the receives are posted
      std::vector<RequestPtr> sends;
      for (int i = 0; i < kWindow; ++i) sends.push_back(slot_send(ep, buf + i * kMax, size_of(i), 1, i));
      const bool none_yet = counting->single_out == 0 && counting->batches_out == 0;  // nothing enqueued yet
      for (auto& r : sends) ep.wait(r);  // every record is in the ring
      unblock(fds[1]);  // before the checks: a failing one must not leave the receiver blocked
      RANK_CHECK(none_yet);
      RANK_CHECK(counting->batches_out == 1 && counting->batched_out == kWindow && counting->single_out == 0);
      device_put(*be, buf, rank, seeded_bytes(400, 7));
      ep.send(buf, 7, 1, 200, kComm);  // blocking: enqueued and complete within the call
      RANK_CHECK(counting->batched_out + counting->single_out == kWindow + 1);
    } else {
      std::vector<RequestPtr> recvs;
      for (int i = 0; i < kWindow; ++i) recvs.push_back(ep.irecv(buf + i * kMax, kMax, 0, i, kComm));
      unblock(posted[1]);
      block_on(fds[0]);  // no pass until all 64 records wait in the ring
      for (auto& r : recvs) ep.wait(r);
      RANK_CHECK(counting->batches_in == 1 && counting->batched_in == kWindow && counting->single_in == 0);
      for (int i = 0; i < kWindow; ++i) {
        RANK_CHECK(recvs[i]->status().bytes == size_of(i) && recvs[i]->status().error == GPUSTRIPE_SUCCESS);
        RANK_CHECK(device_get(*be, buf + i * kMax, rank, size_of(i)) == seeded_bytes(300 + i, size_of(i)));
      }
      P2pStatus st = ep.recv(buf, kMax, 0, 200, kComm);
      RANK_CHECK(st.bytes == 7 && device_get(*be, buf, rank, 7) == seeded_bytes(400, 7));
    }
    be->free_device(buf);
    ep.flush();
  }));
  for (int fd : {fds[0], fds[1], posted[0], posted[1]}) close(fd);
}

// Windows both ways of 64 device messages, small ones (slots) and rendezvous ones interleaved,
// received by any-source receives in reverse tag order, some truncated: each lands whole (or
// cut to its buffer) where its tag says, and every send completes.
TEST(P2pEagerSlots, WindowsMixedWithRendezvousMessagesBothWaysLandByTag) {
  ScopedEnv jitter("GPUSTRIPE_TEST", "emu_jitter_us=5");
  ScopedEnv to("GPUSTRIPE_TIMEOUT", "20");
  EXPECT_RANKS_OK(run_ranks(2, [](int rank, ipc::Channel& ch) {
    auto be = emulated();
    Endpoint ep(ch, be.get());
    const int peer = 1 - rank;
    constexpr int kWindow = 64;
    constexpr size_t kBig = (64u << 10) + 3, kStride = kBig + 64;
    auto bytes_of = [](int i) { return i % 4 == 3 ? kBig - static_cast<size_t>(i) : size_of(i); };
    auto cap_of = [&](int i) { return i % 16 == 5 ? bytes_of(i) / 2 : kStride; };
    char* out = static_cast<char*>(be->alloc_device(rank, kWindow * kStride));
    char* in = static_cast<char*>(be->alloc_device(rank, kWindow * kStride));
    for (int round = 0; round < 2; ++round) {
      for (int i = 0; i < kWindow; ++i)
        device_put(*be, out + i * kStride, rank, seeded_bytes(round * 1000 + rank * 100 + i, bytes_of(i)));
      std::vector<RequestPtr> sends, recvs(kWindow);
      for (int i = 0; i < kWindow; ++i) sends.push_back(slot_send(ep, out + i * kStride, bytes_of(i), peer, i));
      for (int i = kWindow - 1; i >= 0; --i) recvs[i] = ep.irecv(in + i * kStride, cap_of(i), kAnySource, i, kComm);
      for (int i = 0; i < kWindow; ++i) {
        ep.wait(recvs[i]);
        const size_t n = bytes_of(i), got = std::min(n, cap_of(i));
        const P2pStatus& st = recvs[i]->status();
        RANK_CHECK(st.bytes == got && st.message_bytes == n && st.tag == i && st.source == peer);
        RANK_CHECK(st.error == (got < n ? GPUSTRIPE_ERR_TRUNCATE : GPUSTRIPE_SUCCESS));
        auto want = seeded_bytes(round * 1000 + peer * 100 + i, n);
        want.resize(got);
        RANK_CHECK(device_get(*be, in + i * kStride, rank, got) == want);
      }
      for (auto& r : sends) ep.wait(r);
    }
    RANK_CHECK(ep.eager_slots()->taken() >= kWindow);
    be->free_device(out);
    be->free_device(in);
    ep.flush();
  }));
}

// Both ranks post a window of 64 small device sends, then their 64 receives in the reverse
// tag order (some into host memory, one shorter than its message); every byte lands where its
// tag says, and the sends went through slots.
TEST(P2pEagerSlots, WindowsBothWaysLandByTagInAnyPostOrder) {
  ScopedEnv jitter("GPUSTRIPE_TEST", "emu_jitter_us=5");  // copies finish out of step with the posts
  ScopedEnv to("GPUSTRIPE_TIMEOUT", "20");
  EXPECT_RANKS_OK(run_ranks(2, [](int rank, ipc::Channel& ch) {
    auto be = emulated();
    Endpoint ep(ch, be.get());
    RANK_CHECK(ep.eager_slots() != nullptr);
    const int peer = 1 - rank;
    constexpr int kWindow = 64;
    char* out = static_cast<char*>(be->alloc_device(rank, kWindow * kMax));
    char* in = static_cast<char*>(be->alloc_device(rank, kWindow * kMax));
    std::vector<std::vector<unsigned char>> host(kWindow, std::vector<unsigned char>(kMax));
    for (int round = 0; round < 3; ++round) {
      std::vector<RequestPtr> sends, recvs(kWindow);
      for (int i = 0; i < kWindow; ++i) device_put(*be, out + i * kMax, rank, seeded_bytes(round * 1000 + rank * 100 + i, size_of(i)));
      for (int i = 0; i < kWindow; ++i) sends.push_back(slot_send(ep, out + i * kMax, size_of(i), peer, i, i == 20));  // one Ssend (pulled)
      for (int i = kWindow - 1; i >= 0; --i) {
        const size_t cap = i == 9 ? size_of(i) / 2 : kMax;
        void* dst = i % 8 == 7 ? static_cast<void*>(host[i].data()) : static_cast<void*>(in + i * kMax);
        recvs[i] = ep.irecv(dst, cap, peer, i, kComm);
      }
      for (auto& r : sends) ep.wait(r);
      for (int i = 0; i < kWindow; ++i) {
        ep.wait(recvs[i]);
        const size_t n = size_of(i), got = i == 9 ? n / 2 : n;
        const P2pStatus& st = recvs[i]->status();
        RANK_CHECK(st.bytes == got && st.message_bytes == n && st.tag == i && st.source == peer);
        RANK_CHECK(st.error == (i == 9 ? GPUSTRIPE_ERR_TRUNCATE : GPUSTRIPE_SUCCESS));
        auto want = seeded_bytes(round * 1000 + peer * 100 + i, n);
        want.resize(got);
        auto have = i % 8 == 7 ? std::vector<unsigned char>(host[i].begin(), host[i].begin() + got)
                               : device_get(*be, in + i * kMax, rank, got);
        RANK_CHECK(have == want);
      }
    }
    RANK_CHECK(ep.eager_slots()->taken() >= 64);
    be->free_device(out);
    be->free_device(in);
    ep.flush();
  }));
}

// Two senders' messages arrive before any receive is posted: each is copied out of its slot
// at once (the senders see every slot free again while nothing is posted), then received by
// any-source receives in each sender's order.
TEST(P2pEagerSlots, UnexpectedMessagesFreeTheirSlotsAtOnceAndMatchAnySource) {
  ScopedEnv jitter("GPUSTRIPE_TEST", "emu_jitter_us=5");
  ScopedEnv to("GPUSTRIPE_TIMEOUT", "20");
  EXPECT_RANKS_OK(run_ranks(3, [](int rank, ipc::Channel& ch) {
    auto be = emulated();
    Endpoint ep(ch, be.get());
    constexpr int kMsgs = 80, kTags = 4;  // more than a pair's slots
    char token = 0;
    if (rank != 0) {
      char* out = static_cast<char*>(be->alloc_device(rank, kMsgs * kMax));
      std::vector<RequestPtr> sends;
      for (int i = 0; i < kMsgs; ++i) {
        device_put(*be, out + i * kMax, rank, seeded_bytes(rank * 100 + i, size_of(i)));
        sends.push_back(slot_send(ep, out + i * kMax, size_of(i), 0, i % kTags));
      }
      for (auto& r : sends) ep.wait(r);
      ep.send(&token, 1, 0, 100, kComm);  // after every record of the messages
      ep.recv(&token, 1, 0, 101, kComm);  // rank 0 has read them, and posted nothing
      RANK_CHECK(ep.eager_slots()->held(0) == 0);
      be->free_device(out);
    } else {
      ep.recv(&token, 1, 1, 100, kComm);
      ep.recv(&token, 1, 2, 100, kComm);
      ep.send(&token, 1, 1, 101, kComm);
      ep.send(&token, 1, 2, 101, kComm);
      char* in = static_cast<char*>(be->alloc_device(0, kMax));
      int next[3][kTags] = {};
      for (int t = 0; t < kTags; ++t)
        for (int k = 0; k < 2 * kMsgs / kTags; ++k) {
          P2pStatus st = ep.recv(in, kMax, kAnySource, t, kComm);
          RANK_CHECK(st.error == GPUSTRIPE_SUCCESS && (st.source == 1 || st.source == 2) && st.tag == t);
          const int i = t + kTags * next[st.source][t]++;  // each sender's messages of a tag, in order
          RANK_CHECK(st.bytes == size_of(i) && device_get(*be, in, 0, st.bytes) == seeded_bytes(st.source * 100 + i, size_of(i)));
        }
      be->free_device(in);
    }
    ep.flush();
  }));
}

// 200 sends of one tag while the receiver makes no progress: as many as there are slots take
// them, the others go through the channel, and the receiver gets all of them in the order they
// were sent.
TEST(P2pEagerSlots, MoreSendsThanSlotsKeepTheirOrder) {
  ScopedEnv jitter("GPUSTRIPE_TEST", "emu_jitter_us=5");
  ScopedEnv to("GPUSTRIPE_TIMEOUT", "20");
  int fds[2];
  ASSERT_EQ(pipe(fds), 0);
  EXPECT_RANKS_OK(run_ranks(2, [&](int rank, ipc::Channel& ch) {
    auto be = emulated();
    Endpoint ep(ch, be.get());
    constexpr int kMsgs = 200;
    if (rank == 0) {
      char* out = static_cast<char*>(be->alloc_device(0, kMsgs * kMax));
      for (int i = 0; i < kMsgs; ++i) device_put(*be, out + i * kMax, 0, seeded_bytes(i, size_of(i)));
      std::vector<RequestPtr> sends;
      for (int i = 0; i < kMsgs; ++i) sends.push_back(slot_send(ep, out + i * kMax, size_of(i), 1, 9));
      const int slots = ep.eager_slots()->count();
      RANK_CHECK(slots < kMsgs && ep.eager_slots()->taken() == static_cast<uint64_t>(slots) &&
                 ep.eager_slots()->held(1) == slots);
      unblock(fds[1]);
      for (auto& r : sends) ep.wait(r);
      be->free_device(out);
    } else {
      block_on(fds[0]);
      char* in = static_cast<char*>(be->alloc_device(1, kMax));
      for (int i = 0; i < kMsgs; ++i) {
        P2pStatus st = ep.recv(in, kMax, 0, 9, kComm);
        RANK_CHECK(st.bytes == size_of(i) && device_get(*be, in, 1, st.bytes) == seeded_bytes(i, size_of(i)));
      }
      be->free_device(in);
    }
    ep.flush();
  }));
  close(fds[0]);
  close(fds[1]);
}

// The sender dies while the receiver, which made no progress, holds nothing yet: the messages
// it sent still arrive whole, the next receive from it fails, and its area leaves no name.
TEST(P2pEagerSlots, KilledSendersMessagesStillArriveAndItsAreaGoes) {
  ScopedEnv to("GPUSTRIPE_TIMEOUT", "20");
  int fds[2];
  ASSERT_EQ(pipe(fds), 0);
  auto res = run_ranks(2, [&](int rank, ipc::Channel& ch) {
    auto be = emulated();
    const std::string area = ch.name() + "-eager-0-1";
    {
      Endpoint ep(ch, be.get());
      constexpr int kMsgs = 10;
      if (rank == 0) {
        char* out = static_cast<char*>(be->alloc_device(0, kMsgs * kMax));
        for (int i = 0; i < kMsgs; ++i) {
          device_put(*be, out + i * kMax, 0, seeded_bytes(300 + i, size_of(i)));
          ep.send(out + i * kMax, size_of(i), 1, i, kComm);
        }
        RANK_CHECK(ep.eager_slots()->held(1) == kMsgs);
        unblock(fds[1]);
        raise(SIGKILL);
      }
      block_on(fds[0]);
      wait_until_dead(ch, 0);
      RANK_CHECK(shm_exists(area));
      char* in = static_cast<char*>(be->alloc_device(1, kMax));
      for (int i = 0; i < kMsgs; ++i) {
        P2pStatus st = ep.recv(in, kMax, 0, i, kComm);
        RANK_CHECK(st.bytes == size_of(i) && device_get(*be, in, 1, st.bytes) == seeded_bytes(300 + i, size_of(i)));
      }
      RANK_CHECK(fails_with_peer_failed([&] { ep.recv(in, kMax, 0, 99, kComm); }));
      be->free_device(in);
    }
    RANK_CHECK(!shm_exists(area));
  });
  close(fds[0]);
  close(fds[1]);
  EXPECT_EQ(res[0].code, 128 + SIGKILL);
  EXPECT_EQ(res[1].code, 0);
}

// The receiver dies with every slot to it held: the sender's next sends fail with
// ERR_PEER_FAILED instead of waiting for a slot, and its area leaves no name when it goes.
TEST(P2pEagerSlots, KilledReceiverFailsTheSenderAndItsAreaGoes) {
  ScopedEnv to("GPUSTRIPE_TIMEOUT", "20");
  int fds[2];
  ASSERT_EQ(pipe(fds), 0);
  auto res = run_ranks(2, [&](int rank, ipc::Channel& ch) {
    auto be = emulated();
    const std::string area = ch.name() + "-eager-0-1";
    if (rank == 1) {
      Endpoint ep(ch, be.get());
      block_on(fds[0]);
      raise(SIGKILL);
    }
    {
      Endpoint ep(ch, be.get());
      char* out = static_cast<char*>(be->alloc_device(0, kMax));
      device_put(*be, out, 0, seeded_bytes(7, kMax));
      const int slots = ep.eager_slots()->count();
      for (int i = 0; i < slots; ++i) ep.send(out, kMax, 1, 0, kComm);
      RANK_CHECK(ep.eager_slots()->held(1) == slots && shm_exists(area));
      unblock(fds[1]);
      wait_until_dead(ch, 1);
      // more sends than its ring holds
      RANK_CHECK(fails_with_peer_failed([&] { for (int i = 0; i < 100000; ++i) ep.send(out, kMax, 1, 0, kComm); }));
      be->free_device(out);
    }
    RANK_CHECK(!shm_exists(area));
  });
  close(fds[0]);
  close(fds[1]);
  EXPECT_EQ(res[0].code, 0);
  EXPECT_EQ(res[1].code, 128 + SIGKILL);
}

// The sender is killed while its copy into the slot is still running (its copies take seconds):
// the receive fails with ERR_PEER_FAILED, and the receiver frees its memory and leaves without
// waiting for anything of the dead sender.
TEST(P2pEagerSlots, SenderKilledBeforeItsCopyLandedFailsTheReceiveWithoutAHang) {
  ScopedEnv to("GPUSTRIPE_TIMEOUT", "20");
  int fds[2];
  ASSERT_EQ(pipe(fds), 0);
  auto res = run_ranks(2, [&](int rank, ipc::Channel& ch) {
    if (rank == 0) setenv("GPUSTRIPE_TEST", "emu_gbps=0.000001", 1);  // 1 KB/s
    auto be = emulated();
    {
      Endpoint ep(ch, be.get());
      if (rank == 0) {
        char* out = static_cast<char*>(be->alloc_device(0, kMax));
        block_on(fds[0]);  // the receive is posted
        RequestPtr s = slot_send(ep, out, kMax, 1, 0);
        raise(SIGKILL);
      }
      char* in = static_cast<char*>(be->alloc_device(1, kMax));
      RequestPtr r = ep.irecv(in, kMax, 0, 0, kComm);
      unblock(fds[1]);
      RANK_CHECK(fails_with_peer_failed([&] { ep.wait(r); }));
      be->free_device(in);
    }
  });
  close(fds[0]);
  close(fds[1]);
  EXPECT_EQ(res[0].code, 128 + SIGKILL);
  EXPECT_EQ(res[1].code, 0);
}
