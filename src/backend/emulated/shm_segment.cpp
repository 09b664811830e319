#include "backend/emulated/shm_segment.hpp"

#include <dirent.h>
#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>

#include "common/error.hpp"
#include "common/log.hpp"
#include "common/shm_map.hpp"

namespace gpustripe::emu {
namespace {

// Segment names: "/gpustripe.<pid>.<n>"; the pid tells whether the owner still lives.
constexpr const char* kSegmentPrefix = "gpustripe.";

}  // namespace

std::string new_segment_name() {
  static std::atomic<uint64_t> counter{0};
  return format("/%s%d.%llu", kSegmentPrefix, static_cast<int>(getpid()),
                static_cast<unsigned long long>(counter.fetch_add(1) + 1));
}

void remove_stale_segments() noexcept {
  DIR* dir = opendir("/dev/shm");
  if (!dir) return;
  const size_t prefix_len = strlen(kSegmentPrefix);
  int removed = 0;
  while (struct dirent* e = readdir(dir)) {
    if (strncmp(e->d_name, kSegmentPrefix, prefix_len) != 0) continue;
    char* end = nullptr;
    long pid = strtol(e->d_name + prefix_len, &end, 10);
    if (pid <= 0 || !end || *end != '.') continue;
    if (kill(static_cast<pid_t>(pid), 0) == 0 || errno != ESRCH) continue;  // owner alive (or not ours to judge)
    if (shm_unlink((std::string("/") + e->d_name).c_str()) == 0) ++removed;
  }
  closedir(dir);
  if (removed) GS_LOG_INFO(Subsys::Backend, "removed %d emulated memory segments left by processes that died", removed);
}

void* create_segment(const std::string& name, size_t bytes, int device) {
  ShmMapping m = shm_create_map(name, bytes);
  if (!m.ok() && m.error == EEXIST) {
    // Left by a dead process whose pid this one reuses (a killed process frees nothing).
    remove_stale_segments();
    m = shm_create_map(name, bytes);
  }
  if (m.ok()) return m.data;
  if (std::strcmp(m.step, "reserve") == 0)
    GS_THROW(GPUSTRIPE_ERR_NO_MEMORY, "emulated GPU %d: cannot reserve %zu bytes in /dev/shm (%s; %s free there)", device,
             bytes, strerror(m.error), shm_free_text().c_str());
  GS_THROW(GPUSTRIPE_ERR_NO_MEMORY, "emulated GPU %d: %s of segment %s (%zu bytes) failed: %s", device, m.step,
           name.c_str(), bytes, strerror(m.error));
}

void* open_segment(const std::string& name, size_t bytes) {
  ShmMapping m = shm_open_map(name, bytes);
  if (m.ok()) return m.data;
  if (std::strcmp(m.step, "shm_open") == 0)
    GS_THROW(GPUSTRIPE_ERR_INVALID_ARGUMENT, "cannot open emulated memory segment %s: %s (was it freed by its owner?)",
             name.c_str(), strerror(m.error));
  if (std::strcmp(m.step, "size") == 0)
    GS_THROW(GPUSTRIPE_ERR_INVALID_ARGUMENT, "emulated memory segment %s holds %zu bytes, the handle says %zu",
             name.c_str(), m.size, bytes);
  GS_THROW(GPUSTRIPE_ERR_NO_MEMORY, "%s of segment %s failed: %s", m.step, name.c_str(), strerror(m.error));
}

void unmap_segment(void* base, size_t bytes) noexcept { munmap(base, bytes); }

void unlink_segment(const std::string& name) noexcept { shm_unlink(name.c_str()); }

}  // namespace gpustripe::emu
