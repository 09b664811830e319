#include "mpi/call_queue.hpp"

#include <chrono>

#include "common/error.hpp"
#include "ipc/wait.hpp"

namespace gpustripe::mpi {

CallQueue::CallQueue() : worker_([this] { work(); }) {}

CallQueue::~CallQueue() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  more_.notify_one();
  worker_.join();
}

template <class Done>
void CallQueue::wait_for_jobs(std::unique_lock<std::mutex>& lock, const char* what, Done done) {
  const double limit = ipc::timeout_seconds();
  while (!done()) {
    const uint64_t before = done_;
    if (limit <= 0) {
      ran_.wait(lock);
    } else if (!ran_.wait_for(lock, std::chrono::duration<double>(limit), [&] { return done_ != before; })) {
      GS_THROW(GPUSTRIPE_ERR_TIMEOUT,
               "%s: the team's worker ran no queued collective for %.0f s (GPUSTRIPE_TIMEOUT; %llu of %llu done)",
               what, limit, static_cast<unsigned long long>(done_), static_cast<unsigned long long>(posted_));
    }
  }
}

uint64_t CallQueue::post(std::function<void()> job) {
  std::unique_lock<std::mutex> lock(mu_);
  wait_for_jobs(lock, "a collective queued", [this] { return jobs_.size() < kMaxQueued; });
  if (error_) std::rethrow_exception(error_);
  jobs_.push_back({std::move(job), std::chrono::steady_clock::now()});
  const uint64_t n = ++posted_;
  lock.unlock();
  more_.notify_one();
  return n;
}

void CallQueue::drain(const char* what) {
  std::unique_lock<std::mutex> lock(mu_);
  wait_for_jobs(lock, what, [this] { return done_ == posted_; });
  if (error_) std::rethrow_exception(error_);
}

void CallQueue::wait(uint64_t job, const char* what) {
  std::unique_lock<std::mutex> lock(mu_);
  wait_for_jobs(lock, what, [this, job] { return done_ >= job; });
  if (error_ && failed_job_ <= job) std::rethrow_exception(error_);
}

void CallQueue::check() const {
  std::lock_guard<std::mutex> lock(mu_);
  if (error_) std::rethrow_exception(error_);
}

uint64_t CallQueue::posted() const {
  std::lock_guard<std::mutex> lock(mu_);
  return posted_;
}

uint64_t CallQueue::done() const {
  std::lock_guard<std::mutex> lock(mu_);
  return done_;
}

bool CallQueue::idle() const {
  std::lock_guard<std::mutex> lock(mu_);
  return done_ == posted_;
}

double CallQueue::latency_us(uint64_t job) const {
  std::lock_guard<std::mutex> lock(mu_);
  const auto& kept = latencies_[job % kLatenciesKept];
  return job != 0 && job <= done_ && kept.first == job ? kept.second : -1.0;
}

void CallQueue::work() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    more_.wait(lock, [this] { return stop_ || !jobs_.empty(); });
    if (jobs_.empty()) return;  // stopping, and nothing left to run
    Posted job = std::move(jobs_.front());
    jobs_.pop_front();
    lock.unlock();
    std::exception_ptr failed;
    try {
      job.run();
    } catch (...) {
      failed = std::current_exception();
    }
    const double us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - job.at).count();
    lock.lock();
    ++done_;
    latencies_[done_ % kLatenciesKept] = {done_, us};
    if (failed && !error_) {
      error_ = failed;
      failed_job_ = done_;  // jobs run in the order they were posted
    }
    ran_.notify_all();
  }
}

}  // namespace gpustripe::mpi
