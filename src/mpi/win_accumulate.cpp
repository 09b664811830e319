// A device window's accumulates (win.hpp). Two ways, chosen by the target's type alone,
// so every accumulate into one element of one type goes the same way:
//   atomic     an element of 1, 2, 4 or 8 bytes of a type the coll layer has (every predefined
//              integer, floating, logical, byte and complex-float type, and the 8-byte pair
//              types of MINLOC/MAXLOC), at an address aligned to its size: a kernel on the
//              target's GPU updates each element with one compare-and-swap (coll/atomic_acc.hpp);
//              origin, compare and result go through scratch memory of that GPU. No lock: the
//              standard's element-wise atomicity, with concurrent origins in parallel.
//   locked     every other element (16-byte ones: MPI_DOUBLE_INT, MPI_LONG_INT, double complex;
//              types without a coll type; complex products; unaligned elements): the target's
//              accumulate lock around a read-modify-write through pinned host memory, the MPI's
//              own MPI_Reduce_local applying the op.
#include <cstring>

#include "coll/atomic_acc.hpp"
#include "common/error.hpp"
#include "mpi/reduce_type.hpp"
#include "mpi/win.hpp"

namespace gpustripe::mpi {
namespace {

// The atomic way's updates of (ttype, op) at t, or false: the locked way serves them.
bool atomic_way(MPI_Datatype ttype, MPI_Datatype otype, MPI_Op op, coll::AccKind kind, char* t, uint64_t bytes,
                coll::AtomicAccArgs* a) {
  ReduceType tt;
  std::string why;
  if (kind == coll::AccKind::Reduce ? !reduce_type(ttype, op, &tt, &why) : !element_type(ttype, &tt)) return false;
  if (kind != coll::AccKind::Fetch && otype != ttype) {
    ReduceType ot;
    if (!element_type(otype, &ot) || ot.dt != tt.dt || ot.per_base != tt.per_base) return false;
  }
  a->kind = kind;
  a->op = tt.op;
  a->dtype = tt.dt;
  a->per_unit = tt.per_base;
  a->target = t;
  if (!coll::atomic_acc_supported(*a)) return false;
  a->units = bytes / coll::acc_unit_bytes(*a);
  return true;
}

// Where a user buffer lives, checked to hold `bytes` from `p`.
int device_of(Runtime& rt, const void* p, uint64_t bytes, const char* what) {
  p2p::MemLoc loc = rt.locate(p);
  p2p::Mover::check_within(loc, p, bytes, what);
  return loc.device ? loc.dev : kHostDevice;
}

}  // namespace

void DeviceWindow::accumulate(const void* origin, int ocount, MPI_Datatype otype, void* result, int rcount,
                              MPI_Datatype rtype, int target, MPI_Aint disp, int tcount, MPI_Datatype ttype,
                              MPI_Op op) {
  const char* call = result ? "MPI_Get_accumulate" : "MPI_Accumulate";
  require_target(target, call);
  if (target == MPI_PROC_NULL) return;
  require_epoch(target, call);
  const bool noop = op == MPI_NO_OP, replace = op == MPI_REPLACE;
  if (noop && !result) return;
  MPI_Aint tlb = 0, olb = 0, rlb = 0;
  const uint64_t bytes = contiguous_bytes(tcount, ttype, &tlb, call);
  if (!noop && contiguous_bytes(ocount, otype, &olb, call) != bytes)
    throw WinError(MPI_ERR_TYPE, format("%s: the origin and target buffers differ in size", call));
  if (result && contiguous_bytes(rcount, rtype, &rlb, call) != bytes)
    throw WinError(MPI_ERR_TYPE, format("%s: the result and target buffers differ in size", call));
  int tdev = kHostDevice;
  char* t = resolve(target, disp, bytes + tlb, &tdev, call) + tlb;
  if (bytes == 0) return;
  const char* o = noop ? nullptr : static_cast<const char*>(origin) + olb;
  char* res = result ? static_cast<char*>(result) + rlb : nullptr;
  const int odev = noop ? kHostDevice : device_of(rt_, o, bytes, "origin buffer");
  const int rdev = res ? device_of(rt_, res, bytes, "result buffer") : kHostDevice;
  // This origin's earlier puts and gets to the target land first.
  complete_ops(target);
  coll::AtomicAccArgs a;
  const coll::AccKind kind = noop ? coll::AccKind::Fetch : replace ? coll::AccKind::Replace : coll::AccKind::Reduce;
  if (atomic_way(ttype, otype, op, kind, t, bytes, &a)) {
    accumulate_atomic(a, tdev, o, odev, nullptr, kHostDevice, res, rdev, bytes);
    return;
  }
  p2p::Mover& mv = rt_.mover();
  Runtime::Pinned tmp = rt_.staging_alloc(2 * bytes);
  acc_lock(target);
  try {
    if (res || !replace) mv.copy_now(tmp.p, kHostDevice, t, tdev, bytes);
    if (res) mv.copy_now(res, rdev, tmp.p, kHostDevice, bytes);
    if (replace) {
      mv.copy_now(t, tdev, o, odev, bytes);
    } else if (!noop) {
      char* in = tmp.p + bytes;
      mv.copy_now(in, kHostDevice, o, odev, bytes);
      // Reduce_local: inout = in op inout; the buffers as (tcount, ttype) lay them out.
      check_mpi(PMPI_Reduce_local(in - tlb, tmp.p - tlb, tcount, ttype, op), call);
      mv.copy_now(t, tdev, tmp.p, kHostDevice, bytes);
    }
  } catch (...) {
    acc_unlock(target);
    rt_.staging_free(tmp);
    throw;
  }
  acc_unlock(target);
  rt_.staging_free(tmp);
}

void DeviceWindow::accumulate_atomic(coll::AtomicAccArgs a, int tdev, const char* o, int odev, const char* cmp,
                                     int cdev, char* res, int rdev, uint64_t bytes) {
  // Scratch of the target's GPU in this process: origin, compare, result.
  const uint64_t slot = (bytes + 255) / 256 * 256;
  Scratch& sc = scratch_[tdev];
  if (sc.bytes < 3 * slot) {
    if (sc.p) backend_.free_device(sc.p);
    sc.p = nullptr;
    sc.bytes = 0;
    sc.p = static_cast<char*>(backend_.alloc_device(tdev, 3 * slot));
    sc.bytes = 3 * slot;
  }
  for (int from : {odev, cdev})
    if (from != kHostDevice && from != tdev && peer_enabled_.insert({tdev, from}).second &&
        backend_.can_access_peer(tdev, from))
      backend_.enable_peer_access(tdev, from);
  StreamHandle s = copy_stream(tdev);
  if (o) {
    backend_.copy_async(sc.p, tdev, o, odev, bytes, s);
    a.origin = sc.p;
  }
  if (cmp) {
    backend_.copy_async(sc.p + slot, tdev, cmp, cdev, bytes, s);
    a.compare = sc.p + slot;
  }
  a.result = res ? sc.p + 2 * slot : nullptr;
  coll::atomic_acc_async(backend_, a, tdev, s);
  if (res) backend_.copy_async(res, rdev, a.result, tdev, bytes, s);
  backend_.synchronize_stream(s);
}

void DeviceWindow::compare_and_swap(const void* origin, const void* compare, void* result, MPI_Datatype type,
                                    int target, MPI_Aint disp) {
  const char* call = "MPI_Compare_and_swap";
  require_target(target, call);
  if (target == MPI_PROC_NULL) return;
  require_epoch(target, call);
  MPI_Aint lb = 0;
  const uint64_t bytes = contiguous_bytes(1, type, &lb, call);
  int tdev = kHostDevice;
  char* t = resolve(target, disp, bytes + lb, &tdev, call) + lb;
  const int odev = device_of(rt_, origin, bytes, "origin buffer");
  const int cdev = device_of(rt_, compare, bytes, "compare buffer");
  const int rdev = device_of(rt_, result, bytes, "result buffer");
  complete_ops(target);
  coll::AtomicAccArgs a;
  if (atomic_way(type, type, MPI_REPLACE, coll::AccKind::CompareSwap, t, bytes, &a)) {
    accumulate_atomic(a, tdev, static_cast<const char*>(origin), odev, static_cast<const char*>(compare), cdev,
                      static_cast<char*>(result), rdev, bytes);
    return;
  }
  p2p::Mover& mv = rt_.mover();
  Runtime::Pinned tmp = rt_.staging_alloc(2 * bytes);
  acc_lock(target);
  try {
    mv.copy_now(tmp.p, kHostDevice, t, tdev, bytes);
    mv.copy_now(tmp.p + bytes, kHostDevice, compare, cdev, bytes);
    if (std::memcmp(tmp.p, tmp.p + bytes, bytes) == 0) mv.copy_now(t, tdev, origin, odev, bytes);
    mv.copy_now(result, rdev, tmp.p, kHostDevice, bytes);
  } catch (...) {
    acc_unlock(target);
    rt_.staging_free(tmp);
    throw;
  }
  acc_unlock(target);
  rt_.staging_free(tmp);
}

}  // namespace gpustripe::mpi
