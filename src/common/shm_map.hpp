// Mapping POSIX shared-memory segments by name: the one implementation behind the
// emulated backend's device memory and the ipc layer's channel and host staging.
// The functions report failures instead of throwing so that each caller words the
// error for its own context (an emulated GPU running out of memory, a peer's
// channel that is gone) with its own status.
#pragma once
#include <cstddef>
#include <string>

namespace gpustripe {

struct ShmMapping {
  void* data = nullptr;  // nullptr on failure
  size_t size = 0;
  int error = 0;             // errno of the failing step (0 on success)
  const char* step = "";     // "shm_open", "reserve", "fstat", "owner", "size", "mmap"
  long owner = -1;           // step "owner": the uid the segment belongs to
  bool ok() const { return data != nullptr; }
};

// Creates `name` owner-only (mode 0600; fails if it exists: error EEXIST), reserves `bytes` with
// posix_fallocate (ftruncate alone succeeds on a full /dev/shm and the first write
// then kills the process with SIGBUS) and maps it read-write. On failure nothing is
// left behind. The pages read as zeros.
ShmMapping shm_create_map(const std::string& name, size_t bytes);
// Maps an existing segment: `bytes` of it, or all of it when `bytes` is 0. A segment
// smaller than `bytes` fails at step "size", one owned by another user at step "owner".
ShmMapping shm_open_map(const std::string& name, size_t bytes = 0);
// Free space in /dev/shm for error messages ("12.5 GiB", or "unknown").
std::string shm_free_text();

}  // namespace gpustripe
