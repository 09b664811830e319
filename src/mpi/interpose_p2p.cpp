// Interposed point-to-point calls: Send/Ssend/Isend/Issend/Recv/Irecv/Sendrecv/
// Sendrecv_replace/Probe/Iprobe. Each decides the route (interpose.hpp) and either
// calls the PMPI function unchanged or runs an Op.
#include <cstring>
#include <optional>

#include "common/error.hpp"
#include "ipc/wait.hpp"
#include "mpi/coll_team.hpp"
#include "mpi/interpose.hpp"
#include "p2p/trace.hpp"

namespace gpustripe::mpi {

Target route(MPI_Comm comm, int peer, bool device) {
  Target t;
  Runtime* rt = Runtime::get();
  // No communicator: the MPI reports it (MPI_ERR_COMM), as without the interposer.
  if (!rt || peer == MPI_PROC_NULL || comm == MPI_COMM_NULL) return t;
  t.ci = rt->comm(comm);
  bool stage = device && !rt->cuda_aware();
  if (!t.ci) {
    t.route = stage ? Route::Staged : Route::Mpi;
    return t;
  }
  if (peer == MPI_ANY_SOURCE) {
    t.route = t.ci->has_remote ? Route::AnySource : Route::Local;
    t.local = p2p::kAnySource;
    return t;
  }
  if (peer < 0 || peer >= static_cast<int>(t.ci->world_of.size())) return t;  // the MPI reports the bad rank
  int world = t.ci->world_of[peer];
  if (rt->same_node(world)) {
    t.route = Route::Local;
    t.local = rt->local_of(world);
  } else {
    t.route = stage ? Route::Staged : Route::Mpi;
  }
  return t;
}

p2p::MemLoc locate_for(Runtime* rt, const void* buf, int peer) {
  return rt && peer != MPI_PROC_NULL ? rt->locate(buf) : p2p::MemLoc{};
}

int isend_impl(const void* buf, int count, MPI_Datatype type, int dest, int tag, MPI_Comm comm, bool sync,
               MPI_Request* req, bool blocking, const p2p::MemLoc* where) {
  p2p::trace("m_isend", -1, 0, 0, 0);
  std::unique_lock<std::recursive_mutex> l(lock());
  Runtime* rt = Runtime::get();
  const p2p::MemLoc loc = where ? *where : locate_for(rt, buf, dest);
  p2p::trace("m_located", -1, 0, 0, 0);
  Target t = route(comm, dest, loc.device);
  if (t.route == Route::Mpi || tag < 0) {  // a bad tag: the MPI reports it
    if (!blocking)
      return sync ? PMPI_Issend(buf, count, type, dest, tag, comm, req)
                  : PMPI_Isend(buf, count, type, dest, tag, comm, req);
    *req = MPI_REQUEST_NULL;
    l.unlock();  // other threads' calls go on while the MPI blocks
    return sync ? PMPI_Ssend(buf, count, type, dest, tag, comm) : PMPI_Send(buf, count, type, dest, tag, comm);
  }
  UserBuffer b = user_buffer(buf, count, type, loc);
  std::unique_ptr<Op> op = t.route == Route::Local ? local_send(b, t.local, tag, t.ci, comm, sync, blocking)
                                                   : staged_send(b, dest, tag, comm, sync);
  p2p::trace("m_posted", -1, 0, 0, 0);
  if (blocking && op->complete()) {
    // Over as it was posted (an eager message whose record is in the ring: a benchmark's one-byte
    // acknowledgement): nothing to wait for, so no request, no table entry and no wait's pass.
    int err = MPI_SUCCESS;
    op->test(MPI_STATUS_IGNORE, &err);
    *req = MPI_REQUEST_NULL;
    p2p::trace("m_ret", -1, 0, 0, 0);
    return err;
  }
  *req = add_request(std::move(op));
  return MPI_SUCCESS;
}

int irecv_impl(void* buf, int count, MPI_Datatype type, int source, int tag, MPI_Comm comm, MPI_Request* req,
               bool blocking, MPI_Status* st, const p2p::MemLoc* where) {
  p2p::trace("m_irecv", -1, 0, 0, 0);
  std::unique_lock<std::recursive_mutex> l(lock());
  Runtime* rt = Runtime::get();
  const p2p::MemLoc loc = where ? *where : locate_for(rt, buf, source);
  Target t = route(comm, source, loc.device);
  if (t.route == Route::Mpi || (tag < 0 && tag != MPI_ANY_TAG)) {
    if (!blocking) return PMPI_Irecv(buf, count, type, source, tag, comm, req);
    *req = MPI_REQUEST_NULL;
    l.unlock();
    return PMPI_Recv(buf, count, type, source, tag, comm, st);
  }
  UserBuffer b = user_buffer(buf, count, type, loc);
  std::unique_ptr<Op> op;
  switch (t.route) {
    case Route::Local: op = local_recv(b, t.local, tag, t.ci, comm); break;
    case Route::Staged: op = staged_recv(b, source, tag, comm); break;
    default: op = any_source_recv(b, tag, t.ci, comm); break;
  }
  if (blocking && op->complete()) {  // taken from the messages already here: as a send over at its post
    int err = MPI_SUCCESS;
    op->test(st, &err);
    *req = MPI_REQUEST_NULL;
    p2p::trace("m_ret", -1, 0, 0, 0);
    return err;
  }
  *req = add_request(std::move(op));
  return MPI_SUCCESS;
}

namespace {

// The lean forms of MPI_Send and MPI_Recv: contiguous host memory to or from one rank of this
// node goes through Endpoint::send_now / recv_now, with no Op, no request and no progress pass.
// A host message's latency is the sum of such calls' host time on both sides (a ping-pong; a
// window-1 benchmark's acknowledgement). Where their conditions do not hold, nothing is done and
// the general path runs.
struct LeanCall {
  Target t;
  uint64_t bytes = 0;
  p2p::MemLoc loc;       // where the buffer lives, once located: the general path asks no more
  bool located = false;
  const p2p::MemLoc* where() const { return located ? &loc : nullptr; }
};

bool lean_target(const void* buf, int count, MPI_Datatype type, int peer, int tag, MPI_Comm comm, LeanCall* c) {
  Runtime* rt = Runtime::get();
  if (!rt || count < 0 || peer == MPI_ANY_SOURCE || (tag < 0 && tag != MPI_ANY_TAG)) return false;
  c->loc = locate_for(rt, buf, peer);
  c->located = true;
  if (c->loc.device) return false;
  c->t = route(comm, peer, false);
  if (c->t.route != Route::Local) return false;
  const Layout l = layout_of(count, type);
  c->bytes = l.bytes;
  return l.contiguous;
}

bool lean_send(const void* buf, int count, MPI_Datatype type, int dest, int tag, MPI_Comm comm, LeanCall& c) {
  std::lock_guard<std::recursive_mutex> l(lock());
  if (tag < 0 || !lean_target(buf, count, type, dest, tag, comm, &c)) return false;
  if (!Runtime::get()->endpoint().send_now(buf, c.bytes, c.t.local, tag, c.t.ci->ctx)) return false;
  p2p::trace("m_ret", -1, 0, 0, 0);
  return true;
}

constexpr int kLeanSpins = 64;

bool lean_recv(void* buf, int count, MPI_Datatype type, int source, int tag, MPI_Comm comm, MPI_Status* st,
               LeanCall& c) {
  Runtime* rt = Runtime::get();
  {
    std::lock_guard<std::recursive_mutex> l(lock());
    if (!lean_target(buf, count, type, source, tag, comm, &c)) return false;
  }
  const int want = tag == MPI_ANY_TAG ? p2p::kAnyTag : tag;
  std::optional<ipc::Waiter> w;  // made after ipc::kPollsBeforeWaiter looks, as a wait's
  for (int polls = 0;; ++polls) {
    // Nothing new from the source: nothing to look at (no lock taken while spinning); a poll is
    // a look or a short spin without one, so the Waiter's back-off counts alike.
    bool came = polls == 0;
    for (int spin = 0; !came && spin < kLeanSpins; ++spin) came = rt->endpoint().arrived(c.t.local);
    if (came) {
      std::lock_guard<std::recursive_mutex> l(lock());
      // What the general wait would advance meanwhile: then it runs instead.
      if (detached_pending() || pending_collectives() > 0) return false;
      p2p::P2pStatus ps;
      switch (rt->endpoint().recv_now(buf, c.bytes, c.t.local, want, c.t.ci->ctx, &ps)) {
        case p2p::Endpoint::Lean::Taken:
          set_status(st, source, ps.tag, MPI_SUCCESS, ps.bytes);
          p2p::trace("m_ret", -1, 0, 0, 0);
          return true;
        case p2p::Endpoint::Lean::Elsewhere: return false;
        case p2p::Endpoint::Lean::NotYet: break;
      }
    }
    if (polls < ipc::kPollsBeforeWaiter) continue;
    if (!w)
      w.emplace(format("MPI_Recv(source %d, tag %d) on rank %d", source, tag, rt->world_rank()), [&] {
        std::lock_guard<std::recursive_mutex> l(lock());
        try {
          rt->endpoint().check_source(c.t.local);
        } catch (const Error&) {
          // A peer that finalized may have left its last records behind: read them first.
          if (!rt->endpoint().arrived(c.t.local)) throw;
        }
      });
    w->pause();
  }
}

int iprobe_impl(int source, int tag, MPI_Comm comm, int* flag, MPI_Status* st) {
  std::lock_guard<std::recursive_mutex> l(lock());
  Target t = route(comm, source, false);
  if (t.route == Route::Mpi || t.route == Route::Staged || (tag < 0 && tag != MPI_ANY_TAG))
    return PMPI_Iprobe(source, tag, comm, flag, st);  // a bad tag: the MPI reports it
  Runtime& rt = *Runtime::get();
  progress_detached();
  p2p::P2pStatus ps;
  if (rt.endpoint().iprobe(t.local, tag == MPI_ANY_TAG ? p2p::kAnyTag : tag, t.ci->ctx, &ps)) {
    *flag = 1;
    auto it = t.ci->rank_of.find(rt.world_of_local(ps.source));
    set_status(st, it == t.ci->rank_of.end() ? MPI_UNDEFINED : it->second, ps.tag, MPI_SUCCESS, ps.message_bytes);
    return MPI_SUCCESS;
  }
  *flag = 0;
  if (t.route == Route::AnySource) return PMPI_Iprobe(source, tag, comm, flag, st);
  return MPI_SUCCESS;
}

}  // namespace
}  // namespace gpustripe::mpi

