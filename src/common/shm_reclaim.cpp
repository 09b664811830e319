#include "common/shm_reclaim.hpp"

#include <dirent.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <mutex>

#include "common/config.hpp"
#include "common/log.hpp"

namespace gpustripe {
namespace {

bool parse_pid(const std::string& digits, int* pid) {
  if (digits.empty() || digits.size() > 9 || digits.find_first_not_of("0123456789") != std::string::npos) return false;
  *pid = std::atoi(digits.c_str());
  return *pid > 0;
}

bool all_hex(const std::string& s) { return !s.empty() && s.find_first_not_of("0123456789abcdef") == std::string::npos; }

// The creator's pid of a gpustripe segment name (without the leading '/'); false for any
// other name. "gpustripe.<pid>.<n>": emulated device memory (backend/emulated);
// "gpustripe-<tag>-<pid>-<hex>": ipc::unique_shm_name.
bool creator_of(const std::string& name, int* pid) {
  if (name.rfind("gpustripe.", 0) == 0) {
    const size_t dot = name.find('.', 10);
    if (dot == std::string::npos) return false;
    const std::string n = name.substr(dot + 1);
    return !n.empty() && n.find_first_not_of("0123456789") == std::string::npos && parse_pid(name.substr(10, dot - 10), pid);
  }
  if (name.rfind("gpustripe-", 0) == 0) {
    const size_t last = name.rfind('-');
    if (last == std::string::npos || last < 10 || !all_hex(name.substr(last + 1))) return false;
    const size_t before = name.rfind('-', last - 1);
    if (before == std::string::npos || before < 10) return false;  // a tag is required
    return parse_pid(name.substr(before + 1, last - before - 1), pid);
  }
  return false;
}

bool gone(int pid) { return kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH; }

}  // namespace

std::vector<LeftSegment> dead_segments(const std::string& in) {
  std::vector<LeftSegment> out;
  DIR* dir = opendir(in.c_str());
  if (!dir) return out;
  const uid_t me = geteuid();
  while (struct dirent* e = readdir(dir)) {
    const std::string name = e->d_name;
    int pid = 0;
    if (!creator_of(name, &pid) || !gone(pid)) continue;
    struct stat st {};
    const std::string path = in + "/" + name;
    if (lstat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode) || st.st_uid != me) continue;
    out.push_back(LeftSegment{"/" + name, static_cast<uint64_t>(st.st_size), pid});
  }
  closedir(dir);
  return out;
}

std::vector<LeftSegment> reclaim_dead_segments(const std::string& dir) noexcept {
  std::vector<LeftSegment> removed;
  try {
    for (LeftSegment& s : dead_segments(dir))
      if (unlink((dir + s.name).c_str()) == 0) removed.push_back(std::move(s));
  } catch (...) {  // out of memory while listing: nothing more is removed
  }
  return removed;
}

void reclaim_dead_segments_once() noexcept {
  static std::once_flag once;
  std::call_once(once, [] {
    std::vector<LeftSegment> removed = reclaim_dead_segments();
    uint64_t bytes = 0;
    for (const LeftSegment& s : removed) bytes += s.bytes;
    if (!removed.empty())
      GS_LOG_INFO(Subsys::Ipc, "removed %zu shared-memory segments (%s) left by gpustripe processes that died",
                  removed.size(), format_size(bytes).c_str());
  });
}

}  // namespace gpustripe
