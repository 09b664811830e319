// A worker thread that runs a team's calls in the order they were posted, off the caller's
// thread (the PyTorch backend's asynchronous collectives: DDP's reducer posts them from the
// autograd thread, which then only pays for the hand-over, not for the ranks' meeting).
//
// Every rank posts the same calls in the same order, so each rank's worker meets the others'
// at the same call. A job that throws keeps its error: post(), drain() and check() throw it
// from then on (the caller learns at its next call or wait), and the jobs after it still run
// (a team's job fails at once after an earlier failure, and must still release what it holds).
#pragma once
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace gpustripe::mpi {

class CallQueue {
 public:
  CallQueue();
  // Runs what is queued, then ends the worker (no job is dropped: each must release its hold).
  ~CallQueue();
  CallQueue(const CallQueue&) = delete;
  CallQueue& operator=(const CallQueue&) = delete;

  // Jobs queued at most: a caller that gets this far ahead of the worker waits for it (each job
  // holds an event and its caller's buffers until it has run).
  static constexpr size_t kMaxQueued = 256;
  // Queues `job` and returns its number (1, 2, ...). Throws first where a job failed. Waits while
  // kMaxQueued jobs are queued (bounded as drain() is).
  uint64_t post(std::function<void()> job);
  // Returns once every job posted so far has run; throws the failed job's error. Bounded by
  // GPUSTRIPE_TIMEOUT without a job finishing (ERR_TIMEOUT naming `what`): each job's own waits
  // are bounded too, this only keeps a stuck worker from holding the caller forever.
  void drain(const char* what);
  // Returns once jobs 1..`job` have run (post()'s numbers); throws the error of one of them that
  // failed (a failure of a later job is not theirs). Bounded as drain() is.
  void wait(uint64_t job, const char* what);
  // Throws the error of a job that failed, if one did.
  void check() const;
  // Whether `job` runs on the worker (a job asks: the team's calls are not made from elsewhere).
  bool on_worker() const { return std::this_thread::get_id() == worker_.get_id(); }
  uint64_t posted() const;
  uint64_t done() const;
  // Whether every job posted so far has run (one look under the lock: posted() == done()).
  bool idle() const;
  // How long job `job` took from its post() to the end of its run, in microseconds (its wait
  // behind the jobs before it and its own run: for a team's call, the other ranks' hosts met and
  // the call enqueued); negative where it has not run yet or ran kLatenciesKept jobs ago or more.
  double latency_us(uint64_t job) const;
  static constexpr size_t kLatenciesKept = 4 * kMaxQueued;

 private:
  void work();
  // Waits (holding `lock`) until `done` is true, bounded by GPUSTRIPE_TIMEOUT without a job ending.
  template <class Done>
  void wait_for_jobs(std::unique_lock<std::mutex>& lock, const char* what, Done done);

  mutable std::mutex mu_;
  std::condition_variable more_;  // a job was posted, or the queue is ending
  std::condition_variable ran_;   // a job ran
  struct Posted {
    std::function<void()> run;
    std::chrono::steady_clock::time_point at;
  };
  std::deque<Posted> jobs_;
  uint64_t posted_ = 0, done_ = 0;
  // (job, latency_us) of the latest jobs run, at index job % kLatenciesKept
  std::vector<std::pair<uint64_t, double>> latencies_ = std::vector<std::pair<uint64_t, double>>(kLatenciesKept);
  std::exception_ptr error_;
  uint64_t failed_job_ = 0;  // the number of the job that set error_ (0: none failed)
  bool stop_ = false;
  std::thread worker_;
};

}  // namespace gpustripe::mpi
