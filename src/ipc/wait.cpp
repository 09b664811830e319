#include "ipc/wait.hpp"

#include <sched.h>
#include <unistd.h>

#include <thread>

#include "common/config.hpp"
#include "common/error.hpp"

namespace gpustripe::ipc {
namespace {
const DoubleSetting kTimeout{"GPUSTRIPE_TIMEOUT", "300",
                             "Seconds a wait on another process (message, reply, copy) may last without progress "
                             "before it fails with GPUSTRIPE_ERR_TIMEOUT; 0: no limit. A dead peer is detected "
                             "sooner (process liveness)"};
constexpr auto kPeerCheckEvery = std::chrono::milliseconds(5);
}  // namespace

double timeout_seconds() {
  double t = kTimeout.get();
  GS_REQUIRE(t >= 0, GPUSTRIPE_ERR_CONFIG, "GPUSTRIPE_TIMEOUT: %g is negative", t);
  return t;
}

Waiter::Waiter(std::string what, std::function<void()> check_peers)
    : what_(std::move(what)), check_peers_(std::move(check_peers)), timeout_s_(timeout_seconds()) {
  start_ = last_check_ = std::chrono::steady_clock::now();
}

void Waiter::progressed() {
  start_ = std::chrono::steady_clock::now();
  spins_ = 0;
}

void Waiter::pause() {
  ++spins_;
  // Short messages are answered within microseconds: spin first, then give the core
  // away (ranks are often oversubscribed in CI), then sleep.
  if (spins_ < 200) {
  } else if (spins_ < 2000) {
    sched_yield();
  } else {
    std::this_thread::sleep_for(std::chrono::microseconds(spins_ < 20000 ? 20 : 200));
  }
  if ((spins_ & 63) != 0 && spins_ > 200) return;
  auto now = std::chrono::steady_clock::now();
  if (check_peers_ && now - last_check_ >= kPeerCheckEvery) {
    last_check_ = now;
    check_peers_();
  }
  if (timeout_s_ > 0 && std::chrono::duration<double>(now - start_).count() > timeout_s_)
    GS_THROW(GPUSTRIPE_ERR_TIMEOUT, "%s: no progress for %.1f s (GPUSTRIPE_TIMEOUT=%g)", what_.c_str(),
             std::chrono::duration<double>(now - start_).count(), timeout_s_);
}

}  // namespace gpustripe::ipc
