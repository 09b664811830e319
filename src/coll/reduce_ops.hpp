// The element-wise reduction operators, shared by the CUDA kernels and the CPU loops
// so both compute the same thing. Half and bfloat16 accumulate in float; integer
// SUM and PROD wrap around (computed unsigned, no undefined overflow).
#pragma once
#include <gpustripe/coll.h>

#include <cstdint>
#include <type_traits>

#ifdef __CUDACC__
#define GS_HD __host__ __device__ __forceinline__
#else
#define GS_HD inline
#endif

namespace gpustripe::coll {

template <int OP, class A>
GS_HD A reduce_apply(A a, A b) {
  if constexpr (OP == GPUSTRIPE_MAX) return a > b ? a : b;
  else if constexpr (OP == GPUSTRIPE_MIN) return a < b ? a : b;
  else if constexpr (std::is_integral_v<A>) {
    using U = std::make_unsigned_t<A>;
    if constexpr (OP == GPUSTRIPE_SUM) return static_cast<A>(static_cast<U>(a) + static_cast<U>(b));
    else return static_cast<A>(static_cast<U>(a) * static_cast<U>(b));
  } else {
    if constexpr (OP == GPUSTRIPE_SUM) return a + b;
    else return a * b;
  }
}

}  // namespace gpustripe::coll
