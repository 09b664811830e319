#include "backend/emulated/shm_segment.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>

#include "common/error.hpp"
#include "common/log.hpp"
#include "common/shm_map.hpp"
#include "common/shm_reclaim.hpp"

namespace gpustripe::emu {
namespace {

// Segment names: "/gpustripe.<pid>.<n>"; the pid tells whether the owner still lives
// (common/shm_reclaim.hpp).
constexpr const char* kSegmentPrefix = "gpustripe.";

}  // namespace

std::string new_segment_name() {
  static std::atomic<uint64_t> counter{0};
  return format("/%s%d.%llu", kSegmentPrefix, static_cast<int>(getpid()),
                static_cast<unsigned long long>(counter.fetch_add(1) + 1));
}

void* create_segment(const std::string& name, size_t bytes, int device) {
  ShmMapping m = shm_create_map(name, bytes);
  if (!m.ok() && m.error == EEXIST) {
    // Left by a dead process whose pid this one reuses (a killed process frees nothing).
    reclaim_dead_segments();
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
  if (std::strcmp(m.step, "owner") == 0)
    GS_THROW(GPUSTRIPE_ERR_INVALID_ARGUMENT, "emulated memory segment %s belongs to uid %ld, not to this user: refused",
             name.c_str(), m.owner);
  if (std::strcmp(m.step, "size") == 0)
    GS_THROW(GPUSTRIPE_ERR_INVALID_ARGUMENT, "emulated memory segment %s holds %zu bytes, the handle says %zu",
             name.c_str(), m.size, bytes);
  GS_THROW(GPUSTRIPE_ERR_NO_MEMORY, "%s of segment %s failed: %s", m.step, name.c_str(), strerror(m.error));
}

void unmap_segment(void* base, size_t bytes) noexcept { munmap(base, bytes); }

void unlink_segment(const std::string& name) noexcept { shm_unlink(name.c_str()); }

void* reserve_range(size_t bytes, int device) {
  void* p = mmap(nullptr, bytes, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  GS_REQUIRE(p != MAP_FAILED, GPUSTRIPE_ERR_NO_MEMORY, "emulated GPU %d: cannot reserve %zu bytes of addresses: %s",
             device, bytes, strerror(errno));
  return p;
}

void* create_memfd(size_t bytes, int device, int* fd, void* at) {
  int f = memfd_create("gpustripe-emu-vmm", MFD_CLOEXEC);
  GS_REQUIRE(f >= 0, GPUSTRIPE_ERR_NO_MEMORY, "emulated GPU %d: memfd_create failed: %s", device, strerror(errno));
  int rc = posix_fallocate(f, 0, static_cast<off_t>(bytes));
  if (rc != 0) {
    close(f);
    GS_THROW(GPUSTRIPE_ERR_NO_MEMORY, "emulated GPU %d: cannot reserve %zu bytes of memfd memory (%s; %s free in /dev/shm)",
             device, bytes, strerror(rc), shm_free_text().c_str());
  }
  void* p = mmap(at, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | (at ? MAP_FIXED : 0), f, 0);
  if (p == MAP_FAILED) {
    int err = errno;
    close(f);
    GS_THROW(GPUSTRIPE_ERR_NO_MEMORY, "emulated GPU %d: mmap of %zu bytes of memfd memory failed: %s", device, bytes,
             strerror(err));
  }
  *fd = f;
  return p;
}

void* map_memfd(int fd, size_t bytes) { return map_memfd_range(fd, 0, bytes); }

void* map_memfd_range(int fd, uint64_t offset, size_t bytes, void* at) {
  struct stat st {};
  GS_REQUIRE(fd >= 0 && fstat(fd, &st) == 0, GPUSTRIPE_ERR_INVALID_ARGUMENT,
             "emulated VMM import: file descriptor %d is not open", fd);
  GS_REQUIRE(static_cast<uint64_t>(st.st_size) >= offset + bytes, GPUSTRIPE_ERR_INVALID_ARGUMENT,
             "emulated VMM import: the memory holds %lld bytes, the handle says %zu at %llu",
             static_cast<long long>(st.st_size), bytes, static_cast<unsigned long long>(offset));
  void* p = mmap(at, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | (at ? MAP_FIXED : 0), fd, static_cast<off_t>(offset));
  GS_REQUIRE(p != MAP_FAILED, GPUSTRIPE_ERR_NO_MEMORY, "emulated VMM import: mmap of %zu bytes failed: %s", bytes,
             strerror(errno));
  return p;
}

void* create_private(size_t bytes, int device) {
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  GS_REQUIRE(p != MAP_FAILED, GPUSTRIPE_ERR_NO_MEMORY, "emulated GPU %d: %zu bytes of private memory not available: %s",
             device, bytes, strerror(errno));
  return p;
}

}  // namespace gpustripe::emu
