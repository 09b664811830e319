#include "ipc/shm_segment.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <random>

#include "common/error.hpp"

namespace gpustripe::ipc {

static void* map_fd(int fd, size_t bytes, const std::string& name) {
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  int err = errno;
  close(fd);
  if (p == MAP_FAILED)
    GS_THROW(GPUSTRIPE_ERR_NO_MEMORY, "mmap of shared memory '%s' (%zu bytes): %s", name.c_str(), bytes,
             strerror(err));
  return p;
}

ShmSegment ShmSegment::create(const std::string& name, size_t bytes) {
  GS_REQUIRE(bytes > 0, GPUSTRIPE_ERR_INVALID_SIZE, "shared memory '%s': zero size", name.c_str());
  int fd = shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
  if (fd < 0) GS_THROW(GPUSTRIPE_ERR_IO, "shm_open('%s', create): %s", name.c_str(), strerror(errno));
  if (ftruncate(fd, static_cast<off_t>(bytes)) != 0) {
    int err = errno;
    close(fd);
    shm_unlink(name.c_str());
    GS_THROW(GPUSTRIPE_ERR_NO_MEMORY, "sizing shared memory '%s' to %zu bytes: %s", name.c_str(), bytes,
             strerror(err));
  }
  ShmSegment s;
  s.name_ = name;
  s.linked_ = true;
  try {
    s.data_ = map_fd(fd, bytes, name);
  } catch (...) {
    shm_unlink(name.c_str());
    throw;
  }
  s.size_ = bytes;
  return s;
}

ShmSegment ShmSegment::open(const std::string& name) {
  int fd = shm_open(name.c_str(), O_RDWR, 0600);
  if (fd < 0) GS_THROW(GPUSTRIPE_ERR_IO, "shm_open('%s'): %s", name.c_str(), strerror(errno));
  struct stat st {};
  if (fstat(fd, &st) != 0 || st.st_size <= 0) {
    close(fd);
    GS_THROW(GPUSTRIPE_ERR_IO, "shared memory '%s' has no size", name.c_str());
  }
  ShmSegment s;
  s.name_ = name;
  s.data_ = map_fd(fd, static_cast<size_t>(st.st_size), name);
  s.size_ = static_cast<size_t>(st.st_size);
  return s;
}

ShmSegment& ShmSegment::operator=(ShmSegment&& o) noexcept {
  if (this != &o) {
    this->~ShmSegment();
    name_ = std::move(o.name_);
    data_ = o.data_;
    size_ = o.size_;
    linked_ = o.linked_;
    o.data_ = nullptr;
    o.size_ = 0;
    o.linked_ = false;
  }
  return *this;
}

ShmSegment::~ShmSegment() {
  if (data_) munmap(data_, size_);
  if (linked_) shm_unlink(name_.c_str());
  data_ = nullptr;
  linked_ = false;
}

void ShmSegment::unlink() {
  if (linked_) shm_unlink(name_.c_str());
  linked_ = false;
}

std::string unique_shm_name(const std::string& tag) {
  std::random_device rd;
  uint64_t r = (static_cast<uint64_t>(rd()) << 32) ^ rd();
  return format("/gpustripe-%s-%d-%016llx", tag.c_str(), static_cast<int>(getpid()),
                static_cast<unsigned long long>(r));
}

}  // namespace gpustripe::ipc
