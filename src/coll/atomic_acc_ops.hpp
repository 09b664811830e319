// The new value of one unit of an atomic accumulate (atomic_acc.hpp), shared by the CUDA
// kernel and the CPU loop so both compute the same thing, and the dispatch of a
// (type, op) to the template that computes it.
#pragma once
#include <cstddef>
#include <cstring>

#include "coll/atomic_acc.hpp"
#include "coll/reduce_ops.hpp"
#include "common/error.hpp"

namespace gpustripe::coll {

// out = the unit's new value from its old one; false when nothing is to be written. out holds
// the old value on entry.
template <class S, int OP>
GS_HD bool acc_unit_new(AccKind kind, const unsigned char* old, const unsigned char* in, const unsigned char* cmp,
                        unsigned char* out, size_t per_unit) {
  const size_t ub = per_unit * sizeof(S);
  switch (kind) {
    case AccKind::Fetch: return false;
    case AccKind::Replace: memcpy(out, in, ub); return true;
    case AccKind::CompareSwap:
      for (size_t i = 0; i < ub; ++i)
        if (old[i] != cmp[i]) return false;
      memcpy(out, in, ub);
      return true;
    default:
      for (size_t i = 0; i < per_unit; ++i) {
        S a, b;
        memcpy(&a, in + i * sizeof(S), sizeof(S));
        memcpy(&b, old + i * sizeof(S), sizeof(S));
        const S r = reduce_apply<OP>(a, b);
        if constexpr (IsPair<S>::value) {  // the padding keeps its old bytes (out starts as old)
          memcpy(out + i * sizeof(S), &r.v, sizeof r.v);
          memcpy(out + i * sizeof(S) + offsetof(S, i), &r.i, sizeof r.i);
        } else {
          memcpy(out + i * sizeof(S), &r, sizeof(S));
        }
      }
      return true;
  }
}

// Calls Run<S, OP>::run(a, extra...) for the storage type and op of a (any type of the unit's
// size for the kinds that only move bits). Integer ops for which the sign does not matter run
// on the unsigned type; bitwise ones on the unsigned type of the same width.
template <template <class, int> class Run, class... X>
void acc_dispatch(const AtomicAccArgs& a, X&&... extra) {
  if (a.kind != AccKind::Reduce) {
    switch (acc_unit_bytes(a)) {
      case 1: return Run<uint8_t, GPUSTRIPE_SUM>::run(a, extra...);
      case 2: return Run<uint16_t, GPUSTRIPE_SUM>::run(a, extra...);
      case 4: return Run<uint32_t, GPUSTRIPE_SUM>::run(a, extra...);
      default: return Run<uint64_t, GPUSTRIPE_SUM>::run(a, extra...);
    }
  }
#define GS_ACC_ARITH(S)                                                            \
  switch (a.op) {                                                                  \
    case GPUSTRIPE_SUM: return Run<S, GPUSTRIPE_SUM>::run(a, extra...);            \
    case GPUSTRIPE_PROD: return Run<S, GPUSTRIPE_PROD>::run(a, extra...);          \
    case GPUSTRIPE_MAX: return Run<S, GPUSTRIPE_MAX>::run(a, extra...);            \
    case GPUSTRIPE_MIN: return Run<S, GPUSTRIPE_MIN>::run(a, extra...);            \
    default: break;                                                                \
  }
#define GS_ACC_INT(S, U)                                                           \
  switch (a.op) {                                                                  \
    case GPUSTRIPE_SUM: return Run<U, GPUSTRIPE_SUM>::run(a, extra...);            \
    case GPUSTRIPE_PROD: return Run<U, GPUSTRIPE_PROD>::run(a, extra...);          \
    case GPUSTRIPE_MAX: return Run<S, GPUSTRIPE_MAX>::run(a, extra...);            \
    case GPUSTRIPE_MIN: return Run<S, GPUSTRIPE_MIN>::run(a, extra...);            \
    case GPUSTRIPE_LAND: return Run<U, GPUSTRIPE_LAND>::run(a, extra...);          \
    case GPUSTRIPE_LOR: return Run<U, GPUSTRIPE_LOR>::run(a, extra...);            \
    case GPUSTRIPE_LXOR: return Run<U, GPUSTRIPE_LXOR>::run(a, extra...);          \
    case GPUSTRIPE_BAND: return Run<U, GPUSTRIPE_BAND>::run(a, extra...);          \
    case GPUSTRIPE_BOR: return Run<U, GPUSTRIPE_BOR>::run(a, extra...);            \
    case GPUSTRIPE_BXOR: return Run<U, GPUSTRIPE_BXOR>::run(a, extra...);          \
    default: break;                                                                \
  }
#define GS_ACC_LOC(V)                                                              \
  switch (a.op) {                                                                  \
    case GPUSTRIPE_MINLOC: return Run<ValIdx<V>, GPUSTRIPE_MINLOC>::run(a, extra...); \
    case GPUSTRIPE_MAXLOC: return Run<ValIdx<V>, GPUSTRIPE_MAXLOC>::run(a, extra...); \
    default: break;                                                                \
  }
  switch (a.dtype) {
    case GPUSTRIPE_FLOAT32: GS_ACC_ARITH(float) break;
    case GPUSTRIPE_FLOAT64: GS_ACC_ARITH(double) break;
    case GPUSTRIPE_INT8: GS_ACC_INT(int8_t, uint8_t) break;
    case GPUSTRIPE_UINT8: GS_ACC_INT(uint8_t, uint8_t) break;
    case GPUSTRIPE_INT16: GS_ACC_INT(int16_t, uint16_t) break;
    case GPUSTRIPE_UINT16: GS_ACC_INT(uint16_t, uint16_t) break;
    case GPUSTRIPE_INT32: GS_ACC_INT(int32_t, uint32_t) break;
    case GPUSTRIPE_UINT32: GS_ACC_INT(uint32_t, uint32_t) break;
    case GPUSTRIPE_INT64: GS_ACC_INT(int64_t, uint64_t) break;
    case GPUSTRIPE_UINT64: GS_ACC_INT(uint64_t, uint64_t) break;
    case GPUSTRIPE_FLOAT_INT: GS_ACC_LOC(float) break;
    case GPUSTRIPE_INT_INT: GS_ACC_LOC(int32_t) break;
    case GPUSTRIPE_INT16_INT: GS_ACC_LOC(int16_t) break;
    default: break;
  }
#undef GS_ACC_ARITH
#undef GS_ACC_INT
#undef GS_ACC_LOC
  GS_THROW(GPUSTRIPE_ERR_INTERNAL, "no atomic accumulate for %s on %s", redop_name(a.op), dtype_name(a.dtype));
}

}  // namespace gpustripe::coll
