// Memory of the emulated backend: device allocations in shared-memory segments,
// pinned host memory, the pointer table behind pointer_info, and IPC by segment name
// (Legacy handles) or by file descriptor (memfd memory: the emulated VMM, VmmFd handles).
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>
#include <algorithm>

#include "backend/emulated/emulated_backend.hpp"
#include "backend/emulated/shm_segment.hpp"
#include "common/log.hpp"

namespace gpustripe::emu {
namespace {

// Layout of IpcMemHandle::bytes for emulated memory: magic, exporter pid, segment name.
constexpr char kIpcMagic[8] = "gsemu01";
constexpr size_t kIpcPidOffset = 8;
constexpr size_t kIpcNameOffset = 16;
constexpr size_t kIpcNameMax = Backend::kIpcHandleBytes - kIpcNameOffset - 1;

constexpr size_t kPinnedAlign = 4096;
// The emulated VMM granularity: small, so CI's megabyte buffers span many pieces.
constexpr size_t kVmmGranularity = 64 << 10;

}  // namespace

void EmulatedBackend::release(const Allocation& a) noexcept {
  if (a.kind == MemoryKind::PinnedHost) {
    std::free(reinterpret_cast<void*>(a.base));
    return;
  }
  unmap_segment(reinterpret_cast<void*>(a.base), a.size);
  if (a.fd >= 0) close(a.fd);
  if (!a.imported && !a.vmm && !a.unshared && a.pool_offset < 0) unlink_segment(a.segment);
}

void* EmulatedBackend::alloc_device(int dev, size_t bytes) { return alloc_device_as(dev, bytes, DeviceAlloc::Plain); }

// Counts `bytes` against the emulated GPU's memory (the topology's memory_bytes; 0: no limit), or refuses them.
void EmulatedBackend::charge_memory(int dev, size_t bytes) {
  std::lock_guard<std::mutex> lock(mu_);
  uint64_t limit = memory_limit_[dev];
  GS_REQUIRE(limit == 0 || memory_used_[dev] + bytes <= limit, GPUSTRIPE_ERR_NO_MEMORY,
             "alloc_device: emulated GPU %d has %llu of %llu bytes in use, %zu more do not fit", dev,
             static_cast<unsigned long long>(memory_used_[dev]), static_cast<unsigned long long>(limit), bytes);
  memory_used_[dev] += bytes;
}

void* EmulatedBackend::alloc_device_as(int dev, size_t bytes, DeviceAlloc how) {
  check_device("alloc_device", "dev", dev);
  GS_REQUIRE(bytes > 0, GPUSTRIPE_ERR_INVALID_SIZE, "alloc_device: 0 bytes on GPU %d", dev);
  if (how == DeviceAlloc::VmmMulti) return alloc_vmm_multi(dev, bytes);
  charge_memory(dev, bytes);
  Allocation a;
  a.size = bytes;
  a.kind = MemoryKind::Device;
  a.device = dev;
  try {
    switch (how) {
      case DeviceAlloc::Plain:
        a.segment = new_segment_name();
        a.base = reinterpret_cast<uintptr_t>(create_segment(a.segment, bytes, dev));
        break;
      case DeviceAlloc::VmmFd:
        a.vmm = true;
        a.base = reinterpret_cast<uintptr_t>(create_memfd(bytes, dev, &a.fd));
        break;
      case DeviceAlloc::PoolFd: {
        std::lock_guard<std::mutex> lock(mu_);
        Pool& pool = pools_[dev];
        if (pool.fd < 0) {
          pool.fd = memfd_create("gpustripe-emu-pool", MFD_CLOEXEC);
          GS_REQUIRE(pool.fd >= 0, GPUSTRIPE_ERR_NO_MEMORY, "emulated GPU %d: memfd_create: %s", dev, strerror(errno));
        }
        const size_t len = (bytes + kPinnedAlign - 1) / kPinnedAlign * kPinnedAlign;
        auto it = pool.free.find(len);
        uint64_t off;
        if (it != pool.free.end()) {
          off = it->second;
          pool.free.erase(it);
        } else {
          off = pool.length;
          int rc = posix_fallocate(pool.fd, static_cast<off_t>(off), static_cast<off_t>(len));
          GS_REQUIRE(rc == 0, GPUSTRIPE_ERR_NO_MEMORY, "emulated GPU %d: pool of %llu bytes cannot grow by %zu: %s", dev,
                     static_cast<unsigned long long>(off), len, strerror(rc));
          pool.length += len;
        }
        a.pool_offset = static_cast<int64_t>(off);
        a.base = reinterpret_cast<uintptr_t>(map_memfd_range(pool.fd, off, bytes));
        break;
      }
      case DeviceAlloc::NotShareable:
        a.unshared = true;
        a.base = reinterpret_cast<uintptr_t>(create_private(bytes, dev));
        break;
      case DeviceAlloc::VmmMulti: break;  // alloc_vmm_multi
    }
  } catch (...) {
    std::lock_guard<std::mutex> lock(mu_);
    memory_used_[dev] -= bytes;
    throw;
  }
  a.buffer_id = next_buffer_id();
  table_.insert(a);
  GS_LOG_TRACE(Subsys::Backend, "alloc_device(GPU %d, %zu) -> %p (%s, buffer %llx)", dev, bytes,
               reinterpret_cast<void*>(a.base), a.segment.c_str(), static_cast<unsigned long long>(a.buffer_id));
  return reinterpret_cast<void*>(a.base);
}

void* EmulatedBackend::alloc_vmm_multi(int dev, size_t bytes) {
  const size_t total = (bytes + kVmmGranularity - 1) / kVmmGranularity * kVmmGranularity;
  const size_t piece = vmm_multi_piece(bytes, kVmmGranularity);
  charge_memory(dev, total);
  char* base = static_cast<char*>(reserve_range(total, dev));
  std::vector<Allocation> made;
  try {
    for (size_t off = 0; off < total; off += piece) {
      Allocation a;
      a.size = std::min(piece, total - off);
      a.kind = MemoryKind::Device;
      a.device = dev;
      a.vmm = true;
      a.reservation = reinterpret_cast<uintptr_t>(base);
      a.reservation_size = total;
      a.base = reinterpret_cast<uintptr_t>(create_memfd(a.size, dev, &a.fd, base + off));
      a.buffer_id = next_buffer_id();
      made.push_back(a);
    }
  } catch (...) {
    for (const Allocation& a : made) close(a.fd);
    unmap_segment(base, total);
    std::lock_guard<std::mutex> lock(mu_);
    memory_used_[dev] -= total;
    throw;
  }
  for (const Allocation& a : made) table_.insert(a);
  GS_LOG_TRACE(Subsys::Backend, "alloc_device_as(GPU %d, %zu, vmm_multi) -> %p (%zu pieces)", dev, bytes,
               static_cast<void*>(base), made.size());
  return base;
}

void EmulatedBackend::free_vmm_multi(const Allocation& first) {
  GS_REQUIRE(first.base == first.reservation, GPUSTRIPE_ERR_INVALID_POINTER,
             "free_device: 0x%zx is a piece inside the vmm_multi allocation at 0x%zx, not its start",
             static_cast<size_t>(first.base), static_cast<size_t>(first.reservation));
  drain_all_streams();
  for (uintptr_t at = first.base; at < first.reservation + first.reservation_size;) {
    std::optional<Allocation> a = table_.find_base(reinterpret_cast<void*>(at));
    if (!a) break;  // cannot happen: the pieces tile the range
    table_.erase(reinterpret_cast<void*>(at));
    release(*a);
    at += a->size;
  }
  std::lock_guard<std::mutex> lock(mu_);
  memory_used_[first.device] -= first.reservation_size;
}

void EmulatedBackend::remap_piece(void* p) {
  std::optional<Allocation> a = table_.find_base(p);
  GS_REQUIRE(a && a->reservation != 0 && !a->imported, GPUSTRIPE_ERR_INVALID_POINTER,
             "remap_piece: %p is not the start of a piece of vmm_multi memory made here", p);
  drain_all_streams();
  Allocation n = *a;
  n.base = reinterpret_cast<uintptr_t>(create_memfd(a->size, a->device, &n.fd, p));  // replaces the old mapping
  n.buffer_id = next_buffer_id();
  close(a->fd);
  table_.erase(p);
  table_.insert(n);
}

void EmulatedBackend::free_device(void* p) {
  if (p == nullptr) return;  // as cudaFree(NULL)
  std::optional<Allocation> a = table_.find_base(p);
  if (a && a->reservation != 0 && !a->imported) return free_vmm_multi(*a);
  if (!a || a->kind != MemoryKind::Device || a->imported) {
    std::optional<Allocation> inner = table_.find(p);
    if (a && a->imported)
      GS_THROW(GPUSTRIPE_ERR_INVALID_POINTER, "free_device: %p was mapped by ipc_open; release it with ipc_close", p);
    if (inner && inner->kind == MemoryKind::Device)
      GS_THROW(GPUSTRIPE_ERR_INVALID_POINTER,
               "free_device: %p is inside the allocation [0x%zx, 0x%zx) of GPU %d, not its start", p,
               static_cast<size_t>(inner->base), static_cast<size_t>(inner->base + inner->size), inner->device);
    GS_THROW(GPUSTRIPE_ERR_INVALID_POINTER, "free_device: %p is not device memory allocated by this backend", p);
  }
  drain_all_streams();
  table_.erase(p);
  release(*a);
  std::lock_guard<std::mutex> lock(mu_);
  memory_used_[a->device] -= a->size;
  if (a->pool_offset >= 0)
    pools_[a->device].free.emplace((a->size + kPinnedAlign - 1) / kPinnedAlign * kPinnedAlign,
                                   static_cast<uint64_t>(a->pool_offset));
}

void* EmulatedBackend::alloc_pinned(size_t bytes) {
  GS_REQUIRE(bytes > 0, GPUSTRIPE_ERR_INVALID_SIZE, "alloc_pinned: 0 bytes");
  size_t rounded = (bytes + kPinnedAlign - 1) / kPinnedAlign * kPinnedAlign;
  void* p = std::aligned_alloc(kPinnedAlign, rounded);
  GS_REQUIRE(p != nullptr, GPUSTRIPE_ERR_NO_MEMORY, "alloc_pinned: %zu bytes of host memory not available", bytes);
  Allocation a;
  a.base = reinterpret_cast<uintptr_t>(p);
  a.size = bytes;
  a.kind = MemoryKind::PinnedHost;
  a.buffer_id = next_buffer_id();
  table_.insert(a);
  return p;
}

void EmulatedBackend::free_pinned(void* p) {
  if (p == nullptr) return;
  std::optional<Allocation> a = table_.find_base(p);
  GS_REQUIRE(a && a->kind == MemoryKind::PinnedHost, GPUSTRIPE_ERR_INVALID_POINTER,
             "free_pinned: %p is not the start of pinned host memory allocated by this backend", p);
  drain_all_streams();
  table_.erase(p);
  release(*a);
}

PointerInfo EmulatedBackend::pointer_info(const void* p) {
  std::optional<Allocation> a = table_.find(p);
  return a ? a->info() : PointerInfo{};
}

Backend::IpcMemHandle EmulatedBackend::ipc_export(const void* p) {
  std::optional<Allocation> a = table_.find(p);
  GS_REQUIRE(a && a->kind == MemoryKind::Device && !a->imported, GPUSTRIPE_ERR_INVALID_POINTER,
             "ipc_export: %p is not emulated device memory of this process", p);
  GS_REQUIRE(!a->unshared, GPUSTRIPE_ERR_NOT_SUPPORTED,
             "ipc_export: %p is private memory (the emulated default pool): no IPC handle", p);
  GS_REQUIRE(a->segment.size() <= kIpcNameMax, GPUSTRIPE_ERR_INTERNAL, "ipc_export: segment name %s too long",
             a->segment.c_str());
  IpcMemHandle h;
  std::memcpy(h.bytes, kIpcMagic, sizeof kIpcMagic);
  int32_t pid = static_cast<int32_t>(getpid());
  std::memcpy(h.bytes + kIpcPidOffset, &pid, sizeof pid);
  if (a->vmm) {
    h.kind = IpcKind::VmmFd;
    h.share_id = a->buffer_id;
  } else if (a->pool_offset >= 0) {
    h.kind = IpcKind::PoolFd;
    h.share_id = static_cast<uint64_t>(a->device) + 1;  // the device's pool
    std::memcpy(h.bytes + kIpcNameOffset, &a->pool_offset, sizeof a->pool_offset);
  } else {
    std::memcpy(h.bytes + kIpcNameOffset, a->segment.c_str(), a->segment.size() + 1);
  }
  h.device = a->device;
  h.base = a->base;
  h.size = a->size;
  h.buffer_id = a->buffer_id;
  return h;
}

int EmulatedBackend::ipc_export_fd(const IpcMemHandle& h) {
  GS_REQUIRE(h.kind != IpcKind::Legacy, GPUSTRIPE_ERR_INVALID_ARGUMENT, "ipc_export_fd: a %s handle has no descriptor",
             ipc_kind_name(h.kind));
  if (h.kind == IpcKind::PoolFd) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = pools_.find(static_cast<int>(h.share_id) - 1);
    GS_REQUIRE(it != pools_.end(), GPUSTRIPE_ERR_INVALID_ARGUMENT, "ipc_export_fd: no pool %llu here",
               static_cast<unsigned long long>(h.share_id));
    int fd = dup(it->second.fd);
    GS_REQUIRE(fd >= 0, GPUSTRIPE_ERR_IO, "ipc_export_fd: dup: %s", strerror(errno));
    return fd;
  }
  std::optional<Allocation> a = table_.find_base(reinterpret_cast<const void*>(h.base));
  GS_REQUIRE(a && a->vmm && !a->imported && a->buffer_id == h.buffer_id, GPUSTRIPE_ERR_INVALID_POINTER,
             "ipc_export_fd: buffer %llu at 0x%llx is gone (freed since it was exported)",
             static_cast<unsigned long long>(h.buffer_id), static_cast<unsigned long long>(h.base));
  int fd = dup(a->fd);
  GS_REQUIRE(fd >= 0, GPUSTRIPE_ERR_IO, "ipc_export_fd: dup: %s", strerror(errno));
  return fd;
}