using namespace gpustripe;
using namespace gpustripe::mpi;

extern "C" {

int MPI_Isend(const void* buf, int count, MPI_Datatype type, int dest, int tag, MPI_Comm comm, MPI_Request* req) {
  try {
    return isend_impl(buf, count, type, dest, tag, comm, false, req);
  } catch (const std::exception& e) {
    return report(comm, "MPI_Isend", e);
  }
}

int MPI_Issend(const void* buf, int count, MPI_Datatype type, int dest, int tag, MPI_Comm comm, MPI_Request* req) {
  try {
    return isend_impl(buf, count, type, dest, tag, comm, true, req);
  } catch (const std::exception& e) {
    return report(comm, "MPI_Issend", e);
  }
}

// A ready send may be a standard one (MPI: its receive is posted already).
int MPI_Irsend(const void* buf, int count, MPI_Datatype type, int dest, int tag, MPI_Comm comm, MPI_Request* req) {
  return MPI_Isend(buf, count, type, dest, tag, comm, req);
}

int MPI_Irecv(void* buf, int count, MPI_Datatype type, int source, int tag, MPI_Comm comm, MPI_Request* req) {
  try {
    return irecv_impl(buf, count, type, source, tag, comm, req);
  } catch (const std::exception& e) {
    return report(comm, "MPI_Irecv", e);
  }
}

static int blocking_send(const void* buf, int count, MPI_Datatype type, int dest, int tag, MPI_Comm comm, bool sync,
                         const char* call) {
  try {
    p2p::trace("m_isend", -1, 0, 0, 0);
    LeanCall c;
    if (!sync && lean_send(buf, count, type, dest, tag, comm, c)) return MPI_SUCCESS;
    MPI_Request r;
    int rc = isend_impl(buf, count, type, dest, tag, comm, sync, &r, /*blocking*/ true, c.where());
    return rc == MPI_SUCCESS && r != MPI_REQUEST_NULL ? wait_impl(&r, MPI_STATUS_IGNORE) : rc;
  } catch (const std::exception& e) {
    return report(comm, call, e);
  }
}

int MPI_Send(const void* buf, int count, MPI_Datatype type, int dest, int tag, MPI_Comm comm) {
  return blocking_send(buf, count, type, dest, tag, comm, false, "MPI_Send");
}

int MPI_Ssend(const void* buf, int count, MPI_Datatype type, int dest, int tag, MPI_Comm comm) {
  return blocking_send(buf, count, type, dest, tag, comm, true, "MPI_Ssend");
}

int MPI_Rsend(const void* buf, int count, MPI_Datatype type, int dest, int tag, MPI_Comm comm) {
  return blocking_send(buf, count, type, dest, tag, comm, false, "MPI_Rsend");
}

int MPI_Recv(void* buf, int count, MPI_Datatype type, int source, int tag, MPI_Comm comm, MPI_Status* st) {
  try {
    p2p::trace("m_irecv", -1, 0, 0, 0);
    LeanCall c;
    if (lean_recv(buf, count, type, source, tag, comm, st, c)) return MPI_SUCCESS;
    MPI_Request r;
    int rc = irecv_impl(buf, count, type, source, tag, comm, &r, /*blocking*/ true, st, c.where());
    return rc == MPI_SUCCESS && r != MPI_REQUEST_NULL ? wait_impl(&r, st) : rc;
  } catch (const std::exception& e) {
    return report(comm, "MPI_Recv", e);
  }
}

int MPI_Sendrecv(const void* sendbuf, int sendcount, MPI_Datatype sendtype, int dest, int sendtag, void* recvbuf,
                 int recvcount, MPI_Datatype recvtype, int source, int recvtag, MPI_Comm comm, MPI_Status* st) {
  try {
    // Each buffer is located once, for the route and for its half's start.
    bool untouched;
    p2p::MemLoc sloc, rloc;
    {
      std::lock_guard<std::recursive_mutex> l(lock());
      Runtime* rt = Runtime::get();
      sloc = locate_for(rt, sendbuf, dest);
      rloc = locate_for(rt, recvbuf, source);
      untouched = route(comm, dest, sloc.device).route == Route::Mpi &&
                  route(comm, source, rloc.device).route == Route::Mpi;
    }
    if (untouched)
      return PMPI_Sendrecv(sendbuf, sendcount, sendtype, dest, sendtag, recvbuf, recvcount, recvtype, source, recvtag,
                           comm, st);
    MPI_Request r[2];
    MPI_Status s[2];
    int rc = irecv_impl(recvbuf, recvcount, recvtype, source, recvtag, comm, &r[1], false, MPI_STATUS_IGNORE, &rloc);
    if (rc != MPI_SUCCESS) return rc;
    rc = isend_impl(sendbuf, sendcount, sendtype, dest, sendtag, comm, false, &r[0], false, &sloc);
    if (rc != MPI_SUCCESS) return rc;
    rc = waitall_impl(2, r, s);
    if (st != MPI_STATUS_IGNORE) *st = s[1];
    return rc == MPI_ERR_IN_STATUS ? (s[1].MPI_ERROR != MPI_SUCCESS ? s[1].MPI_ERROR : s[0].MPI_ERROR) : rc;
  } catch (const std::exception& e) {
    return report(comm, "MPI_Sendrecv", e);
  }
}

int MPI_Sendrecv_replace(void* buf, int count, MPI_Datatype type, int dest, int sendtag, int source, int recvtag,
                         MPI_Comm comm, MPI_Status* st) {
  try {
    Runtime* rt = Runtime::get();
    if (!rt) return PMPI_Sendrecv_replace(buf, count, type, dest, sendtag, source, recvtag, comm, st);
    Layout l;
    p2p::MemLoc loc;
    bool untouched;
    {
      std::lock_guard<std::recursive_mutex> g(lock());
      loc = rt->locate(buf);
      untouched = route(comm, dest, loc.device).route == Route::Mpi && route(comm, source, loc.device).route == Route::Mpi;
      l = layout_of(count, type);
    }
    if (untouched) return PMPI_Sendrecv_replace(buf, count, type, dest, sendtag, source, recvtag, comm, st);
    // Receive into a copy of the span (same kind of memory), then copy it back: the
    // holes of a non-contiguous type keep their bytes.
    Backend& be = rt->context().backend();
    char* span = static_cast<char*>(buf) + l.span_lb;
    std::vector<char> host;
    char* tmp = nullptr;
    if (loc.device) tmp = static_cast<char*>(be.alloc_device(loc.dev, std::max<uint64_t>(l.span_bytes, 1)));
    else {
      host.resize(std::max<uint64_t>(l.span_bytes, 1));
      tmp = host.data();
    }
    int dev = loc.device ? loc.dev : kHostDevice;
    int rc;
    {
      std::lock_guard<std::recursive_mutex> g(lock());
      rt->mover().copy_now(tmp, dev, span, dev, l.span_bytes);
    }
    MPI_Request r[2];
    MPI_Status s[2];
    rc = irecv_impl(tmp - l.span_lb, count, type, source, recvtag, comm, &r[1]);
    if (rc == MPI_SUCCESS) rc = isend_impl(buf, count, type, dest, sendtag, comm, false, &r[0], false, &loc);
    if (rc == MPI_SUCCESS) rc = waitall_impl(2, r, s);
    if (rc == MPI_SUCCESS || s[1].MPI_ERROR == MPI_ERR_TRUNCATE) {
      std::lock_guard<std::recursive_mutex> g(lock());
      rt->mover().copy_now(span, dev, tmp, dev, l.span_bytes);
    }
    if (loc.device) be.free_device(tmp);
    if (st != MPI_STATUS_IGNORE) *st = s[1];
    return rc == MPI_ERR_IN_STATUS ? s[1].MPI_ERROR : rc;
  } catch (const std::exception& e) {
    return report(comm, "MPI_Sendrecv_replace", e);
  }
}

int MPI_Iprobe(int source, int tag, MPI_Comm comm, int* flag, MPI_Status* st) {
  try {
    return iprobe_impl(source, tag, comm, flag, st);
  } catch (const std::exception& e) {
    return report(comm, "MPI_Iprobe", e);
  }
}

int MPI_Probe(int source, int tag, MPI_Comm comm, MPI_Status* st) {
  try {
    Target t;
    {
      std::lock_guard<std::recursive_mutex> l(lock());
      t = route(comm, source, false);
    }
    if (t.route == Route::Mpi || t.route == Route::Staged || (tag < 0 && tag != MPI_ANY_TAG))
      return PMPI_Probe(source, tag, comm, st);
    Runtime& rt = *Runtime::get();
    ipc::Waiter w(format("MPI_Probe(source %d, tag %d) on rank %d", source, tag, rt.world_rank()), [&] {
      std::lock_guard<std::recursive_mutex> l(lock());
      int flag = 0;
      MPI_Status s;
      if (iprobe_impl(source, tag, comm, &flag, &s) == MPI_SUCCESS && flag) return;  // a finalized peer's last message
      if (t.route == Route::Local) rt.endpoint().check_source(t.local);
    });
    for (;;) {
      int flag = 0;
      int rc = iprobe_impl(source, tag, comm, &flag, st);
      if (rc != MPI_SUCCESS || flag) return rc;
      w.pause();
    }
  } catch (const std::exception& e) {
    return report(comm, "MPI_Probe", e);
  }
}

}  // extern "C"
