#include "ipc/handle_cache.hpp"

#include <unistd.h>

#include "common/config.hpp"
#include "common/error.hpp"
#include "common/log.hpp"
#include "ipc/fd_exchange.hpp"

namespace gpustripe::ipc {
namespace {
const IntSetting kCacheEntries{"GPUSTRIPE_IPC_CACHE_ENTRIES", "256",
                               "Peer buffers kept mapped per process (least recently used are closed first): raise it "
                               "where a program sends from more buffers than that, lower it where the mappings "
                               "hold too much peer memory alive"};
}

HandleCache::HandleCache(Backend& backend, size_t max_entries, FdExchange* fds)
    : backend_(backend), max_entries_(max_entries), fds_(fds) {
  if (max_entries_ == 0) {
    int64_t n = kCacheEntries.get();
    GS_REQUIRE(n >= 1, GPUSTRIPE_ERR_CONFIG, "GPUSTRIPE_IPC_CACHE_ENTRIES: %lld must be at least 1",
               static_cast<long long>(n));
    max_entries_ = static_cast<size_t>(n);
  }
}

HandleCache::~HandleCache() {
  std::lock_guard<std::mutex> lock(mu_);
  while (!entries_.empty()) close_entry(entries_.begin());
}

void HandleCache::close_entry(std::map<Key, Entry>::iterator it) {
  closed_.fetch_add(1, std::memory_order_release);  // before the close: no reader counts a closed mapping as open
  try {
    backend_.ipc_close(it->second.local_base);
  } catch (const Error& e) {
    // The peer may be gone already; the mapping is dropped either way.
    GS_LOG_WARN(Subsys::Ipc, "closing the mapping of rank %d's buffer %llu: %s", it->first.peer,
                static_cast<unsigned long long>(it->second.buffer_id), e.what());
  }
  lru_.erase(it->second.lru);
  entries_.erase(it);
}

void* HandleCache::map(int peer, uint64_t peer_base, const Backend::IpcMemHandle& h, int reader) {
  GS_REQUIRE(h.buffer_id != 0, GPUSTRIPE_ERR_INVALID_ARGUMENT,
             "IPC handle from rank %d carries no buffer id: cannot tell a reused address from the old buffer", peer);
  std::lock_guard<std::mutex> lock(mu_);
  if (h.kind != Backend::IpcKind::Legacy) reader = -1;
  Key key{peer, peer_base, reader};
  auto it = entries_.find(key);
  if (it != entries_.end()) {
    const Entry& e = it->second;
    if (e.buffer_id == h.buffer_id && e.size == h.size && e.kind == h.kind && e.share_id == h.share_id) {
      ++stats_.hits;
      lru_.splice(lru_.begin(), lru_, it->second.lru);
      if (leased(h)) ++it->second.leases;
      return it->second.local_base;
    }
    GS_LOG_DEBUG(Subsys::Ipc, "rank %d reused address 0x%llx: buffer %llu -> %llu, remapping", peer,
                 static_cast<unsigned long long>(peer_base), static_cast<unsigned long long>(it->second.buffer_id),
                 static_cast<unsigned long long>(h.buffer_id));
    ++stats_.stale_evictions;
    close_entry(it);
  } else {
    ++stats_.misses;
  }
  if (h.kind == Backend::IpcKind::PoolFd) evict_overlapping_pool_imports(peer, peer_base, h);
  // The least recently used go first; a leased pool import is in use by a copy: never closed
  // here (the cache may then hold more than its bound for a while).
  for (auto l = lru_.end(); entries_.size() >= max_entries_ && l != lru_.begin();) {
    auto cur = std::prev(l);
    auto e = entries_.find(*cur);
    if (e->second.leases > 0) {
      l = cur;
      continue;
    }
    ++stats_.capacity_evictions;
    close_entry(e);  // erases cur only: l stays valid
  }
  if (h.kind == Backend::IpcKind::VmmMulti) {
    // Every piece's descriptor and the layout came in one message; the mapping holds the
    // memory once open, so the descriptors are closed either way.
    GS_REQUIRE(fds_, GPUSTRIPE_ERR_NOT_SUPPORTED, "rank %d's vmm-multi buffer needs file descriptors: no exchange for "
               "them here", peer);
    ReceivedFds got = fds_->take_all(peer, h);
    void* local = nullptr;
    try {
      local = backend_.ipc_open_pieces(h, got.pieces, got.fds);
    } catch (...) {
      for (int fd : got.fds) close(fd);
      throw;
    }
    for (int fd : got.fds) close(fd);
    ++stats_.fd_opens;
    ++stats_.multi_opens;
    stats_.pieces_mapped += got.pieces.size();
    GS_LOG_DEBUG(Subsys::Ipc, "mapped rank %d's vmm-multi buffer %llu (%zu bytes in %zu pieces, GPU %d) at %p", peer,
                 static_cast<unsigned long long>(h.buffer_id), h.size, got.pieces.size(), h.device, local);
    lru_.push_front(key);
    entries_.emplace(key, Entry{h.buffer_id, h.size, h.kind, h.share_id, local, lru_.begin()});
    return local;
  }
  int fd = -1;
  if (h.kind != Backend::IpcKind::Legacy && backend_.ipc_open_needs_fd(h)) {
    GS_REQUIRE(fds_, GPUSTRIPE_ERR_NOT_SUPPORTED, "rank %d's %s buffer needs a file descriptor: no exchange for them here",
               peer, ipc_kind_name(h.kind));
    fd = fds_->take(peer, h);
  }
  void* local = nullptr;
  try {
    local = backend_.ipc_open(h, fd, reader);
  } catch (...) {
    if (fd >= 0) close(fd);
    throw;
  }
  if (fd >= 0) {
    close(fd);  // the mapping holds the memory now
    ++stats_.fd_opens;
  }
  lru_.push_front(key);
  entries_.emplace(key, Entry{h.buffer_id, h.size, h.kind, h.share_id, local, lru_.begin(), leased(h) ? 1 : 0});
  GS_LOG_DEBUG(Subsys::Ipc, "mapped rank %d's %s buffer %llu (%zu bytes, GPU %d) at %p", peer, ipc_kind_name(h.kind),
               static_cast<unsigned long long>(h.buffer_id), h.size, h.device, local);
  return local;
}

void HandleCache::release(int peer, uint64_t peer_base, uint64_t buffer_id) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = entries_.find(Key{peer, peer_base, -1});  // pool imports: one entry for every reader
  if (it == entries_.end() || it->second.buffer_id != buffer_id || it->second.leases <= 0) return;  // closed already
  if (--it->second.leases > 0) return;
  ++stats_.leases_closed;
  close_entry(it);
}

