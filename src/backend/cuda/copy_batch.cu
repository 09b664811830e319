// One kernel copies many ranges: a window of small messages costs one launch (~2-4 us of host
// time) instead of one copy-engine enqueue per message. The ranges ride in the kernel's
// parameters (no upload, nothing to free). Blocks take the ranges in turn (block b on range
// b mod n), so every range starts in the first wave; a range moves in 16-byte vectors when
// both of its ends are aligned to 16, else 4-byte words or bytes, with a byte tail.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "backend/cuda/copy_batch.hpp"
#include "common/error.hpp"

namespace gpustripe {
namespace {

constexpr int kMaxBatchRanges = 64;  // 64 x 32 bytes of parameters: well inside the 4 KB limit
constexpr int kThreads = 256;
constexpr int kBlocksPerSm = 2;

struct Range {
  const unsigned char* src;
  unsigned char* dst;
  size_t bytes;
  int align;
};
struct Ranges {
  Range r[kMaxBatchRanges];
  int n;
};

template <class V>
__device__ __forceinline__ void copy_vectors(const Range& r, size_t n, size_t i, size_t stride) {
  const V* src = reinterpret_cast<const V*>(r.src);
  V* dst = reinterpret_cast<V*>(r.dst);
  for (; i + 3 * stride < n; i += 4 * stride) {  // four loads in flight before the stores (peer reads)
    const V a = src[i], b = src[i + stride], c = src[i + 2 * stride], d = src[i + 3 * stride];
    dst[i] = a;
    dst[i + stride] = b;
    dst[i + 2 * stride] = c;
    dst[i + 3 * stride] = d;
  }
  for (; i < n; i += stride) dst[i] = src[i];
}

__global__ void __launch_bounds__(kThreads) copy_batch_kernel(Ranges p) {
  const unsigned n = static_cast<unsigned>(p.n);
  const unsigned ri = blockIdx.x % n;
  const Range& r = p.r[ri];
  const size_t blocks = (gridDim.x - ri + n - 1) / n;  // blocks on this range
  const size_t tid = static_cast<size_t>(blockIdx.x / n) * blockDim.x + threadIdx.x;
  const size_t stride = blocks * blockDim.x;
  size_t done = 0;
  if (r.align >= 16) {
    copy_vectors<uint4>(r, r.bytes / 16, tid, stride);
    done = r.bytes / 16 * 16;
  } else if (r.align >= 4) {
    copy_vectors<unsigned>(r, r.bytes / 4, tid, stride);
    done = r.bytes / 4 * 4;
  }
  for (size_t k = done + tid; k < r.bytes; k += stride) r.dst[k] = r.src[k];
}

int sm_count(int dev) {
  static int counts[64] = {};
  if (dev < 0 || dev >= 64) return 1;
  if (counts[dev] == 0) {
    int v = 0;
    if (cudaDeviceGetAttribute(&v, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess || v <= 0) v = 1;
    counts[dev] = v;
  }
  return counts[dev];
}

}  // namespace

void launch_copy_batch(const Backend::CopyRange* ranges, size_t n, int dev, void* stream) {
  const size_t cap = static_cast<size_t>(sm_count(dev)) * kBlocksPerSm;
  for (size_t first = 0; first < n; first += kMaxBatchRanges) {
    Ranges p{};
    size_t work = 0;  // vectors (or words, or bytes) of the largest range
    for (size_t i = first; i < std::min(n, first + kMaxBatchRanges); ++i) {
      const Backend::CopyRange& c = ranges[i];
      if (c.bytes == 0) continue;
      Range& r = p.r[p.n++];
      r.src = static_cast<const unsigned char*>(c.src);
      r.dst = static_cast<unsigned char*>(c.dst);
      r.bytes = c.bytes;
      const uintptr_t bits = reinterpret_cast<uintptr_t>(c.src) | reinterpret_cast<uintptr_t>(c.dst);
      r.align = bits % 16 == 0 ? 16 : bits % 4 == 0 ? 4 : 1;
      work = std::max(work, (c.bytes + r.align - 1) / r.align);
    }
    if (p.n == 0) continue;
    // One thread per element of the largest range on each range's blocks, up to the cap (spread
    // over the ranges): small messages get few short blocks, a MB-sized one a striding grid.
    const size_t nr = static_cast<size_t>(p.n);
    const size_t per_range = std::max<size_t>(1, (work + kThreads - 1) / kThreads);
    const size_t grid = std::min(std::max(nr, cap / nr * nr), per_range * nr);
    copy_batch_kernel<<<static_cast<unsigned>(grid), kThreads, 0, static_cast<cudaStream_t>(stream)>>>(p);
    const cudaError_t e = cudaGetLastError();
    GS_REQUIRE(e == cudaSuccess, GPUSTRIPE_ERR_CUDA, "copy batch kernel (%d ranges) on device %d: %s", p.n, dev,
               cudaGetErrorString(e));
  }
}

}  // namespace gpustripe
