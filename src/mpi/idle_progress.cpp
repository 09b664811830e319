#include "mpi/idle_progress.hpp"

#include <unistd.h>

#include <chrono>
#include <mutex>

#include "common/error.hpp"
#include "common/log.hpp"
#include "mpi/ops.hpp"

namespace gpustripe::mpi {
namespace {
// While work is in flight the thread looks every 20 us (a pulled message waits for the
// receiver's look); idle, it backs off to 1 ms, so ranks that wait elsewhere cost next to
// nothing (CI runs four ranks on two cores). The endpoint counts as left alone once nobody
// has progressed it for as long as the thread's current period.
constexpr std::chrono::microseconds kBusyPeriod{20}, kIdlePeriod{1000};
}  // namespace

IdleProgress::IdleProgress(std::function<bool()> pass, std::function<int64_t()> last_ns, std::function<void()> start)
    : pass_(std::move(pass)), last_ns_(std::move(last_ns)), start_(std::move(start)), pid_(getpid()) {
  thread_ = std::make_unique<std::thread>([this] { run(); });
}

IdleProgress::~IdleProgress() {
  stop_.store(true);
  if (getpid() != pid_) {
    (void)thread_.release();  // fork: the thread stayed in the parent
    return;
  }
  if (thread_ && thread_->joinable()) thread_->join();
}

void IdleProgress::run() {
  try {
    if (start_) start_();
  } catch (const Error& e) {
    GS_LOG_WARN(Subsys::Mpi, "idle progress: not started: %s", e.what());
    return;
  }
  auto period = kBusyPeriod;
  bool warned = false;
  while (!stop_.load(std::memory_order_relaxed)) {
    std::this_thread::sleep_for(period);
    const int64_t now = std::chrono::duration_cast<std::chrono::nanoseconds>(
                            std::chrono::steady_clock::now().time_since_epoch())
                            .count();
    if (now - last_ns_() < std::chrono::duration_cast<std::chrono::nanoseconds>(period).count()) continue;
    std::unique_lock<std::recursive_mutex> l(lock(), std::try_to_lock);
    if (!l.owns_lock() || stop_.load()) continue;
    bool busy = false;
    try {
      busy = pass_();
    } catch (const std::exception& e) {
      // The application's next call meets the same failure and reports it; said once here.
      if (!warned) GS_LOG_DEBUG(Subsys::Mpi, "idle progress: %s", e.what());
      warned = true;
    }
    period = busy ? kBusyPeriod : std::min(kIdlePeriod, period * 2);
  }
}

}  // namespace gpustripe::mpi
