// The integer reduction kernels (reduce_kernel.cuh), by kernel_key: MIN and MAX on the signed
// and unsigned types, every other integer operator on the unsigned ones (the sign does not
// change their bits), the bitwise ones on bytes; copies (a single source) take the unsigned
// SUM kernels.
#include <cstdint>

#include "coll/reduce_kernel.cuh"
#include "common/error.hpp"

namespace gpustripe::coll {
namespace {

template <class T>
void min_max(const ReducePtrs& p, const KernelKey& k, const ReduceLaunch& l, const FusedBarrier& bar, cudaStream_t s) {
  if (k.op == GPUSTRIPE_MAX) return launch_reduce<T, GPUSTRIPE_MAX>(p, k.count, l, bar, s);
  if (k.op == GPUSTRIPE_MIN) return launch_reduce<T, GPUSTRIPE_MIN>(p, k.count, l, bar, s);
  GS_THROW(GPUSTRIPE_ERR_INTERNAL, "no reduction kernel for %s on %s", redop_name(k.op), dtype_name(k.dtype));
}

template <class T>
void unsigned_ops(const ReducePtrs& p, const KernelKey& k, const ReduceLaunch& l, const FusedBarrier& bar,
                  cudaStream_t s) {
  switch (k.op) {
    case GPUSTRIPE_SUM: return launch_reduce<T, GPUSTRIPE_SUM>(p, k.count, l, bar, s);
    case GPUSTRIPE_PROD: return launch_reduce<T, GPUSTRIPE_PROD>(p, k.count, l, bar, s);
    case GPUSTRIPE_LAND: return launch_reduce<T, GPUSTRIPE_LAND>(p, k.count, l, bar, s);
    case GPUSTRIPE_LOR: return launch_reduce<T, GPUSTRIPE_LOR>(p, k.count, l, bar, s);
    case GPUSTRIPE_LXOR: return launch_reduce<T, GPUSTRIPE_LXOR>(p, k.count, l, bar, s);
    default: return min_max<T>(p, k, l, bar, s);
  }
}

void bytewise(const ReducePtrs& p, const KernelKey& k, const ReduceLaunch& l, const FusedBarrier& bar, cudaStream_t s) {
  using T = Same<uint8_t>;
  switch (k.op) {
    case GPUSTRIPE_BAND: return launch_reduce<T, GPUSTRIPE_BAND>(p, k.count, l, bar, s);
    case GPUSTRIPE_BOR: return launch_reduce<T, GPUSTRIPE_BOR>(p, k.count, l, bar, s);
    case GPUSTRIPE_BXOR: return launch_reduce<T, GPUSTRIPE_BXOR>(p, k.count, l, bar, s);
    default: return unsigned_ops<T>(p, k, l, bar, s);
  }
}

}  // namespace

void launch_int_reduce(const ReducePtrs& p, const KernelKey& k, const ReduceLaunch& l, const FusedBarrier& bar,
                       cudaStream_t s) {
  switch (k.dtype) {
    case GPUSTRIPE_INT8: return min_max<Same<int8_t>>(p, k, l, bar, s);
    case GPUSTRIPE_INT16: return min_max<Same<int16_t>>(p, k, l, bar, s);
    case GPUSTRIPE_INT32: return min_max<Same<int32_t>>(p, k, l, bar, s);
    case GPUSTRIPE_INT64: return min_max<Same<long long>>(p, k, l, bar, s);
    case GPUSTRIPE_UINT8: return bytewise(p, k, l, bar, s);
    case GPUSTRIPE_UINT16: return unsigned_ops<Same<uint16_t>>(p, k, l, bar, s);
    case GPUSTRIPE_UINT32: return unsigned_ops<Same<uint32_t>>(p, k, l, bar, s);
    case GPUSTRIPE_UINT64: return unsigned_ops<Same<unsigned long long>>(p, k, l, bar, s);
    default: GS_THROW(GPUSTRIPE_ERR_INTERNAL, "%s is not an integer type", dtype_name(k.dtype));
  }
}

}  // namespace gpustripe::coll
