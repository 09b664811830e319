// Nonblocking collectives (MPI_Iallreduce, MPI_Ireduce_scatter(_block), MPI_Iallgather(v),
// MPI_Ialltoall(v/w), MPI_Ibcast, MPI_Ireduce, MPI_Igather(v), MPI_Iscatter(v), MPI_Iscan,
// MPI_Iexscan) on device buffers. The MPI is not CUDA-aware: handed device pointers it
// would read them as host memory. So a call with a device buffer is the blocking interposed
// collective started without waiting (start_collective): on gpustripe's path the call is
// posted on its team and returns; it advances whenever the interposer progresses (every
// wait, test and nonblocking start: progress_collectives), its GPU work running on the
// streams meanwhile, and its request (here) completes through MPI_Wait*/MPI_Test*
// (interpose_wait.cpp). Where some rank cannot take gpustripe's path, the ranks learn it at
// the call's exchange and run it the MPI's way (staged through host memory) as it
// progresses. Calls the MPI runs from the start (other nodes, no team) run to their end
// before returning, with a request complete from its start. Calls whose buffers are all host
// memory, and MPI_Ibarrier, go to the MPI unchanged. Every rank of a call must pass device
// buffers, or every rank host buffers: the two routes do not match.
#include <exception>
#include <functional>
#include <initializer_list>
#include <memory>
#include <vector>

#include <mpi.h>
#if __has_include(<mpi-ext.h>)
#include <mpi-ext.h>  // Open MPI: the MPIX_*_init persistent collectives (after mpi.h)
#endif

#include "mpi/coll_staged.hpp"
#include "mpi/coll_team.hpp"
#include "mpi/interpose.hpp"
#include "p2p/trace.hpp"

namespace gpustripe::mpi {
namespace {

// A request complete from its start, with the collective's result.
class DoneOp : public Op {
 public:
  DoneOp(MPI_Comm comm, int rc) : Op(comm), rc_(rc) {}
  bool test(MPI_Status* st, int* err) override {
    set_status(st, MPI_ANY_SOURCE, MPI_ANY_TAG, rc_, 0);
    *err = rc_;
    return true;
  }
  bool ready() override { return true; }

 private:
  int rc_;
};

// A collective pending on its team: complete once the team has ended it.
class PendingOp : public Op {
 public:
  PendingOp(MPI_Comm comm, const char* name, std::shared_ptr<CollPending> p)
      : Op(comm), name_(name), p_(std::move(p)) {}
  bool ready() override {
    // Inside a pass over many requests, or right after its caller's progress, not again.
    if (!p_->done && !ProgressPass::active() && !Progressed::active()) progress_collectives();
    return p_->done;
  }
  bool advance_alone(bool spin) override {
    if (p_->done) return true;
    // Another team's call or a detached request: the full pass advances them too.
    if (!p_->team || pending_collectives() > 1 || detached_pending()) return false;
    if (spin) p_->team->progress_soon();
    else p_->team->progress();
    return true;
  }
  bool test(MPI_Status* st, int* err) override {
    if (!ready()) return false;
    if (p_->served) {
      p2p::trace("coll_ret", p_->rank, p_->call, 1, p_->bytes);
      collective_served();
    }
    int rc = p_->served ? MPI_SUCCESS : p_->mpi_rc;
    if (p_->error) {
      try {
        std::rethrow_exception(p_->error);
      } catch (const std::exception& e) {
        rc = report(comm_, name_, e);
      }
    }
    set_status(st, MPI_ANY_SOURCE, MPI_ANY_TAG, rc, 0);
    *err = rc;
    return true;
  }
  void check_peers() override {
    if (!p_->done) collective_team_check(comm_);
  }

