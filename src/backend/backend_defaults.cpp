// The optional parts of the Backend interface: a backend that has no IPC or no
// graphs inherits these, which refuse with ERR_NOT_SUPPORTED naming the backend.
#include "backend/backend.hpp"
#include "common/error.hpp"

namespace gpustripe {

Backend::IpcMemHandle Backend::ipc_export(const void*) {
  GS_THROW(GPUSTRIPE_ERR_NOT_SUPPORTED, "ipc_export: the %s backend has no cross-process memory", name());
}
int Backend::ipc_export_fd(const IpcMemHandle&) {
  GS_THROW(GPUSTRIPE_ERR_NOT_SUPPORTED, "ipc_export_fd: the %s backend has no file-descriptor IPC", name());
}
void* Backend::ipc_open(const IpcMemHandle&, int, int) {
  GS_THROW(GPUSTRIPE_ERR_NOT_SUPPORTED, "ipc_open: the %s backend has no cross-process memory", name());
}
void* Backend::ipc_open_pieces(const IpcMemHandle&, const std::vector<IpcPiece>&, const std::vector<int>&) {
  GS_THROW(GPUSTRIPE_ERR_NOT_SUPPORTED, "ipc_open_pieces: the %s backend maps no multi-allocation handles", name());
}
void Backend::remap_piece(void*) {
  GS_THROW(GPUSTRIPE_ERR_NOT_SUPPORTED, "remap_piece: the %s backend makes no vmm_multi memory", name());
}
void Backend::ipc_close(void*) {
  GS_THROW(GPUSTRIPE_ERR_NOT_SUPPORTED, "ipc_close: the %s backend has no cross-process memory", name());
}
void* Backend::alloc_device_as(int dev, size_t bytes, DeviceAlloc how) {
  GS_REQUIRE(how == DeviceAlloc::Plain, GPUSTRIPE_ERR_NOT_SUPPORTED, "alloc_device_as: the %s backend makes no %s memory",
             name(), device_alloc_name(how));
  return alloc_device(dev, bytes);
}

const char* device_alloc_name(Backend::DeviceAlloc how) {
  switch (how) {
    case Backend::DeviceAlloc::Plain: return "plain";
    case Backend::DeviceAlloc::VmmFd: return "vmm";
    case Backend::DeviceAlloc::PoolFd: return "pool";
    case Backend::DeviceAlloc::NotShareable: return "async";
    case Backend::DeviceAlloc::VmmMulti: return "vmm_multi";
  }
  return "?";
}

Backend::DeviceAlloc parse_device_alloc(const std::string& word) {
  for (auto how : {Backend::DeviceAlloc::Plain, Backend::DeviceAlloc::VmmFd, Backend::DeviceAlloc::PoolFd,
                   Backend::DeviceAlloc::NotShareable, Backend::DeviceAlloc::VmmMulti})
    if (word == device_alloc_name(how)) return how;
  GS_THROW(GPUSTRIPE_ERR_INVALID_ARGUMENT, "device memory kind '%s': plain, vmm, pool, async or vmm_multi", word.c_str());
}

const char* ipc_kind_name(Backend::IpcKind kind) {
  switch (kind) {
    case Backend::IpcKind::Legacy: return "legacy";
    case Backend::IpcKind::VmmFd: return "vmm-fd";
    case Backend::IpcKind::PoolFd: return "pool-fd";
    case Backend::IpcKind::VmmMulti: return "vmm-multi";
  }
  return "?";
}

uint32_t* Backend::register_host(void*, size_t) { return nullptr; }
void Backend::unregister_host(void*) {}
void Backend::stream_write_flag(StreamHandle, uint32_t*, uint32_t) {
  GS_THROW(GPUSTRIPE_ERR_NOT_SUPPORTED, "stream_write_flag: the %s backend has no stream flags", name());
}
void Backend::stream_wait_flag(StreamHandle, const uint32_t*, uint32_t) {
  GS_THROW(GPUSTRIPE_ERR_NOT_SUPPORTED, "stream_wait_flag: the %s backend has no stream flags", name());
}
void Backend::stream_flag_barrier(StreamHandle s, uint32_t* mine, const uint32_t* const* others, size_t n,
                                  uint32_t value) {
  stream_write_flag(s, mine, value);
  for (size_t i = 0; i < n; ++i) stream_wait_flag(s, others[i], value);
}

void Backend::begin_capture(StreamHandle) {
  GS_THROW(GPUSTRIPE_ERR_NOT_SUPPORTED, "begin_capture: the %s backend has no graphs", name());
}
GraphExecHandle Backend::end_capture(StreamHandle) {
  GS_THROW(GPUSTRIPE_ERR_NOT_SUPPORTED, "end_capture: the %s backend has no graphs", name());
}
void Backend::launch_graph(GraphExecHandle, StreamHandle) {
  GS_THROW(GPUSTRIPE_ERR_NOT_SUPPORTED, "launch_graph: the %s backend has no graphs", name());
}
void Backend::destroy_graph(GraphExecHandle) {
  GS_THROW(GPUSTRIPE_ERR_NOT_SUPPORTED, "destroy_graph: the %s backend has no graphs", name());
}

}  // namespace gpustripe
