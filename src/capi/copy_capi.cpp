#include <gpustripe/copy.h>

#include "core/context_handle.hpp"

using gpustripe::capi_guard;
using gpustripe::context_of;

extern "C" {

gpustripe_status_t gpustripe_copy_async(gpustripe_context_t ctx, void* dst, int dst_dev, const void* src, int src_dev,
                                        size_t bytes, void* stream) {
  return capi_guard(__func__, [&] {
    gpustripe::Context& c = context_of(ctx);
    gpustripe::StreamHandle s = stream ? stream : (bytes ? c.default_stream(src_dev) : nullptr);
    c.engine().copy_async(dst, dst_dev, src, src_dev, bytes, s);
  });
}

gpustripe_status_t gpustripe_copy(gpustripe_context_t ctx, void* dst, int dst_dev, const void* src, int src_dev,
                                  size_t bytes, void* stream) {
  return capi_guard(__func__, [&] {
    gpustripe::Context& c = context_of(ctx);
    if (bytes == 0) {
      c.engine().copy_async(dst, dst_dev, src, src_dev, 0, nullptr);  // checks the devices
      return;
    }
    gpustripe::StreamHandle s = stream ? stream : c.default_stream(src_dev);
    c.engine().copy(dst, dst_dev, src, src_dev, bytes, s);
  });
}

}  // extern "C"
