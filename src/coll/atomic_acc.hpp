// Element-wise atomic read-modify-writes of a buffer (the accumulates of one-sided MPI
// on device windows): every element of the target is updated by one atomic
// compare-and-swap, so concurrent updates of the same element from several processes
// (on the target's GPU, or on a peer's over NVLink) never lose one another, and a
// fetching update returns the element exactly as it was just before its own change.
// No lock is held: updates of different elements proceed in parallel.
//
// An element here is the unit the MPI standard makes atomic: one element of a predefined
// type, made of `per_unit` values of the coll type (complex numbers: 2). Units of 1, 2, 4
// and 8 bytes, aligned to their size, are served; a 1- or 2-byte unit is swapped inside
// the aligned 4-byte word that holds it on GPUs (their narrowest compare-and-swap).
#pragma once
#include <cstddef>
#include <cstdint>

#include "backend/backend.hpp"
#include "coll/types.hpp"

namespace gpustripe::coll {

enum class AccKind {
  Reduce,       // target = op(origin, target)
  Replace,      // target = origin
  Fetch,        // nothing written (MPI_NO_OP): result only
  CompareSwap,  // target = origin where target == compare (bitwise)
};

struct AtomicAccArgs {
  void* target = nullptr;          // units * unit_bytes, aligned to unit_bytes
  const void* origin = nullptr;    // Reduce, Replace, CompareSwap
  const void* compare = nullptr;   // CompareSwap
  void* result = nullptr;          // null: nothing fetched; else every unit's value before its update
  size_t units = 0;
  DataType dtype = GPUSTRIPE_UINT8;  // Reduce: the values' type (others: any type of the unit's values)
  size_t per_unit = 1;               // values per unit
  RedOp op = GPUSTRIPE_SUM;          // Reduce only
  AccKind kind = AccKind::Reduce;
};

// Bytes of one unit.
size_t acc_unit_bytes(const AtomicAccArgs& a);
// Whether these updates can run atomically here: a unit of 1, 2, 4 or 8 bytes at an address
// aligned to it, a type other than the 16-bit floating ones, and (Reduce) an op that applies
// to the type. The caller serves the rest otherwise (under a lock).
bool atomic_acc_supported(const AtomicAccArgs& a);
// Throws ERR_INVALID_ARGUMENT naming what is wrong unless atomic_acc_supported and every
// buffer the kind needs is given.
void check_atomic_acc(const AtomicAccArgs& a);

// Enqueues the updates on stream s of device dev (where the target lives; origin, compare and
// result in that device's memory): the kernel on CUDA; on the emulated backend the CPU loop,
// after the stream drains, on this thread (ordered as the stream would order it).
void atomic_acc_async(Backend& backend, const AtomicAccArgs& a, int dev, StreamHandle s);

// The CPU loop (the emulated backend: devices are host or shared memory), run now.
void atomic_acc_host(const AtomicAccArgs& a);

#if GPUSTRIPE_HAVE_CUDA
// The kernel (atomic_acc_cuda.cu), on cuda_stream of device dev; every buffer readable
// there (origin, compare and result in its memory; the target its own or a mapped peer's).
void launch_atomic_acc(const AtomicAccArgs& a, int dev, void* cuda_stream);
#endif

}  // namespace gpustripe::coll
