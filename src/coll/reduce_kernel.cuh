// The reduction kernel template (dst = op(src0, src1, ...) element-wise) and its launch for
// one (type, op), shared by the .cu files that instantiate it per family of types
// (reduce_cuda.cu: floating point; reduce_cuda_int.cu: integers; reduce_cuda_loc.cu: the
// MINLOC/MAXLOC pairs), so each compiles a part of the kernels. Device code only; each
// including .cu file gets its own copy.
#pragma once
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "coll/fused_barrier.cuh"
#include "coll/kernel_done.cuh"
#include "coll/reduce.hpp"
#include "coll/reduce_ops.hpp"

namespace gpustripe::coll {

// Sources and destinations of one launch (kernel parameters).
struct ReducePtrs {
  const void* src[kMaxKernelSources];
  void* dst[kMaxKernelDests];
  int ns, nd;
};

// How one launch is shaped (reduce_cuda.cu sizes it from the element size and the settings),
// and what it announces at its end.
struct ReduceLaunch {
  unsigned grid = 1, threads = 128;
  int dev = 0;  // the device it runs on
  bool vec = false;  // every pointer 16-byte aligned: vector loads
  KernelDone done;
};

// The kernels of one family of types (reduce_cuda*.cu): key.dtype and key.op as kernel_key
// gives them, key.count elements.
void launch_float_reduce(const ReducePtrs& p, const KernelKey& key, const ReduceLaunch& l, const FusedBarrier& bar,
                         cudaStream_t s);
void launch_int_reduce(const ReducePtrs& p, const KernelKey& key, const ReduceLaunch& l, const FusedBarrier& bar,
                       cudaStream_t s);
void launch_loc_reduce(const ReducePtrs& p, const KernelKey& key, const ReduceLaunch& l, const FusedBarrier& bar,
                       cudaStream_t s);

namespace {

constexpr int kReduceThreads = 512;

// Storage type S, accumulated as A.
template <class T>
struct Same {
  using S = T;
  using A = T;
  static __device__ __forceinline__ A load(S s) { return s; }
  static __device__ __forceinline__ S store(A a) { return a; }
};

template <class T>
constexpr int kVec = 16 / sizeof(typename T::S);  // elements per 16-byte vector

template <class T>
__device__ __forceinline__ void unpack(const uint4& v, typename T::A* acc) {
  const typename T::S* e = reinterpret_cast<const typename T::S*>(&v);
#pragma unroll
  for (int j = 0; j < kVec<T>; ++j) acc[j] = T::load(e[j]);
}

template <class T, int OP>
__device__ __forceinline__ void fold(const uint4& v, typename T::A* acc) {
  const typename T::S* e = reinterpret_cast<const typename T::S*>(&v);
#pragma unroll
  for (int j = 0; j < kVec<T>; ++j) acc[j] = reduce_apply<OP>(acc[j], T::load(e[j]));
}

template <class T>
__device__ __forceinline__ uint4 pack(const typename T::A* acc) {
  uint4 out;
  typename T::S* o = reinterpret_cast<typename T::S*>(&out);
#pragma unroll
  for (int j = 0; j < kVec<T>; ++j) o[j] = T::store(acc[j]);
  return out;
}

__device__ __forceinline__ void store_all(const ReducePtrs& p, size_t i, const uint4& out) {
  for (int d = 0; d < p.nd; ++d) reinterpret_cast<uint4*>(p.dst[d])[i] = out;
}

// U vectors per thread, NS sources known at compile time: all U*NS loads (most of them
// over NVLink, where latency is long) are in flight before the first is used.
template <class T, int OP, int NS, int U>
__device__ __forceinline__ void step_fixed(const ReducePtrs& p, size_t i, size_t stride) {
  uint4 v[U][NS];
#pragma unroll
  for (int u = 0; u < U; ++u)
#pragma unroll
    for (int s = 0; s < NS; ++s) v[u][s] = reinterpret_cast<const uint4*>(p.src[s])[i + u * stride];
#pragma unroll
  for (int u = 0; u < U; ++u) {
    typename T::A acc[kVec<T>];
    unpack<T>(v[u][0], acc);
#pragma unroll
    for (int s = 1; s < NS; ++s) fold<T, OP>(v[u][s], acc);
    store_all(p, i + u * stride, pack<T>(acc));
  }
}

// Any number of sources: one load at a time.
template <class T, int OP>
__device__ __forceinline__ void step_any(const ReducePtrs& p, size_t i) {
  typename T::A acc[kVec<T>];
  unpack<T>(reinterpret_cast<const uint4*>(p.src[0])[i], acc);
  for (int s = 1; s < p.ns; ++s) fold<T, OP>(reinterpret_cast<const uint4*>(p.src[s])[i], acc);
  store_all(p, i, pack<T>(acc));
}

template <class T, int OP>
__device__ __forceinline__ void reduce_range(const ReducePtrs& p, size_t begin, size_t end, size_t stride) {
  using S = typename T::S;
  for (size_t k = begin; k < end; k += stride) {
    typename T::A acc = T::load(static_cast<const S*>(p.src[0])[k]);
    for (int s = 1; s < p.ns; ++s) acc = reduce_apply<OP>(acc, T::load(static_cast<const S*>(p.src[s])[k]));
    const S out = T::store(acc);
    for (int d = 0; d < p.nd; ++d) static_cast<S*>(p.dst[d])[k] = out;
  }
}

// NS: the number of sources when it is 1 (a copy), 2, 3 or 4 (unrolled loads), else 0 (any number).
// Element k is read from every source before it is written to any destination, by one
// thread, so destinations may be sources (in-place two-shot allreduce).
// U: vectors per thread and step (loads in flight), for NS > 0.
template <class T, int OP, int NS, int U>
__global__ void __launch_bounds__(kReduceThreads)
    reduce_kernel(ReducePtrs p, size_t count, bool vec, FusedBarrier bar, KernelDone end) {
  constexpr int V = kVec<T>;
  const bool fused = bar.blocks_done != nullptr;
  const unsigned long long e = fused ? fused_entry(bar) : 0;
  const size_t tid = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x;
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  size_t done = 0;
  if (vec) {
    const size_t nvec = count / V;
    size_t i = tid;
    if constexpr (NS > 0) {
      for (; i + (U - 1) * stride < nvec; i += U * stride) step_fixed<T, OP, NS, U>(p, i, stride);
      for (; i < nvec; i += stride) step_fixed<T, OP, NS, 1>(p, i, stride);
    } else {
      for (; i < nvec; i += stride) step_any<T, OP>(p, i);
    }
    done = nvec * V;
  }
  reduce_range<T, OP>(p, done + tid, count, stride);
  if (fused) fused_exit(bar, e);
  if (end.word) announce_done(end);
}

// One launch of the kernel; with copies before its entry or after its work, of no more blocks than
// the GPU holds.
template <class T, int OP, int NS, int U>
void launch_kernel(const ReducePtrs& p, size_t count, const ReduceLaunch& l, const FusedBarrier& bar, cudaStream_t s) {
  auto* k = reduce_kernel<T, OP, NS, U>;
  unsigned grid = l.grid;
  if (bar.blocks_wait()) {
    static std::atomic<int> resident[2] = {0, 0};  // this kernel's blocks per SM
    grid = std::min(grid, resident_blocks(k, l.threads, l.dev, resident));
  }
  k<<<grid, l.threads, 0, s>>>(p, count, l.vec, bar, l.done);
}

// Two 16-byte vectors per thread and step: the loads each thread keeps in flight.
template <class T, int OP, int NS>
void launch_ns(const ReducePtrs& p, size_t count, const ReduceLaunch& l, const FusedBarrier& bar, cudaStream_t s) {
  launch_kernel<T, OP, NS, 2>(p, count, l, bar, s);
}

// One (type, op). A single source (a copy, whatever the op) has kernels of its own only for
// the unsigned SUM ones (launch_reduce_kernel sends every copy there).
template <class T, int OP>
void launch_reduce(const ReducePtrs& p, size_t count, const ReduceLaunch& l, const FusedBarrier& bar, cudaStream_t s) {
  using A = typename T::A;
  constexpr bool kCopies = OP == GPUSTRIPE_SUM && std::is_integral_v<A> && std::is_unsigned_v<A>;
  switch (p.ns) {
    case 1:
      if constexpr (kCopies) {
        launch_ns<T, OP, 1>(p, count, l, bar, s);
        return;
      }
      break;
    case 2: launch_ns<T, OP, 2>(p, count, l, bar, s); return;
    case 3: launch_ns<T, OP, 3>(p, count, l, bar, s); return;
    case 4: launch_ns<T, OP, 4>(p, count, l, bar, s); return;
    default: break;
  }
  launch_kernel<T, OP, 0, 1>(p, count, l, bar, s);
}

}  // namespace
}  // namespace gpustripe::coll
