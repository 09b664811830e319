// What the two-process probes (one process per GPU, forked, sharing an anonymous mapping) signal
// with: a word one process writes and the other spins on, a cache line each so that two words
// never share one; and the pair of processes itself (run_pair).
#pragma once
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <cstring>

struct alignas(64) Word {
  std::atomic<uint64_t> v;
  char pad[56];
};

// Returns once `w` holds `seq` or more.
inline void spin_until(const Word& w, uint64_t seq) {
  while (w.v.load(std::memory_order_acquire) < seq) {
  }
}

// Runs rank(shared, r) in two forked processes (r = 0, 1) over a zeroed anonymous mapping of a
// Shared both see, and waits for both; false if either failed. The calling process must not
// have touched CUDA (forked children would inherit its context).
template <class Shared, class Rank>
bool run_pair(Rank&& rank) {
  auto* sh = static_cast<Shared*>(
      mmap(nullptr, sizeof(Shared), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0));
  if (sh == MAP_FAILED) return false;
  memset(static_cast<void*>(sh), 0, sizeof(Shared));
  pid_t pids[2];
  for (int r = 0; r < 2; ++r) {
    pids[r] = fork();
    if (pids[r] == 0) {
      rank(sh, r);
      _exit(0);
    }
  }
  bool ok = true;
  for (pid_t p : pids) {
    int status = 0;
    waitpid(p, &status, 0);
    ok = ok && WIFEXITED(status) && WEXITSTATUS(status) == 0;
  }
  munmap(sh, sizeof(Shared));
  return ok;
}
