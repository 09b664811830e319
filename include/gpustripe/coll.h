/* gpustripe: collectives over the GPUs of one node.
 *
 * A communicator groups N GPUs ("ranks"); rank r is devices[r]. The single-process
 * communicator (gpustripe_comm_create) takes one device buffer per rank in every call,
 * all valid in the calling process, the way NCCL's ncclCommInitAll + group calls do.
 * Counts are in elements of the data type. Each call takes arrays of N pointers:
 * sendbufs[r] / recvbufs[r] are rank r's buffers on devices[r].
 *
 * Buffers per rank (MPI semantics; "in place" = the pointer equalities given):
 *   alltoall        send N*count, recv N*count; block j of rank i goes to block i of rank j.
 *                   In place: sendbufs[r] == recvbufs[r].
 *   allgather       send count, recv N*count; rank i's data lands in block i everywhere.
 *                   In place: sendbufs[r] == recvbufs[r] + r*count elements.
 *   reduce_scatter  send N*count, recv count (the block reduction of MPI_Reduce_scatter_block).
 *                   In place: recvbufs[r] == sendbufs[r] + r*count elements.
 *   allreduce       send count, recv count, any count. In place: sendbufs[r] == recvbufs[r].
 *   bcast           one buffer per rank of count elements; root's is the source.
 *   reduce          send count, recv count at root (recvbufs[r] may be NULL elsewhere).
 *                   In place: sendbufs[root] == recvbufs[root].
 *
 * streams: NULL, or N stream handles (cudaStream_t of devices[r]; on the emulated backend,
 * handles the library gave out). With NULL the call returns when the collective is complete.
 * With streams the call is asynchronous: the collective starts after the work already
 * enqueued on every streams[r] and later work on streams[r] waits for it.
 *
 * Schedules are chosen per call from the node's topology and the message size (copy-engine
 * permutation rounds, pipelined reduce-scatter + allgather, host-path share, peer-read
 * kernels at small sizes, hierarchical on multi-socket nodes); GPUSTRIPE_LOG_LEVEL=debug
 * with GPUSTRIPE_LOG_SUBSYS=coll logs each choice and why. GPUSTRIPE_COLL_ALGO forces one.
 * A communicator is not thread-safe: one call at a time. */
#ifndef GPUSTRIPE_COLL_H
#define GPUSTRIPE_COLL_H
#include <stddef.h>

#include <gpustripe/context.h>
#include <gpustripe/status.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum gpustripe_dtype {
  GPUSTRIPE_FLOAT32 = 0,
  GPUSTRIPE_FLOAT64 = 1,
  GPUSTRIPE_FLOAT16 = 2,  /* IEEE half */
  GPUSTRIPE_BFLOAT16 = 3,
  GPUSTRIPE_INT32 = 4,
  GPUSTRIPE_INT64 = 5,
  GPUSTRIPE_INT8 = 6,
  GPUSTRIPE_UINT8 = 7,
  GPUSTRIPE_INT16 = 8,
  GPUSTRIPE_UINT16 = 9,
  GPUSTRIPE_UINT32 = 10,
  GPUSTRIPE_UINT64 = 11,
  /* (value, index) pairs of MINLOC/MAXLOC, laid out as the C structs {value; int index}
   * (MPI_FLOAT_INT, MPI_DOUBLE_INT, MPI_LONG_INT, MPI_2INT, MPI_SHORT_INT); the size is the
   * struct's, padding included. */
  GPUSTRIPE_FLOAT_INT = 12,
  GPUSTRIPE_DOUBLE_INT = 13,
  GPUSTRIPE_INT64_INT = 14,
  GPUSTRIPE_INT_INT = 15,
  GPUSTRIPE_INT16_INT = 16,
  GPUSTRIPE_DTYPE_COUNT = 17
} gpustripe_dtype_t;

