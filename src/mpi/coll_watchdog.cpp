#include "mpi/coll_watchdog.hpp"

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <list>
#include <mutex>
#include <thread>

#include "common/error.hpp"
#include "common/log.hpp"
#include "ipc/wait.hpp"

namespace gpustripe::mpi {

using Clock = std::chrono::steady_clock;

struct WaitWatch::State {
  const std::string* what = nullptr;  // the watch's, borrowed
  const std::function<void()>* check = nullptr;
  const std::function<void()>* release = nullptr;
  Clock::time_point armed;
  double timeout_s = 0;
  std::atomic<bool> fired{false};
  Status status = GPUSTRIPE_SUCCESS;  // written before `fired` is set
  std::string message;
};

namespace {

// One thread for the whole process, started at the first watch and never stopped (it
// sleeps while nothing is armed): a thread per communicator or per call would cost more
// than the checks.
class Watchdog {
 public:
  static Watchdog& get() {
    // Never destroyed: its thread may outlive static destructors. A forked child has no
    // thread of its parent's: it starts its own.
    static std::atomic<Watchdog*> w{nullptr};
    Watchdog* cur = w.load(std::memory_order_acquire);
    if (!cur || cur->pid_ != getpid()) {
      static std::mutex start;
      std::lock_guard<std::mutex> l(start);
      cur = w.load(std::memory_order_acquire);
      if (!cur || cur->pid_ != getpid()) {
        cur = new Watchdog;
        w.store(cur, std::memory_order_release);
      }
    }
    return *cur;
  }
  // Arming is on every collective's path: it wakes the thread only where it sleeps for good
  // (idle a while). Waking it at every call would cost the caller a futex wake-up, and a peer
  // check run at once under the lock that the disarm then waits for, for waits that mostly end
  // within microseconds; the first check comes within one period.
  void arm(WaitWatch::State* s) {
    std::lock_guard<std::mutex> l(mu_);
    armed_.push_back(s);
    last_armed_ = s->armed;
    if (asleep_) cv_.notify_one();
  }
  void disarm(WaitWatch::State* s) {
    std::lock_guard<std::mutex> l(mu_);  // a check or release of `s` in progress ends first
    armed_.remove(s);
  }

 private:
  Watchdog() { std::thread([this] { loop(); }).detach(); }
  void loop() {
    std::unique_lock<std::mutex> l(mu_);
    for (;;) {
      // Between the calls of a busy program the thread keeps its period (no wake-up needed
      // at the next arm); a second after the last arming, it sleeps until armed.
      if (armed_.empty() && Clock::now() - last_armed_ > kIdleBeforeSleep) {
        asleep_ = true;
        cv_.wait(l, [this] { return !armed_.empty(); });
        asleep_ = false;
      } else {
        cv_.wait_for(l, kPeriod);
      }
      const Clock::time_point now = Clock::now();
      for (WaitWatch::State* s : armed_) {
        if (s->fired.load(std::memory_order_relaxed)) continue;
        try {
          if (*s->check) (*s->check)();
          const double waited = std::chrono::duration<double>(now - s->armed).count();
          if (s->timeout_s > 0 && waited > s->timeout_s)
            GS_THROW(GPUSTRIPE_ERR_TIMEOUT, "%s: not done after %.1f s (GPUSTRIPE_TIMEOUT=%g)", s->what->c_str(), waited,
                     s->timeout_s);
          continue;
        } catch (const Error& e) {
          s->status = e.status();
          s->message = format("%s: %s", s->what->c_str(), e.what());
        } catch (const std::exception& e) {
          s->status = GPUSTRIPE_ERR_INTERNAL;
          s->message = format("%s: %s", s->what->c_str(), e.what());
        }
        s->fired.store(true, std::memory_order_release);
        GS_LOG_WARN(Subsys::Mpi, "%s: releasing this rank's streams", s->message.c_str());
        try {
          (*s->release)();
        } catch (const std::exception& e) {
          GS_LOG_WARN(Subsys::Mpi, "%s: releasing the streams failed: %s", s->what->c_str(), e.what());
        }
      }
    }
  }

  static constexpr auto kPeriod = std::chrono::milliseconds(5);
  static constexpr auto kIdleBeforeSleep = std::chrono::seconds(1);
  const pid_t pid_ = getpid();
  bool asleep_ = false;                          // waiting for an arm (guarded by mu_)
  Clock::time_point last_armed_ = Clock::now();  // guarded by mu_
  std::mutex mu_;
  std::condition_variable cv_;
  std::list<WaitWatch::State*> armed_;
};

}  // namespace

WaitWatch::WaitWatch(const std::string& what, const std::function<void()>& check,
                     const std::function<void()>& release)
    : state_(new State) {
  state_->what = &what;
  state_->check = &check;
  state_->release = &release;
  state_->armed = Clock::now();
  state_->timeout_s = ipc::timeout_seconds();
  Watchdog::get().arm(state_);
}

WaitWatch::~WaitWatch() {
  Watchdog::get().disarm(state_);
  delete state_;
}

void WaitWatch::rethrow() const {
  if (state_->fired.load(std::memory_order_acquire)) GS_THROW(state_->status, "%s", state_->message.c_str());
}

}  // namespace gpustripe::mpi
