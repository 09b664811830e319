// Scratch memory of a communicator: one device buffer per rank and one pinned host
// buffer, grown on demand. A grown buffer's predecessor may still be named by ops
// enqueued earlier, so it is retired, not freed, until release_retired() is called
// once everything enqueued has completed.
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

#include "backend/backend.hpp"

namespace gpustripe::coll {

class Scratch {
 public:
  Scratch(Backend& backend, std::vector<int> devices);
  ~Scratch();
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;

  // At least `bytes` of device memory on rank's GPU, 256-byte aligned.
  char* device(int rank, size_t bytes);
  // At least `bytes` of pinned host memory.
  char* host(size_t bytes);
  void release_retired();
  // Changes whenever a buffer is replaced: addresses handed out before may be freed.
  uint64_t generation() const { return generation_; }
  size_t device_bytes(int rank) const { return dev_[rank].bytes; }

  // Cross-process use (the MPI interposer, where each rank is another process): rank's
  // device scratch is memory owned elsewhere and mapped here. device(rank, bytes) then
  // returns `p` and only records the largest request in wanted(rank); the owner grows
  // its buffer and the caller maps it again. `p` may be a placeholder while sizing a
  // schedule (the program built then is never run).
  void set_external(int rank, char* p, size_t bytes);
  size_t wanted(int rank) const { return dev_.at(rank).wanted; }
  // The same for the pinned host buffer: memory the ranks' processes share (the team's staging,
  // mapped here at `p`); host(bytes) then returns `p` and records the largest request in
  // host_wanted().
  void set_external_host(char* p, size_t bytes);
  size_t host_wanted() const { return host_.wanted; }

 private:
  struct Buf {
    char* p = nullptr;
    size_t bytes = 0;
    bool external = false;  // not ours to free or grow
    size_t wanted = 0;      // external: the largest size asked for
  };
  Backend& backend_;
  std::vector<int> devices_;
  std::vector<Buf> dev_;
  Buf host_;
  std::vector<std::pair<int, void*>> retired_;
  uint64_t generation_ = 0;  // (device or kHostDevice, pointer)
};

}  // namespace gpustripe::coll