 private:
  const char* name_;
  std::shared_ptr<CollPending> p_;
};

// Allocations of a call's buffers, located once (p2p::Mover::locate).
using Located = std::vector<p2p::MemLoc>;

// Whether one of the call's buffers is device memory (the call is then the interposer's); its
// allocation goes into *found, where given, for the collective to take instead of asking again
// (a pointer query is a driver call on CUDA: the blocking form asks once per allocation, and so
// must the nonblocking one).
bool on_device(std::initializer_list<const void*> bufs, Located* found = nullptr) {
  std::lock_guard<std::recursive_mutex> l(lock());
  Runtime* rt = Runtime::get();
  if (!rt) return false;
  for (const void* b : bufs) {
    if (!b || b == MPI_IN_PLACE) continue;
    p2p::MemLoc loc = rt->locate(b);
    if (!loc.device) continue;
    if (found) found->push_back(loc);
    return true;
  }
  return false;
}

// Starts `call` (the blocking interposed collective, capturing its arguments by value: the
// MPI's way may run after this function has returned); *rc is the start's result. Templates:
// the call is wrapped once, for the MPI's way (s.mpi), not copied into std::functions.
template <class Call>
std::unique_ptr<Op> started(MPI_Comm comm, const char* name, const Call& call, int* rc, Located located = {}) {
  NonblockingStart s;
  s.mpi = [call] { return mpi_collective(call); };
  s.located = std::move(located);
  *rc = start_collective(s, call);  // takes lock() itself, and leaves it for the MPI
  if (s.pending) return std::make_unique<PendingOp>(comm, name, std::move(s.pending));
  return std::make_unique<DoneOp>(comm, *rc);
}

template <class Call>
int start(MPI_Comm comm, const char* name, MPI_Request* req, Located located, const Call& call) {
  int rc = MPI_SUCCESS;
  std::unique_ptr<Op> op = started(comm, name, call, &rc, std::move(located));
  std::lock_guard<std::recursive_mutex> l(lock());
  *req = add_request(std::move(op));
  return rc;
}

// A persistent collective (MPIX_*_init, Open MPI's form of MPI-4's MPI_*_init): every
// MPI_Start starts the call as its MPI_I* form does; between its completion and the next
// start the request is inactive.
class PersistentOp : public Op {
 public:
  PersistentOp(MPI_Comm comm, const char* name, std::function<int()> call)
      : Op(comm), name_(name), call_(std::move(call)) {}
  bool persistent() const override { return true; }
  bool active() const override { return current_ != nullptr; }
  int start() override {
    if (current_) return MPI_ERR_REQUEST;  // started again before it completed
    int rc = MPI_SUCCESS;
    current_ = started(comm_, name_, call_, &rc);
    return rc;
  }
  bool ready() override { return !current_ || current_->ready(); }
  bool advance_alone(bool spin) override { return !current_ || current_->advance_alone(spin); }
  bool test(MPI_Status* st, int* err) override {
    if (!current_) {
      set_empty_status(st);
      *err = MPI_SUCCESS;
      return true;
    }
    if (!current_->test(st, err)) return false;
    current_.reset();
    return true;
  }
  void check_peers() override {
    if (current_) current_->check_peers();
  }

 private:
  const char* name_;
  std::function<int()> call_;
  std::unique_ptr<Op> current_;
};

int persistent(MPI_Comm comm, const char* name, MPI_Request* req, std::function<int()> call) {
  std::lock_guard<std::recursive_mutex> l(lock());
  *req = add_request(std::make_unique<PersistentOp>(comm, name, std::move(call)));
  return MPI_SUCCESS;
}

}  // namespace
}  // namespace gpustripe::mpi

using namespace gpustripe::mpi;

