#include "coll/comm.hpp"

#include <algorithm>
#include <tuple>
#include <utility>
#include <functional>

#include "coll/barrier.hpp"
#include "coll/executor.hpp"
#include "coll/program.hpp"
#include "coll/reduce.hpp"
#include "coll/scratch.hpp"
#include "common/config.hpp"
#include "common/error.hpp"
#include "common/log.hpp"
#include "core/context.hpp"
#include "model/planner.hpp"
#include "topology/topology.hpp"

namespace gpustripe::coll {
namespace {

constexpr size_t kChoicesMax = 256;   // schedule choices remembered

bool overlaps(const void* a, size_t an, const void* b, size_t bn) {
  auto x = reinterpret_cast<uintptr_t>(a), y = reinterpret_cast<uintptr_t>(b);
  return an && bn && x < y + bn && y < x + an;
}

// Bytes of `blocks` blocks of `count` elements of `dt`: ERR_INVALID_SIZE when that does not
// fit in 64 bits (a product that wrapped would pass the buffer checks with a small size while
// the schedule runs over `count` elements).
size_t count_bytes(const char* call, size_t count, DataType dt, size_t blocks = 1) {
  const size_t esz = dtype_size(dt);
  GS_REQUIRE(esz == 0 || count <= SIZE_MAX / esz / blocks, GPUSTRIPE_ERR_INVALID_SIZE,
             "%s: %zu elements of %zu bytes%s overflow a 64-bit byte count", call, count, esz,
             blocks > 1 ? " per rank" : "");
  return count * esz * blocks;
}

Team whole(const std::vector<int>& devices) {
  Team t;
  for (int r = 0; r < static_cast<int>(devices.size()); ++r) {
    t.rank.push_back(r);
    t.dev.push_back(devices[r]);
  }
  return t;
}

template <class P>
std::vector<const char*> cbytes(const std::vector<P>& v) {
  std::vector<const char*> out;
  for (auto p : v) out.push_back(static_cast<const char*>(p));
  return out;
}
std::vector<char*> bytes_of(const std::vector<void*>& v) {
  std::vector<char*> out;
  for (auto p : v) out.push_back(static_cast<char*>(p));
  return out;
}

}  // namespace

std::unique_ptr<Comm> Comm::create(Backend& backend, const Topology& topo, const std::vector<int>& devices,
                                   Planner* planner, const Tuning& tuning) {
  tuning.validate();
  GS_REQUIRE(!devices.empty(), GPUSTRIPE_ERR_INVALID_ARGUMENT, "a communicator needs at least one device");
  const int have = backend.device_count();
  for (size_t i = 0; i < devices.size(); ++i) {
    GS_REQUIRE(devices[i] >= 0 && devices[i] < have && devices[i] < topo.gpu_count(), GPUSTRIPE_ERR_INVALID_DEVICE,
               "communicator device %d (rank %zu): the %s backend has devices 0..%d", devices[i], i, backend.name(),
               std::min(have, topo.gpu_count()) - 1);
    for (size_t j = 0; j < i; ++j)
      GS_REQUIRE(devices[i] != devices[j], GPUSTRIPE_ERR_INVALID_DEVICE,
                 "device %d is listed twice (ranks %zu and %zu): one rank per GPU", devices[i], j, i);
  }
  return std::unique_ptr<Comm>(new Comm(backend, topo, devices, planner, tuning));
}

std::unique_ptr<Comm> Comm::create(Context& ctx, const std::vector<int>& devices, const Tuning& tuning) {
  return create(ctx.backend(), ctx.topology(), devices, ctx.planner(), tuning);
}

Comm::Comm(Backend& backend, const Topology& topo, std::vector<int> devices, Planner* planner,
           const Tuning& tuning)
    : backend_(backend), planner_(planner), devices_(std::move(devices)), tuning_(tuning) {
  res_ = describe_team(backend, topo, devices_);
  // Kernels of the reduction schedules read peers' memory directly where the pair maps it.
  for (int i : devices_)
    for (int j : devices_)
      if (i != j && backend.can_access_peer(i, j)) backend.enable_peer_access(i, j);
  reducer_ = make_reducer(backend_);
  scratch_ = std::make_unique<Scratch>(backend_, devices_);
  barrier_ = make_device_barrier(backend_, devices_, res_.all_peer);
  exec_ = std::make_unique<Executor>(backend_, *reducer_, devices_, barrier_.get());
  GS_LOG_DEBUG(Subsys::Coll, "communicator of %d ranks on %s: peer access %s, %s, %zu socket groups", size(),
               backend.name(), res_.all_peer ? "all pairs" : "not all pairs",
               res_.nvswitch ? "NVSwitch" : "no NVSwitch", res_.socket_groups.size());
}

Comm::~Comm() {
  try {
    synchronize();
  } catch (const Error& e) {
    GS_LOG_ERROR(Subsys::Coll, "communicator teardown: %s", e.what());
  }
  exec_.reset();
  barrier_.reset();
  scratch_.reset();
}

int Comm::device(int rank) const {
  GS_REQUIRE(rank >= 0 && rank < size(), GPUSTRIPE_ERR_INVALID_ARGUMENT, "rank %d: the communicator has ranks 0..%d",
             rank, size() - 1);
  return devices_[rank];
}

void Comm::check_buffer(int rank, const void* p, size_t bytes, const char* what) {
  GS_REQUIRE(p != nullptr, GPUSTRIPE_ERR_INVALID_POINTER, "%s of rank %d is NULL", what, rank);
  // Asked every call (one driver query per buffer): the allocation's id goes into the graph
  // key, as a captured graph must never be replayed on memory freed since and allocated
  // again at the same address (cuGraphLaunch crashed on such a graph: CollGpu.GraphReplays).
  PointerInfo info = backend_.pointer_info(p);
  GS_REQUIRE(info.kind == MemoryKind::Device && info.device == devices_[rank], GPUSTRIPE_ERR_INVALID_POINTER,
             "%s of rank %d (%p) is not memory of device %d", what, rank, p, devices_[rank]);
  if (info.base && info.size) {
    uintptr_t end = reinterpret_cast<uintptr_t>(p) + bytes;
    GS_REQUIRE(end <= info.base + info.size, GPUSTRIPE_ERR_INVALID_SIZE,
               "%s of rank %d: %zu bytes at %p run past its allocation (%zu bytes at %p)", what, rank, bytes, p,
               info.size, reinterpret_cast<void*>(info.base));
  }
  buffer_ids_.append(reinterpret_cast<const char*>(&info.buffer_id), sizeof info.buffer_id);
}

void Comm::check_count(const std::vector<const void*>& send, const std::vector<void*>& recv, const char* call) {
  buffer_ids_.clear();  // the first check of every call but bcast's
  GS_REQUIRE(static_cast<int>(send.size()) == size() && static_cast<int>(recv.size()) == size(),
             GPUSTRIPE_ERR_INVALID_ARGUMENT, "%s: %zu send and %zu receive buffers for %d ranks", call, send.size(),
             recv.size(), size());
}

void Comm::check_root(int root) {
  GS_REQUIRE(root >= 0 && root < size(), GPUSTRIPE_ERR_INVALID_ARGUMENT, "root %d: the communicator has ranks 0..%d",
             root, size() - 1);
}

double Comm::planned_host_share(size_t block) {
  if (!planner_ || size() < 2) return -1;
  auto it = planned_share_.find(block);
  if (it != planned_share_.end()) return it->second;
  // One round of the permutation: every rank sends one block to the next, all at once.
  std::vector<TransferSpec> round;
  for (int i = 0; i < size(); ++i) round.push_back({devices_[i], devices_[(i + 1) % size()], block});
  double share = -1;
  try {
    double host = 0;
    for (const Plan& p : planner_->plan_concurrent(round))
      for (const PathPlan& path : p.paths)
        if (path.kind == PathKind::HostStaged) host += static_cast<double>(path.bytes) / p.bytes;
    share = host / round.size();
  } catch (const Error& e) {
    GS_LOG_INFO(Subsys::Coll, "planner gave no plan for a round of %zu-byte blocks: %s", block, e.what());
  }
  planned_share_[block] = share;
  return share;
}

Choice Comm::pick(CollOp op, size_t bytes, DataType dt) {
  // The choice depends on the call's op, size and type and on GPUSTRIPE_COLL_ALGO (the
  // tuning is the communicator's own): a repeated call with the same of all reuses it
  // (choosing formats its reasons: microseconds). The trace setting shapes the program too.
  std::string key = forced_schedules() + '\n' + Executor::trace_path();
  fingerprint_ = key;
  auto put = [&](const auto& v) { key.append(reinterpret_cast<const char*>(&v), sizeof v); };
  put(op);
  put(bytes);
  put(dt);
  auto it = choices_.find(key);
  if (it == choices_.end()) {
    double planned = wants_host_share(op, res_, bytes, tuning_) ? planned_host_share(bytes / size()) : -1;
    Choice c = choose_schedule(op, res_, bytes, dtype_size(dt), tuning_, PlannedHost{planned, 0});
    std::string desc = std::string(coll_op_name(op)) + " " + format_size(bytes) + " " + c.describe();
    if (choices_.size() >= kChoicesMax) choices_.clear();
    it = choices_.emplace(key, std::make_pair(std::move(c), std::move(desc))).first;
  }
  // The exchanges' only waits between GPUs are their host path's, and pushed reduction inputs
  // wait for their pushes: those gain from flags in per-rank graphs (a chain broadcast lost with
  // them). Measured with 4 GPUs; 2 keep one graph as before.
  flags_preferred_ = ((op == CollOp::AllToAll || op == CollOp::AllGather) && size() > 2) || it->second.first.reduce.push ||
                     it->second.first.reduce.flags;
  last_ = it->second.second;
  GS_LOG_DEBUG(Subsys::Coll, "%s", last_.c_str());
  return it->second.first;
}

void Comm::run(const std::string& key, const std::function<void(Program&)>& build, const Streams& streams) {
  // The key names everything the program holds: the schedule, the sizes, every buffer and
  // the scratch memory's generation (a replaced scratch buffer invalidates old programs).
  std::string k = key;
  uint64_t gen = scratch_->generation();
  k.append(reinterpret_cast<const char*>(&gen), sizeof gen);
  // And the settings: GPUSTRIPE_COLL_TRACE shapes the program without showing in its
  // description, so a graph captured under other settings is never replayed.
  k += fingerprint_;
  const bool as_graph = tuning_.graphs;
  exec_->enqueue_keyed(
      k,
      [&] {
        Program prog(size());
        build(prog);
        GS_LOG_TRACE(Subsys::Coll, "schedule: %s", prog.summary().c_str());
        if (observer_) observer_(prog);
        return prog;
      },
      streams, as_graph, flags_preferred_);
  std::string note = exec_->take_note();
  if (!note.empty()) last_ += " [" + note + "]";  // shows in last_schedule and the benchmark rows
  if (streams.empty()) synchronize();
}

std::string Comm::key_of(const std::vector<const void*>& a, const std::vector<void*>& b, size_t count, DataType dt,
                         int redop, int root) {
  std::string k = last_ + std::exchange(buffer_ids_, std::string());
  auto put = [&](const auto& v) { k.append(reinterpret_cast<const char*>(&v), sizeof v); };
  put(count);
  put(dt);
  put(redop);
  put(root);
  for (const void* p : a) put(p);
  for (const void* p : b) put(p);
  return k;
}

std::string Comm::trace_text() const { return exec_->trace_text(); }

void Comm::synchronize() {
  exec_->synchronize();
  scratch_->release_retired();
}

void Comm::alltoall(const std::vector<const void*>& send, const std::vector<void*>& recv, size_t count, DataType dt,
                    const Streams& streams) {
  check_count(send, recv, "alltoall");
  const int n = size();
  const size_t block = count_bytes("alltoall", count, dt), total = count_bytes("alltoall", count, dt, n);
  bool in_place = false;
  for (int r = 0; r < n; ++r) {
    check_buffer(r, send[r], total, "alltoall send buffer");
    check_buffer(r, recv[r], total, "alltoall receive buffer");
    GS_REQUIRE(send[r] == recv[r] || !overlaps(send[r], total, recv[r], total), GPUSTRIPE_ERR_INVALID_ARGUMENT,
               "alltoall: rank %d's send and receive buffers overlap without being the same (in place)", r);
    in_place = in_place || send[r] == recv[r];
  }
  if (count == 0) return;
  Choice c = pick(CollOp::AllToAll, total, dt);
  run(key_of(send, recv, count, dt, 0, 0), [&](Program& prog) {
    std::vector<const char*> src = cbytes(send);
    if (in_place) {
      // Every block is both read and overwritten: exchange from a copy of the input.
      for (int r = 0; r < n; ++r) {
        if (send[r] != recv[r]) continue;
        char* copy = scratch_->device(r, total);
        prog.copy(r, kLaneLocal, copy, devices_[r], send[r], devices_[r], total);
        src[r] = copy;
      }
      prog.barrier();
    }
    build_alltoall(prog, whole(devices_), src, bytes_of(recv), block, c.exchange, *scratch_);
  }, streams);
}

void Comm::allgather(const std::vector<const void*>& send, const std::vector<void*>& recv, size_t count, DataType dt,
                     const Streams& streams) {
  check_count(send, recv, "allgather");
  const int n = size();
  const size_t block = count_bytes("allgather", count, dt), total = count_bytes("allgather", count, dt, n);
  for (int r = 0; r < n; ++r) {
    check_buffer(r, send[r], block, "allgather send buffer");
    check_buffer(r, recv[r], total, "allgather receive buffer");
    const void* own = static_cast<const char*>(recv[r]) + r * block;
    GS_REQUIRE(send[r] == own || !overlaps(send[r], block, recv[r], total), GPUSTRIPE_ERR_INVALID_ARGUMENT,
               "allgather: rank %d's send buffer overlaps its receive buffer but is not block %d of it (in place)", r,
               r);
  }
  if (count == 0) return;
  Choice c = pick(CollOp::AllGather, total, dt);
  run(key_of(send, recv, count, dt, 0, 0), [&](Program& prog) {
    build_allgather(prog, whole(devices_), cbytes(send), bytes_of(recv), block, c.exchange, *scratch_);
  }, streams);
}

void Comm::reduce_scatter(const std::vector<const void*>& send, const std::vector<void*>& recv, size_t count,
                          DataType dt, RedOp op, const Streams& streams) {
  check_count(send, recv, "reduce_scatter");
  check_reduction(dt, op);
  const int n = size();
  const size_t block = count_bytes("reduce_scatter", count, dt),
               total = count_bytes("reduce_scatter", count, dt, n);
  for (int r = 0; r < n; ++r) {
    check_buffer(r, send[r], total, "reduce_scatter send buffer");
    check_buffer(r, recv[r], block, "reduce_scatter receive buffer");
    const void* own = static_cast<const char*>(send[r]) + r * block;
    GS_REQUIRE(recv[r] == own || !overlaps(send[r], total, recv[r], block), GPUSTRIPE_ERR_INVALID_ARGUMENT,
               "reduce_scatter: rank %d's receive buffer overlaps its send buffer but is not block %d of it", r, r);
  }
  if (count == 0) return;
  Choice c = pick(CollOp::ReduceScatter, total, dt);
  run(key_of(send, recv, count, dt, op, 0), [&](Program& prog) {
    build_reduce_scatter(prog, whole(devices_), cbytes(send), bytes_of(recv), equal_blocks(count, n), dt, op, c.reduce, *scratch_);
  }, streams);
}

void Comm::allreduce(const std::vector<const void*>& send, const std::vector<void*>& recv, size_t count, DataType dt,
                     RedOp op, const Streams& streams) {
  check_count(send, recv, "allreduce");
  check_reduction(dt, op);
  const int n = size();
  const size_t bytes = count_bytes("allreduce", count, dt);
  for (int r = 0; r < n; ++r) {
    check_buffer(r, send[r], bytes, "allreduce send buffer");
    check_buffer(r, recv[r], bytes, "allreduce receive buffer");
    GS_REQUIRE(send[r] == recv[r] || !overlaps(send[r], bytes, recv[r], bytes), GPUSTRIPE_ERR_INVALID_ARGUMENT,
               "allreduce: rank %d's send and receive buffers overlap without being the same (in place)", r);
  }
  if (count == 0) return;
  Choice c = pick(CollOp::AllReduce, bytes, dt);
  run(key_of(send, recv, count, dt, op, 0), [&](Program& prog) {
    build_allreduce(prog, whole(devices_), c.name, res_.socket_groups, cbytes(send), bytes_of(recv), count, dt, op,
                    c.reduce, *scratch_);
  }, streams);
}

void Comm::bcast(const std::vector<void*>& bufs, size_t count, DataType dt, int root, const Streams& streams) {
  buffer_ids_.clear();
  const int n = size();
  GS_REQUIRE(static_cast<int>(bufs.size()) == n, GPUSTRIPE_ERR_INVALID_ARGUMENT, "bcast: %zu buffers for %d ranks",
             bufs.size(), n);
  check_root(root);
  const size_t bytes = count_bytes("bcast", count, dt);
  for (int r = 0; r < n; ++r) check_buffer(r, bufs[r], bytes, "bcast buffer");
  if (count == 0) return;
  Choice c = pick(CollOp::Bcast, bytes, dt);
  run(key_of({}, bufs, count, dt, 0, root), [&](Program& prog) {
    build_bcast(prog, whole(devices_), bytes_of(bufs), bytes, root, c.bcast, scratch_.get());
  }, streams);
}

void Comm::reduce(const std::vector<const void*>& send, const std::vector<void*>& recv, size_t count, DataType dt,
                  RedOp op, int root, const Streams& streams) {
  check_count(send, recv, "reduce");
  check_reduction(dt, op);
  check_root(root);
  const int n = size();
  const size_t bytes = count_bytes("reduce", count, dt);
  for (int r = 0; r < n; ++r) check_buffer(r, send[r], bytes, "reduce send buffer");
  check_buffer(root, recv[root], bytes, "reduce receive buffer of the root");
  GS_REQUIRE(send[root] == recv[root] || !overlaps(send[root], bytes, recv[root], bytes),
             GPUSTRIPE_ERR_INVALID_ARGUMENT,
             "reduce: the root's send and receive buffers overlap without being the same (in place)");
  if (count == 0) return;
  Choice c = pick(CollOp::Reduce, bytes, dt);
  run(key_of(send, {recv[root]}, count, dt, op, root), [&](Program& prog) {
    build_reduce(prog, whole(devices_), cbytes(send), static_cast<char*>(recv[root]), count, dt, op, root,
                 c.reduce, *scratch_);
  }, streams);
}

}  // namespace gpustripe::coll
