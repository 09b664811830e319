// Runs a test body as N ranks in forked processes over one node-local channel.
// The parent only creates the channel and reaps the children, so a killed rank is
// reaped at once (no zombie hides its death from liveness checks). A rank fails
// by throwing; RANK_CHECK throws with the expression and line.
#pragma once
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <functional>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "common/error.hpp"
#include "ipc/channel.hpp"
#include "ipc/shm_segment.hpp"

#define RANK_CHECK(cond)                                                                                      \
  do {                                                                                                        \
    if (!(cond)) throw std::runtime_error(std::string(__FILE__) + ":" + std::to_string(__LINE__) + ": " #cond); \
  } while (0)

// Exit codes of a rank: 0 done, 1 failed check or unexpected exception, 100 + status
// for a gpustripe::Error, 128 + signal when killed.
constexpr int kRankErrorBase = 100;

struct RankResult {
  int code = -1;
  bool timed_out = false;
};

// Forks n processes running body(rank); reaps them, killing all after timeout_s.
inline std::vector<RankResult> run_processes(int n, const std::function<void(int rank)>& body, double timeout_s = 60) {
  std::fflush(stdout);
  std::fflush(stderr);
  std::vector<pid_t> pids;
  for (int r = 0; r < n; ++r) {
    pid_t pid = fork();
    if (pid == 0) {
      int code = 0;
      try {
        body(r);
      } catch (const gpustripe::Error& e) {
        std::fprintf(stderr, "[rank %d] gpustripe error %s: %s\n", r, gpustripe::status_name(e.status()), e.what());
        code = kRankErrorBase + static_cast<int>(e.status());
      } catch (const std::exception& e) {
        std::fprintf(stderr, "[rank %d] failed: %s\n", r, e.what());
        code = 1;
      }
      std::fflush(stderr);
      _exit(code);
    }
    pids.push_back(pid);
  }
  std::vector<RankResult> results(n);
  auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  int left = n;
  while (left > 0) {
    int status = 0;
    pid_t done = waitpid(-1, &status, WNOHANG);
    if (done > 0) {
      for (int r = 0; r < n; ++r)
        if (pids[r] == done) {
          results[r].code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
          pids[r] = -1;
          --left;
        }
      continue;
    }
    if (std::chrono::steady_clock::now() > deadline) {
      for (int r = 0; r < n; ++r)
        if (pids[r] > 0) {
          kill(pids[r], SIGKILL);
          waitpid(pids[r], nullptr, 0);
          results[r].timed_out = true;
        }
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  return results;
}

// n ranks attached to one fresh channel (made by this, the parent, process).
inline std::vector<RankResult> run_ranks(int n, const std::function<void(int rank, gpustripe::ipc::Channel& ch)>& body,
                                         double timeout_s = 60, size_t ring_bytes = 0) {
  std::string name = gpustripe::ipc::unique_shm_name("test");
  gpustripe::ipc::ShmSegment seg = gpustripe::ipc::Channel::create_segment(name, n, ring_bytes);
  return run_processes(
      n,
      [&](int r) {
        gpustripe::ipc::Channel ch(gpustripe::ipc::ShmSegment::open(name), r);
        ch.wait_all_attached();
        body(r, ch);
      },
      timeout_s);
}

inline int error_code(gpustripe_status_t s) { return kRankErrorBase + static_cast<int>(s); }

#define EXPECT_RANKS_OK(results)                                                 \
  do {                                                                           \
    auto res_ = (results);                                                       \
    for (size_t r_ = 0; r_ < res_.size(); ++r_) {                                \
      EXPECT_FALSE(res_[r_].timed_out) << "rank " << r_ << " hung";              \
      EXPECT_EQ(res_[r_].code, 0) << "rank " << r_ << " failed (see its stderr)"; \
    }                                                                            \
  } while (0)
