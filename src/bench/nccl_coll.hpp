// NCCL's own collectives over GPUs of this process (ncclCommInitAll, one group call per
// collective), timed the way coll_bench.hpp times gpustripe's. The coll benchmark uses it
// for NCCL's copy-engine mode ("nccl_ce"): buffers from ncclMemAlloc registered as
// symmetric windows, with NCCL_CTA_POLICY=2 in the environment before the first
// communicator of the process (NCCL reads its settings once), which torch could not set up.
#pragma once
#include <cstddef>
#include <memory>
#include <string>

#include "coll/types.hpp"

namespace gpustripe {

struct NcclCollTiming {
  double us = 0, min_us = 0, max_us = 0;  // median, fastest and slowest batch, per call
};

class NcclCollBench {
 public:
  // Communicators over devices 0..ranks-1 and per-rank buffers of max_bytes (send and
  // receive). symmetric: buffers from ncclMemAlloc in NCCL_WIN_COLL_SYMMETRIC windows.
  // Throws ERR_NOT_SUPPORTED with the reason when NCCL, CUDA or windows are missing.
  NcclCollBench(int ranks, size_t max_bytes, bool symmetric);
  ~NcclCollBench();
  NcclCollBench(const NcclCollBench&) = delete;
  NcclCollBench& operator=(const NcclCollBench&) = delete;

  // bytes: size per rank as nccl-tests reports it (coll_bench.hpp), at most max_bytes.
  NcclCollTiming time(coll::CollOp op, size_t bytes, coll::DataType dt, int warmup, int iters, int trials);
  // The NCCL version and how the buffers were set up.
  std::string describe() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace gpustripe
