// What the two-process probes (one process per GPU, forked, sharing an anonymous mapping) signal
// with: a word one process writes and the other spins on, a cache line each so that two words
// never share one.
#pragma once
#include <atomic>
#include <cstdint>

struct alignas(64) Word {
  std::atomic<uint64_t> v;
  char pad[56];
};

// Returns once `w` holds `seq` or more.
inline void spin_until(const Word& w, uint64_t seq) {
  while (w.v.load(std::memory_order_acquire) < seq) {
  }
}
