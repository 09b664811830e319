// Which allocation an address belongs to: the emulated counterpart of CUDA's
// pointer attributes. Interior pointers resolve to their allocation.
#pragma once
#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <shared_mutex>
#include <string>
#include <vector>

#include "backend/backend.hpp"

namespace gpustripe::emu {

struct Allocation {
  uintptr_t base = 0;
  size_t size = 0;
  MemoryKind kind = MemoryKind::Unknown;
  int device = kHostDevice;
  uint64_t buffer_id = 0;
  std::string segment;  // shared-memory segment name (device memory of alloc_device)
  int fd = -1;          // memfd of VMM-like device memory this process made (alloc_device_as VmmFd)
  bool vmm = false;     // memfd memory (made here, or imported by ipc_open with a descriptor)
  bool unshared = false;  // private memory: no IPC handle (alloc_device_as NotShareable)
  int64_t pool_offset = -1;  // pool memory (alloc_device_as PoolFd, or imported): offset in the pool's memfd
  uintptr_t reservation = 0;    // VmmMulti pieces made here: the range they tile (its first piece's base)
  size_t reservation_size = 0;
  bool imported = false;  // mapped by ipc_open, released by ipc_close
  int open_count = 0;     // ipc_open calls not yet closed (imported only)

  // A VmmMulti piece reports the whole range (as CUDA's range attributes give the reservation
  // of VMM memory) with its own buffer id; ipc_export names the piece itself.
  PointerInfo info() const {
    return reservation ? PointerInfo{kind, device, reservation, reservation_size, buffer_id}
                       : PointerInfo{kind, device, base, size, buffer_id};
  }
  bool contains(uintptr_t p, size_t bytes) const { return p >= base && p - base <= size && bytes <= size - (p - base); }
};

// A buffer id unique in this process (a freed and reallocated address gets a new id), as
// CUDA's CU_POINTER_ATTRIBUTE_BUFFER_ID is: a process-wide counter in the low half, and in
// the high half a random number drawn once per process, so that another process cannot
// predict ids (with 2^32 values, ids of two processes practically never meet either).
uint64_t next_buffer_id();

class PointerTable {
 public:
  void insert(const Allocation& a);
  // The allocation containing p, if any.
  std::optional<Allocation> find(const void* p) const;
  // The allocation starting exactly at p, if any.
  std::optional<Allocation> find_base(const void* p) const;
  void erase(const void* base);
  // Adjusts the open count of an imported mapping; returns the new count.
  int add_open(const void* base, int delta);
  // Removes and returns every allocation (backend teardown).
  std::vector<Allocation> take_all();

 private:
  mutable std::shared_mutex mu_;
  std::map<uintptr_t, Allocation> by_base_;
};

}  // namespace gpustripe::emu
