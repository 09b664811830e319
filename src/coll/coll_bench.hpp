// Timing of one collective on a communicator, the way nccl-tests times: `iters`
// back-to-back calls on per-rank streams, one synchronisation per batch, the batch's
// time divided by `iters`; the median of `trials` batches after `warmup` untimed calls.
// `bytes` is the size per rank as nccl-tests reports it (coll.h / select.hpp).
#pragma once
#include <cstddef>
#include <string>

#include "coll/comm.hpp"

namespace gpustripe::coll {

struct CollTiming {
  double us = 0;                 // median time of one call
  double min_us = 0, max_us = 0;
  double algbw_gbps = 0;         // bytes / us
  double busbw_gbps = 0;         // algbw times the nccl-tests factor of the op
  double enqueue_us = 0;         // median host time of one call to return (no synchronisation):
                                 // near `us`, the host's issuing bounds the rate
  double gpu_us = 0;             // CallPacing::FromIdle: the median GPU time of a call alone
  double round_trip_us = 0;      // CallPacing::FromIdle: the median host-GPU-host round trip
  std::string schedule;          // Comm::last_schedule() of the timed calls
};

// nccl-tests' bus-bandwidth factor: allreduce 2(n-1)/n; allgather, reduce-scatter,
// alltoall (n-1)/n; bcast and reduce 1.
double busbw_factor(CollOp op, int nranks);

// How a batch's calls are timed.
enum class CallPacing {
  BackToBack,  // nccl-tests': the host enqueues the next call while the GPUs run this one
  FromIdle,    // each call alone: enqueued on every rank's stream behind a flag, released at once,
               // timed by events on the GPUs (the slowest rank's), plus one host-GPU-host round
               // trip (a 4-byte memset on rank 0's stream, enqueued and seen complete). `us` is
               // then the least a blocking call of this schedule can take: its GPUs start from
               // idle and its host must start them and see them end. Throws ERR_NOT_SUPPORTED on
               // a backend without stream flags, or where the call waits on its host for the
               // GPUs (the flag is then released after a few seconds: no hang).
};

// Throws ERR_INVALID_SIZE when bytes is not a multiple of the element size times the
// ranks where the op needs it. Buffers are allocated and freed inside.
CollTiming time_collective(Comm& comm, CollOp op, size_t bytes, DataType dt, RedOp redop, int warmup, int iters,
                           int trials, CallPacing pacing = CallPacing::BackToBack);

CollOp parse_coll_op(const std::string& name);  // the results format's op names

}  // namespace gpustripe::coll
