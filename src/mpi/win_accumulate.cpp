// A device window's accumulates (win.hpp): a read-modify-write of the target's
// elements under the target's accumulate lock. The lock makes the whole operation
// atomic with respect to every other accumulate into that target, which is more than
// the standard's element-wise atomicity for the same op and type.
//   on the target's GPU  the ops and types the coll layer's reduction kernels have (sum,
//                        prod, max, min of float, double, int32, int64): the target's
//                        elements and the origin's are copied into scratch memory of that
//                        GPU, reduced there by a kernel and copied back, on one stream
//   through host memory  every other predefined op and type (the pair types of MAXLOC /
//                        MINLOC included): the MPI's own MPI_Reduce_local applies the op
#include <cstring>

#include "coll/reduce.hpp"
#include "common/error.hpp"
#include "mpi/win.hpp"

namespace gpustripe::mpi {
namespace {

// The coll reduction of (type, op) where its kernels have one. MPI_LONG is int64 only where
// long is 8 bytes; unsigned types are left to the host (max/min differ from the signed ones).
bool kernel_reduction(MPI_Datatype t, MPI_Op o, coll::DataType* dt, coll::RedOp* op) {
  static const std::pair<MPI_Datatype, coll::DataType> types[] = {
      {MPI_FLOAT, GPUSTRIPE_FLOAT32}, {MPI_DOUBLE, GPUSTRIPE_FLOAT64}, {MPI_INT, GPUSTRIPE_INT32},
      {MPI_INT32_T, GPUSTRIPE_INT32}, {MPI_INT64_T, GPUSTRIPE_INT64}, {MPI_LONG_LONG, GPUSTRIPE_INT64},
      {MPI_LONG, sizeof(long) == 8 ? GPUSTRIPE_INT64 : GPUSTRIPE_INT32}};
  static const std::pair<MPI_Op, coll::RedOp> ops[] = {
      {MPI_SUM, GPUSTRIPE_SUM}, {MPI_PROD, GPUSTRIPE_PROD}, {MPI_MAX, GPUSTRIPE_MAX}, {MPI_MIN, GPUSTRIPE_MIN}};
  bool found_type = false, found_op = false;
  for (const auto& kv : types)
    if (kv.first == t) *dt = kv.second, found_type = true;
  for (const auto& kv : ops)
    if (kv.first == o) *op = kv.second, found_op = true;
  return found_type && found_op;
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
  coll::DataType dt;
  coll::RedOp rop;
  if (tdev != kHostDevice && !replace && !noop && otype == ttype && kernel_reduction(ttype, op, &dt, &rop)) {
    acc_lock(target);
    try {
      accumulate_on_gpu(t, tdev, o, odev, res, rdev, bytes, dt, rop);
    } catch (...) {
      acc_unlock(target);
      throw;
    }
    acc_unlock(target);
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

void DeviceWindow::accumulate_on_gpu(char* t, int tdev, const char* o, int odev, char* res, int rdev, uint64_t bytes,
                                     coll::DataType dt, coll::RedOp op) {
  // Scratch of the target's GPU in this process: its elements, then the origin's.
  const uint64_t half = (bytes + 255) / 256 * 256;
  Scratch& sc = scratch_[tdev];
  if (sc.bytes < 2 * half) {
    if (sc.p) backend_.free_device(sc.p);
    sc.p = nullptr;
    sc.bytes = 0;
    sc.p = static_cast<char*>(backend_.alloc_device(tdev, 2 * half));
    sc.bytes = 2 * half;
  }
  if (!reducer_) reducer_ = coll::make_reducer(backend_);
  if (odev != kHostDevice && odev != tdev && peer_enabled_.insert({tdev, odev}).second &&
      backend_.can_access_peer(tdev, odev))
    backend_.enable_peer_access(tdev, odev);
  StreamHandle s = put_stream(tdev);
  char* mine = sc.p;
  char* in = sc.p + half;
  backend_.copy_async(mine, tdev, t, tdev, bytes, s);
  backend_.copy_async(in, tdev, o, odev, bytes, s);
  if (res) backend_.copy_async(res, rdev, mine, tdev, bytes, s);
  coll::ReduceArgs a;
  a.dst = mine;
  a.srcs = {mine, in};
  a.count = bytes / coll::dtype_size(dt);
  a.dtype = dt;
  a.op = op;
  reducer_->reduce_async(a, tdev, s);
  backend_.copy_async(t, tdev, mine, tdev, bytes, s);
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
