#include "backend/emulated/emu_stream.hpp"

#include "common/log.hpp"

namespace gpustripe::emu {

void AsyncErrors::report(Status status, const std::string& message) {
  GS_LOG_ERROR(Subsys::Backend, "emulated stream operation failed: %s", message.c_str());
  std::lock_guard<std::mutex> lock(mu_);
  if (pending_) {
    ++more_;
    return;
  }
  pending_ = true;
  status_ = status;
  message_ = message;
  more_ = 0;
}

void AsyncErrors::rethrow_pending() {
  std::unique_lock<std::mutex> lock(mu_);
  if (!pending_) return;
  pending_ = false;
  std::string msg = message_;
  if (more_ > 0) msg += format(" (and %d later errors)", more_);
  Status status = status_;
  lock.unlock();
  throw Error(status, "asynchronous error in an emulated stream: " + msg);
}

void Mark::complete() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    at_ = Clock::now();
    done_ = true;
  }
  cv_.notify_all();
}

void Mark::wait() {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [&] { return done_; });
}

bool Mark::done() {
  std::lock_guard<std::mutex> lock(mu_);
  return done_;
}

Clock::time_point Mark::completed_at() {
  std::lock_guard<std::mutex> lock(mu_);
  return at_;
}

EmuStream::EmuStream(int device, InjectedDelay delay, AsyncErrors& errors)
    : device_(device), delay_(delay), errors_(errors), worker_([this] { run(); }) {}

EmuStream::~EmuStream() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  work_cv_.notify_one();
  worker_.join();
}

uint64_t EmuStream::enqueue(std::string what, Op op) {
  uint64_t ticket;
  {
    std::lock_guard<std::mutex> lock(mu_);
    queue_.push_back(Item{std::move(what), std::move(op)});
    ticket = ++enqueued_;
  }
  work_cv_.notify_one();
  return ticket;
}

uint64_t EmuStream::last_ticket() {
  std::lock_guard<std::mutex> lock(mu_);
  return enqueued_;
}

void EmuStream::wait_done(uint64_t ticket) {
  std::unique_lock<std::mutex> lock(mu_);
  done_cv_.wait(lock, [&] { return completed_ >= ticket; });
}

bool EmuStream::is_done(uint64_t ticket) {
  std::lock_guard<std::mutex> lock(mu_);
  return completed_ >= ticket;
}

void EmuStream::run() {
  for (;;) {
    Item item;
    {
      std::unique_lock<std::mutex> lock(mu_);
      work_cv_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stopping, and drained
      item = std::move(queue_.front());
      queue_.pop_front();
    }
    delay_.jitter();
    try {
      item.op();
    } catch (const Error& e) {
      errors_.report(e.status(), item.what + ": " + e.what());
    } catch (const std::exception& e) {
      errors_.report(GPUSTRIPE_ERR_INTERNAL, item.what + ": " + e.what());
    }
    {
      std::lock_guard<std::mutex> lock(mu_);
      ++completed_;
    }
    done_cv_.notify_all();
  }
}

}  // namespace gpustripe::emu
