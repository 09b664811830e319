#include "backend/emulated/shm_segment.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>

#include "common/error.hpp"
#include "common/log.hpp"

namespace gpustripe::emu {
namespace {

// Segment names: "/gpustripe.<pid>.<n>"; the pid tells whether the owner still lives.
constexpr const char* kSegmentPrefix = "gpustripe.";

std::string shm_free_text() {
  struct statvfs st {};
  if (statvfs("/dev/shm", &st) != 0) return "unknown";
  return format("%.1f GiB", static_cast<double>(st.f_bavail) * st.f_frsize / (1024.0 * 1024 * 1024));
}

// Closes a descriptor when the scope ends (the mapping outlives it).
struct FdCloser {
  int fd;
  ~FdCloser() {
    if (fd >= 0) close(fd);
  }
};

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
  int fd = shm_open(name.c_str(), O_RDWR | O_CREAT | O_EXCL, 0600);
  if (fd < 0 && errno == EEXIST) {
    // Left by a dead process whose pid this one reuses (a killed process frees nothing).
    remove_stale_segments();
    fd = shm_open(name.c_str(), O_RDWR | O_CREAT | O_EXCL, 0600);
  }
  if (fd < 0) GS_THROW(GPUSTRIPE_ERR_NO_MEMORY, "emulated GPU %d: shm_open(%s) failed: %s", device, name.c_str(), strerror(errno));
  FdCloser closer{fd};
  // posix_fallocate reserves the pages now: ftruncate alone would succeed and a
  // later write into a full /dev/shm would kill the process with SIGBUS.
  int rc = posix_fallocate(fd, 0, static_cast<off_t>(bytes));
  if (rc != 0) {
    shm_unlink(name.c_str());
    GS_THROW(GPUSTRIPE_ERR_NO_MEMORY, "emulated GPU %d: cannot reserve %zu bytes in /dev/shm (%s; %s free there)", device,
             bytes, strerror(rc), shm_free_text().c_str());
  }
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) {
    int err = errno;
    shm_unlink(name.c_str());
    GS_THROW(GPUSTRIPE_ERR_NO_MEMORY, "emulated GPU %d: mmap of %zu bytes failed: %s", device, bytes, strerror(err));
  }
  return p;
}

void* open_segment(const std::string& name, size_t bytes) {
  int fd = shm_open(name.c_str(), O_RDWR, 0);
  if (fd < 0)
    GS_THROW(GPUSTRIPE_ERR_INVALID_ARGUMENT, "cannot open emulated memory segment %s: %s (was it freed by its owner?)",
             name.c_str(), strerror(errno));
  FdCloser closer{fd};
  struct stat st {};
  if (fstat(fd, &st) != 0 || static_cast<size_t>(st.st_size) < bytes)
    GS_THROW(GPUSTRIPE_ERR_INVALID_ARGUMENT, "emulated memory segment %s holds %lld bytes, the handle says %zu",
             name.c_str(), static_cast<long long>(st.st_size), bytes);
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) GS_THROW(GPUSTRIPE_ERR_NO_MEMORY, "mmap of segment %s failed: %s", name.c_str(), strerror(errno));
  return p;
}

void unmap_segment(void* base, size_t bytes) noexcept { munmap(base, bytes); }

void unlink_segment(const std::string& name) noexcept { shm_unlink(name.c_str()); }

}  // namespace gpustripe::emu