/* Integer SUM and PROD wrap around (two's complement); half and bfloat16 accumulate in float
 * and round once per element. Logical ops (LAND, LOR, LXOR) give 1 or 0 and bitwise ops
 * (BAND, BOR, BXOR) work on the bits, both on integer types only; MINLOC/MAXLOC only on the
 * pair types (ties take the smaller index), which take no other op. */
typedef enum gpustripe_redop {
  GPUSTRIPE_SUM = 0,
  GPUSTRIPE_PROD = 1,
  GPUSTRIPE_MAX = 2,
  GPUSTRIPE_MIN = 3,
  GPUSTRIPE_LAND = 4,
  GPUSTRIPE_LOR = 5,
  GPUSTRIPE_LXOR = 6,
  GPUSTRIPE_BAND = 7,
  GPUSTRIPE_BOR = 8,
  GPUSTRIPE_BXOR = 9,
  GPUSTRIPE_MINLOC = 10,
  GPUSTRIPE_MAXLOC = 11,
  GPUSTRIPE_REDOP_COUNT = 12
} gpustripe_redop_t;

typedef struct gpustripe_comm* gpustripe_comm_t;

/* Size in bytes of one element; 0 for an unknown type. */
size_t gpustripe_dtype_size(gpustripe_dtype_t dtype);

/* A communicator over `ndev` GPUs of the context: rank r is devices[r] (distinct device
 * indices of the context's backend). Enables peer access between them where the node
 * allows it. The context must outlive the communicator. */
gpustripe_status_t gpustripe_comm_create(gpustripe_comm_t* comm, gpustripe_context_t ctx, const int* devices,
                                         int ndev);
/* Waits for outstanding work, frees scratch memory. NULL is accepted. */
gpustripe_status_t gpustripe_comm_destroy(gpustripe_comm_t comm);
gpustripe_status_t gpustripe_comm_size(gpustripe_comm_t comm, int* nranks);
/* Device index of a rank. */
gpustripe_status_t gpustripe_comm_device(gpustripe_comm_t comm, int rank, int* device);
/* Waits until every collective issued on the communicator is complete. */
gpustripe_status_t gpustripe_comm_synchronize(gpustripe_comm_t comm);
/* Name of the schedule the last call used and why it was picked, e.g.
 * "rs_ag_copy chunks=8 host=0%: 256M per rank on NVSwitch: pipelined copy-engine RS+AG".
 * Valid until the next call on the communicator. */
const char* gpustripe_comm_last_schedule(gpustripe_comm_t comm);

gpustripe_status_t gpustripe_alltoall(gpustripe_comm_t comm, const void* const* sendbufs, void* const* recvbufs,
                                      size_t count, gpustripe_dtype_t dtype, void* const* streams);
gpustripe_status_t gpustripe_allgather(gpustripe_comm_t comm, const void* const* sendbufs, void* const* recvbufs,
                                       size_t count, gpustripe_dtype_t dtype, void* const* streams);
gpustripe_status_t gpustripe_reduce_scatter(gpustripe_comm_t comm, const void* const* sendbufs,
                                            void* const* recvbufs, size_t count, gpustripe_dtype_t dtype,
                                            gpustripe_redop_t op, void* const* streams);
gpustripe_status_t gpustripe_allreduce(gpustripe_comm_t comm, const void* const* sendbufs, void* const* recvbufs,
                                       size_t count, gpustripe_dtype_t dtype, gpustripe_redop_t op,
                                       void* const* streams);
gpustripe_status_t gpustripe_bcast(gpustripe_comm_t comm, void* const* bufs, size_t count, gpustripe_dtype_t dtype,
                                   int root, void* const* streams);
gpustripe_status_t gpustripe_reduce(gpustripe_comm_t comm, const void* const* sendbufs, void* const* recvbufs,
                                    size_t count, gpustripe_dtype_t dtype, gpustripe_redop_t op, int root,
                                    void* const* streams);

#ifdef __cplusplus
}
#endif
#endif
