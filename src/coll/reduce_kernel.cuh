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

// A chunked reduction (FusedBarrier::grid): the elements of one chunk.
template <class T>
constexpr size_t kChunkElems = size_t(4) * kReduceThreads * kVec<T>;

// Whether a chunked reduction takes type T: whole elements in every 16-byte vector.
template <class T>
constexpr bool kChunkable = sizeof(typename T::S) <= 16 && 16 % sizeof(typename T::S) == 0;

// Bytes [b0, b1) of one copy before a chunked reduction, by this block's threads: every load of
// a thread's (four vectors: a chunk's share) in flight before its stores.
__device__ __forceinline__ void copy_bytes(const BarrierCopy& cp, size_t b0, size_t b1) {
  const unsigned char* src = static_cast<const unsigned char*>(cp.src);
  unsigned char* dst = static_cast<unsigned char*>(cp.dst);
  size_t k = b0;
  if (((reinterpret_cast<uintptr_t>(src) | reinterpret_cast<uintptr_t>(dst) | b0) & 15) == 0) {
    const uint4* s = reinterpret_cast<const uint4*>(src);
    uint4* d = reinterpret_cast<uint4*>(dst);
    const size_t v1 = b1 / 16, step = blockDim.x;
    size_t i = b0 / 16 + threadIdx.x;
    for (; i + 3 * step < v1; i += 4 * step) {
      uint4 v[4];
#pragma unroll
      for (int u = 0; u < 4; ++u) v[u] = s[i + u * step];
#pragma unroll
      for (int u = 0; u < 4; ++u) d[i + u * step] = v[u];
    }
    for (; i < v1; i += step) d[i] = s[i];
    k = v1 * 16;
  }
  for (k += threadIdx.x; k < b1; k += blockDim.x) dst[k] = src[k];
}

// Spins (thread 0) until every peer's block b has set its flag here to at least v (or the
// timeout: the mark the host checks).
__device__ void wait_chunk(const FusedBarrier& b, unsigned long long v) {
  const unsigned long long start = global_ns();
  for (int q = 0; q < b.args.n; ++q) {
    if (q == b.args.me) continue;
    const volatile unsigned long long* f = b.chunks + static_cast<size_t>(q) * kMaxChunkBlocks + blockIdx.x;
    while (*f < v)
      if (global_ns() - start > b.args.timeout_ns) {
        *reinterpret_cast<volatile int*>(b.args.error) = 1;
        __threadfence_system();
        return;
      }
  }
}

// The chunked form (FusedBarrier::grid): iteration j stores chunk c_j = blockIdx.x + j * grid of
// every copy, reduces c_{j-1} once the peers' blocks have stored it, and only then makes its own
// stores of c_j visible (a fence waits for every store in flight) and tells the peers: this
// block's stores over NVLink drain while it reduces the chunk before.
template <class T, int OP, int NS>
__device__ void reduce_chunked(const ReducePtrs& p, size_t count, bool vec, const FusedBarrier& bar,
                               unsigned long long e) {
  if constexpr (kChunkable<T>) {
    constexpr int V = kVec<T>;
    constexpr size_t E = kChunkElems<T>;
    constexpr size_t esz = sizeof(typename T::S);
    const size_t chunks = (count + E - 1) / E;
    const unsigned long long base = e << 24;  // e grows by 2 a call; under 2^24 chunks a block
    for (size_t j = 0;; ++j) {
      const size_t c = blockIdx.x + j * gridDim.x;
      if (c < chunks) {
        const size_t b1 = (c + 1) * E < count ? (c + 1) * E * esz : count * esz;
        for (int k = 0; k < bar.npre; ++k) copy_bytes(bar.pre[k], c * E * esz, b1);
      }
      const size_t r = c - gridDim.x;  // the chunk before (j > 0)
      if (j > 0 && r < chunks) {
        if (threadIdx.x == 0) {
          wait_chunk(bar, base + j);
          __threadfence();  // the peers' stores seen after their flags
        }
        __syncthreads();
        const size_t e0 = r * E, e1 = (r + 1) * E < count ? (r + 1) * E : count;
        size_t done = e0;
        if (vec) {
          for (size_t i = e0 / V + threadIdx.x; i < e1 / V; i += blockDim.x) {
            if constexpr (NS > 0) step_fixed<T, OP, NS, 1>(p, i, 0);
            else step_any<T, OP>(p, i);
          }
          done = e1 / V * V;
        }
        reduce_range<T, OP>(p, done + threadIdx.x, e1, blockDim.x);
      }
      if (c < chunks) {
        __threadfence_system();
        __syncthreads();
        if (threadIdx.x == 0)
          for (int q = 0; q < bar.args.n; ++q)
            if (q != bar.args.me)
              reinterpret_cast<volatile unsigned long long*>(bar.args.peer_chunks[q])[blockIdx.x] = base + j + 1;
        continue;
      }
      // Every chunk of this block stored and visible (the fence of its last iteration); the last
      // block to get here sets the entry flags, for a peer that arrives by a barrier kernel (its
      // stores by copy engines) and waits for this rank's.
      if (last_block_done(bar.arrived)) set_flags(bar.args, e);
      break;
    }
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
  if (bar.grid > 0) {
    __shared__ unsigned long long ce;
    if (threadIdx.x == 0) ce = *reinterpret_cast<volatile unsigned long long*>(bar.args.counter) + 1;
    __syncthreads();
    reduce_chunked<T, OP, NS>(p, count, vec, bar, ce);
    fused_exit(bar, ce);
    if (end.word) announce_done(end);
    return;
  }
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

// Two 16-byte vectors per thread and step: the loads each thread keeps in flight.
template <class T, int OP, int NS, int U>
void launch_kernel(const ReducePtrs& p, size_t count, const ReduceLaunch& l, const FusedBarrier& bar, cudaStream_t s) {
  auto* k = reduce_kernel<T, OP, NS, U>;
  if (bar.grid > 0) {  // chunked: the ranks' agreed grid of full blocks
    k<<<bar.grid, kReduceThreads, 0, s>>>(p, count, l.vec, bar, l.done);
    return;
  }
  unsigned grid = l.grid;
  if (bar.npre > 0) {
    static std::atomic<int> resident[2] = {0, 0};  // this kernel's blocks per SM
    int dev = 0;
    cudaGetDevice(&dev);
    grid = std::min(grid, resident_blocks(k, l.threads, dev, resident));
  }
  k<<<grid, l.threads, 0, s>>>(p, count, l.vec, bar, l.done);
}

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
