#include "ipc/liveness.hpp"

#include <signal.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

namespace gpustripe::ipc {

namespace {

bool signalable(pid_t pid) { return !(kill(pid, 0) != 0 && errno == ESRCH); }

}  // namespace

bool process_alive(pid_t pid) {
  if (pid <= 0) return false;
  if (!signalable(pid)) return false;
  // kill() succeeds on a zombie: a killed rank whose parent (mpirun, a test) has
  // not reaped it yet. Its state letter in /proc says so.
  char path[64];
  std::snprintf(path, sizeof path, "/proc/%d/stat", static_cast<int>(pid));
  FILE* f = std::fopen(path, "r");
  // No entry (or nothing read from it): no procfs, where kill() is all there is to trust, or a
  // zombie reaped since kill() above, which kill() now tells too.
  if (!f) return signalable(pid);
  char buf[512];
  size_t n = std::fread(buf, 1, sizeof buf - 1, f);
  std::fclose(f);
  buf[n] = 0;
  const char* close_paren = std::strrchr(buf, ')');  // the command name may contain spaces
  if (!close_paren || close_paren[1] == 0) return signalable(pid);
  char state = close_paren[2];
  return state != 'Z' && state != 'X';
}

}  // namespace gpustripe::ipc
