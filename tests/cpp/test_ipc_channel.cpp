// The node-local channel across forked processes: record order and contents
// through ring wrap-around, dead and silent peers, bad attaches.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <random>
#include <thread>

#include "ipc/liveness.hpp"
#include "ipc/shm_segment.hpp"
#include "ipc/wait.hpp"
#include "test_ipc_ranks.hpp"
#include "test_util.hpp"

using namespace gpustripe;
using namespace gpustripe::ipc;

namespace {

// Waits for one record from `src`, copying it out.
std::vector<char> recv_record(Channel& ch, int src) {
  Waiter w("test record", [&] { ch.check_peer(src, false); });
  size_t n = 0;
  const void* p;
  while (!(p = ch.peek(src, &n))) w.pause();
  std::vector<char> out(static_cast<const char*>(p), static_cast<const char*>(p) + n);
  ch.consume(src);
  return out;
}

void send_record(Channel& ch, int dst, const std::vector<char>& payload, uint32_t seq) {
  Waiter w("test send", [&] { ch.check_peer(dst, false); });
  while (!ch.try_send(dst, &seq, sizeof seq, payload.data(), payload.size())) w.pause();
}

}  // namespace

// A segment moved onto one that holds another: the old one is unmapped and its name removed, and
// the new one's name (longer than a string keeps inline) stays intact.
TEST(IpcShmSegment, MoveOntoANamedSegmentReleasesIt) {
  ShmSegment a = ShmSegment::create(unique_shm_name("test"), 4096);
  const std::string first = a.name();
  a = ShmSegment::create(unique_shm_name("test"), 8192);
  EXPECT_EQ(a.size(), 8192u);
  EXPECT_NE(a.name(), first);
  EXPECT_THROW(ShmSegment::open(first), Error);
  const std::string second = a.name();
  EXPECT_EQ(ShmSegment::open(second).size(), 8192u);
  a = ShmSegment{};
  EXPECT_EQ(a.data(), nullptr);
  EXPECT_THROW(ShmSegment::open(second), Error);
}

TEST(IpcChannel, RecordsArriveInOrderThroughWrapAround) {
  constexpr int kRecords = 3000;
  EXPECT_RANKS_OK(run_ranks(
      2,
      [](int rank, Channel& ch) {
        std::mt19937 rng(42);
        size_t max_payload = ch.max_record() - 64;
        if (rank == 0) {
          for (uint32_t i = 0; i < kRecords; ++i) {
            std::vector<char> p(rng() % max_payload);
            for (size_t k = 0; k < p.size(); ++k) p[k] = static_cast<char>(i * 31 + k);
            send_record(ch, 1, p, i);
          }
        } else {
          for (uint32_t i = 0; i < kRecords; ++i) {
            size_t expect = rng() % max_payload;
            std::vector<char> rec = recv_record(ch, 0);
            RANK_CHECK(rec.size() == sizeof(uint32_t) + expect);
            uint32_t seq;
            std::memcpy(&seq, rec.data(), sizeof seq);
            RANK_CHECK(seq == i);
            for (size_t k = 0; k < expect; ++k) RANK_CHECK(rec[sizeof seq + k] == static_cast<char>(i * 31 + k));
          }
        }
      },
      60, 16384));
}

// A record is published by its own length word, so the bytes a consumer finds where the next
// record will start must never read as one: payloads made of words that look like record lengths,
// records of sizes that make later ones start inside earlier payloads, lap after lap.
TEST(IpcChannel, BytesOfEarlierLapsAreNeverTakenForRecords) {
  constexpr int kRecords = 4000;
  EXPECT_RANKS_OK(run_ranks(
      2,
      [](int rank, Channel& ch) {
        std::mt19937 rng(7);
        const size_t max_payload = ch.max_record() - 64;
        auto size_of = [&](uint32_t i) { return i % 3 == 0 ? rng() % max_payload : 8 + 8 * (rng() % 8); };
        auto fill = [](std::vector<char>& p, uint32_t i) {
          for (size_t k = 0; k + sizeof(uint64_t) <= p.size(); k += sizeof(uint64_t)) {
            uint64_t looks_like_a_length = 16 + 8 * ((i + k) % 4);
            std::memcpy(p.data() + k, &looks_like_a_length, sizeof looks_like_a_length);
          }
        };
        if (rank == 0) {
          for (uint32_t i = 0; i < kRecords; ++i) {
            std::vector<char> p(size_of(i));
            fill(p, i);
            send_record(ch, 1, p, i);
          }
        } else {
          for (uint32_t i = 0; i < kRecords; ++i) {
            std::vector<char> expect(size_of(i));
            fill(expect, i);
            std::vector<char> rec = recv_record(ch, 0);
            RANK_CHECK(rec.size() == sizeof(uint32_t) + expect.size());
            uint32_t seq;
            std::memcpy(&seq, rec.data(), sizeof seq);
            RANK_CHECK(seq == i);
            RANK_CHECK(std::memcmp(rec.data() + sizeof seq, expect.data(), expect.size()) == 0);
          }
        }
      },
      60, 16384));
}

