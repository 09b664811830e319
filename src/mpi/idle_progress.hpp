// A thread that progresses the node's p2p endpoint while the application is away from the
// library: computing, or blocked inside a call the MPI serves itself (a message to another
// node, a collective on a communicator the interposer left to the MPI). Device messages are
// pulled by their receiver, so a sender's MPI_Send completes only once the receiver has copied
// the data (or, for small ones, into its scratch): without this thread a receiver blocked in
// PMPI_Recv on another node's message would never answer, and its node peer would wait forever.
// It also gives true overlap: an Isend's data moves while the program computes.
//
// The thread never calls MPI and never blocks the application: it takes the interposer's lock
// with try_lock, and only once nobody has progressed the endpoint for a while, so a program
// waiting on its local messages progresses by itself as before. The criterion is the endpoint's
// progress, not the application's calls: a wait on another node's message calls in without end
// (PMPI_Test under the lock, in turn) but progresses nothing here. It works on
// the device that was current on the thread that made it (CUDA calls switch devices per call
// and restore the current one: a thread on device 0 would make a context there).
#pragma once
#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <thread>

namespace gpustripe::mpi {

class IdleProgress {
 public:
  // `pass`: one progress pass, run under the interposer's lock; it reports whether work is in
  // flight (the thread then looks again soon, else it backs off). `last_ns`: steady_clock
  // nanoseconds of the endpoint's latest progress pass (by anyone). `start`: run once on the
  // thread before anything else (making the application's device current).
  IdleProgress(std::function<bool()> pass, std::function<int64_t()> last_ns, std::function<void()> start);
  // Stops the thread and joins it (in a forked child, where the thread does not exist, it is
  // left alone).
  ~IdleProgress();
  IdleProgress(const IdleProgress&) = delete;
  IdleProgress& operator=(const IdleProgress&) = delete;

 private:
  void run();

  std::function<bool()> pass_;
  std::function<int64_t()> last_ns_;
  std::function<void()> start_;
  std::atomic<bool> stop_{false};
  int pid_;
  std::unique_ptr<std::thread> thread_;
};

}  // namespace gpustripe::mpi
