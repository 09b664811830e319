// Reduction kernels: dst = op(src0, src1, ...) element-wise, sources anywhere the
// device can read (its own memory, or peers' over NVLink with peer access on).
// Memory-bound: 16-byte vector loads when every pointer allows it, a grid-stride
// loop sized to fill the SMs a few times over, half/bfloat16 accumulated in float.
// The result may go to several destinations (two-shot allreduce: every member's copy).
// This file sizes every launch and runs the floating-point kernels; the integer and
// MINLOC/MAXLOC ones are instantiated in reduce_cuda_int.cu and reduce_cuda_loc.cu.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <mutex>
#include <vector>

#include "coll/reduce_kernel.cuh"
#include "coll/on_device.cuh"
#include "common/error.hpp"

namespace gpustripe::coll {
namespace {

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

template <class T>
void float_ops(const ReducePtrs& p, const KernelKey& k, const ReduceLaunch& l, const FusedBarrier& bar,
               cudaStream_t s) {
  switch (k.op) {
    case GPUSTRIPE_SUM: return launch_reduce<T, GPUSTRIPE_SUM>(p, k.count, l, bar, s);
    case GPUSTRIPE_PROD: return launch_reduce<T, GPUSTRIPE_PROD>(p, k.count, l, bar, s);
    case GPUSTRIPE_MAX: return launch_reduce<T, GPUSTRIPE_MAX>(p, k.count, l, bar, s);
    case GPUSTRIPE_MIN: return launch_reduce<T, GPUSTRIPE_MIN>(p, k.count, l, bar, s);
    default: GS_THROW(GPUSTRIPE_ERR_INTERNAL, "no reduction kernel for %s on %s", redop_name(k.op), dtype_name(k.dtype));
  }
}

}  // namespace

void launch_float_reduce(const ReducePtrs& p, const KernelKey& k, const ReduceLaunch& l, const FusedBarrier& bar,
                         cudaStream_t s) {
  switch (k.dtype) {
    case GPUSTRIPE_FLOAT32: return float_ops<Same<float>>(p, k, l, bar, s);
    case GPUSTRIPE_FLOAT64: return float_ops<Same<double>>(p, k, l, bar, s);
    case GPUSTRIPE_FLOAT16: return float_ops<F16>(p, k, l, bar, s);
    case GPUSTRIPE_BFLOAT16: return float_ops<BF16>(p, k, l, bar, s);
    default: GS_THROW(GPUSTRIPE_ERR_INTERNAL, "%s is not a floating-point type", dtype_name(k.dtype));
  }
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

namespace {

// Most blocks of kReduceThreads threads per SM of a reduction kernel (a ReduceArgs may ask for
// fewer): 2, 4 or 8 measured within 1-2% of each other.
constexpr int64_t kBlocksPerSm = 4;

// The key's kernel for a launch: a single source is a copy whatever the type and op, which
// the unsigned SUM kernel of the element's width does (16-byte pairs: twice as many 8-byte words).
KernelKey key_of(const ReduceArgs& a) {
  const size_t esz = dtype_size(a.dtype);
  if (a.srcs.size() != 1) return kernel_key(a.dtype, a.op, a.count, esz);
  switch (esz) {
    case 1: return {GPUSTRIPE_UINT8, GPUSTRIPE_SUM, a.count};
    case 2: return {GPUSTRIPE_UINT16, GPUSTRIPE_SUM, a.count};
    case 4: return {GPUSTRIPE_UINT32, GPUSTRIPE_SUM, a.count};
    default: return {GPUSTRIPE_UINT64, GPUSTRIPE_SUM, a.count * (esz / 8)};
  }
}

ReduceLaunch shape_launch(const ReduceArgs& a, const ReducePtrs& p, size_t count, size_t esz, int dev) {
  ReduceLaunch l;
  l.dev = dev;
  l.vec = true;
  for (int i = 0; i < p.ns; ++i) l.vec = l.vec && reinterpret_cast<uintptr_t>(p.src[i]) % 16 == 0;
  for (int d = 0; d < p.nd; ++d) l.vec = l.vec && reinterpret_cast<uintptr_t>(p.dst[d]) % 16 == 0;
  const size_t V = 16 / esz;
  size_t work = l.vec ? (count + V - 1) / V : count;
  const size_t sms = static_cast<size_t>(sm_count(dev));
  // Small reductions: smaller blocks over more SMs (each SM's loads in flight are bounded).
  const unsigned most = kReduceThreads;
  l.threads = work < most * sms ? 128 : most;
  size_t blocks = (work + l.threads - 1) / l.threads;
  // Enough to keep NVLink reads in flight, few enough that every thread strides.
  const int64_t per_sm = a.blocks_per_sm > 0 ? a.blocks_per_sm : kBlocksPerSm;
  size_t cap = sms * static_cast<size_t>(std::max<int64_t>(1, per_sm)) * (kReduceThreads / l.threads);
  if (blocks > cap) blocks = cap;
  if (blocks == 0) blocks = 1;
  l.grid = static_cast<unsigned>(blocks);
  return l;
}

}  // namespace

unsigned* alloc_block_counter(int dev, void* cuda_stream) {
  OnDevice on(dev);
  void* w = nullptr;
  cudaError_t e = cudaMalloc(&w, sizeof(unsigned));
  // Zeroed in stream order before the first launch on `cuda_stream` (a plain cudaMemset runs on
  // the legacy stream, which the non-blocking streams do not wait for).
  if (e == cudaSuccess) e = cudaMemsetAsync(w, 0, sizeof(unsigned), static_cast<cudaStream_t>(cuda_stream));
  GS_REQUIRE(e == cudaSuccess, GPUSTRIPE_ERR_CUDA, "a reduction's block counter on device %d: %s", dev,
             cudaGetErrorString(e));
  return static_cast<unsigned*>(w);
}

void free_block_counter(int dev, unsigned* word) noexcept {
  if (!word) return;
  try {
    OnDevice on(dev);
    cudaFree(word);  // at exit the context may be gone already: nothing to free then
  } catch (...) {
  }
}

void launch_reduce_kernel(const ReduceArgs& a, int dev, void* cuda_stream, unsigned* blocks_done) {
  GS_REQUIRE(a.srcs.size() >= 1 && a.srcs.size() <= static_cast<size_t>(kMaxKernelSources),
             GPUSTRIPE_ERR_INTERNAL, "reduce kernel takes 1..%d sources, got %zu", kMaxKernelSources, a.srcs.size());
  GS_REQUIRE(a.more_dsts.size() < static_cast<size_t>(kMaxKernelDests), GPUSTRIPE_ERR_INTERNAL,
             "reduce kernel writes 1..%d destinations, got %zu", kMaxKernelDests, a.more_dsts.size() + 1);
  ReducePtrs p{};
  p.ns = static_cast<int>(a.srcs.size());
  p.nd = 1 + static_cast<int>(a.more_dsts.size());
  for (int i = 0; i < p.ns; ++i) p.src[i] = a.srcs[i];
  p.dst[0] = a.dst;
  for (int d = 1; d < p.nd; ++d) p.dst[d] = a.more_dsts[d - 1];
  const KernelKey k = key_of(a);
  ReduceLaunch l = shape_launch(a, p, k.count, dtype_size(k.dtype), dev);
  if (a.done_word) {
    GS_REQUIRE(blocks_done != nullptr, GPUSTRIPE_ERR_INTERNAL, "a reduction announcing its end without a block counter");
    l.done = KernelDone{a.done_word, a.done_value, blocks_done};
  }
  const FusedBarrier bar = a.barrier ? *a.barrier : FusedBarrier{};
  OnDevice on(dev);
  cudaStream_t s = static_cast<cudaStream_t>(cuda_stream);
  if (k.dtype >= GPUSTRIPE_FLOAT_INT) launch_loc_reduce(p, k, l, bar, s);
  else if (k.dtype <= GPUSTRIPE_BFLOAT16) launch_float_reduce(p, k, l, bar, s);
  else launch_int_reduce(p, k, l, bar, s);
  const cudaError_t e = cudaGetLastError();
  GS_REQUIRE(e == cudaSuccess, GPUSTRIPE_ERR_CUDA, "reduce kernel (%s %s, %zu elements) on device %d: %s",
             dtype_name(a.dtype), redop_name(a.op), a.count, dev, cudaGetErrorString(e));
}

}  // namespace gpustripe::coll
