#include "mpi/node_team.hpp"

#include <string>

#include "coll/schedules.hpp"
#include "common/error.hpp"
#include "common/log.hpp"

namespace gpustripe::mpi {
namespace {

std::vector<const char*> in(const std::vector<char*>& v) { return {v.begin(), v.end()}; }

// CollCall::shape: the collective and what its build closure captures.
std::string shape_of(const char* name, std::initializer_list<long long> captured) {
  std::string s(name);
  for (long long v : captured) s.append(reinterpret_cast<const char*>(&v), sizeof v);
  return s;
}

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
  ep_ = std::make_unique<p2p::Endpoint>(*ch_, &ctx_->backend(), p2p::engine_copy(ctx_->engine(), ch_.get()));
  std::vector<int> channel_rank(static_cast<size_t>(b.size()));
  for (int r = 0; r < b.size(); ++r) channel_rank[r] = r;  // the channel was joined in bootstrap order
  team_ = std::make_unique<CollTeam>(*ctx_, *ep_, std::move(boot), std::move(channel_rank));
  GS_LOG_INFO(Subsys::Mpi, "node team: rank %d of %d, %s backend", team_->rank(), team_->size(), ctx_->backend_name());
}

NodeTeam::~NodeTeam() {
  team_.reset();  // settles the stream-ordered calls first
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
  int dev = -1;
  for (const void* b : bufs) {
    p2p::MemLoc loc = ep_->mover().locate(b);
    if (!loc.device || (dev >= 0 && loc.dev != dev)) return -1;
    dev = loc.dev;
    c.located.push_back(loc);
  }
  return dev;
}

bool NodeTeam::run(CollCall& c) { return team_->run(c); }

bool NodeTeam::allreduce(const void* send, void* recv, size_t count, coll::DataType dt, coll::RedOp op, StreamHandle stream) {
  CollCall c;
  c.stream = stream;
  c.name = "allreduce";
  c.op = coll::CollOp::AllReduce;
  const bool ok_types = reducible(dt, op);
  const size_t esz = ok_types ? coll::dtype_size(dt) : 1, bytes = count * esz;
  c.device = ok_types ? device_of(c, {send, recv}) : -1;
  c.eligible = c.device >= 0 && count > 0 && (send == recv || disjoint(send, bytes, recv, bytes));
  if (c.eligible) {
    c.bytes = c.send_bytes = c.recv_bytes = bytes;
    c.elem_size = esz;
    c.send = send;
    c.recv = recv;
    c.shape = shape_of("allreduce", {static_cast<long long>(count), dt, op});
    c.build = [count, dt, op](coll::Program& p, const coll::Team& t, const std::vector<char*>& s,
                              const std::vector<char*>& r, coll::Scratch& sc, const coll::Choice& ch) {
      coll::build_allreduce(p, t, ch.name, {}, in(s), r, count, dt, op, ch.reduce, sc);
    };
  }
  return run(c);
}

bool NodeTeam::reduce_scatter(const void* send, void* recv, size_t count, coll::DataType dt, coll::RedOp op, StreamHandle stream) {
  CollCall c;
  c.stream = stream;
  c.name = "reduce_scatter";
  c.op = coll::CollOp::ReduceScatter;
  const int n = size();
  const bool ok_types = reducible(dt, op);
  const size_t esz = ok_types ? coll::dtype_size(dt) : 1, block = count * esz;
  const bool in_place = static_cast<const char*>(send) + rank() * block == recv;
  c.device = ok_types ? device_of(c, {send, recv}) : -1;
  c.eligible = c.device >= 0 && count > 0 && (in_place || disjoint(send, block * n, recv, block));
  if (c.eligible) {
    c.bytes = c.send_bytes = block * n;
    c.recv_bytes = block;
    c.elem_size = esz;
    c.send = send;
    c.recv = recv;
    c.shape = shape_of("reduce_scatter", {static_cast<long long>(count), n, dt, op});
    c.build = [count, n, dt, op](coll::Program& p, const coll::Team& t, const std::vector<char*>& s,
                                 const std::vector<char*>& r, coll::Scratch& sc, const coll::Choice& ch) {
      coll::build_reduce_scatter(p, t, in(s), r, coll::equal_blocks(count, n), dt, op, ch.reduce, sc);
    };
  }
  return run(c);
}

bool NodeTeam::allgather(const void* send, void* recv, size_t block, StreamHandle stream) {
  CollCall c;
  c.stream = stream;
  c.name = "allgather";
  c.op = coll::CollOp::AllGather;
  const size_t total = block * size();
  const bool in_place = static_cast<char*>(recv) + rank() * block == send;
  c.device = device_of(c, {send, recv});
  c.eligible = c.device >= 0 && block > 0 && (in_place || disjoint(send, block, recv, total));
  if (c.eligible) {
    c.bytes = c.recv_bytes = total;
    c.send_bytes = block;
    c.send = send;
    c.recv = recv;
    c.shape = shape_of("allgather", {static_cast<long long>(block)});
    c.build = [block](coll::Program& p, const coll::Team& t, const std::vector<char*>& s, const std::vector<char*>& r,
                      coll::Scratch& sc, const coll::Choice& ch) {
      coll::build_allgather(p, t, in(s), r, block, ch.exchange, sc);
    };
  }
  return run(c);
}

bool NodeTeam::alltoall(const void* send, void* recv, size_t block, StreamHandle stream) {
  CollCall c;
  c.stream = stream;
  c.name = "alltoall";
  c.op = coll::CollOp::AllToAll;
  const size_t total = block * size();
  c.device = device_of(c, {send, recv});
  c.eligible = c.device >= 0 && block > 0 && disjoint(send, total, recv, total);
  if (c.eligible) {
    c.bytes = c.send_bytes = c.recv_bytes = total;
    c.send = send;
    c.recv = recv;
    c.shape = shape_of("alltoall", {static_cast<long long>(block)});
    c.build = [block](coll::Program& p, const coll::Team& t, const std::vector<char*>& s, const std::vector<char*>& r,
                      coll::Scratch& sc, const coll::Choice& ch) {
      coll::build_alltoall(p, t, in(s), r, block, ch.exchange, sc);
    };
  }
  return run(c);
}

bool NodeTeam::bcast(void* buf, size_t bytes, int root, StreamHandle stream) {
  GS_REQUIRE(root >= 0 && root < size(), GPUSTRIPE_ERR_INVALID_ARGUMENT, "bcast: root %d of %d ranks", root, size());
  CollCall c;
  c.stream = stream;
  c.name = "bcast";
  c.op = coll::CollOp::Bcast;
  c.device = device_of(c, {buf});
  c.eligible = c.device >= 0 && bytes > 0;
  if (c.eligible) {
    c.bytes = c.recv_bytes = bytes;
    c.recv = buf;
    c.shape = shape_of("bcast", {static_cast<long long>(bytes), root});
    c.build = [bytes, root](coll::Program& p, const coll::Team& t, const std::vector<char*>&,
                            const std::vector<char*>& r, coll::Scratch&, const coll::Choice& ch) {
      coll::build_bcast(p, t, r, bytes, root, ch.bcast);
    };
  }
  return run(c);
}

bool NodeTeam::reduce(const void* send, void* recv, size_t count, coll::DataType dt, coll::RedOp op, int root, StreamHandle stream) {
  GS_REQUIRE(root >= 0 && root < size(), GPUSTRIPE_ERR_INVALID_ARGUMENT, "reduce: root %d of %d ranks", root, size());
  CollCall c;
  c.stream = stream;
  c.name = "reduce";
  c.op = coll::CollOp::Reduce;
  const bool is_root = rank() == root;
  const bool ok_types = reducible(dt, op);
  const size_t esz = ok_types ? coll::dtype_size(dt) : 1, bytes = count * esz;
  c.device = !ok_types ? -1 : is_root ? device_of(c, {send, recv}) : device_of(c, {send});
  c.eligible = c.device >= 0 && count > 0 && (!is_root || send == recv || disjoint(send, bytes, recv, bytes));
  if (c.eligible) {
    c.bytes = c.send_bytes = bytes;
    c.elem_size = esz;
    c.send = send;
    if (is_root) {
      c.recv = recv;
      c.recv_bytes = bytes;
    }
    c.shape = shape_of("reduce", {static_cast<long long>(count), dt, op, root});
    c.build = [count, dt, op, root](coll::Program& p, const coll::Team& t, const std::vector<char*>& s,
                                    const std::vector<char*>& r, coll::Scratch& sc, const coll::Choice& ch) {
      coll::build_reduce(p, t, in(s), r[root], count, dt, op, root, ch.reduce, sc);
    };
  }
  return run(c);
}

}  // namespace gpustripe::mpi
