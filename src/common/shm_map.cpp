#include "common/shm_map.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <cerrno>

#include "common/error.hpp"

namespace gpustripe {
namespace {

ShmMapping failed(const char* step, int err) {
  ShmMapping m;
  m.step = step;
  m.error = err;
  return m;
}

ShmMapping map_fd(int fd, size_t bytes) {
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  int err = errno;
  close(fd);  // the mapping outlives the descriptor
  if (p == MAP_FAILED) return failed("mmap", err);
  ShmMapping m;
  m.data = p;
  m.size = bytes;
  return m;
}

}  // namespace

ShmMapping shm_create_map(const std::string& name, size_t bytes) {
  if (bytes == 0) return failed("size", EINVAL);
  int fd = shm_open(name.c_str(), O_RDWR | O_CREAT | O_EXCL, 0600);
  if (fd < 0) return failed("shm_open", errno);
  int rc = posix_fallocate(fd, 0, static_cast<off_t>(bytes));
  if (rc != 0) {
    close(fd);
    shm_unlink(name.c_str());
    return failed("reserve", rc);
  }
  ShmMapping m = map_fd(fd, bytes);
  if (!m.ok()) shm_unlink(name.c_str());
  return m;
}

ShmMapping shm_open_map(const std::string& name, size_t bytes) {
  int fd = shm_open(name.c_str(), O_RDWR, 0);
  if (fd < 0) return failed("shm_open", errno);
  struct stat st {};
  if (fstat(fd, &st) != 0) {
    int err = errno;
    close(fd);
    return failed("fstat", err);
  }
  // Segments are made owner-only (0600) by their creator; one of another user here is not
  // ours, whatever its mode: another user may have made it under the name we expect.
  if (st.st_uid != geteuid()) {
    close(fd);
    ShmMapping m = failed("owner", EPERM);
    m.owner = static_cast<long>(st.st_uid);
    return m;
  }
  size_t have = static_cast<size_t>(st.st_size);
  if (have == 0 || have < bytes) {
    close(fd);
    ShmMapping m = failed("size", EINVAL);
    m.size = have;
    return m;
  }
  return map_fd(fd, bytes ? bytes : have);
}

std::string shm_free_text() {
  struct statvfs st {};
  if (statvfs("/dev/shm", &st) != 0) return "unknown";
  return format("%.1f GiB", static_cast<double>(st.f_bavail) * st.f_frsize / (1024.0 * 1024 * 1024));
}

}  // namespace gpustripe
