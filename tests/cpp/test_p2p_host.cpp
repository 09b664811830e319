// p2p send/recv across forked ranks with host buffers (no backend): MPI matching
// semantics, eager and streamed rendezvous, truncation, zero bytes, dead peers.
#include <gtest/gtest.h>
#include <signal.h>

#include <chrono>
#include <cstring>
#include <random>
#include <thread>

#include "p2p/endpoint.hpp"
#include "test_ipc_ranks.hpp"
#include "test_util.hpp"

using namespace gpustripe;
using namespace gpustripe::p2p;

namespace {

constexpr uint64_t kComm = 7;

// Deterministic content of message (from, tag, seq): any mix-up shows as a mismatch.
std::vector<unsigned char> pattern(int from, int tag, int seq, size_t n) {
  std::vector<unsigned char> v(n);
  std::mt19937 rng(static_cast<unsigned>(from * 1000003 + tag * 101 + seq));
  for (auto& b : v) b = static_cast<unsigned char>(rng());
  return v;
}

std::vector<size_t> sizes() {
  size_t e = eager_limit();
  return {0, 1, 7, 64, e - 1, e, e + 1, 100000, (1u << 20) + 3};
}

}  // namespace

TEST(P2pHost, RandomDataAllSizesAndTags) {
  EXPECT_RANKS_OK(run_ranks(2, [](int rank, ipc::Channel& ch) {
    Endpoint ep(ch, nullptr);
    int seq = 0;
    for (size_t n : sizes()) {
      for (int tag : {0, 5}) {
        if (rank == 0) {
          auto data = pattern(0, tag, seq, n);
          ep.send(data.data(), n, 1, tag, kComm);
        } else {
          std::vector<unsigned char> buf(n + 16, 0xee);
          P2pStatus st = ep.recv(buf.data(), buf.size(), 0, tag, kComm);
          RANK_CHECK(st.error == GPUSTRIPE_SUCCESS);
          RANK_CHECK(st.bytes == n && st.source == 0 && st.tag == tag);
          auto expect = pattern(0, tag, seq, n);
          RANK_CHECK(std::equal(expect.begin(), expect.end(), buf.begin()));
          RANK_CHECK(buf[n] == 0xee);  // nothing written past the message
        }
        ++seq;
      }
    }
  }));
}

TEST(P2pHost, OutOfOrderPostsMatchByTagAndKeepOrderPerTag) {
  EXPECT_RANKS_OK(run_ranks(2, [](int rank, ipc::Channel& ch) {
    Endpoint ep(ch, nullptr);
    size_t big = 200000;  // rendezvous
    if (rank == 0) {
      // tag 1 twice (order must hold), then tags 2 and 3, mixing eager and rendezvous.
      std::vector<RequestPtr> rs;
      std::vector<std::vector<unsigned char>> keep;
      int seq = 0;
      for (int tag : {1, 1, 2, 3}) {
        size_t n = (seq % 2) ? big : 100;
        keep.push_back(pattern(0, tag, seq++, n));
        rs.push_back(ep.isend(keep.back().data(), n, 1, tag, kComm));
      }
      for (auto& r : rs) ep.wait(r);
    } else {
      std::vector<std::vector<unsigned char>> bufs(4, std::vector<unsigned char>(big));
      // Posted in reverse: 3, 2, then the two tag-1 receives.
      auto r3 = ep.irecv(bufs[3].data(), big, 0, 3, kComm);
      auto r2 = ep.irecv(bufs[2].data(), big, 0, 2, kComm);
      auto r0 = ep.irecv(bufs[0].data(), big, 0, 1, kComm);
      auto r1 = ep.irecv(bufs[1].data(), big, kAnySource, kAnyTag, kComm);
      for (auto& r : {r3, r2, r0, r1}) ep.wait(r);
      int seq = 0;
      int tags[] = {1, 1, 2, 3};
      RequestPtr reqs[] = {r0, r1, r2, r3};
      for (int i = 0; i < 4; ++i, ++seq) {
        size_t n = (seq % 2) ? big : 100;
        RANK_CHECK(reqs[i]->status().bytes == n);
        RANK_CHECK(reqs[i]->status().tag == tags[i]);
        auto expect = pattern(0, tags[i], seq, n);
        RANK_CHECK(std::equal(expect.begin(), expect.end(), bufs[i].begin()));
      }
    }
  }));
}

