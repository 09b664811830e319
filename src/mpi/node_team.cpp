#include "mpi/node_team.hpp"

#include <string>

#include "mpi/coll_calls.hpp"
#include "common/error.hpp"
#include "common/log.hpp"

namespace gpustripe::mpi {
namespace {

bool disjoint(const void* a, size_t an, const void* b, size_t bn) {
  const char* x = static_cast<const char*>(a);
  const char* y = static_cast<const char*>(b);
  return x + an <= y || y + bn <= x;
}

bool reducible(coll::DataType dt, coll::RedOp op) {
  try {
    coll::check_dtype(dt);
    coll::check_redop(op);
    return true;
  } catch (const Error&) {
    return false;
  }
}

}  // namespace

NodeTeam::NodeTeam(std::unique_ptr<ipc::Bootstrap> boot) {
  ipc::Bootstrap& b = *boot;
  ctx_ = std::make_unique<Context>();
  ch_ = ipc::join_channel(
      b.rank(), b.size(), [&b](char* name) { b.bcast(name, 128, 0); }, [&b] { b.barrier(); });
  ep_ = std::make_unique<p2p::Endpoint>(*ch_, &ctx_->backend(), p2p::engine_copy(ctx_->engine(), ch_.get()),
                                         p2p::engine_plain(ctx_->engine()));
  std::vector<int> channel_rank(static_cast<size_t>(b.size()));
  for (int r = 0; r < b.size(); ++r) channel_rank[r] = r;  // the channel was joined in bootstrap order
  team_ = std::make_unique<CollTeam>(*ctx_, *ep_, std::move(boot), std::move(channel_rank));
  marks_ = std::make_unique<CallMarks>(ctx_->backend());
  GS_LOG_INFO(Subsys::Mpi, "node team: rank %d of %d, %s backend", team_->rank(), team_->size(), ctx_->backend_name());
}

NodeTeam::~NodeTeam() {
  team_.reset();  // settles the stream-ordered calls first
  marks_.reset();
  for (auto& [dev, s] : streams_) {
    try {
      ctx_->backend().synchronize_stream(s);
      ctx_->backend().destroy_stream(s);
    } catch (const Error& e) {
      GS_LOG_WARN(Subsys::Mpi, "node team: closing its stream on GPU %d: %s", dev, e.what());
    }
  }
  try {
    ep_->flush();
  } catch (const Error& e) {
    GS_LOG_WARN(Subsys::Mpi, "node team: closing: %s", e.what());
  }
  ep_.reset();
  ch_.reset();
  ctx_.reset();
}

StreamHandle NodeTeam::stream(int dev) {
  auto it = streams_.find(dev);
  if (it == streams_.end()) it = streams_.emplace(dev, ctx_->backend().create_stream(dev)).first;
  return it->second;
}

ipc::HandleCacheStats NodeTeam::mapping_stats() const {
  const ipc::HandleCache* cache = ep_->handle_cache();
  return cache ? cache->stats() : ipc::HandleCacheStats{};
}

int NodeTeam::device_of(CollCall& c, std::initializer_list<const void*> bufs) {
  return mpi::device_of(ep_->mover(), c, bufs);
}

bool NodeTeam::run(CollCall& c) { return team_->run(c); }

bool NodeTeam::allreduce(const void* send, void* recv, size_t count, coll::DataType dt, coll::RedOp op, StreamHandle stream) {
  CollCall c;
  c.entered = std::chrono::steady_clock::now();  // the "lookup" phase: the buffers' devices, the call's closure
  c.stream = stream;
  c.name = "allreduce";
  c.op = coll::CollOp::AllReduce;
  const bool ok_types = reducible(dt, op);
  const size_t bytes = ok_types ? count * coll::dtype_size(dt) : 0;
  c.device = ok_types ? device_of(c, {send, recv}) : -1;
  c.eligible = c.device >= 0 && count > 0 && (send == recv || disjoint(send, bytes, recv, bytes));
  if (c.eligible) allreduce_call(c, send, recv, count, dt, op);
  return run(c);
}

bool NodeTeam::reduce_scatter(const void* send, void* recv, size_t count, coll::DataType dt, coll::RedOp op, StreamHandle stream) {
  CollCall c;
  c.entered = std::chrono::steady_clock::now();  // the "lookup" phase: the buffers' devices, the call's closure
  c.stream = stream;
  c.name = "reduce_scatter";
  c.op = coll::CollOp::ReduceScatter;
  const int n = size();
  const bool ok_types = reducible(dt, op);
  const size_t block = ok_types ? count * coll::dtype_size(dt) : 0;
  const bool in_place = static_cast<const char*>(send) + rank() * block == recv;
  c.device = ok_types ? device_of(c, {send, recv}) : -1;
  c.eligible = c.device >= 0 && count > 0 && (in_place || disjoint(send, block * n, recv, block));
  if (c.eligible) reduce_scatter_call(c, n, send, recv, count, dt, op);
  return run(c);
}

bool NodeTeam::allgather(const void* send, void* recv, size_t block, StreamHandle stream) {
  CollCall c;
  c.entered = std::chrono::steady_clock::now();  // the "lookup" phase: the buffers' devices, the call's closure
  c.stream = stream;
  c.name = "allgather";
  c.op = coll::CollOp::AllGather;
  const size_t total = block * size();
  const bool in_place = static_cast<char*>(recv) + rank() * block == send;
  c.device = device_of(c, {send, recv});
  c.eligible = c.device >= 0 && block > 0 && (in_place || disjoint(send, block, recv, total));
  if (c.eligible) allgather_call(c, size(), send, recv, block);
  return run(c);
}

bool NodeTeam::alltoall(const void* send, void* recv, size_t block, StreamHandle stream) {
  CollCall c;
  c.entered = std::chrono::steady_clock::now();  // the "lookup" phase: the buffers' devices, the call's closure
  c.stream = stream;
  c.name = "alltoall";
  c.op = coll::CollOp::AllToAll;
  const size_t total = block * size();
  c.device = device_of(c, {send, recv});
  c.eligible = c.device >= 0 && block > 0 && disjoint(send, total, recv, total);
  if (c.eligible) alltoall_call(c, size(), send, recv, block);
  return run(c);
}

bool NodeTeam::bcast(void* buf, size_t bytes, int root, StreamHandle stream) {
  GS_REQUIRE(root >= 0 && root < size(), GPUSTRIPE_ERR_INVALID_ARGUMENT, "bcast: root %d of %d ranks", root, size());
  CollCall c;
  c.entered = std::chrono::steady_clock::now();  // the "lookup" phase: the buffers' devices, the call's closure
  c.stream = stream;
  c.name = "bcast";
  c.op = coll::CollOp::Bcast;
  c.device = device_of(c, {buf});
  c.eligible = c.device >= 0 && bytes > 0;
  if (c.eligible) bcast_call(c, buf, bytes, root);
  return run(c);
}

bool NodeTeam::reduce(const void* send, void* recv, size_t count, coll::DataType dt, coll::RedOp op, int root, StreamHandle stream) {
  GS_REQUIRE(root >= 0 && root < size(), GPUSTRIPE_ERR_INVALID_ARGUMENT, "reduce: root %d of %d ranks", root, size());
  CollCall c;
  c.entered = std::chrono::steady_clock::now();  // the "lookup" phase: the buffers' devices, the call's closure
  c.stream = stream;
  c.name = "reduce";
  c.op = coll::CollOp::Reduce;
  const bool is_root = rank() == root;
  const bool ok_types = reducible(dt, op);
  const size_t bytes = ok_types ? count * coll::dtype_size(dt) : 0;
  c.device = !ok_types ? -1 : is_root ? device_of(c, {send, recv}) : device_of(c, {send});
  c.eligible = c.device >= 0 && count > 0 && (!is_root || send == recv || disjoint(send, bytes, recv, bytes));
  if (c.eligible) reduce_call(c, is_root, send, recv, count, dt, op, root);
  return run(c);
}

}  // namespace gpustripe::mpi
