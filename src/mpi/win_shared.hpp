// The layout of a device window's shared-memory segment (win.hpp): per member, its
// lock words, barrier sequence and the regions of memory it exposes; per (target,
// origin) pair, the post/start/complete/wait counters. Zero-filled is the initial
// state. Members read each other's regions without locks: a slot's version is odd
// while its owner writes it, and a reader retries until it read an even, unchanged one.
#pragma once
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "backend/backend.hpp"

namespace gpustripe::mpi {

constexpr int kWinMaxRegions = 32;  // regions one rank may attach to a dynamic window at a time

struct WinRegionDesc {
  uint64_t base = 0;   // the owner's address
  uint64_t bytes = 0;
  int32_t disp_unit = 1;
  int32_t dev = kHostDevice;
  uint32_t present = 0;
  Backend::IpcMemHandle handle;
};

struct WinRankSlot {
  // MPI_Win_lock: bit 63 set while a member holds it exclusively (the low bits: its rank + 1),
  // else the number of shared holders.
  std::atomic<uint64_t> lock;
  std::atomic<uint32_t> acc_lock;  // accumulates into this member: 0, or the holder's rank + 1
  std::atomic<uint32_t> version;   // of `regions`
  std::atomic<uint64_t> barrier;   // the last barrier (fence, free) this member entered
  WinRegionDesc regions[kWinMaxRegions];
};

struct WinShared {
  alignas(64) uint32_t n;  // members (the slots follow, 64-byte aligned)
  static constexpr uint64_t kExclusive = uint64_t(1) << 63;

  static size_t bytes_for(int n) {
    return sizeof(WinShared) + n * sizeof(WinRankSlot) + 2 * size_t(n) * n * sizeof(std::atomic<uint64_t>);
  }
  WinRankSlot& slot(int r) { return reinterpret_cast<WinRankSlot*>(this + 1)[r]; }
  // Exposure epochs `target` opened for `origin` (post) / access epochs `origin` closed at `target` (complete).
  std::atomic<uint64_t>& posted(int n_, int target, int origin) { return counters(n_)[size_t(target) * n_ + origin]; }
  std::atomic<uint64_t>& completed(int n_, int target, int origin) {
    return counters(n_)[size_t(n_) * n_ + size_t(target) * n_ + origin];
  }
  // A consistent copy of region `i` of member `r`.
  WinRegionDesc read_region(int r, int i) {
    WinRankSlot& s = slot(r);
    WinRegionDesc d;
    for (;;) {
      const uint32_t v = s.version.load(std::memory_order_acquire);
      if (v & 1) continue;
      std::memcpy(static_cast<void*>(&d), &s.regions[i], sizeof d);
      std::atomic_thread_fence(std::memory_order_acquire);
      if (s.version.load(std::memory_order_relaxed) == v) return d;
    }
  }

 private:
  std::atomic<uint64_t>* counters(int n_) {
    return reinterpret_cast<std::atomic<uint64_t>*>(reinterpret_cast<char*>(this + 1) + n_ * sizeof(WinRankSlot));
  }
};

}  // namespace gpustripe::mpi