extern "C" {

int MPI_Iallreduce(const void* sendbuf, void* recvbuf, int count, MPI_Datatype type, MPI_Op op, MPI_Comm comm,
                   MPI_Request* req) {
  Located at;
  if (!on_device({sendbuf, recvbuf}, &at)) return PMPI_Iallreduce(sendbuf, recvbuf, count, type, op, comm, req);
  return start(comm, "MPI_Iallreduce", req, std::move(at),
               [=] { return MPI_Allreduce(sendbuf, recvbuf, count, type, op, comm); });
}

int MPI_Ireduce(const void* sendbuf, void* recvbuf, int count, MPI_Datatype type, MPI_Op op, int root,
                MPI_Comm comm, MPI_Request* req) {
  const bool is_root = comm_rank(comm) == root;
  Located at;
  if (!on_device({sendbuf, is_root ? recvbuf : nullptr}, &at))
    return PMPI_Ireduce(sendbuf, recvbuf, count, type, op, root, comm, req);
  return start(comm, "MPI_Ireduce", req, std::move(at),
               [=] { return MPI_Reduce(sendbuf, recvbuf, count, type, op, root, comm); });
}

int MPI_Ireduce_scatter_block(const void* sendbuf, void* recvbuf, int recvcount, MPI_Datatype type, MPI_Op op,
                              MPI_Comm comm, MPI_Request* req) {
  Located at;
  if (!on_device({sendbuf, recvbuf}, &at))
    return PMPI_Ireduce_scatter_block(sendbuf, recvbuf, recvcount, type, op, comm, req);
  return start(comm, "MPI_Ireduce_scatter_block", req, std::move(at), [=] {
    return MPI_Reduce_scatter_block(sendbuf, recvbuf, recvcount, type, op, comm);
  });
}

int MPI_Ireduce_scatter(const void* sendbuf, void* recvbuf, const int* recvcounts, MPI_Datatype type, MPI_Op op,
                        MPI_Comm comm, MPI_Request* req) {
  Located at;
  if (!on_device({sendbuf, recvbuf}, &at))
    return PMPI_Ireduce_scatter(sendbuf, recvbuf, recvcounts, type, op, comm, req);
  return start(comm, "MPI_Ireduce_scatter", req, std::move(at), [=] {
    return MPI_Reduce_scatter(sendbuf, recvbuf, recvcounts, type, op, comm);
  });
}

int MPI_Iallgather(const void* sendbuf, int sendcount, MPI_Datatype sendtype, void* recvbuf, int recvcount,
                   MPI_Datatype recvtype, MPI_Comm comm, MPI_Request* req) {
  Located at;
  if (!on_device({sendbuf, recvbuf}, &at))
    return PMPI_Iallgather(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, comm, req);
  return start(comm, "MPI_Iallgather", req, std::move(at), [=] {
    return MPI_Allgather(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, comm);
  });
}

int MPI_Iallgatherv(const void* sendbuf, int sendcount, MPI_Datatype sendtype, void* recvbuf, const int* recvcounts,
                    const int* displs, MPI_Datatype recvtype, MPI_Comm comm, MPI_Request* req) {
  Located at;
  if (!on_device({sendbuf, recvbuf}, &at))
    return PMPI_Iallgatherv(sendbuf, sendcount, sendtype, recvbuf, recvcounts, displs, recvtype, comm, req);
  return start(comm, "MPI_Iallgatherv", req, std::move(at), [=] {
    return MPI_Allgatherv(sendbuf, sendcount, sendtype, recvbuf, recvcounts, displs, recvtype, comm);
  });
}

int MPI_Ialltoall(const void* sendbuf, int sendcount, MPI_Datatype sendtype, void* recvbuf, int recvcount,
                  MPI_Datatype recvtype, MPI_Comm comm, MPI_Request* req) {
  Located at;
  if (!on_device({sendbuf, recvbuf}, &at))
    return PMPI_Ialltoall(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, comm, req);
  return start(comm, "MPI_Ialltoall", req, std::move(at), [=] {
    return MPI_Alltoall(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, comm);
  });
}

int MPI_Ialltoallv(const void* sendbuf, const int* sendcounts, const int* sdispls, MPI_Datatype sendtype,
                   void* recvbuf, const int* recvcounts, const int* rdispls, MPI_Datatype recvtype, MPI_Comm comm,
                   MPI_Request* req) {
  Located at;
  if (!on_device({sendbuf, recvbuf}, &at))
    return PMPI_Ialltoallv(sendbuf, sendcounts, sdispls, sendtype, recvbuf, recvcounts, rdispls, recvtype, comm, req);
  return start(comm, "MPI_Ialltoallv", req, std::move(at), [=] {
    return MPI_Alltoallv(sendbuf, sendcounts, sdispls, sendtype, recvbuf, recvcounts, rdispls, recvtype, comm);
  });
}

int MPI_Ialltoallw(const void* sendbuf, const int* sendcounts, const int* sdispls, const MPI_Datatype* sendtypes,
                   void* recvbuf, const int* recvcounts, const int* rdispls, const MPI_Datatype* recvtypes,
                   MPI_Comm comm, MPI_Request* req) {
  Located at;
  if (!on_device({sendbuf, recvbuf}, &at))
    return PMPI_Ialltoallw(sendbuf, sendcounts, sdispls, sendtypes, recvbuf, recvcounts, rdispls, recvtypes, comm, req);
  return start(comm, "MPI_Ialltoallw", req, std::move(at), [=] {
    return MPI_Alltoallw(sendbuf, sendcounts, sdispls, sendtypes, recvbuf, recvcounts, rdispls, recvtypes, comm);
  });
}

int MPI_Ibcast(void* buffer, int count, MPI_Datatype type, int root, MPI_Comm comm, MPI_Request* req) {
  Located at;
  if (!on_device({buffer}, &at)) return PMPI_Ibcast(buffer, count, type, root, comm, req);
  return start(comm, "MPI_Ibcast", req, std::move(at), [=] { return MPI_Bcast(buffer, count, type, root, comm); });
}

int MPI_Igather(const void* sendbuf, int sendcount, MPI_Datatype sendtype, void* recvbuf, int recvcount,
                MPI_Datatype recvtype, int root, MPI_Comm comm, MPI_Request* req) {
  const bool is_root = comm_rank(comm) == root;
  Located at;
  if (!on_device({sendbuf, is_root ? recvbuf : nullptr}, &at))
    return PMPI_Igather(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, root, comm, req);
  return start(comm, "MPI_Igather", req, std::move(at), [=] {
    return MPI_Gather(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, root, comm);
  });
}

int MPI_Igatherv(const void* sendbuf, int sendcount, MPI_Datatype sendtype, void* recvbuf, const int* recvcounts,
                 const int* displs, MPI_Datatype recvtype, int root, MPI_Comm comm, MPI_Request* req) {
  const bool is_root = comm_rank(comm) == root;
  Located at;
  if (!on_device({sendbuf, is_root ? recvbuf : nullptr}, &at))
    return PMPI_Igatherv(sendbuf, sendcount, sendtype, recvbuf, recvcounts, displs, recvtype, root, comm, req);
  return start(comm, "MPI_Igatherv", req, std::move(at), [=] {
    return MPI_Gatherv(sendbuf, sendcount, sendtype, recvbuf, recvcounts, displs, recvtype, root, comm);
  });
}

int MPI_Iscatter(const void* sendbuf, int sendcount, MPI_Datatype sendtype, void* recvbuf, int recvcount,
                 MPI_Datatype recvtype, int root, MPI_Comm comm, MPI_Request* req) {
  const bool is_root = comm_rank(comm) == root;
  Located at;
  if (!on_device({is_root ? sendbuf : nullptr, recvbuf}, &at))
    return PMPI_Iscatter(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, root, comm, req);
  return start(comm, "MPI_Iscatter", req, std::move(at), [=] {
    return MPI_Scatter(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, root, comm);
  });
}

int MPI_Iscatterv(const void* sendbuf, const int* sendcounts, const int* displs, MPI_Datatype sendtype, void* recvbuf,
                  int recvcount, MPI_Datatype recvtype, int root, MPI_Comm comm, MPI_Request* req) {
  const bool is_root = comm_rank(comm) == root;
  Located at;
  if (!on_device({is_root ? sendbuf : nullptr, recvbuf}, &at))
    return PMPI_Iscatterv(sendbuf, sendcounts, displs, sendtype, recvbuf, recvcount, recvtype, root, comm, req);
  return start(comm, "MPI_Iscatterv", req, std::move(at), [=] {
    return MPI_Scatterv(sendbuf, sendcounts, displs, sendtype, recvbuf, recvcount, recvtype, root, comm);
  });
}

int MPI_Iscan(const void* sendbuf, void* recvbuf, int count, MPI_Datatype type, MPI_Op op, MPI_Comm comm,
              MPI_Request* req) {
  Located at;
  if (!on_device({sendbuf, recvbuf}, &at)) return PMPI_Iscan(sendbuf, recvbuf, count, type, op, comm, req);
  return start(comm, "MPI_Iscan", req, std::move(at),
               [=] { return MPI_Scan(sendbuf, recvbuf, count, type, op, comm); });
}

int MPI_Iexscan(const void* sendbuf, void* recvbuf, int count, MPI_Datatype type, MPI_Op op, MPI_Comm comm,
                MPI_Request* req) {
  Located at;
  if (!on_device({sendbuf, recvbuf}, &at)) return PMPI_Iexscan(sendbuf, recvbuf, count, type, op, comm, req);
  return start(comm, "MPI_Iexscan", req, std::move(at),
               [=] { return MPI_Exscan(sendbuf, recvbuf, count, type, op, comm); });
}

// Persistent collectives: Open MPI's MPIX_*_init (mpi-ext.h). Device buffers: a request
// of ours, started by MPI_Start/MPI_Startall (interpose_wait.cpp); host buffers: the MPI's.
#ifdef OMPI_HAVE_MPI_EXT_PCOLLREQ

int MPIX_Allreduce_init(const void* sendbuf, void* recvbuf, int count, MPI_Datatype type, MPI_Op op, MPI_Comm comm,
                        MPI_Info info, MPI_Request* req) {
  if (!on_device({sendbuf, recvbuf})) return PMPIX_Allreduce_init(sendbuf, recvbuf, count, type, op, comm, info, req);
  return persistent(comm, "MPIX_Allreduce_init", req,
                    [=] { return MPI_Allreduce(sendbuf, recvbuf, count, type, op, comm); });
}

int MPIX_Reduce_init(const void* sendbuf, void* recvbuf, int count, MPI_Datatype type, MPI_Op op, int root,
                     MPI_Comm comm, MPI_Info info, MPI_Request* req) {
  const bool is_root = comm_rank(comm) == root;
  if (!on_device({sendbuf, is_root ? recvbuf : nullptr}))
    return PMPIX_Reduce_init(sendbuf, recvbuf, count, type, op, root, comm, info, req);
  return persistent(comm, "MPIX_Reduce_init", req,
                    [=] { return MPI_Reduce(sendbuf, recvbuf, count, type, op, root, comm); });
}

int MPIX_Reduce_scatter_block_init(const void* sendbuf, void* recvbuf, int recvcount, MPI_Datatype type, MPI_Op op,
                                   MPI_Comm comm, MPI_Info info, MPI_Request* req) {
  if (!on_device({sendbuf, recvbuf}))
    return PMPIX_Reduce_scatter_block_init(sendbuf, recvbuf, recvcount, type, op, comm, info, req);
  return persistent(comm, "MPIX_Reduce_scatter_block_init", req,
                    [=] { return MPI_Reduce_scatter_block(sendbuf, recvbuf, recvcount, type, op, comm); });
}

int MPIX_Reduce_scatter_init(const void* sendbuf, void* recvbuf, const int recvcounts[], MPI_Datatype type, MPI_Op op,
                             MPI_Comm comm, MPI_Info info, MPI_Request* req) {
  if (!on_device({sendbuf, recvbuf}))
    return PMPIX_Reduce_scatter_init(sendbuf, recvbuf, recvcounts, type, op, comm, info, req);
  return persistent(comm, "MPIX_Reduce_scatter_init", req,
                    [=] { return MPI_Reduce_scatter(sendbuf, recvbuf, recvcounts, type, op, comm); });
}

int MPIX_Allgather_init(const void* sendbuf, int sendcount, MPI_Datatype sendtype, void* recvbuf, int recvcount,
                        MPI_Datatype recvtype, MPI_Comm comm, MPI_Info info, MPI_Request* req) {
  if (!on_device({sendbuf, recvbuf}))
    return PMPIX_Allgather_init(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, comm, info, req);
  return persistent(comm, "MPIX_Allgather_init", req, [=] {
    return MPI_Allgather(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, comm);
  });
}

int MPIX_Allgatherv_init(const void* sendbuf, int sendcount, MPI_Datatype sendtype, void* recvbuf,
                         const int recvcounts[], const int displs[], MPI_Datatype recvtype, MPI_Comm comm,
                         MPI_Info info, MPI_Request* req) {
  if (!on_device({sendbuf, recvbuf}))
    return PMPIX_Allgatherv_init(sendbuf, sendcount, sendtype, recvbuf, recvcounts, displs, recvtype, comm, info,
                                 req);
  return persistent(comm, "MPIX_Allgatherv_init", req, [=] {
    return MPI_Allgatherv(sendbuf, sendcount, sendtype, recvbuf, recvcounts, displs, recvtype, comm);
  });
}

int MPIX_Alltoall_init(const void* sendbuf, int sendcount, MPI_Datatype sendtype, void* recvbuf, int recvcount,
                       MPI_Datatype recvtype, MPI_Comm comm, MPI_Info info, MPI_Request* req) {
  if (!on_device({sendbuf, recvbuf}))
    return PMPIX_Alltoall_init(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, comm, info, req);
  return persistent(comm, "MPIX_Alltoall_init", req, [=] {
    return MPI_Alltoall(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, comm);
  });
}

int MPIX_Alltoallv_init(const void* sendbuf, const int sendcounts[], const int sdispls[], MPI_Datatype sendtype,
                        void* recvbuf, const int recvcounts[], const int rdispls[], MPI_Datatype recvtype,
                        MPI_Comm comm, MPI_Info info, MPI_Request* req) {
  if (!on_device({sendbuf, recvbuf}))
    return PMPIX_Alltoallv_init(sendbuf, sendcounts, sdispls, sendtype, recvbuf, recvcounts, rdispls, recvtype, comm,
                                info, req);
  return persistent(comm, "MPIX_Alltoallv_init", req, [=] {
    return MPI_Alltoallv(sendbuf, sendcounts, sdispls, sendtype, recvbuf, recvcounts, rdispls, recvtype, comm);
  });
}

int MPIX_Bcast_init(void* buffer, int count, MPI_Datatype type, int root, MPI_Comm comm, MPI_Info info,
                    MPI_Request* req) {
  if (!on_device({buffer})) return PMPIX_Bcast_init(buffer, count, type, root, comm, info, req);
  return persistent(comm, "MPIX_Bcast_init", req, [=] { return MPI_Bcast(buffer, count, type, root, comm); });
}

int MPIX_Scan_init(const void* sendbuf, void* recvbuf, int count, MPI_Datatype type, MPI_Op op, MPI_Comm comm,
                   MPI_Info info, MPI_Request* req) {
  if (!on_device({sendbuf, recvbuf})) return PMPIX_Scan_init(sendbuf, recvbuf, count, type, op, comm, info, req);
  return persistent(comm, "MPIX_Scan_init", req, [=] { return MPI_Scan(sendbuf, recvbuf, count, type, op, comm); });
}

int MPIX_Exscan_init(const void* sendbuf, void* recvbuf, int count, MPI_Datatype type, MPI_Op op, MPI_Comm comm,
                     MPI_Info info, MPI_Request* req) {
  if (!on_device({sendbuf, recvbuf})) return PMPIX_Exscan_init(sendbuf, recvbuf, count, type, op, comm, info, req);
  return persistent(comm, "MPIX_Exscan_init", req,
                    [=] { return MPI_Exscan(sendbuf, recvbuf, count, type, op, comm); });
}

int MPIX_Alltoallw_init(const void* sendbuf, const int sendcounts[], const int sdispls[], const MPI_Datatype sendtypes[],
                        void* recvbuf, const int recvcounts[], const int rdispls[], const MPI_Datatype recvtypes[],
                        MPI_Comm comm, MPI_Info info, MPI_Request* req) {
  if (!on_device({sendbuf, recvbuf}))
    return PMPIX_Alltoallw_init(sendbuf, sendcounts, sdispls, sendtypes, recvbuf, recvcounts, rdispls, recvtypes, comm,
                                info, req);
  return persistent(comm, "MPIX_Alltoallw_init", req, [=] {
    return MPI_Alltoallw(sendbuf, sendcounts, sdispls, sendtypes, recvbuf, recvcounts, rdispls, recvtypes, comm);
  });
}

int MPIX_Gather_init(const void* sendbuf, int sendcount, MPI_Datatype sendtype, void* recvbuf, int recvcount,
                     MPI_Datatype recvtype, int root, MPI_Comm comm, MPI_Info info, MPI_Request* req) {
  const bool is_root = comm_rank(comm) == root;
  if (!on_device({sendbuf, is_root ? recvbuf : nullptr}))
    return PMPIX_Gather_init(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, root, comm, info, req);
  return persistent(comm, "MPIX_Gather_init", req, [=] {
    return MPI_Gather(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, root, comm);
  });
}

int MPIX_Gatherv_init(const void* sendbuf, int sendcount, MPI_Datatype sendtype, void* recvbuf, const int recvcounts[],
                      const int displs[], MPI_Datatype recvtype, int root, MPI_Comm comm, MPI_Info info,
                      MPI_Request* req) {
  const bool is_root = comm_rank(comm) == root;
  if (!on_device({sendbuf, is_root ? recvbuf : nullptr}))
    return PMPIX_Gatherv_init(sendbuf, sendcount, sendtype, recvbuf, recvcounts, displs, recvtype, root, comm, info,
                              req);
  return persistent(comm, "MPIX_Gatherv_init", req, [=] {
    return MPI_Gatherv(sendbuf, sendcount, sendtype, recvbuf, recvcounts, displs, recvtype, root, comm);
  });
}

int MPIX_Scatter_init(const void* sendbuf, int sendcount, MPI_Datatype sendtype, void* recvbuf, int recvcount,
                      MPI_Datatype recvtype, int root, MPI_Comm comm, MPI_Info info, MPI_Request* req) {
  const bool is_root = comm_rank(comm) == root;
  if (!on_device({is_root ? sendbuf : nullptr, recvbuf}))
    return PMPIX_Scatter_init(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, root, comm, info, req);
  return persistent(comm, "MPIX_Scatter_init", req, [=] {
    return MPI_Scatter(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, root, comm);
  });
}

int MPIX_Scatterv_init(const void* sendbuf, const int sendcounts[], const int displs[], MPI_Datatype sendtype,
                       void* recvbuf, int recvcount, MPI_Datatype recvtype, int root, MPI_Comm comm, MPI_Info info,
                       MPI_Request* req) {
  const bool is_root = comm_rank(comm) == root;
  if (!on_device({is_root ? sendbuf : nullptr, recvbuf}))
    return PMPIX_Scatterv_init(sendbuf, sendcounts, displs, sendtype, recvbuf, recvcount, recvtype, root, comm, info,
                               req);
  return persistent(comm, "MPIX_Scatterv_init", req, [=] {
    return MPI_Scatterv(sendbuf, sendcounts, displs, sendtype, recvbuf, recvcount, recvtype, root, comm);
  });
}

#endif  // OMPI_HAVE_MPI_EXT_PCOLLREQ

}  // extern "C"
