// What a gpustripe_channel_t points to, for the C API files (ipc_capi, p2p_capi).
#pragma once
#include <gpustripe/ipc.h>

#include <memory>

#include "ipc/channel.hpp"

struct gpustripe_channel {
  std::unique_ptr<gpustripe::ipc::Channel> impl;
};
