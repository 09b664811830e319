// Reduction kernels: dst = op(src0, src1, ...) element-wise, sources anywhere the
// device can read (its own memory, or peers' over NVLink with peer access on).
// Memory-bound: 16-byte vector loads when every pointer allows it, a grid-stride
// loop sized to fill the SMs a few times over, half/bfloat16 accumulated in float.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <mutex>
#include <vector>

#include "coll/reduce.hpp"
#include "coll/reduce_ops.hpp"
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

struct Sources {
  const void* p[kMaxKernelSources];
  int n;
};

constexpr int kThreads = 512;

template <class T, int OP>
__device__ __forceinline__ void reduce_range(typename T::S* dst, const Sources& src, size_t begin, size_t end,
                                             size_t stride) {
  using S = typename T::S;
  for (size_t k = begin; k < end; k += stride) {
    typename T::A acc = T::load(static_cast<const S*>(src.p[0])[k]);
    for (int s = 1; s < src.n; ++s) acc = reduce_apply<OP>(acc, T::load(static_cast<const S*>(src.p[s])[k]));
    dst[k] = T::store(acc);
  }
}

template <class T, int OP>
__global__ void __launch_bounds__(kThreads) reduce_kernel(typename T::S* dst, Sources src, size_t count, bool vec) {
  using S = typename T::S;
  constexpr int V = 16 / sizeof(S);  // elements per 16-byte vector
  const size_t tid = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x;
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  size_t done = 0;
  if (vec) {
    const size_t nvec = count / V;
    for (size_t i = tid; i < nvec; i += stride) {
      uint4 in = reinterpret_cast<const uint4*>(src.p[0])[i];
      const S* e = reinterpret_cast<const S*>(&in);
      typename T::A acc[V];
#pragma unroll
      for (int j = 0; j < V; ++j) acc[j] = T::load(e[j]);
      for (int s = 1; s < src.n; ++s) {
        uint4 v = reinterpret_cast<const uint4*>(src.p[s])[i];
        const S* f = reinterpret_cast<const S*>(&v);
#pragma unroll
        for (int j = 0; j < V; ++j) acc[j] = reduce_apply<OP>(acc[j], T::load(f[j]));
      }
      uint4 out;
      S* o = reinterpret_cast<S*>(&out);
#pragma unroll
      for (int j = 0; j < V; ++j) o[j] = T::store(acc[j]);
      reinterpret_cast<uint4*>(dst)[i] = out;
    }
    done = nvec * V;
  }
  reduce_range<T, OP>(dst, src, done + tid, count, stride);
}

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

template <class T, int OP>
void launch(const ReduceArgs& a, int dev, cudaStream_t s) {
  using S = typename T::S;
  Sources src{};
  src.n = static_cast<int>(a.srcs.size());
  bool vec = reinterpret_cast<uintptr_t>(a.dst) % 16 == 0;
  for (int i = 0; i < src.n; ++i) {
    src.p[i] = a.srcs[i];
    vec = vec && reinterpret_cast<uintptr_t>(a.srcs[i]) % 16 == 0;
  }
  constexpr size_t V = 16 / sizeof(S);
  size_t work = vec ? (a.count + V - 1) / V : a.count;
  size_t blocks = (work + kThreads - 1) / kThreads;
  size_t cap = static_cast<size_t>(sm_count(dev)) * 4;  // enough to hide latency, few enough to stride
  if (blocks > cap) blocks = cap;
  if (blocks == 0) blocks = 1;
  reduce_kernel<T, OP><<<static_cast<unsigned>(blocks), kThreads, 0, s>>>(static_cast<S*>(a.dst), src, a.count, vec);
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
