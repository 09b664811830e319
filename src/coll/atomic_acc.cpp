// Atomic accumulates (atomic_acc.hpp): what is served, and the CPU loop, whose
// compare-and-swap on host or shared memory is atomic across threads and processes.
#include "coll/atomic_acc.hpp"

#include <cstring>

#include "coll/atomic_acc_ops.hpp"
#include "common/error.hpp"

namespace gpustripe::coll {

size_t acc_unit_bytes(const AtomicAccArgs& a) { return a.per_unit * dtype_size(a.dtype); }

bool atomic_acc_supported(const AtomicAccArgs& a) {
  if (a.dtype == GPUSTRIPE_FLOAT16 || a.dtype == GPUSTRIPE_BFLOAT16 || a.per_unit == 0) return false;
  const size_t ub = acc_unit_bytes(a);
  if (ub != 1 && ub != 2 && ub != 4 && ub != 8) return false;
  if (reinterpret_cast<uintptr_t>(a.target) % ub != 0) return false;
  return a.kind != AccKind::Reduce || redop_applies(a.dtype, a.op);
}

void check_atomic_acc(const AtomicAccArgs& a) {
  check_dtype(a.dtype);
  GS_REQUIRE(atomic_acc_supported(a), GPUSTRIPE_ERR_INVALID_ARGUMENT,
             "no atomic accumulate of %zu-byte units of %s (%s) at %p", acc_unit_bytes(a), dtype_name(a.dtype),
             redop_name(a.op), a.target);
  if (a.units == 0) return;
  GS_REQUIRE(a.target, GPUSTRIPE_ERR_INVALID_POINTER, "atomic accumulate: the target is NULL");
  GS_REQUIRE(a.kind == AccKind::Fetch || a.origin, GPUSTRIPE_ERR_INVALID_POINTER, "atomic accumulate: the origin is NULL");
  GS_REQUIRE(a.kind != AccKind::CompareSwap || a.compare, GPUSTRIPE_ERR_INVALID_POINTER,
             "compare-and-swap: the compare buffer is NULL");
  GS_REQUIRE(a.kind != AccKind::Fetch || a.result, GPUSTRIPE_ERR_INVALID_POINTER,
             "atomic fetch: the result buffer is NULL");
}

namespace {

// One unit: a compare-and-swap loop on the word W of the unit's size.
template <class S, int OP, class W>
void host_unit(const AtomicAccArgs& a, size_t k) {
  const size_t ub = sizeof(W);
  W* w = reinterpret_cast<W*>(static_cast<char*>(a.target) + k * ub);
  const auto* in = a.origin ? static_cast<const unsigned char*>(a.origin) + k * ub : nullptr;
  const auto* cmp = a.compare ? static_cast<const unsigned char*>(a.compare) + k * ub : nullptr;
  W old = __atomic_load_n(w, __ATOMIC_ACQUIRE);
  for (;;) {
    W next = old;
    if (!acc_unit_new<S, OP>(a.kind, reinterpret_cast<const unsigned char*>(&old), in, cmp,
                             reinterpret_cast<unsigned char*>(&next), a.per_unit) ||
        next == old)
      break;
    if (__atomic_compare_exchange_n(w, &old, next, false, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) break;
  }
  if (a.result) std::memcpy(static_cast<char*>(a.result) + k * ub, &old, ub);
}

template <class S, int OP>
struct HostRun {
  static void run(const AtomicAccArgs& a) {
    const size_t ub = acc_unit_bytes(a);
    for (size_t k = 0; k < a.units; ++k) {
      // A unit holds whole values: words narrower than S never come up.
      if constexpr (sizeof(S) <= 1) {
        if (ub == 1) {
          host_unit<S, OP, uint8_t>(a, k);
          continue;
        }
      }
      if constexpr (sizeof(S) <= 2) {
        if (ub == 2) {
          host_unit<S, OP, uint16_t>(a, k);
          continue;
        }
      }
      if constexpr (sizeof(S) <= 4) {
        if (ub == 4) {
          host_unit<S, OP, uint32_t>(a, k);
          continue;
        }
      }
      host_unit<S, OP, uint64_t>(a, k);
    }
  }
};

}  // namespace

void atomic_acc_host(const AtomicAccArgs& a) {
  check_atomic_acc(a);
  if (a.units == 0) return;
  acc_dispatch<HostRun>(a);
}

void atomic_acc_async(Backend& backend, const AtomicAccArgs& a, int dev, StreamHandle s) {
  if (backend.emulated()) {
    backend.synchronize_stream(s);
    return atomic_acc_host(a);
  }
#if GPUSTRIPE_HAVE_CUDA
  launch_atomic_acc(a, dev, s);
#else
  GS_THROW(GPUSTRIPE_ERR_NOT_SUPPORTED, "no atomic accumulate for backend '%s' in this build (built without CUDA)",
           backend.name());
#endif
}

}  // namespace gpustripe::coll
