/* gpustripe: the node-local channel between the processes of one job.
 *
 * The processes (ranks) of a job on one node share a channel: a POSIX shared-memory
 * segment with a ring per pair of ranks, over which the p2p layer (p2p.h) sends small
 * messages and the control records of large ones. A dead rank is noticed from its pid
 * within milliseconds (GPUSTRIPE_ERR_PEER_FAILED); a silent one ends every wait after
 * GPUSTRIPE_TIMEOUT seconds (GPUSTRIPE_ERR_TIMEOUT). Details: docs/mpi.md. */
#ifndef GPUSTRIPE_IPC_H
#define GPUSTRIPE_IPC_H
#include <gpustripe/status.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct gpustripe_channel* gpustripe_channel_t;

/* Joins the channel `name` as `rank` of `nranks` (1..256) and returns once every rank
 * has joined. `name` is one word unique to the job, such as "myjob-1234" (it becomes
 * /dev/shm/gpustripe-<name> until all ranks have joined). Rank 0 creates it; the others
 * wait for it to appear, at most GPUSTRIPE_TIMEOUT seconds. *channel is NULL on failure. */
gpustripe_status_t gpustripe_channel_join(const char* name, int rank, int nranks, gpustripe_channel_t* channel);

/* Leaves the channel (peers still waiting on this rank get GPUSTRIPE_ERR_PEER_FAILED)
 * and frees it. Destroy the endpoints over it first. NULL is a no-op. */
gpustripe_status_t gpustripe_channel_destroy(gpustripe_channel_t channel);

/* This process's rank and the number of ranks; either pointer may be NULL. */
gpustripe_status_t gpustripe_channel_rank(gpustripe_channel_t channel, int* rank, int* nranks);

#ifdef __cplusplus
}
#endif
#endif
