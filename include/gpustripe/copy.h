/* gpustripe: copies between the GPUs of one node, striped over every useful path.
 *
 * A copy larger than the size where splitting pays is split over the paths the planner
 * picks (direct peer copy, staging through pinned host memory or another GPU) and
 * pipelined in chunks; smaller copies are one plain peer copy with no extra work. */
#ifndef GPUSTRIPE_COPY_H
#define GPUSTRIPE_COPY_H
#include <stddef.h>

#include <gpustripe/context.h>
#include <gpustripe/status.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Copies `bytes` from `src` (device memory of GPU src_dev) to `dst` (device memory of
 * GPU dst_dev), stream-ordered like cudaMemcpyPeerAsync:
 *   - `stream` is a cudaStream_t of GPU src_dev, passed as void*. The copy starts after the
 *     work enqueued on it before the call; work enqueued on it after the call starts after
 *     the copy is complete on every path. NULL means the legacy default stream, with
 *     src_dev as the current device (on emulated devices: a stream of src_dev the context owns).
 *   - Safe to call from many threads and streams at once; copies issued on one stream keep
 *     their order (a later copy to the same dst wins).
 *   - src_dev == dst_dev: one device-local copy. The ranges must not overlap.
 *   - bytes == 0: success, nothing is done; devices are checked, pointers are not.
 * Errors (nothing is enqueued and nothing written): ERR_INVALID_DEVICE for a device the
 * context does not have; ERR_INVALID_POINTER for NULL, host memory (also pinned) or memory
 * of another GPU than the one named; ERR_INVALID_SIZE for a range past the end of its
 * allocation or a byte count that wraps around the address space; ERR_INVALID_ARGUMENT for overlapping ranges or a NULL context. */
gpustripe_status_t gpustripe_copy_async(gpustripe_context_t ctx, void* dst, int dst_dev, const void* src, int src_dev,
                                        size_t bytes, void* stream);

/* gpustripe_copy_async, then waits until `stream` (all of its work) is complete. */
gpustripe_status_t gpustripe_copy(gpustripe_context_t ctx, void* dst, int dst_dev, const void* src, int src_dev,
                                  size_t bytes, void* stream);

#ifdef __cplusplus
}
#endif
#endif
