/* gpustripe: send/receive between the processes of one node, with MPI's matching.
 *
 * An endpoint joins a context (context.h) to a channel (ipc.h). A message matches a
 * receive when `comm` is equal, the source is equal or GPUSTRIPE_ANY_SOURCE, and the
 * tag is equal or GPUSTRIPE_ANY_TAG; messages from one sender match in send order.
 * Buffers may be device or host memory on either side. Small host messages go through the
 * channel; a device send buffer is read by the receiver (one GPU-to-GPU copy, the multi-path
 * engine's for large ones), so a send of device memory completes once the receiver has matched
 * and copied it. Progress happens inside the calls (test, wait, iprobe).
 * An endpoint is thread-safe. Details: docs/mpi.md. */
#ifndef GPUSTRIPE_P2P_H
#define GPUSTRIPE_P2P_H
#include <stdint.h>

#include <gpustripe/context.h>
#include <gpustripe/ipc.h>
#include <gpustripe/status.h>

#ifdef __cplusplus
extern "C" {
#endif

#define GPUSTRIPE_ANY_SOURCE (-1)
#define GPUSTRIPE_ANY_TAG (-1)

typedef struct gpustripe_endpoint* gpustripe_endpoint_t;
typedef struct gpustripe_request* gpustripe_request_t;

typedef struct gpustripe_p2p_status {
  int source;              /* the sender's rank (receives) */
  int tag;                 /* the message's tag */
  uint64_t bytes;          /* bytes delivered into the buffer */
  uint64_t message_bytes;  /* bytes the sender sent (> bytes when truncated) */
  gpustripe_status_t error; /* GPUSTRIPE_ERR_TRUNCATE when the message did not fit */
} gpustripe_p2p_status_t;

/* An endpoint of `channel` moving data with `ctx`'s engine. Both must outlive it. */
gpustripe_status_t gpustripe_p2p_create(gpustripe_context_t ctx, gpustripe_channel_t channel,
                                        gpustripe_endpoint_t* endpoint);
/* Delivers what is still buffered for live peers (bounded), then frees. NULL: no-op. */
gpustripe_status_t gpustripe_p2p_destroy(gpustripe_endpoint_t endpoint);

/* Starts a send of `bytes` from `buf` to rank `dst` (tag >= 0). The buffer must stay
 * untouched until the request completes. `synchronous`: completes only once matched. */
gpustripe_status_t gpustripe_p2p_isend(gpustripe_endpoint_t endpoint, const void* buf, uint64_t bytes, int dst,
                                       int tag, uint64_t comm, int synchronous, gpustripe_request_t* request);
/* Starts a receive of at most `capacity` bytes into `buf`. */
gpustripe_status_t gpustripe_p2p_irecv(gpustripe_endpoint_t endpoint, void* buf, uint64_t capacity, int src, int tag,
                                       uint64_t comm, gpustripe_request_t* request);

/* *done = 1 when the request completed; it is then freed and *request set to NULL.
 * `status` (may be NULL) is filled on completion. Returns the completion's error
 * (GPUSTRIPE_ERR_TRUNCATE) once done, GPUSTRIPE_ERR_PEER_FAILED when its peer died. */
gpustripe_status_t gpustripe_p2p_test(gpustripe_endpoint_t endpoint, gpustripe_request_t* request, int* done,
                                      gpustripe_p2p_status_t* status);
/* Waits for completion (bounded by GPUSTRIPE_TIMEOUT), then as gpustripe_p2p_test. */
gpustripe_status_t gpustripe_p2p_wait(gpustripe_endpoint_t endpoint, gpustripe_request_t* request,
                                      gpustripe_p2p_status_t* status);
/* Frees a request that is not needed any more; an incomplete one keeps running. */
gpustripe_status_t gpustripe_p2p_request_free(gpustripe_request_t* request);

/* *found = 1 when a matching message has arrived (not received); fills source, tag
 * and message_bytes. src and tag as for gpustripe_p2p_irecv: GPUSTRIPE_ERR_INVALID_ARGUMENT
 * for a rank outside the channel or a negative tag other than any. */
gpustripe_status_t gpustripe_p2p_iprobe(gpustripe_endpoint_t endpoint, int src, int tag, uint64_t comm, int* found,
                                        gpustripe_p2p_status_t* status);

#ifdef __cplusplus
}
#endif
#endif
