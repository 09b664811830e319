// Mappings of peers' device buffers into this process, reused across messages.
//
// Opening an IPC handle costs tens of microseconds on CUDA (and a mmap on the
// emulated backend), so a rank that sends to the same receive buffer again maps
// it once. The danger is a stale mapping: the peer frees the buffer and allocates
// a new one at the same address. Entries are therefore keyed by (peer, the
// exporter's base address) and remember the exporter's buffer_id; a handle with
// the same key but another buffer_id evicts the old mapping (closed) and maps the
// new one, so a reused address is never served from the old allocation. The handle's
// kind and share id are part of the match too: a VMM allocation or pool buffer that
// replaced a cudaMalloc one at the same address (or the other way) is a new mapping.
// Fd kinds (VMM, pools) get their file descriptor from the FdExchange on a miss. A vmm-multi
// handle (a buffer over several VMM allocations) is one entry: its share id digests every
// piece's buffer id, so a piece freed and reallocated at its address makes a stale eviction
// (the whole mapping closed: every piece unmapped and released) and a new mapping.
//
// Pool pointers (PoolFd) are leased, not kept: CUDA requires the importers of a pool
// allocation to free their imports before the exporter frees it, and the exporter (the
// user's program) frees whenever its request is complete. So the caller returns the lease
// (release) once the copy through it is done and before it tells the exporter so; the import
// is closed when its last lease comes back. Imports held past the exporter's free broke on
// the GPUs (closing them failed and a later import of the pool was not device memory; or a
// crash in cuMemcpyAsync). The pool itself stays imported (the
// backend keeps it), so only the first buffer of a pool needs its descriptor.
#pragma once
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <list>
#include <map>
#include <mutex>
#include <utility>

#include "backend/backend.hpp"

namespace gpustripe::ipc {

struct HandleCacheStats {
  uint64_t hits = 0;
  uint64_t misses = 0;            // first mapping of a key
  uint64_t stale_evictions = 0;   // same (peer, base), new buffer_id
  uint64_t capacity_evictions = 0;
  uint64_t fd_opens = 0;          // mappings opened with a file descriptor (VMM, a pool's first)
  uint64_t multi_opens = 0;       // of those: buffers spanning several VMM allocations (vmm-multi)
  uint64_t pieces_mapped = 0;     // the allocations those mapped
  uint64_t leases_closed = 0;     // pool imports closed when their last lease came back
};

class FdExchange;

class HandleCache {
 public:
  // `max_entries` 0: GPUSTRIPE_IPC_CACHE_ENTRIES. `fds`: where the descriptors of fd-kind
  // handles come from (null: such handles are refused with ERR_NOT_SUPPORTED).
  explicit HandleCache(Backend& backend, size_t max_entries = 0, FdExchange* fds = nullptr);
  ~HandleCache();  // closes every mapping
  HandleCache(const HandleCache&) = delete;
  HandleCache& operator=(const HandleCache&) = delete;

  // This process's address of the base of the allocation that `peer` exported as
  // `h` (its base there was `peer_base`). Thread-safe. `reader`: the GPU whose kernels use
  // the mapping (Backend::ipc_open); a legacy handle mapped for another reader is another
  // entry (another context's mapping), other kinds are one entry for every reader.
  void* map(int peer, uint64_t peer_base, const Backend::IpcMemHandle& h, int reader = -1);
  // Whether map() of `h` takes a lease the caller must return with release() (pool pointers).
  static bool leased(const Backend::IpcMemHandle& h) { return h.kind == Backend::IpcKind::PoolFd; }
  // Returns a lease map() took for (peer, peer_base) and buffer `buffer_id`; the last one closes
  // the import. The copy through it must be complete.
  void release(int peer, uint64_t peer_base, uint64_t buffer_id);
  // Closes every mapping of `peer` (it left or died).
  void evict_peer(int peer);
  size_t size() const;
  HandleCacheStats stats() const;
  // How many mappings this cache has closed so far (stale, capacity, evict_peer, leases): a
  // caller that kept addresses map() returned may use them again without asking while this
  // has not changed.
  uint64_t closed() const { return closed_.load(std::memory_order_acquire); }

 private:
  struct Key {  // ordered by peer first (evict_peer, the pool scan)
    int peer;
    uint64_t base;  // peer_base
    int reader;     // legacy handles: the reader map() was given; else -1
    bool operator<(const Key& o) const {
      if (peer != o.peer) return peer < o.peer;
      if (base != o.base) return base < o.base;
      return reader < o.reader;
    }
    bool operator==(const Key& o) const { return peer == o.peer && base == o.base && reader == o.reader; }
  };
  struct Entry {
    uint64_t buffer_id;
    size_t size;
    Backend::IpcKind kind;
    uint64_t share_id;
    void* local_base;
    std::list<Key>::iterator lru;
    int leases = 0;  // pool imports: maps not released yet (never closed while > 0)
  };
  void close_entry(std::map<Key, Entry>::iterator it);
  void evict_overlapping_pool_imports(int peer, uint64_t peer_base, const Backend::IpcMemHandle& h);

  Backend& backend_;
  size_t max_entries_;
  FdExchange* fds_;
  mutable std::mutex mu_;
  std::map<Key, Entry> entries_;
  std::list<Key> lru_;  // front: most recently used
  HandleCacheStats stats_;
  std::atomic<uint64_t> closed_{0};
};

}  // namespace gpustripe::ipc