TEST(P2pHost, AnySourceReceivesFromEveryRank) {
  EXPECT_RANKS_OK(run_ranks(4, [](int rank, ipc::Channel& ch) {
    Endpoint ep(ch, nullptr);
    constexpr int kPer = 20;
    if (rank != 0) {
      for (int i = 0; i < kPer; ++i) {
        size_t n = (i % 3 == 0) ? 50000 : 8;
        auto d = pattern(rank, 9, i, n);
        ep.send(d.data(), n, 0, 9, kComm);
      }
      return;
    }
    std::vector<int> next(4, 0);
    for (int k = 0; k < 3 * kPer; ++k) {
      std::vector<unsigned char> buf(50000);
      P2pStatus st = ep.recv(buf.data(), buf.size(), kAnySource, kAnyTag, kComm);
      RANK_CHECK(st.source >= 1 && st.source <= 3 && st.tag == 9);
      int i = next[st.source]++;  // per sender, in send order
      size_t n = (i % 3 == 0) ? 50000 : 8;
      RANK_CHECK(st.bytes == n);
      auto expect = pattern(st.source, 9, i, n);
      RANK_CHECK(std::equal(expect.begin(), expect.end(), buf.begin()));
    }
  }));
}

TEST(P2pHost, CommunicatorsDoNotMatchEachOther) {
  EXPECT_RANKS_OK(run_ranks(2, [](int rank, ipc::Channel& ch) {
    Endpoint ep(ch, nullptr);
    int a = 1, b = 2;
    if (rank == 0) {
      ep.send(&a, sizeof a, 1, 0, /*comm*/ 1);
      ep.send(&b, sizeof b, 1, 0, /*comm*/ 2);
    } else {
      int x = 0, y = 0;
      ep.recv(&y, sizeof y, 0, 0, 2);
      ep.recv(&x, sizeof x, 0, 0, 1);
      RANK_CHECK(x == 1 && y == 2);
    }
  }));
}

TEST(P2pHost, TruncationDeliversPrefixAndReportsError) {
  EXPECT_RANKS_OK(run_ranks(2, [](int rank, ipc::Channel& ch) {
    Endpoint ep(ch, nullptr);
    for (size_t n : {size_t{100}, size_t{300000}}) {
      auto d = pattern(0, 4, static_cast<int>(n), n);
      if (rank == 0) {
        ep.send(d.data(), n, 1, 4, kComm);  // the sender does not see the receiver's truncation
      } else {
        std::vector<unsigned char> buf(n / 2 + 1, 0);
        P2pStatus st = ep.recv(buf.data(), n / 2, 0, 4, kComm);
        RANK_CHECK(st.error == GPUSTRIPE_ERR_TRUNCATE);
        RANK_CHECK(st.bytes == n / 2 && st.message_bytes == n);
        RANK_CHECK(std::equal(buf.begin(), buf.begin() + n / 2, d.begin()));
        RANK_CHECK(buf[n / 2] == 0);
      }
    }
  }));
}

TEST(P2pHost, ZeroByteAndSynchronousAndSelf) {
  EXPECT_RANKS_OK(run_ranks(2, [](int rank, ipc::Channel& ch) {
    Endpoint ep(ch, nullptr);
    if (rank == 0) {
      ep.send(nullptr, 0, 1, 3, kComm);
      int v = 42;
      ep.send(&v, sizeof v, 1, 3, kComm, /*synchronous*/ true);
    } else {
      P2pStatus st = ep.recv(nullptr, 0, 0, 3, kComm);
      RANK_CHECK(st.bytes == 0 && st.error == GPUSTRIPE_SUCCESS);
      int v = 0;
      ep.recv(&v, sizeof v, 0, 3, kComm);
      RANK_CHECK(v == 42);
    }
    // To oneself, eager and rendezvous.
    for (size_t n : {size_t{16}, size_t{400000}}) {
      auto d = pattern(rank, 1, 0, n);
      std::vector<unsigned char> buf(n);
      auto s = ep.isend(d.data(), n, rank, 1, kComm);
      P2pStatus st = ep.recv(buf.data(), n, rank, 1, kComm);
      ep.wait(s);
      RANK_CHECK(st.bytes == n && buf == d);
    }
  }));
}

