// Interposed collectives: MPI_Alltoall, MPI_Alltoallv, MPI_Alltoallw, MPI_Allgather, MPI_Allgatherv, MPI_Gather(v),
// MPI_Scatter(v), MPI_Reduce_scatter_block, MPI_Reduce_scatter, MPI_Allreduce, MPI_Bcast,
// MPI_Reduce, MPI_Scan, MPI_Exscan.
//
// On a communicator whose ranks all sit on this node, the ranks agree in every call
// (coll_team.hpp) whether each of them has device buffers of a contiguous type, and for
// reductions a type and an op the coll kernels have (every predefined pair the MPI accepts,
// reduce_type.hpp); then the coll layer's schedules run across the processes. In every
// other case the MPI runs the collective: host buffers untouched, device buffers
// staged through host memory (coll_staged.hpp) -- other nodes, non-contiguous types,
// user ops, mixed host/device ranks.
//   GPUSTRIPE_MPI_COLL  yes|no: collectives of node-local communicators on gpustripe
#include <algorithm>
#include <atomic>
#include <chrono>
#include <map>

#include "common/config.hpp"
#include "common/error.hpp"
#include "mpi/coll_calls.hpp"
#include "mpi/coll_staged.hpp"
#include "mpi/coll_team.hpp"
#include "mpi/datatype.hpp"
#include "mpi/interpose.hpp"
#include "mpi/mpi_bootstrap.hpp"
#include "mpi/reduce_type.hpp"