TEST(IpcChannel, RecordLargerThanAQuarterRingIsRefused) {
  EXPECT_RANKS_OK(run_ranks(2, [](int rank, Channel& ch) {
    if (rank != 0) return;
    std::vector<char> big(ch.max_record() + 1);
    uint32_t h = 0;
    try {
      ch.try_send(1, &h, sizeof h, big.data(), big.size());
      RANK_CHECK(false);
    } catch (const Error& e) {
      RANK_CHECK(e.status() == GPUSTRIPE_ERR_INVALID_SIZE);
    }
  }));
}

TEST(IpcChannel, KilledPeerFailsTheWaitQuickly) {
  ScopedEnv t("GPUSTRIPE_TIMEOUT", "30");
  auto t0 = std::chrono::steady_clock::now();
  auto res = run_ranks(2, [](int rank, Channel& ch) {
    if (rank == 1) raise(SIGKILL);
    recv_record(ch, 1);  // never sent
  });
  double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_EQ(res[1].code, 128 + SIGKILL);
  EXPECT_EQ(res[0].code, error_code(GPUSTRIPE_ERR_PEER_FAILED));
  EXPECT_LT(s, 10.0) << "a dead peer must be noticed from its pid, long before GPUSTRIPE_TIMEOUT";
}

// A process killed is dead to its peers whether its parent has reaped it yet (a zombie) or not,
// at every ask: a check that sees it reaped between its kill() probe and its /proc read must not
// take the missing entry for a live process (a peer's state read twice would go dead, alive).
TEST(IpcLiveness, AKilledProcessIsDeadAsAZombieAndOnceReaped) {
  EXPECT_TRUE(ipc::process_alive(getpid()));
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    pause();
    _exit(0);
  }
  EXPECT_TRUE(ipc::process_alive(child));
  ASSERT_EQ(kill(child, SIGKILL), 0);
  for (int i = 0; i < 5000 && ipc::process_alive(child); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  EXPECT_FALSE(ipc::process_alive(child));  // a zombie
  // Reaped while another thread keeps asking: never alive again.
  std::atomic<bool> seen_alive{false}, stop{false};
  std::thread asker([&] {
    while (!stop.load())
      if (ipc::process_alive(child)) seen_alive = true;
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(5));
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  std::this_thread::sleep_for(std::chrono::milliseconds(5));
  stop = true;
  asker.join();
  EXPECT_FALSE(seen_alive.load());
  EXPECT_FALSE(ipc::process_alive(child));
}

TEST(IpcChannel, SilentPeerTimesOut) {
  ScopedEnv t("GPUSTRIPE_TIMEOUT", "0.5");
  auto res = run_ranks(2, [](int rank, Channel& ch) {
    if (rank == 1) {
      std::this_thread::sleep_for(std::chrono::seconds(2));
      return;
    }
    recv_record(ch, 1);
  });
  EXPECT_EQ(res[0].code, error_code(GPUSTRIPE_ERR_TIMEOUT));
  EXPECT_EQ(res[1].code, 0);
}

// ready_within polls past ready_within_polls' few polls for as long as it is given, and no
// longer than until `ready` says so; given nothing, it is ready_within_polls.
TEST(IpcWait, ReadyWithinPollsUntilReadyOrItsTimeIsUp) {
  int polls = 0;
  auto on_poll = [&](int n) { return [&polls, n] { return ++polls >= n; }; };
  const int late = 10 * kPollsBeforeWaiter;
  EXPECT_TRUE(ready_within(std::chrono::seconds(60), on_poll(late)));
  EXPECT_EQ(polls, late);
  polls = 0;
  EXPECT_FALSE(ready_within(std::chrono::steady_clock::duration::zero(), on_poll(late)));
  EXPECT_EQ(polls, kPollsBeforeWaiter);
  polls = 0;
  EXPECT_FALSE(ready_within(std::chrono::microseconds(200), [&polls] {
    ++polls;
    return false;
  }));
  EXPECT_GE(polls, 2 * kPollsBeforeWaiter);  // polled on past the first few
}

TEST(IpcChannel, RankAttachedTwiceOrOutOfRangeIsRejected) {
  std::string name = unique_shm_name("test");
  ShmSegment seg = Channel::create_segment(name, 2);
  Channel a(ShmSegment::open(name), 0);
  EXPECT_THROW(Channel(ShmSegment::open(name), 0), Error);
  EXPECT_THROW(Channel(ShmSegment::open(name), 2), Error);
  EXPECT_FALSE(a.all_attached());
  EXPECT_EQ(a.peer_state(1), PeerState::Absent);
  EXPECT_THROW(ShmSegment::open("/gpustripe-test-does-not-exist"), Error);
  EXPECT_THROW(Channel::create_segment(name, 2), Error) << "an existing name must not be reused";
}

TEST(IpcChannel, RetiredTransfersFreeTheirSlot) {
  std::string name = unique_shm_name("board");
  ShmSegment seg = Channel::create_segment(name, 2);
  Channel a(ShmSegment::open(name), 0), b(ShmSegment::open(name), 1);
  int s = b.publish_transfer(1, 0, 4096);
  ASSERT_GE(s, 0);
  auto seen = a.transfers_of_others();
  ASSERT_EQ(seen.size(), 1u);
  EXPECT_EQ(seen[0].bytes, 4096u);
  EXPECT_TRUE(b.transfers_of_others().empty()) << "its own copies are not others'";
  b.retire_transfer(s);
  EXPECT_TRUE(a.transfers_of_others().empty()) << "retired copies are no longer in flight";
  // A full board refuses; a retired slot is taken again.
  int taken = 0, last = -1;
  for (int slot; (slot = b.publish_transfer(0, 1, 1)) >= 0; last = slot) ++taken;
  EXPECT_GT(taken, 0);
  EXPECT_EQ(a.transfers_of_others().size(), static_cast<size_t>(taken));
  b.retire_transfer(last);
  EXPECT_EQ(b.publish_transfer(3, 2, 1), last);
}

TEST(IpcChannel, TransferBoardShowsOtherRanksCopiesWhileTheyRun) {
  EXPECT_RANKS_OK(run_ranks(3, [](int rank, Channel& ch) {
    auto barrier_on = [&](int from, uint32_t step) {  // a record from `from` says "step done"
      if (rank == from) {
        for (int p = 0; p < ch.size(); ++p)
          if (p != rank) send_record(ch, p, {}, step);
      } else {
        std::vector<char> r = recv_record(ch, from);
        uint32_t got;
        std::memcpy(&got, r.data(), sizeof got);
        RANK_CHECK(got == step);
      }
    };
    int slot = -1;
    if (rank == 1) slot = ch.publish_transfer(1, 0, 1 << 20);
    if (rank == 2) ch.publish_transfer(2, 3, 4096);  // rank 2 then leaves: its entry is stale
    barrier_on(1, 1);
    if (rank == 2) return;
    // Rank 2 left (this waits for its record, sent before it left) but may still be alive:
    // wait until its slot says so.
    while (ch.peer_state(2) == PeerState::Alive) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    auto seen = ch.transfers_of_others();
    if (rank == 0) {
      RANK_CHECK(seen.size() == 1);
      RANK_CHECK(seen[0].src_dev == 1 && seen[0].dst_dev == 0 && seen[0].bytes == (1u << 20));
    } else {
      RANK_CHECK(seen.empty());  // its own copies are not "others"
    }
    barrier_on(0, 2);
    if (rank == 1) ch.retire_transfer(slot);
    barrier_on(1, 3);
    if (rank == 0) RANK_CHECK(ch.transfers_of_others().empty());
  }));
}
