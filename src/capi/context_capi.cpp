#include <gpustripe/context.h>

#include "core/context_handle.hpp"

using gpustripe::capi_guard;
using gpustripe::context_of;

extern "C" {

gpustripe_status_t gpustripe_context_create(gpustripe_context_t* ctx) {
  return capi_guard(__func__, [&] {
    GS_REQUIRE_ARG(ctx);
    *ctx = nullptr;
    *ctx = new gpustripe_context();
  });
}

gpustripe_status_t gpustripe_context_destroy(gpustripe_context_t ctx) {
  return capi_guard(__func__, [&] { delete ctx; });
}

gpustripe_status_t gpustripe_context_device_count(gpustripe_context_t ctx, int* count) {
  return capi_guard(__func__, [&] {
    GS_REQUIRE_ARG(count);
    *count = context_of(ctx).device_count();
  });
}

gpustripe_status_t gpustripe_context_backend_name(gpustripe_context_t ctx, const char** name) {
  return capi_guard(__func__, [&] {
    GS_REQUIRE_ARG(name);
    *name = context_of(ctx).backend_name();
  });
}

}  // extern "C"
