// Interposed collectives: MPI_Alltoall, MPI_Allgather, MPI_Reduce_scatter_block,
// MPI_Allreduce, MPI_Bcast, MPI_Reduce.
//
// On a communicator whose ranks all sit on this node, the ranks agree in every call
// (coll_team.hpp) whether each of them has device buffers of a contiguous type, and for
// reductions a type and an op the coll kernels have (float, double, int32, int64; SUM,
// PROD, MAX, MIN); then the coll layer's schedules run across the processes. In every
// other case the MPI runs the collective: host buffers untouched, device buffers
// staged through host memory (coll_staged.hpp) -- other nodes, derived or other types,
// user ops, mixed host/device ranks.
//   GPUSTRIPE_MPI_COLL  yes|no: collectives of node-local communicators on gpustripe
#include <atomic>
#include <map>

#include "common/config.hpp"
#include "common/error.hpp"
#include "mpi/coll_staged.hpp"
#include "mpi/coll_team.hpp"
#include "mpi/datatype.hpp"
#include "mpi/interpose.hpp"
#include "mpi/mpi_bootstrap.hpp"

namespace gpustripe::mpi {
namespace {

const BoolSetting kColl{"GPUSTRIPE_MPI_COLL", "yes",
                        "MPI collectives (alltoall, allgather, reduce_scatter_block, allreduce, bcast, reduce) on "
                        "device buffers of a node-local communicator run on gpustripe's collective schedules; no: "
                        "the MPI runs them (device buffers staged through host memory)"};

std::atomic<long> g_served{0};  // collectives run on gpustripe (a test hook reads it)

struct CollState {
  std::map<uint64_t, std::unique_ptr<CollTeam>> teams;  // by the communicator's p2p id
};

// The team of a node-local communicator, made at its first collective; null otherwise.
CollTeam* team_for(Runtime& rt, MPI_Comm comm) {
  if (!kColl.get()) return nullptr;
  std::shared_ptr<const CommInfo> ci = rt.comm(comm);
  if (!ci || ci->has_remote) return nullptr;
  if (!rt.coll_state) rt.coll_state = std::make_shared<CollState>();
  auto& teams = static_cast<CollState*>(rt.coll_state.get())->teams;
  std::unique_ptr<CollTeam>& t = teams[ci->ctx];
  if (!t) t = make_coll_team(rt, comm, *ci);
  return t.get();
}

}  // namespace

void release_collective_team(Runtime& rt, uint64_t ctx) {
  if (rt.coll_state) static_cast<CollState*>(rt.coll_state.get())->teams.erase(ctx);
}

namespace {

// The GPU all the buffers live on; -1 when one is not device memory or they differ. The
// allocations found go into c.located.
int device_of(Runtime& rt, CollCall& c, std::initializer_list<const void*> bufs) {
  int dev = -1;
  for (const void* b : bufs) {
    p2p::MemLoc loc = rt.locate(b);
    if (!loc.device || (dev >= 0 && loc.dev != dev)) return -1;
    dev = loc.dev;
    c.located.push_back(loc);
  }
  return dev;
}

bool reduce_type(MPI_Datatype t, coll::DataType* dt) {
  if (t == MPI_FLOAT) *dt = GPUSTRIPE_FLOAT32;
  else if (t == MPI_DOUBLE) *dt = GPUSTRIPE_FLOAT64;
  else if (t == MPI_INT || t == MPI_INT32_T) *dt = GPUSTRIPE_INT32;
  else if (t == MPI_INT64_T || t == MPI_LONG_LONG || (t == MPI_LONG && sizeof(long) == 8)) *dt = GPUSTRIPE_INT64;
  else return false;
  return true;
}

bool reduce_op(MPI_Op o, coll::RedOp* op) {
  if (o == MPI_SUM) *op = GPUSTRIPE_SUM;
  else if (o == MPI_PROD) *op = GPUSTRIPE_PROD;
  else if (o == MPI_MAX) *op = GPUSTRIPE_MAX;
  else if (o == MPI_MIN) *op = GPUSTRIPE_MIN;
  else return false;
  return true;
}

size_t type_size(MPI_Datatype t) {
  int s = 0;
  PMPI_Type_size(t, &s);
  return s > 0 ? static_cast<size_t>(s) : 1;
}

std::vector<const char*> in(const std::vector<char*>& v) { return {v.begin(), v.end()}; }

// CollCall::shape: the function and what its build closure captures.
std::string shape_of(const char* name, std::initializer_list<long long> captured) {
  std::string s(name);
  for (long long v : captured) s.append(reinterpret_cast<const char*>(&v), sizeof v);
  return s;
}

// One collective: the gpustripe way when every rank can (`prepare` fills this rank's
// side of the call; `after` finishes it), else `mpi` over staged buffers.
int collective(MPI_Comm comm, const char* name, const std::function<void(Runtime&, CollTeam&, CollCall&)>& prepare,
               const std::function<void(Runtime&, const CollCall&)>& after,
               const std::function<int(StagedBuffers*)>& mpi) {
  std::unique_lock<std::recursive_mutex> l(lock());
  if (Runtime* rt = Runtime::get()) {
    try {
      if (CollTeam* team = team_for(*rt, comm)) {
        CollCall call;
        call.name = name;
        prepare(*rt, *team, call);
        if (team->run(call)) {
          if (after) after(*rt, call);
          ++g_served;
          return MPI_SUCCESS;
        }
      }
    } catch (const std::exception& e) {
      return report(comm, name, e);
    }
  }
  l.unlock();  // staged_collective takes the lock itself (and leaves it for the MPI outside the runtime)
  return staged_collective(comm, name, mpi);
}

}  // namespace
}  // namespace gpustripe::mpi

