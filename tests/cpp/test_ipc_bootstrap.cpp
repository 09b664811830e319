// ipc::Bootstrap's defaults (barrier, bcast and allreduce_max through allgather) over an allgather of
// threads, and FunctionBootstrap's argument checks.
#include <gtest/gtest.h>

#include <condition_variable>
#include <cstring>
#include <mutex>
#include <thread>
#include <vector>

#include "common/error.hpp"
#include "ipc/bootstrap.hpp"

using namespace gpustripe;
using namespace gpustripe::ipc;

namespace {

// An allgather among n threads: each round, every member deposits its bytes, the last one
// to arrive publishes the round, and every member copies it out.
class ThreadAllgather {
 public:
  explicit ThreadAllgather(int n) : n_(n), slots_(n) {}
  void operator()(int rank, const void* mine, size_t bytes, void* all) {
    std::unique_lock<std::mutex> l(m_);
    const uint64_t round = round_;
    slots_[rank].assign(static_cast<const char*>(mine), static_cast<const char*>(mine) + bytes);
    if (++arrived_ == n_) {
      published_.clear();
      for (auto& s : slots_) published_.insert(published_.end(), s.begin(), s.end());
      arrived_ = 0;
      ++round_;
      cv_.notify_all();
    } else {
      cv_.wait(l, [&] { return round_ != round; });
    }
    std::memcpy(all, published_.data(), published_.size());
    // Nobody starts the next round before everyone has copied this one out.
    if (++copied_ == n_) {
      copied_ = 0;
      ++copy_round_;
      cv_.notify_all();
    } else {
      cv_.wait(l, [&] { return copy_round_ != round; });
    }
  }

 private:
  int n_;
  std::mutex m_;
  std::condition_variable cv_;
  std::vector<std::vector<char>> slots_;
  std::vector<char> published_;
  int arrived_ = 0, copied_ = 0;
  uint64_t round_ = 0, copy_round_ = 0;
};

}  // namespace

TEST(IpcBootstrap, AllgatherBcastMaxAndBarrierAmongThreads) {
  constexpr int kN = 3;
  ThreadAllgather ag(kN);
  std::vector<std::vector<int>> gathered(kN);
  std::vector<std::vector<char>> names(kN);
  std::vector<std::vector<int>> maxima(kN);
  std::vector<std::thread> ts;
  for (int r = 0; r < kN; ++r)
    ts.emplace_back([&, r] {
      FunctionBootstrap b(r, kN, [&ag, r](const void* m, size_t n, void* all) { ag(r, m, n, all); });
      int mine = 10 * r + 1;
      gathered[r].resize(kN);
      b.allgather(&mine, sizeof mine, gathered[r].data());
      char name[16] = {};
      if (r == 1) std::strcpy(name, "from-rank-1");
      b.bcast(name, sizeof name, 1);
      names[r].assign(name, name + sizeof name);
      int agreed[2] = {r == 2 ? 7 : 0, r == 0 ? 5 : -1};  // the largest of each wins
      b.allreduce_max(agreed, 2);
      maxima[r].assign(agreed, agreed + 2);
      b.barrier();
    });
  for (auto& t : ts) t.join();
  for (int r = 0; r < kN; ++r) {
    EXPECT_EQ(gathered[r], (std::vector<int>{1, 11, 21}));
    EXPECT_STREQ(names[r].data(), "from-rank-1");
    EXPECT_EQ(maxima[r], (std::vector<int>{7, 5}));
  }
}

TEST(IpcBootstrap, RejectsBadRanksAndRoots) {
  auto noop = [](const void*, size_t, void*) {};
  EXPECT_THROW(FunctionBootstrap(2, 2, noop), Error);
  EXPECT_THROW(FunctionBootstrap(0, 0, noop), Error);
  EXPECT_THROW(FunctionBootstrap(0, 2, nullptr), Error);
  FunctionBootstrap one(0, 1, [](const void* m, size_t n, void* all) { std::memcpy(all, m, n); });
  char c = 'x';
  EXPECT_THROW(one.bcast(&c, 1, 1), Error);
  one.bcast(&c, 1, 0);
  EXPECT_EQ(c, 'x');
}