TEST(P2pHost, SynchronousSendWaitsForTheMatch) {
  EXPECT_RANKS_OK(run_ranks(2, [](int rank, ipc::Channel& ch) {
    Endpoint ep(ch, nullptr);
    int v = 5;
    if (rank == 0) {
      auto r = ep.isend(&v, sizeof v, 1, 0, kComm, true);
      auto t0 = std::chrono::steady_clock::now();
      while (std::chrono::steady_clock::now() - t0 < std::chrono::milliseconds(200)) RANK_CHECK(!ep.test(r));
      int go = 1;
      ep.send(&go, sizeof go, 1, 1, kComm);
      ep.wait(r);
    } else {
      int go = 0;
      ep.recv(&go, sizeof go, 0, 1, kComm);  // tag 1 first: tag 0 stays unmatched meanwhile
      int x = 0;
      ep.recv(&x, sizeof x, 0, 0, kComm);
      RANK_CHECK(x == 5 && go == 1);
    }
  }));
}

TEST(P2pHost, ProbeSeesSizeWithoutReceiving) {
  EXPECT_RANKS_OK(run_ranks(2, [](int rank, ipc::Channel& ch) {
    Endpoint ep(ch, nullptr);
    if (rank == 0) {
      std::vector<char> d(300000, 'x');
      ep.send(d.data(), d.size(), 1, 11, kComm);
    } else {
      P2pStatus none;
      RANK_CHECK(!ep.iprobe(0, 12, kComm, &none));
      P2pStatus st = ep.probe(kAnySource, kAnyTag, kComm);
      RANK_CHECK(st.source == 0 && st.tag == 11 && st.message_bytes == 300000);
      std::vector<char> buf(st.message_bytes);
      ep.recv(buf.data(), buf.size(), st.source, st.tag, kComm);
      RANK_CHECK(buf[299999] == 'x');
    }
  }));
}

TEST(P2pHost, KilledRankMidTransferEndsOthersWithPeerFailed) {
  ScopedEnv t("GPUSTRIPE_TIMEOUT", "20");
  auto t0 = std::chrono::steady_clock::now();
  auto res = run_ranks(3, [](int rank, ipc::Channel& ch) {
    Endpoint ep(ch, nullptr);
    std::vector<char> buf(1 << 20);
    if (rank == 1) {
      // Announce a rendezvous message, then die before sending its data.
      ep.isend(buf.data(), buf.size(), 0, 0, kComm);
      ep.progress();
      raise(SIGKILL);
    }
    if (rank == 0) ep.recv(buf.data(), buf.size(), 1, 0, kComm);
    if (rank == 2) ep.recv(buf.data(), buf.size(), kAnySource, 0, kComm);  // any source: any death ends it
  });
  double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_EQ(res[1].code, 128 + SIGKILL);
  EXPECT_EQ(res[0].code, error_code(GPUSTRIPE_ERR_PEER_FAILED));
  EXPECT_EQ(res[2].code, error_code(GPUSTRIPE_ERR_PEER_FAILED));
  EXPECT_LT(s, 10.0);
}

TEST(P2pHost, FinalizedPeerIsAClearErrorNotAHang) {
  auto res = run_ranks(2, [](int rank, ipc::Channel& ch) {
    Endpoint ep(ch, nullptr);
    if (rank == 1) {
      int v = 1;
      ep.send(&v, sizeof v, 0, 0, kComm);  // one message, then leave
      return;
    }
    int v = 0;
    ep.recv(&v, sizeof v, 1, 0, kComm);  // arrives even if rank 1 has left already
    RANK_CHECK(v == 1);
    ep.recv(&v, sizeof v, 1, 0, kComm);  // never sent
  });
  EXPECT_EQ(res[1].code, 0);
  EXPECT_EQ(res[0].code, error_code(GPUSTRIPE_ERR_PEER_FAILED));
}

TEST(P2pHost, BadArgumentsAreRejected) {
  EXPECT_RANKS_OK(run_ranks(2, [](int rank, ipc::Channel& ch) {
    Endpoint ep(ch, nullptr);
    int v = 0;
    auto status_of = [](auto&& f) {
      try {
        f();
      } catch (const Error& e) {
        return e.status();
      }
      return GPUSTRIPE_SUCCESS;
    };
    RANK_CHECK(status_of([&] { ep.isend(&v, 4, 2, 0, kComm); }) == GPUSTRIPE_ERR_INVALID_ARGUMENT);
    RANK_CHECK(status_of([&] { ep.isend(&v, 4, 1, -1, kComm); }) == GPUSTRIPE_ERR_INVALID_ARGUMENT);
    RANK_CHECK(status_of([&] { ep.isend(nullptr, 4, 1, 0, kComm); }) == GPUSTRIPE_ERR_INVALID_POINTER);
    RANK_CHECK(status_of([&] { ep.irecv(&v, 4, 5, 0, kComm); }) == GPUSTRIPE_ERR_INVALID_ARGUMENT);
  }));
}