namespace gpustripe::mpi {
namespace {

const BoolSetting kColl{"GPUSTRIPE_MPI_COLL", "yes",
                        "MPI collectives (every interposed form, blocking, nonblocking and persistent: allreduce, "
                        "reduce, reduce_scatter(_block), scan, exscan, allgather(v), alltoall(v/w), bcast, gather(v), "
                        "scatter(v)) on device buffers of a node-local communicator run on gpustripe's collective "
                        "schedules; no: the MPI runs them (device buffers staged through host memory)"};

std::atomic<long> g_served{0};  // collectives run on gpustripe (a test hook reads it)
std::atomic<uint64_t> g_progress_passes{0};  // full passes of progress_collectives (a test hook reads it)

// Set while a nonblocking collective starts (interpose_icoll.cpp): the call is left
// pending on its team instead of run here.
thread_local NonblockingStart* g_starting = nullptr;
// Set while a nonblocking collective that some rank could not take on gpustripe's way runs
// the MPI's way: straight to the MPI, every rank has agreed on it already.
thread_local bool g_mpi_only = false;


struct CollState {
  std::map<uint64_t, std::unique_ptr<CollTeam>> teams;  // by the communicator's p2p id
};

// The team of a node-local communicator, made at its first collective; null otherwise.
CollTeam* team_for(Runtime& rt, MPI_Comm comm) {
  // Read once: a setting's read scans the environment, on every call's path.
  static const bool on = kColl.get();
  if (!on) return nullptr;
  std::shared_ptr<const CommInfo> ci = rt.comm(comm);
  if (!ci || ci->has_remote) return nullptr;
  if (!rt.coll_state) {
    rt.coll_state = std::make_shared<CollState>();
    set_collective_progress(&progress_collectives);
  }
  auto& teams = static_cast<CollState*>(rt.coll_state.get())->teams;
  std::unique_ptr<CollTeam>& t = teams[ci->ctx];
  if (!t) t = make_coll_team(rt, comm, *ci);
  return t.get();
}

}  // namespace

void release_collective_team(Runtime& rt, uint64_t ctx) {
  if (rt.coll_state) static_cast<CollState*>(rt.coll_state.get())->teams.erase(ctx);
}

void progress_collectives() {
  // A team's progress may run the MPI's way of a call, whose staging may progress again.
  static thread_local bool inside = false;
  Runtime* rt = Runtime::get();
  if (inside || !rt || !rt->coll_state) return;
  inside = true;
  g_progress_passes.fetch_add(1, std::memory_order_relaxed);
  struct Leave {
    ~Leave() { inside = false; }
  } leave;
  for (auto& [ctx, team] : static_cast<CollState*>(rt->coll_state.get())->teams)
    if (team && team->pending()) team->progress();
}

bool collective_team_check(MPI_Comm comm) {
  Runtime* rt = Runtime::get();
  if (!rt || !rt->coll_state) return false;
  std::shared_ptr<const CommInfo> ci = rt->comm(comm);
  if (!ci) return false;
  auto& teams = static_cast<CollState*>(rt->coll_state.get())->teams;
  auto it = teams.find(ci->ctx);
  if (it == teams.end() || !it->second) return false;
  it->second->check_peers();
  return true;
}

StartingCollective::StartingCollective(NonblockingStart& s) { g_starting = &s; }
StartingCollective::~StartingCollective() { g_starting = nullptr; }
MpiOnlyCollective::MpiOnlyCollective() { g_mpi_only = true; }
MpiOnlyCollective::~MpiOnlyCollective() { g_mpi_only = false; }

void collective_served() { ++g_served; }

uint64_t collective_progress_passes() { return g_progress_passes.load(); }

namespace {

// Through the runtime's pointer query, which counts them (gpustripe_mpi_test_pointer_queries).
int device_of(Runtime& rt, CollCall& c, std::initializer_list<const void*> bufs) {
  return device_of([&rt](const void* b) { return rt.locate(b); }, c, bufs);
}

// This rank's reduction as the kernels take it; false otherwise, and then, where its buffers
// are on a device and the MPI's way is slow rather than an error, a note (once) saying why.
bool kernel_reduction(const CollCall& c, MPI_Datatype t, MPI_Op o, ReduceType* r) {
  std::string why;
  if (reduce_type(t, o, r, &why)) return true;
  if (c.device >= 0 && !why.empty()) note_host_path(c.name, why);
  return false;
}

size_t type_size(MPI_Datatype t) {
  int s = 0;
  PMPI_Type_size(t, &s);
  return s > 0 ? static_cast<size_t>(s) : 1;
}

// One collective: the gpustripe way when every rank can (`prepare(Runtime&, CollTeam&,
// CollCall&)` fills this rank's side of the call, its `after` finishing it), else
// `mpi(StagedBuffers*)` over staged buffers. Templates, not std::functions: a blocking call's
// path allocates nothing for its closures.
template <class Prepare, class Mpi>
int collective(MPI_Comm comm, const char* name, Prepare&& prepare, Mpi&& mpi) {
  const auto entered = std::chrono::steady_clock::now();
  std::unique_lock<std::recursive_mutex> l(lock());
  Runtime* rt = g_mpi_only ? nullptr : Runtime::get();
  if (rt) {
    try {
      if (CollTeam* team = team_for(*rt, comm)) {
        // A call still pending on the team ends first: its buffers (the team's temporary one
        // among them) are in use until then.
        team->finish();
        CollCall call;
        call.name = name;
        call.entered = entered;
        // A nonblocking start has located some of the buffers already: not asked again.
        if (NonblockingStart* s = g_starting) call.located = std::move(s->located);
        prepare(*rt, *team, call);
        if (NonblockingStart* s = g_starting) {
          // Counted when its request completes (collective_served), after its own `after`.
          s->pending = team->start(std::move(call), std::move(s->mpi));
          return MPI_SUCCESS;
        }
        if (team->run(call)) {
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
  if (c.device >= 0 && !(rl.contiguous && sl.contiguous)) note_host_path(c.name, "a datatype with holes");
  return block;
}

// Blocks of a "v" collective at the rank that has their layout: bytes and byte offsets of
// counts[i] and displs[i] elements of `esz` bytes; *span is the bytes from the buffer's start
// past the last block. False when a count or displacement is negative.
bool v_blocks(int n, const int* counts, const int* displs, size_t esz, std::vector<size_t>* bytes,
              std::vector<size_t>* at, size_t* span) {
  bytes->assign(n, 0);
  at->assign(n, 0);
  *span = 0;
  for (int i = 0; i < n; ++i) {
    if (counts[i] < 0 || displs[i] < 0) return false;
    (*bytes)[i] = static_cast<size_t>(counts[i]) * esz;
    (*at)[i] = static_cast<size_t>(displs[i]) * esz;
    if ((*bytes)[i]) *span = std::max(*span, (*at)[i] + (*bytes)[i]);
  }
  return true;
}

// MPI_Gather(v) and MPI_Scatter(v), one the mirror of the other: every rank's one block
// (`one`: gather's send buffer, scatter's receive buffer; MPI_IN_PLACE at the root) and the
// root's buffer of every rank's block at its displacement (`many`: counts and displacements
// matter at the root only). Gather: the root's copy engines pull every block into place;
// scatter: they push every block out. The other ranks only take part in the entry exchange
// and wait for the root's GPU at the end.
int rooted_v(MPI_Comm comm, const char* name, bool gather, const void* one, int one_count, MPI_Datatype one_type,
             const void* many, const int* counts, const int* displs, MPI_Datatype many_type, int root,
             const std::function<int(StagedBuffers*)>& mpi) {
  const bool in_place = one == MPI_IN_PLACE;
  return collective(
      comm, name,
      [&](Runtime& rt, CollTeam& team, CollCall& c) {
        const int n = team.size(), me = team.rank();
        std::vector<size_t> bytes, at;
        size_t span = 0;
        c.op = coll::CollOp::AllGather;
        if (root < 0 || root >= n) return;
        if (me != root) {
          const Layout l = layout_of(one_count, one_type);
          c.device = device_of(rt, c, {one});
          c.eligible = c.device >= 0 && l.contiguous;
          c.bytes = l.bytes;
          (gather ? c.send_bytes : c.recv_bytes) = l.bytes;
          if (gather) c.send = one;
          else c.recv = const_cast<void*>(one);
        } else {
          const Layout el = layout_of(1, many_type);
          const bool blocks_ok = v_blocks(n, counts, displs, el.bytes, &bytes, &at, &span);
          const Layout l = in_place ? Layout{} : layout_of(one_count, one_type);
          c.device = in_place ? device_of(rt, c, {many}) : device_of(rt, c, {one, many});
          c.eligible = c.device >= 0 && blocks_ok && el.contiguous && span > 0 &&
                       (in_place || (l.contiguous && l.bytes == bytes[me]));
          c.bytes = span;
          const char* own = in_place ? static_cast<const char*>(many) + at[me] : static_cast<const char*>(one);
          if (gather) {
            c.send = own;
            c.send_bytes = blocks_ok ? bytes[me] : 0;
            c.recv = const_cast<void*>(many);
            c.recv_bytes = span;
          } else {
            c.send = many;
            c.send_bytes = span;
            if (!in_place) {
              c.recv = const_cast<void*>(one);
              c.recv_bytes = blocks_ok ? bytes[me] : 0;
            }
          }
        }
        if (c.device >= 0 && !c.eligible) note_host_path(name, "a datatype with holes or mismatched blocks");
        if (!c.eligible) return;
        c.shape = v_shape(gather ? "gatherv" : "scatterv", n, me, root, bytes, at);
        c.build = [gather, me, root, bytes, at](coll::Program& p, const coll::Team& t, const std::vector<char*>& s,
                                                const std::vector<char*>& r, coll::Scratch&, const coll::Choice& ch) {
          if (me != root) return;
          if (gather) coll::build_allgatherv_pull(p, t, me, in(s), r, bytes, at, ch.exchange);
          else coll::build_scatterv_push(p, t, me, in(s), r, bytes, at, ch.exchange);
        };
      },
      mpi);
}

// Blocks of MPI_Alltoallv/w at one side of a rank: bytes and byte offsets per peer, the span
// they cover; ok when the counts and displacements are valid and every type is contiguous.
struct VSide {
  std::vector<size_t> bytes, at;
  size_t span = 0;
  bool ok = true;
};

// Alltoallv's side: counts and displacements in elements of one type.
VSide v_side(int n, const int* counts, const int* displs, MPI_Datatype type) {
  VSide v;
  const Layout el = layout_of(1, type);
  v.ok = el.contiguous && v_blocks(n, counts, displs, el.bytes, &v.bytes, &v.at, &v.span);
  return v;
}

// Alltoallw's side: displacements in bytes, a type per peer.
VSide w_side(int n, const int* counts, const int* displs, const MPI_Datatype* types) {
  VSide v;
  v.bytes.assign(n, 0);
  v.at.assign(n, 0);
  for (int i = 0; i < n && v.ok; ++i) {
    if (counts[i] < 0 || displs[i] < 0) {
      v.ok = false;
      break;
    }
    const Layout l = layout_of(counts[i], types[i]);
    v.ok = l.contiguous;
    v.bytes[i] = l.bytes;
    v.at[i] = static_cast<size_t>(displs[i]);
    if (l.bytes) v.span = std::max(v.span, v.at[i] + v.bytes[i]);
  }
  return v;
}

// MPI_Alltoallv / MPI_Alltoallw on contiguous types: each rank's copy engines pull the blocks
// it receives into its own displacements, from where each sender's layout says: the senders'
// block offsets and sizes travel with the entry exchange (CollCall::send_at). In place the
// receive layout is the send layout, sent from a copy (every block is read by one rank and
// overwritten by another).
int alltoall_v(MPI_Comm comm, const char* name, const void* sendbuf, const std::function<VSide(int)>& send_side,
               void* recvbuf, const std::function<VSide(int)>& recv_side, size_t elem_size,
               const std::function<int(StagedBuffers*)>& mpi) {
  const bool in_place = sendbuf == MPI_IN_PLACE;
  return collective(
      comm, name,
      [&](Runtime& rt, CollTeam& team, CollCall& c) {
        const int n = team.size(), me = team.rank();
        const VSide r = recv_side(n), sd = in_place ? r : send_side(n);
        size_t total = 0;
        for (size_t b : r.bytes) total += b;
        c.op = coll::CollOp::AllToAll;
        c.bytes = total;
        c.elem_size = std::max<size_t>(1, elem_size);
        c.device = device_of(rt, c, {in_place ? recvbuf : sendbuf, recvbuf});
        c.eligible = c.device >= 0 && r.ok && sd.ok && static_cast<size_t>(n) <= CollCall::kMaxBlocks &&
                     (total > 0 || sd.span > 0);
        if (c.device >= 0 && !(r.ok && sd.ok)) note_host_path(name, "a datatype with holes or bad counts");
        if (!c.eligible) return;
        const void* from = sendbuf;
        if (in_place && r.span > 0) {
          char* copy = team.temp(c.device, r.span);
          rt.mover().copy_now(copy, c.device, recvbuf, c.device, r.span);
          from = copy;
        }
        alltoallv_call(c, n, me, from, sd.at, sd.bytes, sd.span, recvbuf, r.at, r.bytes, r.span);
      },
      mpi);
}

// MPI_Scan / MPI_Exscan: each rank pulls the earlier ranks' inputs and reduces them with its
// own (coll::build_scan_pull). Not in place: a rank's result would overwrite an input the
// later ranks still read.
int scan(MPI_Comm comm, const char* name, bool exclusive, const void* sendbuf, void* recvbuf, int count,
         MPI_Datatype type, MPI_Op mop, const std::function<int(StagedBuffers*)>& mpi) {
  return collective(
      comm, name,
      [&](Runtime& rt, CollTeam& team, CollCall& c) {
        ReduceType k;
        const int me = team.rank();
        c.op = coll::CollOp::AllReduce;
        c.device = sendbuf == MPI_IN_PLACE ? -1 : device_of(rt, c, {sendbuf, recvbuf});
        c.eligible = c.device >= 0 && count > 0 && kernel_reduction(c, type, mop, &k);
        if (!c.eligible) return;
        const coll::DataType dt = k.dt;
        const coll::RedOp op = k.op;
        const size_t n = static_cast<size_t>(count) * k.per_elem, bytes = n * coll::dtype_size(dt);
        c.bytes = c.send_bytes = c.recv_bytes = bytes;
        c.elem_size = coll::dtype_size(dt);
        c.send = sendbuf;
        c.recv = recvbuf;
        c.shape = shape_of(exclusive ? "exscan" : "scan", {static_cast<long long>(n), dt, op, me});
        c.build = [me, exclusive, n, dt, op](coll::Program& p, const coll::Team& t, const std::vector<char*>& s,
                                             const std::vector<char*>& r, coll::Scratch& sc, const coll::Choice&) {
          coll::build_scan_pull(p, t, me, exclusive, in(s), r, n, dt, op, sc);
        };
      },
      mpi);
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
        const void* from = sendbuf;
        if (in_place) {
          // Every block is read by one rank and overwritten by another: send from a copy.
          char* copy = team.temp(c.device, c.bytes);
          rt.mover().copy_now(copy, c.device, recvbuf, c.device, c.bytes);
          from = copy;
        }
        alltoall_call(c, team.size(), from, recvbuf, block);
      },
      [&](StagedBuffers* sb) {
        const int n = comm_size(comm);
        void* s = stage(sb, sendbuf, sendcount * n, sendtype, true, false);
        void* r = stage(sb, recvbuf, recvcount * n, recvtype, in_place, true);
        return PMPI_Alltoall(s, sendcount, sendtype, r, recvcount, recvtype, comm);
      });
}

int MPI_Alltoallv(const void* sendbuf, const int* sendcounts, const int* sdispls, MPI_Datatype sendtype,
                  void* recvbuf, const int* recvcounts, const int* rdispls, MPI_Datatype recvtype, MPI_Comm comm) {
  return alltoall_v(
      comm, "MPI_Alltoallv", sendbuf, [&](int n) { return v_side(n, sendcounts, sdispls, sendtype); }, recvbuf,
      [&](int n) { return v_side(n, recvcounts, rdispls, recvtype); }, type_size(recvtype),
      [&](StagedBuffers* sb) {
        const int n = comm_size(comm);
        void* s = sendbuf == MPI_IN_PLACE ? const_cast<void*>(sendbuf)
                                          : stage(sb, sendbuf, span_of(sendcounts, sdispls, n), sendtype, true, false);
        void* r = stage(sb, recvbuf, span_of(recvcounts, rdispls, n), recvtype, true, true);
        return PMPI_Alltoallv(s, sendcounts, sdispls, sendtype, r, recvcounts, rdispls, recvtype, comm);
      });
}

int MPI_Alltoallw(const void* sendbuf, const int* sendcounts, const int* sdispls, const MPI_Datatype* sendtypes,
                  void* recvbuf, const int* recvcounts, const int* rdispls, const MPI_Datatype* recvtypes,
                  MPI_Comm comm) {
  return alltoall_v(
      comm, "MPI_Alltoallw", sendbuf, [&](int n) { return w_side(n, sendcounts, sdispls, sendtypes); }, recvbuf,
      [&](int n) { return w_side(n, recvcounts, rdispls, recvtypes); }, 1,
      [&](StagedBuffers* sb) {
        // Displacements in bytes: the staged span is the bytes of the farthest block.
        const int n = comm_size(comm);
        auto span = [n](const int* counts, const int* displs, const MPI_Datatype* types) {
          int end = 0;
          for (int i = 0; i < n; ++i) {
            const Layout l = layout_of(counts[i], types[i]);
            if (counts[i] > 0) end = std::max<int>(end, displs[i] + static_cast<int>(l.span_lb + l.span_bytes));
          }
          return end;
        };
        void* s = sendbuf == MPI_IN_PLACE ? const_cast<void*>(sendbuf)
                                          : stage(sb, sendbuf, span(sendcounts, sdispls, sendtypes), MPI_BYTE, true,
                                                  false);
        void* r = stage(sb, recvbuf, span(recvcounts, rdispls, recvtypes), MPI_BYTE, true, true);
        return PMPI_Alltoallw(s, sendcounts, sdispls, sendtypes, r, recvcounts, rdispls, recvtypes, comm);
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
        // In place: this rank's block already sits at its place in the receive buffer.
        allgather_call(c, team.size(), in_place ? static_cast<const char*>(recvbuf) + team.rank() * block : sendbuf,
                       recvbuf, block);
      },
      [&](StagedBuffers* sb) {
        const int n = comm_size(comm);
        void* s = stage(sb, sendbuf, sendcount, sendtype, true, false);
        void* r = stage(sb, recvbuf, recvcount * n, recvtype, in_place, true);
        return PMPI_Allgather(s, sendcount, sendtype, r, recvcount, recvtype, comm);
      });
}

int MPI_Allgatherv(const void* sendbuf, int sendcount, MPI_Datatype sendtype, void* recvbuf, const int* recvcounts,
                   const int* displs, MPI_Datatype recvtype, MPI_Comm comm) {
  const bool in_place = sendbuf == MPI_IN_PLACE;
  return collective(
      comm, "MPI_Allgatherv",
      [&](Runtime& rt, CollTeam& team, CollCall& c) {
        const int n = team.size(), me = team.rank();
        const Layout rl = layout_of(1, recvtype);
        const size_t esz = rl.bytes;
        std::vector<size_t> bytes, at;
        size_t span = 0, total = 0;
        const bool counts_ok = v_blocks(n, recvcounts, displs, esz, &bytes, &at, &span);
        for (size_t b : bytes) total += b;
        const Layout sl = in_place ? layout_of(recvcounts[me], recvtype) : layout_of(sendcount, sendtype);
        c.op = coll::CollOp::AllGather;
        c.bytes = total;
        c.elem_size = std::max<size_t>(1, esz);
        c.device = device_of(rt, c, {in_place ? recvbuf : sendbuf, recvbuf});
        c.eligible = c.device >= 0 && counts_ok && rl.contiguous && sl.contiguous && sl.bytes == bytes[me] &&
                     total > 0;
        if (c.device >= 0 && !(rl.contiguous && sl.contiguous)) note_host_path(c.name, "a datatype with holes");
        if (!c.eligible) return;
        c.send = in_place ? static_cast<const char*>(recvbuf) + at[me] : sendbuf;
        c.send_bytes = bytes[me];
        c.recv = recvbuf;
        c.recv_bytes = span;
        c.shape = v_shape("allgatherv", n, me, 0, bytes, at);
        c.build = [me, bytes, at](coll::Program& p, const coll::Team& t, const std::vector<char*>& s,
                                  const std::vector<char*>& r, coll::Scratch&, const coll::Choice& ch) {
          coll::build_allgatherv_pull(p, t, me, in(s), r, bytes, at, ch.exchange);
        };
      },
      [&](StagedBuffers* sb) {
        void* s = stage(sb, sendbuf, sendcount, sendtype, true, false);
        void* r = stage(sb, recvbuf, span_of(recvcounts, displs, comm_size(comm)), recvtype, true, true);
        return PMPI_Allgatherv(s, sendcount, sendtype, r, recvcounts, displs, recvtype, comm);
      });
}

int MPI_Gather(const void* sendbuf, int sendcount, MPI_Datatype sendtype, void* recvbuf, int recvcount,
               MPI_Datatype recvtype, int root, MPI_Comm comm) {
  std::vector<int> counts, displs;
  if (comm_rank(comm) == root) {
    const int n = comm_size(comm);
    counts.assign(n, recvcount);
    for (int i = 0; i < n; ++i) displs.push_back(i * recvcount);
  }
  return rooted_v(comm, "MPI_Gather", true, sendbuf, sendcount, sendtype, recvbuf, counts.data(), displs.data(),
                  recvtype, root, [&](StagedBuffers* sb) {
                    const bool is_root = comm_rank(comm) == root;
                    void* s = stage(sb, sendbuf, sendcount, sendtype, true, false);
                    void* r = is_root ? stage(sb, recvbuf, recvcount * comm_size(comm), recvtype,
                                              sendbuf == MPI_IN_PLACE, true)
                                      : recvbuf;
                    return PMPI_Gather(s, sendcount, sendtype, r, recvcount, recvtype, root, comm);
                  });
}

int MPI_Gatherv(const void* sendbuf, int sendcount, MPI_Datatype sendtype, void* recvbuf, const int* recvcounts,
                const int* displs, MPI_Datatype recvtype, int root, MPI_Comm comm) {
  return rooted_v(comm, "MPI_Gatherv", true, sendbuf, sendcount, sendtype, recvbuf, recvcounts, displs, recvtype,
                  root, [&](StagedBuffers* sb) {
                    const bool is_root = comm_rank(comm) == root;
                    void* s = stage(sb, sendbuf, sendcount, sendtype, true, false);
                    void* r = is_root ? stage(sb, recvbuf, span_of(recvcounts, displs, comm_size(comm)), recvtype,
                                              true, true)
                                      : recvbuf;
                    return PMPI_Gatherv(s, sendcount, sendtype, r, recvcounts, displs, recvtype, root, comm);
                  });
}

int MPI_Scatter(const void* sendbuf, int sendcount, MPI_Datatype sendtype, void* recvbuf, int recvcount,
                MPI_Datatype recvtype, int root, MPI_Comm comm) {
  std::vector<int> counts, displs;
  if (comm_rank(comm) == root) {
    const int n = comm_size(comm);
    counts.assign(n, sendcount);
    for (int i = 0; i < n; ++i) displs.push_back(i * sendcount);
  }
  return rooted_v(comm, "MPI_Scatter", false, recvbuf, recvcount, recvtype, sendbuf, counts.data(), displs.data(),
                   sendtype, root, [&](StagedBuffers* sb) {
                     const bool is_root = comm_rank(comm) == root;
                     void* s = is_root ? stage(sb, sendbuf, sendcount * comm_size(comm), sendtype, true, false)
                                       : const_cast<void*>(sendbuf);
                     void* r = stage(sb, recvbuf, recvcount, recvtype, false, true);
                     return PMPI_Scatter(s, sendcount, sendtype, r, recvcount, recvtype, root, comm);
                   });
}

int MPI_Scatterv(const void* sendbuf, const int* sendcounts, const int* displs, MPI_Datatype sendtype, void* recvbuf,
                 int recvcount, MPI_Datatype recvtype, int root, MPI_Comm comm) {
  return rooted_v(comm, "MPI_Scatterv", false, recvbuf, recvcount, recvtype, sendbuf, sendcounts, displs, sendtype,
                   root, [&](StagedBuffers* sb) {
                     const bool is_root = comm_rank(comm) == root;
                     void* s = is_root ? stage(sb, sendbuf, span_of(sendcounts, displs, comm_size(comm)), sendtype,
                                               true, false)
                                       : const_cast<void*>(sendbuf);
                     void* r = stage(sb, recvbuf, recvcount, recvtype, false, true);
                     return PMPI_Scatterv(s, sendcounts, displs, sendtype, r, recvcount, recvtype, root, comm);
                   });
}

int MPI_Scan(const void* sendbuf, void* recvbuf, int count, MPI_Datatype type, MPI_Op op, MPI_Comm comm) {
  return scan(comm, "MPI_Scan", false, sendbuf, recvbuf, count, type, op, [&](StagedBuffers* sb) {
    void* s = stage(sb, sendbuf, count, type, true, false);
    void* r = stage(sb, recvbuf, count, type, sendbuf == MPI_IN_PLACE, true);
    return PMPI_Scan(s, r, count, type, op, comm);
  });
}

int MPI_Exscan(const void* sendbuf, void* recvbuf, int count, MPI_Datatype type, MPI_Op op, MPI_Comm comm) {
  return scan(comm, "MPI_Exscan", true, sendbuf, recvbuf, count, type, op, [&](StagedBuffers* sb) {
    void* s = stage(sb, sendbuf, count, type, true, false);
    // Rank 0's receive buffer is left undefined by the MPI: copy it in so it comes back unchanged.
    void* r = stage(sb, recvbuf, count, type, true, true);
    return PMPI_Exscan(s, r, count, type, op, comm);
  });
}

int MPI_Reduce_scatter_block(const void* sendbuf, void* recvbuf, int recvcount, MPI_Datatype type, MPI_Op mop,
                             MPI_Comm comm) {
  const bool in_place = sendbuf == MPI_IN_PLACE;
  return collective(
      comm, "MPI_Reduce_scatter_block",
      [&](Runtime& rt, CollTeam& team, CollCall& c) {
        const int n = team.size();
        ReduceType k;
        c.op = coll::CollOp::ReduceScatter;
        c.device = device_of(rt, c, {in_place ? recvbuf : sendbuf, recvbuf});
        c.eligible = c.device >= 0 && recvcount > 0 && kernel_reduction(c, type, mop, &k);
        if (!c.eligible) return;
        const size_t count = static_cast<size_t>(recvcount) * k.per_elem, block = count * coll::dtype_size(k.dt);
        // In place the input is the receive buffer; the schedule leaves this rank's result
        // in its own block of it (the coll in-place form), moved to the front afterwards.
        reduce_scatter_call(c, n, in_place ? recvbuf : sendbuf,
                            in_place ? static_cast<char*>(recvbuf) + team.rank() * block : recvbuf, count, k.dt, k.op);
        if (in_place && c.recv != recvbuf) {
          // Every rank has finished reading this buffer (the call ended in a barrier).
          c.after = [mover = &rt.mover(), recvbuf, from = c.recv, dev = c.device, bytes = c.recv_bytes] {
            mover->copy_now(recvbuf, dev, from, dev, bytes);
          };
        }
      },
      [&](StagedBuffers* sb) {
        const int n = comm_size(comm);
        void* s = stage(sb, sendbuf, recvcount * n, type, true, false);
        void* r = stage(sb, recvbuf, in_place ? recvcount * n : recvcount, type, in_place, true);
        return PMPI_Reduce_scatter_block(s, r, recvcount, type, mop, comm);
      });
}

int MPI_Reduce_scatter(const void* sendbuf, void* recvbuf, const int* recvcounts, MPI_Datatype type, MPI_Op mop,
                       MPI_Comm comm) {
  const bool in_place = sendbuf == MPI_IN_PLACE;
  return collective(
      comm, "MPI_Reduce_scatter",
      [&](Runtime& rt, CollTeam& team, CollCall& c) {
        const int n = team.size();
        ReduceType k;
        c.op = coll::CollOp::ReduceScatter;
        c.device = device_of(rt, c, {in_place ? recvbuf : sendbuf, recvbuf});
        long long total = 0;
        bool counts_ok = true;
        for (int j = 0; j < n; ++j) {
          counts_ok = counts_ok && recvcounts[j] >= 0;
          total += recvcounts[j];
        }
        c.eligible = c.device >= 0 && counts_ok && total > 0 && kernel_reduction(c, type, mop, &k);
        if (!c.eligible) return;
        const coll::DataType dt = k.dt;
        const coll::RedOp op = k.op;
        const size_t esz = coll::dtype_size(dt);
        coll::Blocks b;
        std::string shape = shape_of("reduce_scatter_v", {n, dt, op});
        for (int j = 0, off = 0; j < n; off += recvcounts[j], ++j) {
          b.off.push_back(static_cast<size_t>(off) * k.per_elem);
          b.cnt.push_back(static_cast<size_t>(recvcounts[j]) * k.per_elem);
          shape.append(reinterpret_cast<const char*>(&recvcounts[j]), sizeof(int));
        }
        const size_t mine = b.cnt[team.rank()] * esz, all = static_cast<size_t>(total) * k.per_elem * esz;
        c.bytes = all;
        c.elem_size = esz;
        // In place the input is the receive buffer and this rank's result lands at its block's
        // offset in it (the coll in-place form), moved to the front afterwards.
        c.send = in_place ? recvbuf : sendbuf;
        c.send_bytes = all;
        c.recv = in_place ? static_cast<char*>(recvbuf) + b.off[team.rank()] * esz : recvbuf;
        c.recv_bytes = mine;
        c.shape = std::move(shape);
        c.build = [b, dt, op](coll::Program& p, const coll::Team& t, const std::vector<char*>& s,
                              const std::vector<char*>& r, coll::Scratch& sc, const coll::Choice& ch) {
          coll::build_reduce_scatter(p, t, in(s), r, b, dt, op, ch.reduce, sc);
        };
        if (in_place && c.recv != recvbuf && mine > 0) {
          // Every rank has finished reading this buffer (the call ended in a barrier). A result
          // overlapping the front moves through a temporary buffer.
          char* bounce = b.off[team.rank()] * esz < mine ? team.temp(c.device, mine) : nullptr;
          c.after = [mover = &rt.mover(), recvbuf, from = c.recv, dev = c.device, mine, bounce] {
            if (bounce) {
              mover->copy_now(bounce, dev, from, dev, mine);
              mover->copy_now(recvbuf, dev, bounce, dev, mine);
            } else {
              mover->copy_now(recvbuf, dev, from, dev, mine);
            }
          };
        }
      },
      [&](StagedBuffers* sb) {
        const int n = comm_size(comm);
        int total = 0;
        for (int j = 0; j < n; ++j) total += recvcounts[j];
        void* s = stage(sb, sendbuf, total, type, true, false);
        void* r = stage(sb, recvbuf, in_place ? total : recvcounts[comm_rank(comm)], type, in_place, true);
        return PMPI_Reduce_scatter(s, r, recvcounts, type, mop, comm);
      });
}

int MPI_Allreduce(const void* sendbuf, void* recvbuf, int count, MPI_Datatype type, MPI_Op mop, MPI_Comm comm) {
  const bool in_place = sendbuf == MPI_IN_PLACE;
  return collective(
      comm, "MPI_Allreduce",
      [&](Runtime& rt, CollTeam&, CollCall& c) {
        ReduceType k;
        c.op = coll::CollOp::AllReduce;
        c.device = device_of(rt, c, {in_place ? recvbuf : sendbuf, recvbuf});
        c.eligible = c.device >= 0 && count > 0 && kernel_reduction(c, type, mop, &k);
        if (!c.eligible) return;
        allreduce_call(c, in_place ? recvbuf : sendbuf, recvbuf, static_cast<size_t>(count) * k.per_elem, k.dt, k.op);
      },
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
        c.elem_size = type_size(type);
        c.device = device_of(rt, c, {buffer});
        c.eligible = c.device >= 0 && l.contiguous && l.bytes > 0 && root >= 0 && root < team.size();
        if (c.device >= 0 && !l.contiguous) note_host_path(c.name, "a datatype with holes");
        if (c.eligible) bcast_call(c, buffer, l.bytes, root);
      },
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
        ReduceType k;
        const bool is_root = team.rank() == root;
        c.op = coll::CollOp::Reduce;
        // The receive buffer counts at the root only.
        c.device = is_root ? device_of(rt, c, {in_place ? recvbuf : sendbuf, recvbuf}) : device_of(rt, c, {sendbuf});
        c.eligible = c.device >= 0 && count > 0 && root >= 0 && root < team.size() &&
                     kernel_reduction(c, type, mop, &k);
        if (!c.eligible) return;
        reduce_call(c, is_root, in_place ? recvbuf : sendbuf, recvbuf, static_cast<size_t>(count) * k.per_elem, k.dt,
                    k.op, root);
      },
      [&](StagedBuffers* sb) {
        const bool is_root = comm_rank(comm) == root;
        void* s = stage(sb, sendbuf, count, type, true, false);
        void* r = is_root ? stage(sb, recvbuf, count, type, in_place, true) : recvbuf;
        return PMPI_Reduce(s, r, count, type, mop, root, comm);
      });
}

}  // extern "C"
