// Streams and events of the emulated backend.
//
// A stream is a worker thread draining an in-order queue. Each enqueued operation
// gets a ticket (1, 2, ...); the stream counts completed tickets, so "everything
// enqueued so far is done" is a ticket comparison.
//
// An event holds a Mark: the completion of one record_event. Each record makes a new
// Mark and enqueues its completion on the stream; wait_event captures the Mark the
// event holds at that moment, so a later re-record does not move an earlier wait
// (CUDA semantics). An event never recorded holds no Mark and counts as complete.
#pragma once
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "backend/emulated/injected_delay.hpp"
#include "common/error.hpp"

namespace gpustripe::emu {

using Clock = std::chrono::steady_clock;

// Errors raised while a worker executes an operation. They cannot be thrown to the
// caller that enqueued the work, so they wait here for the next synchronize call.
class AsyncErrors {
 public:
  void report(Status status, const std::string& message);
  // Throws the first error reported since the last call (with a count of later ones), and clears.
  void rethrow_pending();

 private:
  std::mutex mu_;
  bool pending_ = false;
  Status status_ = GPUSTRIPE_SUCCESS;
  std::string message_;
  int more_ = 0;
};

class Mark {
 public:
  void complete();
  void wait();
  bool done();
  Clock::time_point completed_at();

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool done_ = false;
  Clock::time_point at_{};
};

struct EmuEvent {
  EmuEvent(int dev, bool t) : device(dev), timing(t) {}
  const int device;
  const bool timing;
  std::mutex mu;
  std::shared_ptr<Mark> mark;  // the latest record; null: never recorded

  std::shared_ptr<Mark> current() {
    std::lock_guard<std::mutex> lock(mu);
    return mark;
  }
};

class EmuStream {
 public:
  using Op = std::function<void()>;
  EmuStream(int device, InjectedDelay delay, AsyncErrors& errors);
  // Runs what is queued, then stops the worker.
  ~EmuStream();
  EmuStream(const EmuStream&) = delete;
  EmuStream& operator=(const EmuStream&) = delete;

  int device() const { return device_; }
  // Queues op; `what` names it in an error report. Returns its ticket.
  uint64_t enqueue(std::string what, Op op);
  // The ticket of the last operation enqueued so far.
  uint64_t last_ticket();
  // Blocks until every operation up to `ticket` has run.
  void wait_done(uint64_t ticket);
  bool is_done(uint64_t ticket);

 private:
  struct Item {
    std::string what;
    Op op;
  };
  void run();

  const int device_;
  const InjectedDelay delay_;
  AsyncErrors& errors_;
  std::mutex mu_;
  std::condition_variable work_cv_, done_cv_;
  std::deque<Item> queue_;
  uint64_t enqueued_ = 0, completed_ = 0;
  bool stopping_ = false;
  std::thread worker_;
};

}  // namespace gpustripe::emu
