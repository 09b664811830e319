// What a gpustripe_context_t points to, for the C API files of every layer.
#pragma once
#include <gpustripe/context.h>

#include "common/capi_guard.hpp"
#include "core/context.hpp"

struct gpustripe_context {
  gpustripe::Context impl;
};

namespace gpustripe {
// The context behind a handle; ERR_INVALID_ARGUMENT for NULL.
inline Context& context_of(gpustripe_context_t ctx) {
  GS_REQUIRE(ctx != nullptr, GPUSTRIPE_ERR_INVALID_ARGUMENT, "context is NULL");
  return ctx->impl;
}
}  // namespace gpustripe
