#include "mpi/coll_staged.hpp"

#include "common/log.hpp"
#include "mpi/datatype.hpp"
#include "mpi/ops.hpp"

namespace gpustripe::mpi {

void* StagedBuffers::add(const void* buf, int count, MPI_Datatype type, bool in, bool out) {
  void* user = const_cast<void*>(buf);
  if (buf == MPI_IN_PLACE || buf == nullptr || count <= 0 || rt_.cuda_aware()) return user;
  p2p::MemLoc loc = rt_.locate(buf);
  if (!loc.device) return user;
  Layout l = layout_of(count, type);
  if (l.span_bytes == 0) return user;
  char* first = static_cast<char*>(user) + l.span_lb;
  Staged s{first, loc.dev, rt_.staging_alloc(l.span_bytes), l.span_bytes, out};
  staged_.push_back(s);
  // A type with holes: the copy back writes the whole span, so the holes come along.
  if (in || (out && !l.contiguous)) rt_.mover().copy_now(s.host.p, kHostDevice, first, loc.dev, l.span_bytes);
  // Where buf would be if the span's host copy sat where the device span is.
  return s.host.p - l.span_lb;
}

void StagedBuffers::finish() {
  for (Staged& s : staged_)
    if (s.out) rt_.mover().copy_now(s.user, s.dev, s.host.p, kHostDevice, s.bytes);
}

StagedBuffers::~StagedBuffers() {
  for (Staged& s : staged_) rt_.staging_free(s.host);
}

int staged_collective(MPI_Comm comm, const char* name, const std::function<int(StagedBuffers*)>& mpi) {
  std::unique_lock<std::recursive_mutex> l(lock());
  Runtime* rt = Runtime::get();
  if (!rt) {
    l.unlock();
    return mpi(nullptr);
  }
  try {
    StagedBuffers staged(*rt);
    int rc = mpi(&staged);
    if (rc == MPI_SUCCESS) staged.finish();
    return rc;
  } catch (const std::exception& e) {
    return report(comm, name, e);
  }
}

}  // namespace gpustripe::mpi
