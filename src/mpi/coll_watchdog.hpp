// Watches the waits of a collective that no host loop polls.
//
// A rank's GPU streams wait on flags that other ranks' streams set (coll_slice.hpp). The
// host normally notices a dead peer while it polls for its streams (ipc::Waiter), but it
// can be stuck before that, inside a driver call that waits for the streams itself: a
// CUDA stream whose queue is full blocks the next enqueue, and a host reduction
// synchronizes its stream before reading. Behind a flag that a dead rank will never set
// that call never returns. A WaitWatch, armed while a rank enqueues and drains its part,
// has a thread of this process check the peers every few milliseconds and bound the
// wait by GPUSTRIPE_TIMEOUT; when either fails it runs `release` (which sets the awaited
// flags, so the streams and the blocked call move on) and keeps the error, which the
// caller throws once its streams are done (WaitWatch::rethrow).
#pragma once
#include <functional>
#include <string>

namespace gpustripe::mpi {

class WaitWatch {
 public:
  // `check` throws when a peer is gone; `release` lets this rank's streams past every wait
  // on the peers. Both run on the watchdog thread (they must not touch state the caller's
  // thread uses unguarded), and never after the destructor has returned. All three are
  // borrowed, not copied (a watch is armed on every stream-ordered call's path): they must
  // outlive the watch.
  WaitWatch(const std::string& what, const std::function<void()>& check, const std::function<void()>& release);
  ~WaitWatch();
  WaitWatch(const WaitWatch&) = delete;
  WaitWatch& operator=(const WaitWatch&) = delete;

  // Throws the error that fired the watch (the peer's death, or GPUSTRIPE_ERR_TIMEOUT);
  // nothing when it has not fired.
  void rethrow() const;

  struct State;

 private:
  State* state_;
};

}  // namespace gpustripe::mpi
