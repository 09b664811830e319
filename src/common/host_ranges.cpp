#include "common/host_ranges.hpp"

#include <pthread.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <mutex>

namespace gpustripe {
namespace {

// The start of the brk heap ([heap] in /proc/self/maps), read once; 0 when the process has none
// yet (the next call reads again). Its end is the current break, which glibc's sbrk(0) returns
// without a system call.
uintptr_t heap_start() {
  static std::mutex mu;
  static uintptr_t start = 0;
  std::lock_guard<std::mutex> lock(mu);
  if (start) return start;
  FILE* f = std::fopen("/proc/self/maps", "r");
  if (!f) return 0;
  char line[512];
  while (std::fgets(line, sizeof line, f)) {
    if (!std::strstr(line, "[heap]")) continue;
    unsigned long lo = 0, hi = 0;
    if (std::sscanf(line, "%lx-%lx", &lo, &hi) == 2) start = lo;
    break;
  }
  std::fclose(f);
  return start;
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
  const uintptr_t start = heap_start();
  return start && u >= start && u < reinterpret_cast<uintptr_t>(sbrk(0));
}

}  // namespace gpustripe
