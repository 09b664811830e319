#include "ipc/wait.hpp"

#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <thread>

#include "common/config.hpp"
#include "common/error.hpp"

namespace gpustripe::ipc {
namespace {
const DoubleSetting kTimeout{"GPUSTRIPE_TIMEOUT", "300",
                             "Seconds a wait on another process (message, reply, copy) may last without progress "
                             "before it fails with GPUSTRIPE_ERR_TIMEOUT; 0: no limit. A dead peer is detected "
                             "sooner (process liveness)"};
// How long a wait polls without sleeping (it spins, then yields the core) before it sleeps
// between polls. A sleep costs up to ~70 us of wake-up (timer slack): large rendezvous copies
// take 0.1-3 ms, and their waits must not sleep.
constexpr double kPollMs = 20;
// How long a wait spins before it starts yielding the core. By time, not by polls: a wait whose
// polls are light (a few loads while nothing has arrived) made its couple of hundred spins in a
// few microseconds, and every yield after them put a trip through the scheduler between the
// awaited write and the poll that sees it. Short enough that ranks sharing a core (CI) still hand
// it over within a small part of a time slice.
constexpr auto kSpinFor = std::chrono::microseconds(50);
constexpr auto kPeerCheckEvery = std::chrono::milliseconds(5);
}  // namespace

double timeout_seconds() {
  double t = kTimeout.get();
  GS_REQUIRE(t >= 0, GPUSTRIPE_ERR_CONFIG, "GPUSTRIPE_TIMEOUT: %g is negative", t);
  return t;
}

Waiter::Waiter(std::string what, std::function<void()> check_peers)
    : what_(std::move(what)),
      check_peers_(std::move(check_peers)),
      timeout_s_(timeout_seconds()),
      poll_(std::chrono::duration_cast<std::chrono::steady_clock::duration>(
          std::chrono::duration<double, std::milli>(kPollMs))) {
  start_ = last_check_ = std::chrono::steady_clock::now();
}

void Waiter::progressed() {
  start_ = std::chrono::steady_clock::now();
  spins_ = 0;
}

void Waiter::pause() {
  ++spins_;
  // The first spins only poll, without reading the clock (a vDSO call in every spin of a
  // short wait): the peers and the timeout are looked at every 64 of them.
  if (spins_ < 200 && (spins_ & 63) != 0) return;
  // Short messages are answered within microseconds: spin first, then give the core
  // away (ranks are often oversubscribed in CI), and sleep only once the wait has
  // lasted kPollMs. The back-off is by time, not by count: counted
  // polls reached the sleeps after ~0.6 ms, inside a 256 MB copy, whose completion
  // was then seen up to a sleep's wake-up late (window-1 bandwidth 0.925x native).
  auto now = std::chrono::steady_clock::now();
  auto idle = now - start_;
  if (spins_ < 200 || idle < kSpinFor) {
  } else if (idle < poll_) {
    sched_yield();
  } else {
    std::this_thread::sleep_for(std::chrono::microseconds(idle < poll_ + std::chrono::milliseconds(100) ? 20 : 200));
  }
  if ((spins_ & 63) != 0 && spins_ > 200) return;
  if (check_peers_ && now - last_check_ >= kPeerCheckEvery) {
    last_check_ = now;
    check_peers_();
  }
  if (timeout_s_ > 0 && std::chrono::duration<double>(now - start_).count() > timeout_s_)
    GS_THROW(GPUSTRIPE_ERR_TIMEOUT, "%s: no progress for %.1f s (GPUSTRIPE_TIMEOUT=%g)", what_.c_str(),
             std::chrono::duration<double>(now - start_).count(), timeout_s_);
}

}  // namespace gpustripe::ipc
