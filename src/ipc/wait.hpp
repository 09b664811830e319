// Bounded waiting for the cross-process layers. Every wait on another process
// (a ring slot, a peer's reply, a copy into a peer's buffer) goes through a
// Waiter, so a dead or silent peer ends in ERR_PEER_FAILED / ERR_TIMEOUT with a
// message instead of a hang.
//   GPUSTRIPE_TIMEOUT  seconds one wait may last without progress (0: no limit)
#pragma once
#include <chrono>
#include <functional>
#include <string>

namespace gpustripe::ipc {

// GPUSTRIPE_TIMEOUT in seconds; 0 disables the limit.
double timeout_seconds();

// Fruitless polls a wait on messages makes before it builds its Waiter (the message naming the
// wait, the timeout setting read: about a microsecond of host time). A receive posted just before
// its message arrives polls again at once instead, and does not add that time to the message's
// latency. Bounded: a Waiter's own first polls spin without a check too, so its peer checks and
// its timeout start only these few polls later.
constexpr int kPollsBeforeWaiter = 64;

// Polls `ready` up to kPollsBeforeWaiter times, true as soon as it is: what a wait does before it
// builds its Waiter, so that a peer a few hundred nanoseconds behind costs no Waiter.
template <class Ready>
bool ready_within_polls(Ready&& ready) {
  for (int polls = 0; polls < kPollsBeforeWaiter; ++polls)
    if (ready()) return true;
  return false;
}

// Polls `ready` without yielding the core until it is true or `spin` has passed (the clock
// read once per kPollsBeforeWaiter polls); true as soon as it is. For a wait whose end is
// expected within `spin` and whose polls are light: a Waiter starts yielding after 50 us, and
// every yield puts a trip through the scheduler between the awaited write and the poll that
// sees it. Zero: ready_within_polls.
template <class Ready>
bool ready_within(std::chrono::steady_clock::duration spin, Ready&& ready) {
  if (ready_within_polls(ready)) return true;
  if (spin <= std::chrono::steady_clock::duration::zero()) return false;
  const auto end = std::chrono::steady_clock::now() + spin;
  do {
    if (ready_within_polls(ready)) return true;
  } while (std::chrono::steady_clock::now() < end);
  return false;
}

// Polls with growing back-off (spin for the first 50 us, then yield, then short sleeps once
// the wait has lasted 20 ms). `check_peers`
// runs every few milliseconds and throws when a peer is gone.
class Waiter {
 public:
  // `what` names the wait in the timeout message ("recv from rank 2, tag 7").
  explicit Waiter(std::string what, std::function<void()> check_peers = {});
  // One poll step: sleeps as the back-off says, checks peers now and then, and
  // throws ERR_TIMEOUT when the deadline has passed.
  void pause();
  // Progress was made: the deadline restarts and the back-off resets.
  void progressed();

 private:
  std::string what_;
  std::function<void()> check_peers_;
  double timeout_s_;
  std::chrono::steady_clock::duration poll_;  // how long it polls before it sleeps
  std::chrono::steady_clock::time_point start_, last_check_;
  unsigned spins_ = 0;
};

}  // namespace gpustripe::ipc