void HandleCache::evict_overlapping_pool_imports(int peer, uint64_t peer_base, const Backend::IpcMemHandle& h) {
  // An exporter's live allocations never overlap, so an older import of the same pool that
  // overlaps this buffer names memory the exporter freed (the pool gave the range to a new,
  // larger or shifted buffer). Imports of one pool share the pool's address range in this
  // process as well: closing the old one after the new one is open would unmap part of the new
  // one (mpi_p2p_np3_alloc_pool crashed in cuMemcpyAsync reading such an address). So it is closed first. (Imports held past the exporter's free are outside
  // CUDA's contract for pool pointers either way: docs/ipc.md.)
  const uint64_t end = peer_base + h.size;
  for (auto it = entries_.lower_bound(Key{peer, 0, -1}); it != entries_.end() && it->first.peer == peer;) {
    auto next = std::next(it);
    const Entry& e = it->second;
    const uint64_t b = it->first.base;
    if (e.kind == Backend::IpcKind::PoolFd && e.share_id == h.share_id && b < end && peer_base < b + e.size) {
      GS_LOG_DEBUG(Subsys::Ipc, "rank %d's pool buffer %llu at 0x%llx overlaps the older import of buffer %llu at 0x%llx: "
                   "closing that one", peer, static_cast<unsigned long long>(h.buffer_id),
                   static_cast<unsigned long long>(peer_base), static_cast<unsigned long long>(e.buffer_id),
                   static_cast<unsigned long long>(b));
      ++stats_.stale_evictions;
      close_entry(it);
    }
    it = next;
  }
}

void HandleCache::evict_peer(int peer) {
  std::lock_guard<std::mutex> lock(mu_);
  for (auto it = entries_.begin(); it != entries_.end();) {
    auto next = std::next(it);
    if (it->first.peer == peer) close_entry(it);
    it = next;
  }
}

size_t HandleCache::size() const {
  std::lock_guard<std::mutex> lock(mu_);
  return entries_.size();
}

HandleCacheStats HandleCache::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

}  // namespace gpustripe::ipc
