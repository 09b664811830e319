// Reduction kernels: dst = op(src0, src1, ...) element-wise, sources anywhere the
// device can read (its own memory, or peers' over NVLink with peer access on).
// Memory-bound: 16-byte vector loads when every pointer allows it, a grid-stride
// loop sized to fill the SMs a few times over, half/bfloat16 accumulated in float.
// The result may go to several destinations (two-shot allreduce: every member's copy).
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <mutex>
#include <vector>

#include "coll/fused_barrier.cuh"
#include "coll/reduce.hpp"
#include "coll/reduce_ops.hpp"
#include "common/config.hpp"
#include "common/error.hpp"

namespace gpustripe::coll {
namespace {

struct F32 {
  using S = float; using A = float;
  static __device__ __forceinline__ A load(S s) { return s; }
  static __device__ __forceinline__ S store(A a) { return a; }
};
struct F64 {
  using S = double; using A = double;
  static __device__ __forceinline__ A load(S s) { return s; }
  static __device__ __forceinline__ S store(A a) { return a; }
};
struct I32 {
  using S = int32_t; using A = int32_t;
  static __device__ __forceinline__ A load(S s) { return s; }
  static __device__ __forceinline__ S store(A a) { return a; }
};
struct I64 {
  using S = long long; using A = long long;
  static __device__ __forceinline__ A load(S s) { return s; }
  static __device__ __forceinline__ S store(A a) { return a; }
};
struct F16 {
  using S = unsigned short; using A = float;
  static __device__ __forceinline__ A load(S s) { return __half2float(__ushort_as_half(s)); }
  static __device__ __forceinline__ S store(A a) { return __half_as_ushort(__float2half_rn(a)); }
};
struct BF16 {
  using S = unsigned short; using A = float;
  static __device__ __forceinline__ A load(S s) { return __bfloat162float(__ushort_as_bfloat16(s)); }
  static __device__ __forceinline__ S store(A a) { return __bfloat16_as_ushort(__float2bfloat16_rn(a)); }
};

// Sources and destinations of one launch (kernel parameters).
struct Ptrs {
  const void* src[kMaxKernelSources];
  void* dst[kMaxKernelDests];
  int ns, nd;
};

constexpr int kThreads = 512;

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

__device__ __forceinline__ void store_all(const Ptrs& p, size_t i, const uint4& out) {
  for (int d = 0; d < p.nd; ++d) reinterpret_cast<uint4*>(p.dst[d])[i] = out;
}

// U vectors per thread, NS sources known at compile time: all U*NS loads (most of them
// over NVLink, where latency is long) are in flight before the first is used.
template <class T, int OP, int NS, int U>
__device__ __forceinline__ void step_fixed(const Ptrs& p, size_t i, size_t stride) {
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
__device__ __forceinline__ void step_any(const Ptrs& p, size_t i) {
  typename T::A acc[kVec<T>];
  unpack<T>(reinterpret_cast<const uint4*>(p.src[0])[i], acc);
  for (int s = 1; s < p.ns; ++s) fold<T, OP>(reinterpret_cast<const uint4*>(p.src[s])[i], acc);
  store_all(p, i, pack<T>(acc));
}

template <class T, int OP>
__device__ __forceinline__ void reduce_range(const Ptrs& p, size_t begin, size_t end, size_t stride) {
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
__global__ void __launch_bounds__(kThreads) reduce_kernel(Ptrs p, size_t count, bool vec, FusedBarrier bar) {
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
}

}  // namespace

int sm_count(int dev) {
  static std::mutex mu;
  static std::vector<int> cache;
  std::lock_guard<std::mutex> lock(mu);
  if (dev >= static_cast<int>(cache.size())) cache.resize(dev + 1, 0);
  if (cache[dev] == 0) {
    int n = 0;
    cudaError_t e = cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, dev);
    GS_REQUIRE(e == cudaSuccess, GPUSTRIPE_ERR_CUDA, "cudaDeviceGetAttribute(SM count) on device %d: %s", dev,
               cudaGetErrorString(e));
    cache[dev] = n;
  }
  return cache[dev];
}

namespace {

// On 4x H200, 2, 4 or 8 blocks per SM measured within 1-2% of each other.
const IntSetting kBlocksPerSm{"GPUSTRIPE_COLL_REDUCE_BLOCKS_PER_SM", "4",
                              "Most thread blocks (of 512 threads) per SM of a reduction kernel"};
const IntSetting kBlockThreads{"GPUSTRIPE_COLL_REDUCE_THREADS", "512",
                               "Threads per block of a reduction kernel (64..512; small reductions take 128)"};
const IntSetting kUnroll{"GPUSTRIPE_COLL_REDUCE_UNROLL", "2",
                         "16-byte vectors per thread and step of a reduction kernel of 1-4 sources (2 or 4): "
                         "the loads in flight"};

template <class T, int OP>
void launch(const ReduceArgs& a, int dev, cudaStream_t s) {
  Ptrs p{};
  p.ns = static_cast<int>(a.srcs.size());
  p.nd = 1 + static_cast<int>(a.more_dsts.size());
  bool vec = true;
  for (int i = 0; i < p.ns; ++i) {
    p.src[i] = a.srcs[i];
    vec = vec && reinterpret_cast<uintptr_t>(a.srcs[i]) % 16 == 0;
  }
  p.dst[0] = a.dst;
  for (int d = 1; d < p.nd; ++d) p.dst[d] = a.more_dsts[d - 1];
  for (int d = 0; d < p.nd; ++d) vec = vec && reinterpret_cast<uintptr_t>(p.dst[d]) % 16 == 0;
  constexpr size_t V = kVec<T>;
  size_t work = vec ? (a.count + V - 1) / V : a.count;
  const size_t sms = static_cast<size_t>(sm_count(dev));
  // Small reductions: smaller blocks over more SMs (each SM's loads in flight are bounded).
  const unsigned most = static_cast<unsigned>(std::clamp<int64_t>(kBlockThreads.get(), 64, kThreads)) / 32 * 32;
  const unsigned threads = work < most * sms ? 128 : most;
  size_t blocks = (work + threads - 1) / threads;
  // Enough to keep NVLink reads in flight, few enough that every thread strides.
  const int64_t per_sm = a.blocks_per_sm > 0 ? a.blocks_per_sm : kBlocksPerSm.get();
  size_t cap = sms * static_cast<size_t>(std::max<int64_t>(1, per_sm)) * (kThreads / threads);
  const bool u4 = kUnroll.get() >= 4;
  if (blocks > cap) blocks = cap;
  if (blocks == 0) blocks = 1;
  const unsigned grid = static_cast<unsigned>(blocks);
  const FusedBarrier bar = a.barrier ? *a.barrier : FusedBarrier{};
  switch (p.ns) {
#define GS_REDUCE_CASE(NS)                                                                  \
  case NS:                                                                                  \
    if (u4) reduce_kernel<T, OP, NS, 4><<<grid, threads, 0, s>>>(p, a.count, vec, bar);     \
    else reduce_kernel<T, OP, NS, 2><<<grid, threads, 0, s>>>(p, a.count, vec, bar);        \
    break;
    GS_REDUCE_CASE(1)
    GS_REDUCE_CASE(2)
    GS_REDUCE_CASE(3)
    GS_REDUCE_CASE(4)
#undef GS_REDUCE_CASE
    default: reduce_kernel<T, OP, 0, 1><<<grid, threads, 0, s>>>(p, a.count, vec, bar); break;
  }
}

template <class T>
void by_op(const ReduceArgs& a, int dev, cudaStream_t s) {
  switch (a.op) {
    case GPUSTRIPE_SUM: return launch<T, GPUSTRIPE_SUM>(a, dev, s);
    case GPUSTRIPE_PROD: return launch<T, GPUSTRIPE_PROD>(a, dev, s);
    case GPUSTRIPE_MAX: return launch<T, GPUSTRIPE_MAX>(a, dev, s);
    case GPUSTRIPE_MIN: return launch<T, GPUSTRIPE_MIN>(a, dev, s);
    default: check_redop(a.op);
  }
}

}  // namespace

void launch_reduce_kernel(const ReduceArgs& a, int dev, void* cuda_stream) {
  GS_REQUIRE(a.srcs.size() >= 1 && a.srcs.size() <= static_cast<size_t>(kMaxKernelSources),
             GPUSTRIPE_ERR_INTERNAL, "reduce kernel takes 1..%d sources, got %zu", kMaxKernelSources, a.srcs.size());
  GS_REQUIRE(a.more_dsts.size() < static_cast<size_t>(kMaxKernelDests), GPUSTRIPE_ERR_INTERNAL,
             "reduce kernel writes 1..%d destinations, got %zu", kMaxKernelDests, a.more_dsts.size() + 1);
  int prev = 0;
  cudaGetDevice(&prev);
  cudaError_t e = cudaSetDevice(dev);
  GS_REQUIRE(e == cudaSuccess, GPUSTRIPE_ERR_CUDA, "cudaSetDevice(%d): %s", dev, cudaGetErrorString(e));
  cudaStream_t s = static_cast<cudaStream_t>(cuda_stream);
  switch (a.dtype) {
    case GPUSTRIPE_FLOAT32: by_op<F32>(a, dev, s); break;
    case GPUSTRIPE_FLOAT64: by_op<F64>(a, dev, s); break;
    case GPUSTRIPE_FLOAT16: by_op<F16>(a, dev, s); break;
    case GPUSTRIPE_BFLOAT16: by_op<BF16>(a, dev, s); break;
    case GPUSTRIPE_INT32: by_op<I32>(a, dev, s); break;
    case GPUSTRIPE_INT64: by_op<I64>(a, dev, s); break;
    default: cudaSetDevice(prev); check_dtype(a.dtype);
  }
  e = cudaGetLastError();
  cudaSetDevice(prev);
  GS_REQUIRE(e == cudaSuccess, GPUSTRIPE_ERR_CUDA, "reduce kernel (%s %s, %zu elements) on device %d: %s",
             dtype_name(a.dtype), redop_name(a.op), a.count, dev, cudaGetErrorString(e));
}

}  // namespace gpustripe::coll
