// The optional parts of the Backend interface: a backend that has no IPC or no
// graphs inherits these, which refuse with ERR_NOT_SUPPORTED naming the backend.
#include "backend/backend.hpp"
#include "common/error.hpp"

namespace gpustripe {

Backend::IpcMemHandle Backend::ipc_export(const void*) {
  GS_THROW(GPUSTRIPE_ERR_NOT_SUPPORTED, "ipc_export: the %s backend has no cross-process memory", name());
}
void* Backend::ipc_open(const IpcMemHandle&) {
  GS_THROW(GPUSTRIPE_ERR_NOT_SUPPORTED, "ipc_open: the %s backend has no cross-process memory", name());
}
void Backend::ipc_close(void*) {
  GS_THROW(GPUSTRIPE_ERR_NOT_SUPPORTED, "ipc_close: the %s backend has no cross-process memory", name());
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
