// Handles of ranges that span several VMM allocations (Backend::IpcKind::VmmMulti), built
// on each backend's ipc_export of one allocation: PyTorch's expandable segments map a large
// tensor as several cuMemCreate allocations back to back in one reservation, which no single
// handle covers. The exporter walks the allocations from the one holding the start of the
// range, allocation by allocation (each ipc_export names the allocation at an address: its
// base, size and buffer id); the importer gets every piece's descriptor and the layout and
// maps them at their offsets in one range (ipc_open_pieces).
#include <unistd.h>

#include <atomic>
#include <cstring>

#include "backend/backend.hpp"
#include "common/error.hpp"
#include "common/log.hpp"

namespace gpustripe {
namespace {

// The allocations covering [base, base + bytes), the first starting at `base`'s allocation.
std::vector<Backend::IpcMemHandle> walk(Backend& b, const Backend::IpcMemHandle& first, uint64_t end) {
  std::vector<Backend::IpcMemHandle> out{first};
  uint64_t at = first.base + first.size;
  const size_t cap = at < end ? Backend::kMaxIpcPieces : 1;
  while (at < end) {
    if (out.size() >= cap) {
      static std::atomic<bool> said{false};
      if (!said.exchange(true))
        GS_LOG_INFO(Subsys::Backend, "a device buffer spans more than %zu VMM allocations (from 0x%llx): "
                    "no IPC handle maps it; such buffers stream (slower)", cap,
                    static_cast<unsigned long long>(first.base));
      GS_THROW(GPUSTRIPE_ERR_NOT_SUPPORTED, "the range [0x%llx, 0x%llx) spans more than %zu VMM allocations",
               static_cast<unsigned long long>(first.base), static_cast<unsigned long long>(end), cap);
    }
    Backend::IpcMemHandle n;
    try {
      n = b.ipc_export(reinterpret_cast<const void*>(static_cast<uintptr_t>(at)));
    } catch (const Error& e) {
      GS_THROW(GPUSTRIPE_ERR_NOT_SUPPORTED, "the range [0x%llx, 0x%llx) leaves VMM memory at 0x%llx: %s",
               static_cast<unsigned long long>(first.base), static_cast<unsigned long long>(end),
               static_cast<unsigned long long>(at), e.what());
    }
    GS_REQUIRE(n.kind == Backend::IpcKind::VmmFd && n.device == first.device && n.base == at && n.size > 0,
               GPUSTRIPE_ERR_NOT_SUPPORTED,
               "the range [0x%llx, 0x%llx) meets %s memory of GPU %d at 0x%llx: not one run of VMM allocations",
               static_cast<unsigned long long>(first.base), static_cast<unsigned long long>(end),
               ipc_kind_name(n.kind), n.device, static_cast<unsigned long long>(at));
    out.push_back(n);
    at += n.size;
  }
  return out;
}

std::vector<Backend::IpcPiece> layout(const std::vector<Backend::IpcMemHandle>& hs) {
  std::vector<Backend::IpcPiece> out;
  for (const auto& h : hs) out.push_back({h.base - hs.front().base, h.size, h.buffer_id});
  return out;
}

}  // namespace

uint64_t ipc_pieces_digest(const std::vector<Backend::IpcPiece>& pieces) {
  // FNV-1a over the layout, then a final mix: buffer ids are unique per allocation over a
  // process's life, so any freed and reallocated piece changes the digest.
  uint64_t h = 1469598103934665603ull;
  auto add = [&](uint64_t v) {
    for (int i = 0; i < 8; ++i) {
      h ^= (v >> (8 * i)) & 0xff;
      h *= 1099511628211ull;
    }
  };
  add(pieces.size());
  for (const auto& p : pieces) {
    add(p.offset);
    add(p.size);
    add(p.buffer_id);
  }
  h ^= h >> 33;
  h *= 0xff51afd7ed558ccdull;
  h ^= h >> 33;
  return h ? h : 1;
}

void ipc_check_pieces(const Backend::IpcMemHandle& h, const std::vector<Backend::IpcPiece>& pieces) {
  GS_REQUIRE(h.kind == Backend::IpcKind::VmmMulti, GPUSTRIPE_ERR_INVALID_ARGUMENT, "a %s handle has no pieces",
             ipc_kind_name(h.kind));
  GS_REQUIRE(pieces.size() >= 2 && pieces.size() <= Backend::kMaxIpcPieces, GPUSTRIPE_ERR_INVALID_ARGUMENT,
             "a vmm-multi handle of %zu pieces (2 to %zu)", pieces.size(), Backend::kMaxIpcPieces);
  uint64_t at = 0;
  for (const auto& p : pieces) {
    GS_REQUIRE(p.offset == at && p.size > 0 && p.buffer_id != 0, GPUSTRIPE_ERR_INVALID_ARGUMENT,
               "vmm-multi layout: a piece at %llu of %llu bytes where %llu was expected",
               static_cast<unsigned long long>(p.offset), static_cast<unsigned long long>(p.size),
               static_cast<unsigned long long>(at));
    at += p.size;
  }
  GS_REQUIRE(at == h.size && ipc_pieces_digest(pieces) == h.share_id, GPUSTRIPE_ERR_INVALID_ARGUMENT,
             "vmm-multi layout of %llu bytes does not match the handle of buffer %llu (%zu bytes)",
             static_cast<unsigned long long>(at), static_cast<unsigned long long>(h.buffer_id), h.size);
}

size_t vmm_multi_piece(size_t bytes, size_t granularity) {
  constexpr size_t kPage = size_t(20) << 20;  // PyTorch's kLargeBuffer
  if (granularity == 0) granularity = 1;
  if (bytes <= kPage) return granularity;
  return (kPage + granularity - 1) / granularity * granularity;
}

Backend::IpcMemHandle Backend::ipc_export_range(const void* p, size_t bytes) {
  IpcMemHandle h = ipc_export(p);
  const uint64_t u = reinterpret_cast<uintptr_t>(p);
  if (h.kind != IpcKind::VmmFd || bytes == 0 || u + bytes <= h.base + h.size) return h;
  std::vector<IpcMemHandle> hs = walk(*this, h, u + bytes);
  IpcMemHandle m = h;  // the first piece's bytes (the backend's tag and the exporter's pid)
  m.kind = IpcKind::VmmMulti;
  m.size = static_cast<size_t>(hs.back().base + hs.back().size - h.base);
  m.share_id = ipc_pieces_digest(layout(hs));
  return m;
}

std::vector<Backend::IpcPiece> Backend::ipc_pieces(const IpcMemHandle& h) {
  GS_REQUIRE(h.kind == IpcKind::VmmMulti, GPUSTRIPE_ERR_INVALID_ARGUMENT, "ipc_pieces: a %s handle",
             ipc_kind_name(h.kind));
  std::vector<IpcMemHandle> hs;
  try {
    IpcMemHandle first = ipc_export(reinterpret_cast<const void*>(static_cast<uintptr_t>(h.base)));
    GS_REQUIRE(first.kind == IpcKind::VmmFd && first.base == h.base, GPUSTRIPE_ERR_INVALID_POINTER, "not VMM");
    hs = walk(*this, first, h.base + h.size);
  } catch (const Error& e) {
    GS_THROW(GPUSTRIPE_ERR_INVALID_POINTER, "vmm-multi buffer %llu at 0x%llx is gone (%s)",
             static_cast<unsigned long long>(h.buffer_id), static_cast<unsigned long long>(h.base), e.what());
  }
  std::vector<IpcPiece> out = layout(hs);
  GS_REQUIRE(ipc_pieces_digest(out) == h.share_id && hs.back().base + hs.back().size == h.base + h.size,
             GPUSTRIPE_ERR_INVALID_POINTER,
             "vmm-multi buffer %llu at 0x%llx is gone (a piece was freed or replaced since it was exported)",
             static_cast<unsigned long long>(h.buffer_id), static_cast<unsigned long long>(h.base));
  return out;
}

std::vector<int> Backend::ipc_export_fds(const IpcMemHandle& h, std::vector<IpcPiece>* pieces) {
  pieces->clear();
  if (h.kind != IpcKind::VmmMulti) return {ipc_export_fd(h)};
  std::vector<IpcPiece> ps = ipc_pieces(h);
  std::vector<int> fds;
  try {
    for (const auto& p : ps) {
      IpcMemHandle one = h;
      one.kind = IpcKind::VmmFd;
      one.base = h.base + p.offset;
      one.size = p.size;
      one.buffer_id = p.buffer_id;
      one.share_id = p.buffer_id;
      fds.push_back(ipc_export_fd(one));
    }
  } catch (...) {
    for (int fd : fds) ::close(fd);
    throw;
  }
  *pieces = std::move(ps);
  return fds;
}

}  // namespace gpustripe
