// Interposed matched probes: MPI_Mprobe/Improbe and MPI_Mrecv/Imrecv. mpi4py's pickled recv
// (comm.recv, its default API) uses them. A message between two ranks of one node travels by
// gpustripe, which the MPI's own matched probe never sees: it waited forever (a torch program
// hung at its first comm.recv). Here a probe of such a
// route asks gpustripe (MPI_Iprobe, interposed) and names the message it found by a handle of
// ours: its communicator, source and tag. Mrecv receives it as a receive of that source and
// tag, which matches the earliest such message: the one probed (messages of one source and
// tag keep their order). Messages the MPI carries keep the MPI's handles. One limit: a
// wildcard receive posted between the probe and Mrecv may take the probed message first (the
// MPI standard forbids that; programs do not do it between their own probe and receive).
#include <mutex>
#include <set>
#include <vector>

#include "common/error.hpp"
#include "ipc/wait.hpp"
#include "mpi/datatype.hpp"
#include "mpi/interpose.hpp"
#include "mpi/ops.hpp"
#include "mpi/runtime.hpp"

namespace gpustripe::mpi {
namespace {

struct OwnMessage {
  MPI_Comm comm;
  int source;  // rank in comm
  int tag;
};

std::set<OwnMessage*>& own_messages() {
  static std::set<OwnMessage*> s;
  return s;
}

// The message `m` names if it is ours (removed from the set: a message is received once).
OwnMessage* take_own(MPI_Message m) {
  std::lock_guard<std::recursive_mutex> l(lock());
  auto it = own_messages().find(reinterpret_cast<OwnMessage*>(m));
  if (it == own_messages().end()) return nullptr;
  OwnMessage* o = *it;
  own_messages().erase(it);
  return o;
}

int improbe_impl(int source, int tag, MPI_Comm comm, int* flag, MPI_Message* msg, MPI_Status* st) {
  std::lock_guard<std::recursive_mutex> l(lock());
  Target t = route(comm, source, false);
  if (t.route == Route::Mpi || t.route == Route::Staged) return PMPI_Improbe(source, tag, comm, flag, msg, st);
  MPI_Status s;
  int rc = MPI_Iprobe(source, tag, comm, flag, &s);  // gpustripe first, then (any source over nodes) the MPI
  if (rc != MPI_SUCCESS || !*flag) return rc;
  Runtime& rt = *Runtime::get();
  if (s.MPI_SOURCE < 0 || s.MPI_SOURCE >= static_cast<int>(t.ci->world_of.size()) ||
      !rt.same_node(t.ci->world_of[s.MPI_SOURCE]))
    return PMPI_Improbe(s.MPI_SOURCE, s.MPI_TAG, comm, flag, msg, st);  // the MPI carries it: its handle
  auto* o = new OwnMessage{comm, s.MPI_SOURCE, s.MPI_TAG};
  own_messages().insert(o);
  *msg = reinterpret_cast<MPI_Message>(o);
  if (st != MPI_STATUS_IGNORE) *st = s;
  return MPI_SUCCESS;
}

// An MPI-carried message into device memory when the MPI cannot read device memory (a rank
// of another node): received into host memory and unpacked there (the MPI's Mrecv writing the
// device buffer itself crashes). -1: not such a case.
int staged_mrecv(void* buf, int count, MPI_Datatype type, MPI_Message* msg, MPI_Status* st) {
  std::lock_guard<std::recursive_mutex> l(lock());
  Runtime* rt = Runtime::get();
  if (!rt || rt->cuda_aware() || !buf) return -1;
  p2p::MemLoc loc = rt->locate(buf);
  if (!loc.device) return -1;
  Layout lay = layout_of(count, type);
  std::vector<char> packed(lay.bytes);
  MPI_Status s;
  int rc = PMPI_Mrecv(packed.data(), static_cast<int>(lay.bytes), MPI_BYTE, msg, &s);
  if (rc != MPI_SUCCESS) return rc;
  int got = 0;
  PMPI_Get_count(&s, MPI_BYTE, &got);
  unpack(packed.data(), static_cast<uint64_t>(got), buf, count, type, lay, loc, rt->mover());
  set_status(st, s.MPI_SOURCE, s.MPI_TAG, MPI_SUCCESS, static_cast<uint64_t>(got));
  return MPI_SUCCESS;
}

}  // namespace
}  // namespace gpustripe::mpi

using namespace gpustripe;
using namespace gpustripe::mpi;

extern "C" {

int MPI_Improbe(int source, int tag, MPI_Comm comm, int* flag, MPI_Message* msg, MPI_Status* st) {
  try {
    return improbe_impl(source, tag, comm, flag, msg, st);
  } catch (const std::exception& e) {
    return report(comm, "MPI_Improbe", e);
  }
}

int MPI_Mprobe(int source, int tag, MPI_Comm comm, MPI_Message* msg, MPI_Status* st) {
  try {
    Target t;
    {
      std::lock_guard<std::recursive_mutex> l(lock());
      t = route(comm, source, false);
    }
    if (t.route == Route::Mpi || t.route == Route::Staged) return PMPI_Mprobe(source, tag, comm, msg, st);
    Runtime& rt = *Runtime::get();
    ipc::Waiter w(format("MPI_Mprobe(source %d, tag %d) on rank %d", source, tag, rt.world_rank()), [&] {
      std::lock_guard<std::recursive_mutex> l(lock());
      if (t.route == Route::Local) rt.endpoint().check_source(t.local);
    });
    for (;;) {
      int flag = 0;
      int rc = improbe_impl(source, tag, comm, &flag, msg, st);
      if (rc != MPI_SUCCESS || flag) return rc;
      w.pause();
    }
  } catch (const std::exception& e) {
    return report(comm, "MPI_Mprobe", e);
  }
}

int MPI_Mrecv(void* buf, int count, MPI_Datatype type, MPI_Message* msg, MPI_Status* st) {
  OwnMessage* o = msg ? take_own(*msg) : nullptr;
  if (!o) {
    try {
      int rc = staged_mrecv(buf, count, type, msg, st);
      if (rc >= 0) return rc;
    } catch (const std::exception& e) {
      return report(MPI_COMM_WORLD, "MPI_Mrecv", e);
    }
    return PMPI_Mrecv(buf, count, type, msg, st);
  }
  *msg = MPI_MESSAGE_NULL;
  OwnMessage m = *o;
  delete o;
  return MPI_Recv(buf, count, type, m.source, m.tag, m.comm, st);
}

int MPI_Imrecv(void* buf, int count, MPI_Datatype type, MPI_Message* msg, MPI_Request* req) {
  OwnMessage* o = msg ? take_own(*msg) : nullptr;
  if (!o) {
    try {
      // Staged: received here at once (the message is matched already); its status is not kept.
      int rc = staged_mrecv(buf, count, type, msg, MPI_STATUS_IGNORE);
      if (rc >= 0) {
        *req = MPI_REQUEST_NULL;
        return rc;
      }
    } catch (const std::exception& e) {
      return report(MPI_COMM_WORLD, "MPI_Imrecv", e);
    }
    return PMPI_Imrecv(buf, count, type, msg, req);
  }
  *msg = MPI_MESSAGE_NULL;
  OwnMessage m = *o;
  delete o;
  return MPI_Irecv(buf, count, type, m.source, m.tag, m.comm, req);
}

}  // extern "C"
