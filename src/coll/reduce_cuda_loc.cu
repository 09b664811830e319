// The MINLOC/MAXLOC kernels (reduce_kernel.cuh) over the (value, int index) pair types.
#include <cstdint>

#include "coll/reduce_kernel.cuh"
#include "common/error.hpp"

namespace gpustripe::coll {
namespace {

template <class V>
void loc(const ReducePtrs& p, const KernelKey& k, const ReduceLaunch& l, const FusedBarrier& bar, cudaStream_t s) {
  using T = Same<ValIdx<V>>;
  if (k.op == GPUSTRIPE_MINLOC) return launch_reduce<T, GPUSTRIPE_MINLOC>(p, k.count, l, bar, s);
  if (k.op == GPUSTRIPE_MAXLOC) return launch_reduce<T, GPUSTRIPE_MAXLOC>(p, k.count, l, bar, s);
  GS_THROW(GPUSTRIPE_ERR_INTERNAL, "no reduction kernel for %s on %s", redop_name(k.op), dtype_name(k.dtype));
}

}  // namespace

void launch_loc_reduce(const ReducePtrs& p, const KernelKey& k, const ReduceLaunch& l, const FusedBarrier& bar,
                       cudaStream_t s) {
  switch (k.dtype) {
    case GPUSTRIPE_FLOAT_INT: return loc<float>(p, k, l, bar, s);
    case GPUSTRIPE_DOUBLE_INT: return loc<double>(p, k, l, bar, s);
    case GPUSTRIPE_INT64_INT: return loc<int64_t>(p, k, l, bar, s);
    case GPUSTRIPE_INT_INT: return loc<int32_t>(p, k, l, bar, s);
    case GPUSTRIPE_INT16_INT: return loc<int16_t>(p, k, l, bar, s);
    default: GS_THROW(GPUSTRIPE_ERR_INTERNAL, "%s is not a pair type", dtype_name(k.dtype));
  }
}

}  // namespace gpustripe::coll
