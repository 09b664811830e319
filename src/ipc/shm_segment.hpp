// A POSIX shared-memory segment mapped into this process (RAII). The channel and
// the shared host staging live in these.
#pragma once
#include <cstddef>
#include <string>

namespace gpustripe::ipc {

class ShmSegment {
 public:
  ShmSegment() = default;
  // Creates `name` ("/gpustripe-...") of `bytes`, zero-filled, readable and writable by this
  // user only; fails if it exists.
  static ShmSegment create(const std::string& name, size_t bytes);
  // Maps an existing segment; its size is read from the segment. ERR_INVALID_ARGUMENT when
  // another user owns it (ERR_IO for the other failures: not there, or no size yet).
  static ShmSegment open(const std::string& name);
  ~ShmSegment();
  ShmSegment(ShmSegment&& o) noexcept { *this = std::move(o); }
  ShmSegment& operator=(ShmSegment&& o) noexcept;
  ShmSegment(const ShmSegment&) = delete;
  ShmSegment& operator=(const ShmSegment&) = delete;

  // Removes the name; the mapping stays valid until unmapped. Once every process
  // has mapped the segment, unlinking makes a crashed job leave nothing behind.
  void unlink();
  // Leaves the name to another process to remove (one that maps the segment later): the
  // destructor of this one keeps it.
  void leave_name() { linked_ = false; }
  void* data() const { return data_; }
  size_t size() const { return size_; }
  const std::string& name() const { return name_; }

 private:
  void release();  // unmaps, and removes the name where this one still owns it
  std::string name_;
  void* data_ = nullptr;
  size_t size_ = 0;
  bool linked_ = false;
};

// A name no other live job uses: "/gpustripe-<tag>-<pid>-<random>".
std::string unique_shm_name(const std::string& tag);

}  // namespace gpustripe::ipc
