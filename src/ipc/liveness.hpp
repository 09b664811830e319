// Is a process of this node still running? Used to turn a killed peer into an
// error within milliseconds rather than waiting for GPUSTRIPE_TIMEOUT.
#pragma once
#include <sys/types.h>

namespace gpustripe::ipc {

// False when `pid` does not exist or is a zombie (killed, not yet reaped by its parent).
bool process_alive(pid_t pid);

}  // namespace gpustripe::ipc
