// A device window's accumulates (win.hpp): a read-modify-write of the target's
// elements under the target's accumulate lock, through pinned host memory, the op
// applied by the MPI itself (MPI_Reduce_local: every predefined op and type, the
// pair types of MAXLOC/MINLOC included). The lock makes the whole operation atomic
// with respect to every other accumulate into that target, which is more than the
// standard's element-wise atomicity for the same op and type.
#include <cstring>

#include "common/error.hpp"
#include "mpi/win.hpp"

namespace gpustripe::mpi {
namespace {

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
