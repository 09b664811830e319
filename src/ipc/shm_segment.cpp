#include "ipc/shm_segment.hpp"

#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <random>

#include "common/error.hpp"
#include "common/shm_map.hpp"

namespace gpustripe::ipc {

ShmSegment ShmSegment::create(const std::string& name, size_t bytes) {
  GS_REQUIRE(bytes > 0, GPUSTRIPE_ERR_INVALID_SIZE, "shared memory '%s': zero size", name.c_str());
  ShmMapping m = shm_create_map(name, bytes);
  if (!m.ok())
    GS_THROW(std::strcmp(m.step, "shm_open") == 0 ? GPUSTRIPE_ERR_IO : GPUSTRIPE_ERR_NO_MEMORY,
             "shared memory '%s' (%zu bytes): %s failed: %s", name.c_str(), bytes, m.step, strerror(m.error));
  ShmSegment s;
  s.name_ = name;
  s.linked_ = true;
  s.data_ = m.data;
  s.size_ = m.size;
  return s;
}

ShmSegment ShmSegment::open(const std::string& name) {
  ShmMapping m = shm_open_map(name);
  if (!m.ok() && std::strcmp(m.step, "owner") == 0)
    GS_THROW(GPUSTRIPE_ERR_INVALID_ARGUMENT, "shared memory '%s' belongs to uid %ld, not to this user (uid %d): refused "
             "(another user made a segment under this job's name)", name.c_str(), m.owner, static_cast<int>(geteuid()));
  if (!m.ok())
    GS_THROW(GPUSTRIPE_ERR_IO, "shared memory '%s': %s failed: %s", name.c_str(), m.step,
             std::strcmp(m.step, "size") == 0 ? "it has no size" : strerror(m.error));
  ShmSegment s;
  s.name_ = name;
  s.data_ = m.data;
  s.size_ = m.size;
  return s;
}

ShmSegment& ShmSegment::operator=(ShmSegment&& o) noexcept {
  if (this != &o) {
    // Releases what this one holds; not by calling the destructor, which would end name_'s
    // lifetime before it is assigned (a heap-held name then freed twice).
    release();
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

ShmSegment::~ShmSegment() { release(); }

void ShmSegment::release() {
  if (data_) munmap(data_, size_);
  if (linked_) shm_unlink(name_.c_str());
  data_ = nullptr;
  size_ = 0;
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
