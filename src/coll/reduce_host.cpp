// CPU reductions: the emulated backend's "kernels", and the same arithmetic as the
// CUDA ones (reduce_ops.hpp), so CI checks the schedules with real reductions.
#include <cstdint>
#include <cstring>

#include "coll/half.hpp"
#include "coll/reduce.hpp"
#include "coll/reduce_ops.hpp"
#include "common/error.hpp"

namespace gpustripe::coll {
namespace {

struct F32 { using S = float; using A = float; static A load(S s) { return s; } static S store(A a) { return a; } };
struct F64 { using S = double; using A = double; static A load(S s) { return s; } static S store(A a) { return a; } };
struct I32 { using S = int32_t; using A = int32_t; static A load(S s) { return s; } static S store(A a) { return a; } };
struct I64 { using S = int64_t; using A = int64_t; static A load(S s) { return s; } static S store(A a) { return a; } };
struct F16 {
  using S = uint16_t; using A = float;
  static A load(S s) { return half_to_float(s); }
  static S store(A a) { return float_to_half(a); }
};
struct BF16 {
  using S = uint16_t; using A = float;
  static A load(S s) { return bf16_to_float(s); }
  static S store(A a) { return float_to_bf16(a); }
};

template <class T, int OP>
void loop(const ReduceArgs& a) {
  using S = typename T::S;
  S* dst = static_cast<S*>(a.dst);
  const size_t n = a.srcs.size();
  for (size_t k = 0; k < a.count; ++k) {
    typename T::A acc = T::load(static_cast<const S*>(a.srcs[0])[k]);
    for (size_t s = 1; s < n; ++s) acc = reduce_apply<OP>(acc, T::load(static_cast<const S*>(a.srcs[s])[k]));
    dst[k] = T::store(acc);
  }
}

template <class T>
void by_op(const ReduceArgs& a) {
  switch (a.op) {
    case GPUSTRIPE_SUM: return loop<T, GPUSTRIPE_SUM>(a);
    case GPUSTRIPE_PROD: return loop<T, GPUSTRIPE_PROD>(a);
    case GPUSTRIPE_MAX: return loop<T, GPUSTRIPE_MAX>(a);
    case GPUSTRIPE_MIN: return loop<T, GPUSTRIPE_MIN>(a);
    default: break;
  }
  check_redop(a.op);
}

}  // namespace

void reduce_host(const ReduceArgs& a) {
  check_reduce_args(a);
  if (a.count == 0) return;
  switch (a.dtype) {
    case GPUSTRIPE_FLOAT32: by_op<F32>(a); break;
    case GPUSTRIPE_FLOAT64: by_op<F64>(a); break;
    case GPUSTRIPE_FLOAT16: by_op<F16>(a); break;
    case GPUSTRIPE_BFLOAT16: by_op<BF16>(a); break;
    case GPUSTRIPE_INT32: by_op<I32>(a); break;
    case GPUSTRIPE_INT64: by_op<I64>(a); break;
    default: check_dtype(a.dtype);
  }
  // Every source has been read: the other destinations (possibly sources) get the result.
  for (void* d : a.more_dsts)
    if (d != a.dst) std::memcpy(d, a.dst, a.count * dtype_size(a.dtype));
}

}  // namespace gpustripe::coll
