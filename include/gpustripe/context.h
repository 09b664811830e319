/* gpustripe: the context.
 *
 * A context holds what one process needs to move data between its GPUs: the node's
 * topology, the backend (CUDA, or emulated devices where no GPU is visible), the
 * planner and the multi-path engine with its streams and staging memory. Make one per
 * process and share it between threads: every call on a context is thread-safe.
 *
 * Where no GPU is visible the context runs on emulated devices of the topology that
 * GPUSTRIPE_TOPOLOGY names (default "h200x4") and logs so at info level. */
#ifndef GPUSTRIPE_CONTEXT_H
#define GPUSTRIPE_CONTEXT_H
#include <gpustripe/status.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct gpustripe_context* gpustripe_context_t;

/* Makes a context and stores it in *ctx (NULL on failure). */
gpustripe_status_t gpustripe_context_create(gpustripe_context_t* ctx);

/* Waits for the context's outstanding work, then frees it. NULL is a no-op. */
gpustripe_status_t gpustripe_context_destroy(gpustripe_context_t ctx);

/* Number of GPUs (real or emulated) the context moves data between. */
gpustripe_status_t gpustripe_context_device_count(gpustripe_context_t ctx, int* count);

/* "cuda" or "emulated"; a static string. */
gpustripe_status_t gpustripe_context_backend_name(gpustripe_context_t ctx, const char** name);

#ifdef __cplusplus
}
#endif
#endif