using namespace gpustripe;
using namespace gpustripe::mpi;

namespace {

// What alltoall and allgather share: blocks of recvcount x recvtype per rank, one block per
// rank sent (the whole receive buffer in place), served when both sides are contiguous, of
// the same size and on one GPU. Returns the block size; c.bytes is the whole receive buffer.
size_t exchange_call(Runtime& rt, CollTeam& team, CollCall& c, coll::CollOp op, const void* sendbuf, int sendcount,
                     MPI_Datatype sendtype, void* recvbuf, int recvcount, MPI_Datatype recvtype) {
  const bool in_place = sendbuf == MPI_IN_PLACE;
  Layout rl = layout_of(recvcount, recvtype), sl = in_place ? rl : layout_of(sendcount, sendtype);
  const size_t block = rl.bytes;
  c.op = op;
  c.bytes = block * static_cast<size_t>(team.size());
  c.elem_size = type_size(recvtype);
  c.device = device_of(rt, c, {in_place ? recvbuf : sendbuf, recvbuf});
  c.eligible = c.device >= 0 && rl.contiguous && sl.contiguous && sl.bytes == block && block > 0;
  return block;
}

}  // namespace

extern "C" {

// Test hook (tests/mpi/mpi_coll.c): how many collectives gpustripe served in this process.
long gpustripe_mpi_test_coll_served(void) { return g_served.load(); }

// Test hook (tests/mpi/mpi_coll_kill.c): die inside the next collective, after its entry exchange.
void gpustripe_mpi_test_coll_die_in_next(void) { test_die_in_next_collective(); }

int MPI_Alltoall(const void* sendbuf, int sendcount, MPI_Datatype sendtype, void* recvbuf, int recvcount,
                 MPI_Datatype recvtype, MPI_Comm comm) {
  const bool in_place = sendbuf == MPI_IN_PLACE;
  return collective(
      comm, "MPI_Alltoall",
      [&](Runtime& rt, CollTeam& team, CollCall& c) {
        const size_t block = exchange_call(rt, team, c, coll::CollOp::AllToAll, sendbuf, sendcount, sendtype, recvbuf,
                                           recvcount, recvtype);
        if (!c.eligible) return;
        const size_t total = c.bytes;
        c.send = sendbuf;
        if (in_place) {
          // Every block is read by one rank and overwritten by another: send from a copy.
          char* copy = team.temp(c.device, total);
          rt.mover().copy_now(copy, c.device, recvbuf, c.device, total);
          c.send = copy;
        }
        c.send_bytes = c.recv_bytes = total;
        c.recv = recvbuf;
        c.shape = shape_of("alltoall", {static_cast<long long>(block)});
        c.build = [block](coll::Program& p, const coll::Team& t, const std::vector<char*>& s,
                          const std::vector<char*>& r, coll::Scratch& sc, const coll::Choice& ch) {
          coll::build_alltoall(p, t, in(s), r, block, ch.exchange, sc);
        };
      },
      nullptr,
      [&](StagedBuffers* sb) {
        const int n = comm_size(comm);
        void* s = stage(sb, sendbuf, sendcount * n, sendtype, true, false);
        void* r = stage(sb, recvbuf, recvcount * n, recvtype, in_place, true);
        return PMPI_Alltoall(s, sendcount, sendtype, r, recvcount, recvtype, comm);
      });
}

int MPI_Allgather(const void* sendbuf, int sendcount, MPI_Datatype sendtype, void* recvbuf, int recvcount,
                  MPI_Datatype recvtype, MPI_Comm comm) {
  const bool in_place = sendbuf == MPI_IN_PLACE;
  return collective(
      comm, "MPI_Allgather",
      [&](Runtime& rt, CollTeam& team, CollCall& c) {
        const size_t block = exchange_call(rt, team, c, coll::CollOp::AllGather, sendbuf, sendcount, sendtype, recvbuf,
                                           recvcount, recvtype);
        if (!c.eligible) return;
        const size_t total = c.bytes;
        // In place: this rank's block already sits at its place in the receive buffer.
        c.send = in_place ? static_cast<const char*>(recvbuf) + team.rank() * block : sendbuf;
        c.send_bytes = block;
        c.recv = recvbuf;
        c.recv_bytes = total;
        c.shape = shape_of("allgather", {static_cast<long long>(block)});
        c.build = [block](coll::Program& p, const coll::Team& t, const std::vector<char*>& s,
                          const std::vector<char*>& r, coll::Scratch& sc, const coll::Choice& ch) {
          coll::build_allgather(p, t, in(s), r, block, ch.exchange, sc);
        };
      },
      nullptr,
      [&](StagedBuffers* sb) {
        const int n = comm_size(comm);
        void* s = stage(sb, sendbuf, sendcount, sendtype, true, false);
        void* r = stage(sb, recvbuf, recvcount * n, recvtype, in_place, true);
        return PMPI_Allgather(s, sendcount, sendtype, r, recvcount, recvtype, comm);
      });
}

int MPI_Reduce_scatter_block(const void* sendbuf, void* recvbuf, int recvcount, MPI_Datatype type, MPI_Op mop,
                             MPI_Comm comm) {
  const bool in_place = sendbuf == MPI_IN_PLACE;
  return collective(
      comm, "MPI_Reduce_scatter_block",
      [&](Runtime& rt, CollTeam& team, CollCall& c) {
        const int n = team.size();
        coll::DataType dt;
        coll::RedOp op;
        c.op = coll::CollOp::ReduceScatter;
        c.device = device_of(rt, c, {in_place ? recvbuf : sendbuf, recvbuf});
        c.eligible = c.device >= 0 && recvcount > 0 && reduce_type(type, &dt) && reduce_op(mop, &op);
        if (!c.eligible) return;
        const size_t count = static_cast<size_t>(recvcount), esz = coll::dtype_size(dt), block = count * esz;
        c.bytes = block * n;
        c.elem_size = esz;
        // In place the input is the receive buffer; the schedule leaves this rank's result
        // in its own block of it (the coll in-place form), moved to the front afterwards.
        c.send = in_place ? recvbuf : sendbuf;
        c.send_bytes = block * n;
        c.recv = in_place ? static_cast<char*>(recvbuf) + team.rank() * block : recvbuf;
        c.recv_bytes = block;
        c.shape = shape_of("reduce_scatter", {static_cast<long long>(count), n, dt, op});
        c.build = [count, n, dt, op](coll::Program& p, const coll::Team& t, const std::vector<char*>& s,
                                     const std::vector<char*>& r, coll::Scratch& sc, const coll::Choice& ch) {
          coll::Blocks b;
          for (int j = 0; j < n; ++j) {
            b.off.push_back(j * count);
            b.cnt.push_back(count);
          }
          coll::build_reduce_scatter(p, t, in(s), r, b, dt, op, ch.reduce, sc);
        };
      },
      [&](Runtime& rt, const CollCall& c) {
        // Every rank has finished reading this buffer (the call ended in a barrier).
        if (in_place && c.recv != recvbuf) rt.mover().copy_now(recvbuf, c.device, c.recv, c.device, c.recv_bytes);
      },
      [&](StagedBuffers* sb) {
        const int n = comm_size(comm);
        void* s = stage(sb, sendbuf, recvcount * n, type, true, false);
        void* r = stage(sb, recvbuf, in_place ? recvcount * n : recvcount, type, in_place, true);
        return PMPI_Reduce_scatter_block(s, r, recvcount, type, mop, comm);
      });
}

int MPI_Allreduce(const void* sendbuf, void* recvbuf, int count, MPI_Datatype type, MPI_Op mop, MPI_Comm comm) {
  const bool in_place = sendbuf == MPI_IN_PLACE;
  return collective(
      comm, "MPI_Allreduce",
      [&](Runtime& rt, CollTeam&, CollCall& c) {
        coll::DataType dt;
        coll::RedOp op;
        c.op = coll::CollOp::AllReduce;
        c.device = device_of(rt, c, {in_place ? recvbuf : sendbuf, recvbuf});
        c.eligible = c.device >= 0 && count > 0 && reduce_type(type, &dt) && reduce_op(mop, &op);
        if (!c.eligible) return;
        const size_t n = static_cast<size_t>(count), bytes = n * coll::dtype_size(dt);
        c.bytes = c.send_bytes = c.recv_bytes = bytes;
        c.elem_size = coll::dtype_size(dt);
        c.send = in_place ? recvbuf : sendbuf;
        c.recv = recvbuf;
        c.shape = shape_of("allreduce", {static_cast<long long>(n), dt, op});
        c.build = [n, dt, op](coll::Program& p, const coll::Team& t, const std::vector<char*>& s,
                              const std::vector<char*>& r, coll::Scratch& sc, const coll::Choice& ch) {
          // No socket groups across processes (coll_team.cpp): never "hier".
          coll::build_allreduce(p, t, ch.name, {}, in(s), r, n, dt, op, ch.reduce, sc);
        };
      },
      nullptr,
      [&](StagedBuffers* sb) {
        void* s = stage(sb, sendbuf, count, type, true, false);
        void* r = stage(sb, recvbuf, count, type, in_place, true);
        return PMPI_Allreduce(s, r, count, type, mop, comm);
      });
}

int MPI_Bcast(void* buffer, int count, MPI_Datatype type, int root, MPI_Comm comm) {
  return collective(
      comm, "MPI_Bcast",
      [&](Runtime& rt, CollTeam& team, CollCall& c) {
        Layout l = layout_of(count, type);
        c.op = coll::CollOp::Bcast;
        c.bytes = c.recv_bytes = l.bytes;
        c.elem_size = type_size(type);
        c.device = device_of(rt, c, {buffer});
        c.eligible = c.device >= 0 && l.contiguous && l.bytes > 0 && root >= 0 && root < team.size();
        if (!c.eligible) return;
        c.recv = buffer;
        const size_t bytes = l.bytes;
        c.shape = shape_of("bcast", {static_cast<long long>(bytes), root});
        c.build = [bytes, root](coll::Program& p, const coll::Team& t, const std::vector<char*>&,
                                const std::vector<char*>& r, coll::Scratch&, const coll::Choice& ch) {
          coll::build_bcast(p, t, r, bytes, root, ch.bcast);
        };
      },
      nullptr,
      [&](StagedBuffers* sb) {
        const bool is_root = sb && comm_rank(comm) == root;
        void* b = stage(sb, buffer, count, type, is_root, !is_root);
        return PMPI_Bcast(b, count, type, root, comm);
      });
}

int MPI_Reduce(const void* sendbuf, void* recvbuf, int count, MPI_Datatype type, MPI_Op mop, int root,
               MPI_Comm comm) {
  const bool in_place = sendbuf == MPI_IN_PLACE;
  return collective(
      comm, "MPI_Reduce",
      [&](Runtime& rt, CollTeam& team, CollCall& c) {
        coll::DataType dt;
        coll::RedOp op;
        const bool is_root = team.rank() == root;
        c.op = coll::CollOp::Reduce;
        // The receive buffer counts at the root only.
        c.device = is_root ? device_of(rt, c, {in_place ? recvbuf : sendbuf, recvbuf}) : device_of(rt, c, {sendbuf});
        c.eligible = c.device >= 0 && count > 0 && root >= 0 && root < team.size() && reduce_type(type, &dt) &&
                     reduce_op(mop, &op);
        if (!c.eligible) return;
        const size_t n = static_cast<size_t>(count), bytes = n * coll::dtype_size(dt);
        c.bytes = c.send_bytes = bytes;
        c.elem_size = coll::dtype_size(dt);
        c.send = in_place ? recvbuf : sendbuf;
        if (is_root) {
          c.recv = recvbuf;
          c.recv_bytes = bytes;
        }
        c.shape = shape_of("reduce", {static_cast<long long>(n), dt, op, root});
        c.build = [n, dt, op, root](coll::Program& p, const coll::Team& t, const std::vector<char*>& s,
                                    const std::vector<char*>& r, coll::Scratch& sc, const coll::Choice& ch) {
          coll::build_reduce(p, t, in(s), r[root], n, dt, op, root, ch.reduce, sc);
        };
      },
      nullptr,
      [&](StagedBuffers* sb) {
        const bool is_root = comm_rank(comm) == root;
        void* s = stage(sb, sendbuf, count, type, true, false);
        void* r = is_root ? stage(sb, recvbuf, count, type, in_place, true) : recvbuf;
        return PMPI_Reduce(s, r, count, type, mop, root, comm);
      });
}

}  // extern "C"
