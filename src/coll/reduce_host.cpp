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

// Storage type S, accumulated as A (half and bfloat16 in float).
template <class T>
struct Same {
  using S = T;
  using A = T;
  static A load(S s) { return s; }
  static S store(A a) { return a; }
};
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
void loop(const ReduceArgs& a, size_t count) {
  using S = typename T::S;
  S* dst = static_cast<S*>(a.dst);
  const size_t n = a.srcs.size();
  for (size_t k = 0; k < count; ++k) {
    typename T::A acc = T::load(static_cast<const S*>(a.srcs[0])[k]);
    for (size_t s = 1; s < n; ++s) acc = reduce_apply<OP>(acc, T::load(static_cast<const S*>(a.srcs[s])[k]));
    dst[k] = T::store(acc);
  }
}

template <class T>
void arithmetic(const ReduceArgs& a, const KernelKey& k) {
  switch (k.op) {
    case GPUSTRIPE_SUM: return loop<T, GPUSTRIPE_SUM>(a, k.count);
    case GPUSTRIPE_PROD: return loop<T, GPUSTRIPE_PROD>(a, k.count);
    case GPUSTRIPE_MAX: return loop<T, GPUSTRIPE_MAX>(a, k.count);
    case GPUSTRIPE_MIN: return loop<T, GPUSTRIPE_MIN>(a, k.count);
    default: GS_THROW(GPUSTRIPE_ERR_INTERNAL, "no CPU reduction for %s", redop_name(k.op));
  }
}

template <class T>
void min_max(const ReduceArgs& a, const KernelKey& k) {
  if (k.op == GPUSTRIPE_MAX) return loop<T, GPUSTRIPE_MAX>(a, k.count);
  if (k.op == GPUSTRIPE_MIN) return loop<T, GPUSTRIPE_MIN>(a, k.count);
  GS_THROW(GPUSTRIPE_ERR_INTERNAL, "no CPU reduction for %s", redop_name(k.op));
}

// Unsigned integers: every operator but MINLOC/MAXLOC (bitwise ones on bytes only, kernel_key).
template <class T>
void unsigned_ops(const ReduceArgs& a, const KernelKey& k) {
  switch (k.op) {
    case GPUSTRIPE_LAND: return loop<T, GPUSTRIPE_LAND>(a, k.count);
    case GPUSTRIPE_LOR: return loop<T, GPUSTRIPE_LOR>(a, k.count);
    case GPUSTRIPE_LXOR: return loop<T, GPUSTRIPE_LXOR>(a, k.count);
    case GPUSTRIPE_BAND: return loop<T, GPUSTRIPE_BAND>(a, k.count);
    case GPUSTRIPE_BOR: return loop<T, GPUSTRIPE_BOR>(a, k.count);
    case GPUSTRIPE_BXOR: return loop<T, GPUSTRIPE_BXOR>(a, k.count);
    default: return arithmetic<T>(a, k);
  }
}

template <class V>
void loc(const ReduceArgs& a, const KernelKey& k) {
  using T = Same<ValIdx<V>>;
  if (k.op == GPUSTRIPE_MINLOC) return loop<T, GPUSTRIPE_MINLOC>(a, k.count);
  if (k.op == GPUSTRIPE_MAXLOC) return loop<T, GPUSTRIPE_MAXLOC>(a, k.count);
  GS_THROW(GPUSTRIPE_ERR_INTERNAL, "no CPU reduction for %s", redop_name(k.op));
}

}  // namespace

void reduce_host(const ReduceArgs& a) {
  check_reduce_args(a);
  if (a.count == 0) return;
  const KernelKey k = kernel_key(a.dtype, a.op, a.count, dtype_size(a.dtype));
  switch (k.dtype) {
    case GPUSTRIPE_FLOAT32: arithmetic<Same<float>>(a, k); break;
    case GPUSTRIPE_FLOAT64: arithmetic<Same<double>>(a, k); break;
    case GPUSTRIPE_FLOAT16: arithmetic<F16>(a, k); break;
    case GPUSTRIPE_BFLOAT16: arithmetic<BF16>(a, k); break;
    case GPUSTRIPE_INT8: min_max<Same<int8_t>>(a, k); break;
    case GPUSTRIPE_INT16: min_max<Same<int16_t>>(a, k); break;
    case GPUSTRIPE_INT32: min_max<Same<int32_t>>(a, k); break;
    case GPUSTRIPE_INT64: min_max<Same<int64_t>>(a, k); break;
    case GPUSTRIPE_UINT8: unsigned_ops<Same<uint8_t>>(a, k); break;
    case GPUSTRIPE_UINT16: unsigned_ops<Same<uint16_t>>(a, k); break;
    case GPUSTRIPE_UINT32: unsigned_ops<Same<uint32_t>>(a, k); break;
    case GPUSTRIPE_UINT64: unsigned_ops<Same<uint64_t>>(a, k); break;
    case GPUSTRIPE_FLOAT_INT: loc<float>(a, k); break;
    case GPUSTRIPE_DOUBLE_INT: loc<double>(a, k); break;
    case GPUSTRIPE_INT64_INT: loc<int64_t>(a, k); break;
    case GPUSTRIPE_INT_INT: loc<int32_t>(a, k); break;
    case GPUSTRIPE_INT16_INT: loc<int16_t>(a, k); break;
    default: check_dtype(a.dtype);
  }
  // Every source has been read: the other destinations (possibly sources) get the result.
  for (void* d : a.more_dsts)
    if (d != a.dst) std::memcpy(d, a.dst, a.count * dtype_size(a.dtype));
}

}  // namespace gpustripe::coll