bool EmulatedBackend::ipc_open_needs_fd(const IpcMemHandle& h) {
  if (h.kind != IpcKind::PoolFd) return h.kind == IpcKind::VmmFd;
  int32_t pid;
  std::memcpy(&pid, h.bytes + kIpcPidOffset, sizeof pid);
  std::lock_guard<std::mutex> lock(mu_);
  return imported_pools_.count({pid, h.share_id}) == 0;
}

void* EmulatedBackend::ipc_open(const IpcMemHandle& h, int fd, int reader) {
  GS_REQUIRE(std::memcmp(h.bytes, kIpcMagic, sizeof kIpcMagic) == 0, GPUSTRIPE_ERR_INVALID_ARGUMENT,
             "ipc_open: not a handle of emulated memory (made by another backend?)");
  check_device("ipc_open", "the handle's device", h.device);
  // Every emulated GPU reads every mapping (host memory): the reader only has to exist.
  if (reader >= 0) check_device("ipc_open", "the reader", reader);
  GS_REQUIRE(h.size > 0, GPUSTRIPE_ERR_INVALID_SIZE, "ipc_open: the handle's size is 0");
  wait_for_stalled_streams("ipc_open");
  int32_t pid;
  std::memcpy(&pid, h.bytes + kIpcPidOffset, sizeof pid);
  // cudaIpcOpenMemHandle refuses a handle of the calling process; refusing it here too
  // keeps code that passes CI from failing on GPUs.
  GS_REQUIRE(pid != static_cast<int32_t>(getpid()), GPUSTRIPE_ERR_INVALID_ARGUMENT,
             "ipc_open: the handle was exported by this process (CUDA cannot open its own IPC handles)");
  const bool vmm = h.kind == IpcKind::VmmFd, pool = h.kind == IpcKind::PoolFd;
  int64_t pool_offset = -1;
  if (pool) std::memcpy(&pool_offset, h.bytes + kIpcNameOffset, sizeof pool_offset);
  char name[kIpcNameMax + 1] = {};
  if (vmm) std::snprintf(name, sizeof name, "memfd:%d:%llu", static_cast<int>(pid), static_cast<unsigned long long>(h.share_id));
  else if (pool)
    std::snprintf(name, sizeof name, "pool:%d:%llu:%lld:%llu", static_cast<int>(pid),
                  static_cast<unsigned long long>(h.share_id), static_cast<long long>(pool_offset),
                  static_cast<unsigned long long>(h.buffer_id));
  else std::memcpy(name, h.bytes + kIpcNameOffset, kIpcNameMax);

  std::lock_guard<std::mutex> lock(mu_);
  auto it = imported_.find(name);
  if (it != imported_.end()) {
    table_.add_open(it->second, +1);
    return it->second;
  }
  GS_REQUIRE(!vmm || fd >= 0, GPUSTRIPE_ERR_INVALID_ARGUMENT,
             "ipc_open: a vmm-fd handle (buffer %llu of pid %d) needs the exporter's file descriptor",
             static_cast<unsigned long long>(h.buffer_id), static_cast<int>(pid));
  if (pool) {  // the pool's descriptor the first time, kept (as the CUDA backend keeps imported pools)
    auto ip = imported_pools_.find({pid, h.share_id});
    if (ip == imported_pools_.end()) {
      GS_REQUIRE(fd >= 0, GPUSTRIPE_ERR_INVALID_ARGUMENT, "ipc_open: the first pool-fd handle of a pool needs its descriptor");
      int own = dup(fd);
      GS_REQUIRE(own >= 0, GPUSTRIPE_ERR_IO, "ipc_open: dup: %s", strerror(errno));
      ip = imported_pools_.emplace(std::make_pair(pid, h.share_id), own).first;
    }
    fd = ip->second;
  }
  Allocation a;
  a.base = reinterpret_cast<uintptr_t>(pool  ? map_memfd_range(fd, static_cast<uint64_t>(pool_offset), h.size)
                                       : vmm ? map_memfd(fd, h.size)
                                             : open_segment(name, h.size));
  a.pool_offset = pool_offset;
  a.size = h.size;
  a.kind = MemoryKind::Device;
  a.device = h.device;
  a.buffer_id = h.buffer_id;
  a.segment = name;  // the key of imported_ (ipc_close), for memfd memory too
  a.vmm = vmm;
  a.imported = true;
  a.open_count = 1;
  table_.insert(a);
  imported_[name] = reinterpret_cast<void*>(a.base);
  GS_LOG_DEBUG(Subsys::Backend, "ipc_open(%s of pid %d, GPU %d, %zu bytes) -> %p", name, pid, h.device, h.size,
               reinterpret_cast<void*>(a.base));
  return reinterpret_cast<void*>(a.base);
}

