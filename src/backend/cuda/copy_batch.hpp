// The batch-copy kernel behind CudaBackend::copy_batch_async.
#pragma once
#include <cstddef>

#include "backend/backend.hpp"

namespace gpustripe {

// Enqueues the copies of `ranges` on `stream` (a cudaStream_t of device `dev`, current when
// called): one launch per kMaxBatchRanges ranges. Every range must be device memory that `dev`
// reaches (its own, or a peer's with peer access enabled).
void launch_copy_batch(const Backend::CopyRange* ranges, size_t n, int dev, void* stream);

}  // namespace gpustripe
