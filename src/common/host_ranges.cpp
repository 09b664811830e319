#include "common/host_ranges.hpp"

#include <pthread.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <mutex>

namespace gpustripe {
namespace {

// The start of the brk heap ([heap] in /proc/self/maps), read once found; 0 while the process has
// none, read again only once the break has moved (every MPI call on host memory asks). The heap's
// end is the current break, which glibc's sbrk(0) returns without a system call.
uintptr_t heap_start(uintptr_t brk_now) {
  static std::atomic<uintptr_t> start{0};
  static std::atomic<uintptr_t> brk_read{0};  // the break when the maps last showed no heap
  if (uintptr_t s = start.load(std::memory_order_acquire)) return s;
  if (brk_read.load(std::memory_order_relaxed) == brk_now) return 0;
  static std::mutex mu;
  std::lock_guard<std::mutex> lock(mu);
  if (uintptr_t s = start.load(std::memory_order_acquire)) return s;
  FILE* f = std::fopen("/proc/self/maps", "r");
  if (!f) return 0;
  char line[512];
  uintptr_t found = 0;
  while (std::fgets(line, sizeof line, f)) {
    if (!std::strstr(line, "[heap]")) continue;
    unsigned long lo = 0, hi = 0;
    if (std::sscanf(line, "%lx-%lx", &lo, &hi) == 2) found = lo;
    break;
  }
  std::fclose(f);
  if (found) start.store(found, std::memory_order_release);
  else brk_read.store(brk_now, std::memory_order_relaxed);
  return found;
}

struct Stack {
  uintptr_t lo = 0, hi = 0;
  bool known = false;
};

const Stack& own_stack() {
  thread_local Stack s;
  if (s.known) return s;
  s.known = true;
  pthread_attr_t attr;
  if (pthread_getattr_np(pthread_self(), &attr) != 0) return s;
  void* addr = nullptr;
  size_t size = 0;
  if (pthread_attr_getstack(&attr, &addr, &size) == 0) {
    s.lo = reinterpret_cast<uintptr_t>(addr);
    s.hi = s.lo + size;
  }
  pthread_attr_destroy(&attr);
  return s;
}

}  // namespace

bool in_heap_or_own_stack(const void* p) {
  const uintptr_t u = reinterpret_cast<uintptr_t>(p);
  const Stack& s = own_stack();
  if (u >= s.lo && u < s.hi) return true;
  const uintptr_t brk_now = reinterpret_cast<uintptr_t>(sbrk(0));
  const uintptr_t start = heap_start(brk_now);
  return start && u >= start && u < brk_now;
}

}  // namespace gpustripe
