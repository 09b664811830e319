// Memory of the emulated backend: device allocations in shared-memory segments,
// pinned host memory, the pointer table behind pointer_info, and IPC by segment name
// (Legacy handles) or by file descriptor (memfd memory: the emulated VMM, VmmFd handles).
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>

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

}  // namespace

void EmulatedBackend::release(const Allocation& a) noexcept {
  if (a.kind == MemoryKind::PinnedHost) {
    std::free(reinterpret_cast<void*>(a.base));
    return;
  }
  unmap_segment(reinterpret_cast<void*>(a.base), a.size);
  if (a.fd >= 0) close(a.fd);
  if (!a.imported && !a.vmm && !a.unshared) unlink_segment(a.segment);
}

void* EmulatedBackend::alloc_device(int dev, size_t bytes) { return alloc_device_as(dev, bytes, DeviceAlloc::Plain); }

void* EmulatedBackend::alloc_device_as(int dev, size_t bytes, DeviceAlloc how) {
  check_device("alloc_device", "dev", dev);
  GS_REQUIRE(bytes > 0, GPUSTRIPE_ERR_INVALID_SIZE, "alloc_device: 0 bytes on GPU %d", dev);
  {
    std::lock_guard<std::mutex> lock(mu_);
    uint64_t limit = memory_limit_[dev];
    GS_REQUIRE(limit == 0 || memory_used_[dev] + bytes <= limit, GPUSTRIPE_ERR_NO_MEMORY,
               "alloc_device: emulated GPU %d has %llu of %llu bytes in use, %zu more do not fit", dev,
               static_cast<unsigned long long>(memory_used_[dev]), static_cast<unsigned long long>(limit), bytes);
    memory_used_[dev] += bytes;
  }
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
      case DeviceAlloc::PoolFd:  // emulated pools are VMM memory too: one fd per allocation
        a.vmm = true;
        a.base = reinterpret_cast<uintptr_t>(create_memfd(bytes, dev, &a.fd));
        break;
      case DeviceAlloc::NotShareable:
        a.unshared = true;
        a.base = reinterpret_cast<uintptr_t>(create_private(bytes, dev));
        break;
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

void EmulatedBackend::free_device(void* p) {
  if (p == nullptr) return;  // as cudaFree(NULL)
  std::optional<Allocation> a = table_.find_base(p);
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
  GS_REQUIRE(h.kind == IpcKind::VmmFd, GPUSTRIPE_ERR_INVALID_ARGUMENT, "ipc_export_fd: a %s handle has no descriptor",
             ipc_kind_name(h.kind));
  std::optional<Allocation> a = table_.find_base(reinterpret_cast<const void*>(h.base));
  GS_REQUIRE(a && a->vmm && !a->imported && a->buffer_id == h.buffer_id, GPUSTRIPE_ERR_INVALID_POINTER,
             "ipc_export_fd: buffer %llu at 0x%llx is gone (freed since it was exported)",
             static_cast<unsigned long long>(h.buffer_id), static_cast<unsigned long long>(h.base));
  int fd = dup(a->fd);
  GS_REQUIRE(fd >= 0, GPUSTRIPE_ERR_IO, "ipc_export_fd: dup: %s", strerror(errno));
  return fd;
}

void* EmulatedBackend::ipc_open(const IpcMemHandle& h, int fd) {
  GS_REQUIRE(std::memcmp(h.bytes, kIpcMagic, sizeof kIpcMagic) == 0, GPUSTRIPE_ERR_INVALID_ARGUMENT,
             "ipc_open: not a handle of emulated memory (made by another backend?)");
  check_device("ipc_open", "the handle's device", h.device);
  GS_REQUIRE(h.size > 0, GPUSTRIPE_ERR_INVALID_SIZE, "ipc_open: the handle's size is 0");
  GS_REQUIRE(h.kind == IpcKind::Legacy || h.kind == IpcKind::VmmFd, GPUSTRIPE_ERR_INVALID_ARGUMENT,
             "ipc_open: the emulated backend has no %s handles", ipc_kind_name(h.kind));
  int32_t pid;
  std::memcpy(&pid, h.bytes + kIpcPidOffset, sizeof pid);
  // cudaIpcOpenMemHandle refuses a handle of the calling process; refusing it here too
  // keeps code that passes CI from failing on GPUs.
  GS_REQUIRE(pid != static_cast<int32_t>(getpid()), GPUSTRIPE_ERR_INVALID_ARGUMENT,
             "ipc_open: the handle was exported by this process (CUDA cannot open its own IPC handles)");
  const bool vmm = h.kind == IpcKind::VmmFd;
  char name[kIpcNameMax + 1] = {};
  if (vmm) std::snprintf(name, sizeof name, "memfd:%d:%llu", static_cast<int>(pid), static_cast<unsigned long long>(h.share_id));
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
  Allocation a;
  a.base = reinterpret_cast<uintptr_t>(vmm ? map_memfd(fd, h.size) : open_segment(name, h.size));
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
