// The element-wise reduction operators, shared by the CUDA kernels and the CPU loops
// so both compute the same thing. Half and bfloat16 accumulate in float; integer
// SUM and PROD wrap around (computed unsigned, no undefined overflow); logical ops
// give 1 or 0; MINLOC/MAXLOC work on (value, index) pairs, ties taking the smaller index.
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

// The C struct {value; int index} of the MPI pair types (MPI_FLOAT_INT, ...).
template <class V>
struct ValIdx {
  V v;
  int32_t i;
};
static_assert(sizeof(ValIdx<float>) == 8 && sizeof(ValIdx<double>) == 16 && sizeof(ValIdx<int64_t>) == 16 &&
              sizeof(ValIdx<int32_t>) == 8 && sizeof(ValIdx<int16_t>) == 8);

template <class A>
struct IsPair : std::false_type {};
template <class V>
struct IsPair<ValIdx<V>> : std::true_type {};

template <int OP, class A>
GS_HD A reduce_apply(A a, A b) {
  if constexpr (IsPair<A>::value) {
    static_assert(OP == GPUSTRIPE_MINLOC || OP == GPUSTRIPE_MAXLOC, "pairs take MINLOC and MAXLOC only");
    const bool a_wins = OP == GPUSTRIPE_MINLOC ? a.v < b.v : a.v > b.v;
    const bool b_wins = OP == GPUSTRIPE_MINLOC ? b.v < a.v : b.v > a.v;
    if (a_wins) return a;
    if (b_wins) return b;
    return A{a.v, a.i < b.i ? a.i : b.i};
  } else if constexpr (OP == GPUSTRIPE_MAX) {
    return a > b ? a : b;
  } else if constexpr (OP == GPUSTRIPE_MIN) {
    return a < b ? a : b;
  } else if constexpr (std::is_integral_v<A>) {
    using U = std::make_unsigned_t<A>;
    if constexpr (OP == GPUSTRIPE_SUM) return static_cast<A>(static_cast<U>(a) + static_cast<U>(b));
    else if constexpr (OP == GPUSTRIPE_PROD) return static_cast<A>(static_cast<U>(a) * static_cast<U>(b));
    else if constexpr (OP == GPUSTRIPE_LAND) return static_cast<A>(a != 0 && b != 0);
    else if constexpr (OP == GPUSTRIPE_LOR) return static_cast<A>(a != 0 || b != 0);
    else if constexpr (OP == GPUSTRIPE_LXOR) return static_cast<A>((a != 0) != (b != 0));
    else if constexpr (OP == GPUSTRIPE_BAND) return static_cast<A>(a & b);
    else if constexpr (OP == GPUSTRIPE_BOR) return static_cast<A>(a | b);
    else return static_cast<A>(a ^ b);
  } else {
    static_assert(OP == GPUSTRIPE_SUM || OP == GPUSTRIPE_PROD, "floating point takes SUM, PROD, MAX and MIN");
    if constexpr (OP == GPUSTRIPE_SUM) return a + b;
    else return a * b;
  }
}

// The (type, op) a reduction runs as: operators for which the sign does not matter run on
// the unsigned type of the same width, and bitwise ones on bytes (count scaled to match), so
// fewer kernels cover every type. MIN, MAX and the pair and floating types keep their own.
struct KernelKey {
  gpustripe_dtype_t dtype;
  gpustripe_redop_t op;
  size_t count;
};
inline KernelKey kernel_key(gpustripe_dtype_t dt, gpustripe_redop_t op, size_t count, size_t elem_size) {
  if (op == GPUSTRIPE_BAND || op == GPUSTRIPE_BOR || op == GPUSTRIPE_BXOR) return {GPUSTRIPE_UINT8, op, count * elem_size};
  if (op == GPUSTRIPE_MAX || op == GPUSTRIPE_MIN) return {dt, op, count};
  switch (dt) {
    case GPUSTRIPE_INT8: return {GPUSTRIPE_UINT8, op, count};
    case GPUSTRIPE_INT16: return {GPUSTRIPE_UINT16, op, count};
    case GPUSTRIPE_INT32: return {GPUSTRIPE_UINT32, op, count};
    case GPUSTRIPE_INT64: return {GPUSTRIPE_UINT64, op, count};
    default: return {dt, op, count};
  }
}

}  // namespace gpustripe::coll
