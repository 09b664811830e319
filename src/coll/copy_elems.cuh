// A copy by a kernel's threads: one source to several destinations, 16-byte or 4-byte vectors
// where every pointer allows, each thread loading 4 vectors before storing them to every
// destination (the loads in flight, where a source is a peer's memory). The copy kernel's
// segments (copy_cuda.cu) and the copies a kernel makes before its fused entry
// (fused_barrier.cuh) run it. Device code only; each including .cu file gets its own copy.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "coll/reduce.hpp"

namespace gpustripe::coll {
namespace {

// A segment of up to D destinations. D is part of a kernel's argument block when segments are
// passed by value, and a launch's host time grows with that block
// (bench/probes/launch_cost.cu), so launches size it to what they carry.
template <int D>
struct SegOf {
  const unsigned char* src;
  unsigned char* dst[D];
  size_t bytes;
  int nd;
  int align;  // 16, 4 or 1: what every pointer of the segment is aligned to
};

constexpr int kUnroll = 4;

template <class V, class S>
__device__ __forceinline__ void copy_elems(const S& s, size_t n, size_t i, size_t stride) {
  const V* src = reinterpret_cast<const V*>(s.src);
  for (; i + (kUnroll - 1) * stride < n; i += kUnroll * stride) {
    V v[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) v[u] = src[i + u * stride];
    for (int d = 0; d < s.nd; ++d) {
      V* dst = reinterpret_cast<V*>(s.dst[d]);
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) dst[i + u * stride] = v[u];
    }
  }
  for (; i < n; i += stride) {
    const V v = src[i];
    for (int d = 0; d < s.nd; ++d) reinterpret_cast<V*>(s.dst[d])[i] = v;
  }
}

// Thread `tid` of `stride`'s share of segment s.
template <class S>
__device__ __forceinline__ void copy_segment(const S& s, size_t tid, size_t stride) {
  size_t done = 0;
  if (s.align >= 16) {
    copy_elems<uint4>(s, s.bytes / 16, tid, stride);
    done = s.bytes / 16 * 16;
  } else if (s.align >= 4) {
    copy_elems<unsigned>(s, s.bytes / 4, tid, stride);
    done = s.bytes / 4 * 4;
  }
  for (size_t k = done + tid; k < s.bytes; k += stride) {
    const unsigned char b = s.src[k];
    for (int d = 0; d < s.nd; ++d) s.dst[d][k] = b;
  }
}

// Block blockIdx.x's part of n segments taken in turn (block b on segment b mod n; gridDim.x >= n):
// which segment, and this thread's place and stride in it.
struct SegShare {
  unsigned seg;
  size_t tid, stride;
};
__device__ __forceinline__ SegShare seg_share(unsigned n) {
  const unsigned si = blockIdx.x % n;
  const size_t blocks = (gridDim.x - si + n - 1) / n;  // blocks on this segment
  return {si, static_cast<size_t>(blockIdx.x / n) * blockDim.x + threadIdx.x, blocks * blockDim.x};
}

}  // namespace
}  // namespace gpustripe::coll