void* EmulatedBackend::ipc_open_pieces(const IpcMemHandle& h, const std::vector<IpcPiece>& pieces,
                                       const std::vector<int>& fds) {
  GS_REQUIRE(std::memcmp(h.bytes, kIpcMagic, sizeof kIpcMagic) == 0, GPUSTRIPE_ERR_INVALID_ARGUMENT,
             "ipc_open_pieces: not a handle of emulated memory (made by another backend?)");
  check_device("ipc_open_pieces", "the handle's device", h.device);
  ipc_check_pieces(h, pieces);
  GS_REQUIRE(fds.size() == pieces.size(), GPUSTRIPE_ERR_INVALID_ARGUMENT, "ipc_open_pieces: %zu descriptors for %zu pieces",
             fds.size(), pieces.size());
  wait_for_stalled_streams("ipc_open_pieces");
  int32_t pid;
  std::memcpy(&pid, h.bytes + kIpcPidOffset, sizeof pid);
  GS_REQUIRE(pid != static_cast<int32_t>(getpid()), GPUSTRIPE_ERR_INVALID_ARGUMENT,
             "ipc_open_pieces: the handle was exported by this process (CUDA cannot open its own IPC handles)");
  char name[kIpcNameMax + 1] = {};
  std::snprintf(name, sizeof name, "memfds:%d:%llu", static_cast<int>(pid), static_cast<unsigned long long>(h.share_id));
  std::lock_guard<std::mutex> lock(mu_);
  auto it = imported_.find(name);
  if (it != imported_.end()) {
    table_.add_open(it->second, +1);
    return it->second;
  }
  char* base = static_cast<char*>(reserve_range(h.size, h.device));
  try {
    for (size_t i = 0; i < pieces.size(); ++i) map_memfd_range(fds[i], 0, pieces[i].size, base + pieces[i].offset);
  } catch (...) {
    unmap_segment(base, h.size);
    throw;
  }
  Allocation a;
  a.base = reinterpret_cast<uintptr_t>(base);
  a.size = h.size;
  a.kind = MemoryKind::Device;
  a.device = h.device;
  a.buffer_id = h.buffer_id;
  a.segment = name;
  a.vmm = true;
  a.imported = true;
  a.open_count = 1;
  table_.insert(a);
  imported_[name] = base;
  GS_LOG_DEBUG(Subsys::Backend, "ipc_open_pieces(%zu pieces of pid %d, GPU %d, %zu bytes) -> %p", pieces.size(), pid,
               h.device, h.size, static_cast<void*>(base));
  return base;
}

void EmulatedBackend::ipc_close(void* base) {
  std::optional<Allocation> a = table_.find_base(base);
  GS_REQUIRE(a && a->imported, GPUSTRIPE_ERR_INVALID_POINTER, "ipc_close: %p is not a base returned by ipc_open", base);
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (table_.add_open(base, -1) > 0) return;
    imported_.erase(a->segment);
  }
  drain_all_streams();
  table_.erase(base);
  release(*a);
}

}  // namespace gpustripe::emu
