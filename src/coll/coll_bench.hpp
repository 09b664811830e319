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
                                 // (CallPacing::WaitEach: the waits included)
  std::string schedule;          // Comm::last_schedule() of the timed calls
};

// nccl-tests' bus-bandwidth factor: allreduce 2(n-1)/n; allgather, reduce-scatter,
// alltoall (n-1)/n; bcast and reduce 1.
double busbw_factor(CollOp op, int nranks);

// How the host issues a batch's calls.
enum class CallPacing {
  BackToBack,  // nccl-tests': the host enqueues the next call while the GPUs run this one
  WaitEach,    // the host waits for every rank's stream after each call before the next one:
               // the pace of blocking calls (MPI's) on one process: a reference, not a bound
};

// Throws ERR_INVALID_SIZE when bytes is not a multiple of the element size times the
// ranks where the op needs it. Buffers are allocated and freed inside.
CollTiming time_collective(Comm& comm, CollOp op, size_t bytes, DataType dt, RedOp redop, int warmup, int iters,
                           int trials, CallPacing pacing = CallPacing::BackToBack);

CollOp parse_coll_op(const std::string& name);  // the results format's op names

}  // namespace gpustripe::coll