TEST(P2pHost, CompletedSendsNeedNoMoreProgressFromTheSender) {
  // More eager data than the ring holds: a send completes only once its record is in
  // the ring, so a sender that then blocks elsewhere (a plain MPI call) cannot strand
  // records in its own queue.
  EXPECT_RANKS_OK(run_ranks(2, [](int rank, ipc::Channel& ch) {
    Endpoint ep(ch, nullptr);
    constexpr int kMessages = 100;
    size_t n = 8192;
    if (rank == 0) {
      std::vector<std::vector<unsigned char>> data;
      std::vector<RequestPtr> rs;
      for (int i = 0; i < kMessages; ++i) {
        data.push_back(pattern(0, 2, i, n));
        rs.push_back(ep.isend(data.back().data(), n, 1, 2, kComm));
      }
      for (auto& r : rs) ep.wait(r);
      std::this_thread::sleep_for(std::chrono::seconds(3));  // no progress meanwhile
    } else {
      auto t0 = std::chrono::steady_clock::now();
      std::vector<unsigned char> buf(n);
      for (int i = 0; i < kMessages; ++i) {
        ep.recv(buf.data(), n, 0, 2, kComm);
        auto expect = pattern(0, 2, i, n);
        RANK_CHECK(buf == expect);
      }
      RANK_CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(2));
    }
  }));
}

// A wait's polls make a progress pass only when one could change something (a record arrived,
// one waits to go out, a copy is in flight): polling a receive whose message has not come makes
// none, and the message's arrival makes the pass that delivers it. The lean receive takes a
// matching eager message alone; one behind another record, or with a receive posted, is left to
// the general path.
TEST(P2pHost, QuietPollsMakeNoPassAndTheLeanReceiveKeepsOrder) {
  EXPECT_RANKS_OK(run_ranks(2, [](int rank, ipc::Channel& ch) {
    Endpoint ep(ch, nullptr);
    char go = 0;
    if (rank == 0) {
      ep.recv(&go, 1, 1, 1, kComm);  // rank 1 polls its receive meanwhile
      std::this_thread::sleep_for(std::chrono::milliseconds(200));  // far longer than 1000 quiet polls
      const int a = 10, b = 20;
      ep.send(&a, sizeof a, 1, 2, kComm);
      ep.recv(&go, 1, 1, 5, kComm);  // rank 1 has taken it: the next two stay in the ring
      ep.send(&b, sizeof b, 1, 3, kComm);
      ep.send(&go, 1, 1, 4, kComm);
    } else {
      int got = 0;
      RequestPtr r = ep.irecv(&got, sizeof got, 0, 2, kComm);
      ep.send(&go, 1, 0, 1, kComm);
      const uint64_t passes = ep.progress_passes();
      for (int i = 0; i < 1000; ++i) RANK_CHECK(!ep.test(r));  // the sender sleeps
      RANK_CHECK(ep.progress_passes() == passes);
      ep.wait(r);
      RANK_CHECK(got == 10 && ep.progress_passes() > passes);
      ep.send(&go, 1, 0, 5, kComm);
      // Tag 3 then tag 4 from rank 0: the lean receive of tag 4 finds tag 3's record first and
      // leaves both to the general path; tag 3's, read meanwhile, is then taken from the
      // unexpected messages.
      int b = 0;
      char four = 0;
      P2pStatus st;
      Endpoint::Lean lean;
      while ((lean = ep.recv_now(&four, 1, 0, 4, kComm, &st)) == Endpoint::Lean::NotYet) {
      }
      RANK_CHECK(lean == Endpoint::Lean::Elsewhere);
      st = ep.recv(&four, 1, 0, 4, kComm);
      RANK_CHECK(st.error == GPUSTRIPE_SUCCESS && st.tag == 4);
      RANK_CHECK(ep.recv_now(&b, sizeof b, 0, 3, kComm, &st) == Endpoint::Lean::Taken);
      RANK_CHECK(b == 20 && st.tag == 3 && st.bytes == sizeof b && st.source == 0);
    }
  }));
}
