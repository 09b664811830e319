#include "mpi/coll_calls.hpp"

#include <algorithm>

#include "coll/schedules.hpp"

namespace gpustripe::mpi {

int device_of(const std::function<p2p::MemLoc(const void*)>& locate, CollCall& c,
              std::initializer_list<const void*> bufs) {
  int dev = -1;
  for (const void* b : bufs) {
    // A buffer inside an allocation this call has located already (in place: the same
    // pointer twice; send and receive buffers cut from one allocation) is that allocation:
    // no second pointer query (a driver call on CUDA) for what was just asked.
    const uintptr_t at = reinterpret_cast<uintptr_t>(b);
    auto same = std::find_if(c.located.begin(), c.located.end(), [at](const p2p::MemLoc& l) {
      return l.device && l.size != 0 && at >= l.base && at - l.base < l.size;
    });
    if (same != c.located.end()) {
      if (dev >= 0 && same->dev != dev) return -1;
      dev = same->dev;
      continue;
    }
    p2p::MemLoc loc = locate(b);
    if (!loc.device || (dev >= 0 && loc.dev != dev)) return -1;
    dev = loc.dev;
    c.located.push_back(loc);
  }
  return dev;
}

int device_of(p2p::Mover& mover, CollCall& c, std::initializer_list<const void*> bufs) {
  return device_of([&mover](const void* b) { return mover.locate(b); }, c, bufs);
}

std::string shape_of(const char* name, std::initializer_list<long long> captured) {
  std::string s(name);
  for (long long v : captured) s.append(reinterpret_cast<const char*>(&v), sizeof v);
  return s;
}

std::string v_shape(const char* name, int n, int me, int root, const std::vector<size_t>& bytes,
                    const std::vector<size_t>& at) {
  std::string shape = shape_of(name, {n, me, root});
  shape.append(reinterpret_cast<const char*>(bytes.data()), bytes.size() * sizeof(size_t));
  shape.append(reinterpret_cast<const char*>(at.data()), at.size() * sizeof(size_t));
  return shape;
}

std::vector<const char*> in(const std::vector<char*>& v) { return {v.begin(), v.end()}; }

void allreduce_call(CollCall& c, const void* send, void* recv, size_t count, coll::DataType dt, coll::RedOp op) {
  c.bytes = c.send_bytes = c.recv_bytes = count * coll::dtype_size(dt);
  c.elem_size = coll::dtype_size(dt);
  c.send = send;
  c.recv = recv;
  c.shape = shape_of("allreduce", {static_cast<long long>(count), dt, op});
  c.build = [count, dt, op](coll::Program& p, const coll::Team& t, const std::vector<char*>& s,
                            const std::vector<char*>& r, coll::Scratch& sc, const coll::Choice& ch) {
    // No socket groups across processes (coll_team.cpp): never "hier".
    coll::build_allreduce(p, t, ch.name, {}, in(s), r, count, dt, op, ch.reduce, sc);
  };
  c.staged_bytes = c.bytes;
  c.staged = [send, recv, count, dt, op](coll::Program& p, const coll::Staged& s) {
    coll::build_staged_allreduce(p, s, static_cast<const char*>(send), static_cast<char*>(recv), count, dt, op);
  };
}

void reduce_scatter_call(CollCall& c, int n, const void* send, void* recv, size_t count, coll::DataType dt,
                         coll::RedOp op) {
  const size_t block = count * coll::dtype_size(dt);
  c.bytes = c.send_bytes = block * n;
  c.recv_bytes = block;
  c.elem_size = coll::dtype_size(dt);
  c.send = send;
  c.recv = recv;
  c.shape = shape_of("reduce_scatter", {static_cast<long long>(count), n, dt, op});
  c.build = [count, n, dt, op](coll::Program& p, const coll::Team& t, const std::vector<char*>& s,
                               const std::vector<char*>& r, coll::Scratch& sc, const coll::Choice& ch) {
    coll::build_reduce_scatter(p, t, in(s), r, coll::equal_blocks(count, n), dt, op, ch.reduce, sc);
  };
  c.staged_bytes = block;
  c.staged = [send, recv, count, dt, op](coll::Program& p, const coll::Staged& s) {
    coll::build_staged_reduce_scatter(p, s, static_cast<const char*>(send), static_cast<char*>(recv), count, dt, op);
  };
}

void reduce_call(CollCall& c, bool is_root, const void* send, void* recv, size_t count, coll::DataType dt,
                 coll::RedOp op, int root) {
  c.bytes = c.send_bytes = count * coll::dtype_size(dt);
  c.elem_size = coll::dtype_size(dt);
  c.send = send;
  if (is_root) {
    c.recv = recv;
    c.recv_bytes = c.bytes;
  }
  c.shape = shape_of("reduce", {static_cast<long long>(count), dt, op, root});
  c.build = [count, dt, op, root](coll::Program& p, const coll::Team& t, const std::vector<char*>& s,
                                  const std::vector<char*>& r, coll::Scratch& sc, const coll::Choice& ch) {
    coll::build_reduce(p, t, in(s), r[root], count, dt, op, root, ch.reduce, sc);
  };
}

void allgather_call(CollCall& c, int n, const void* send, void* recv, size_t block) {
  c.bytes = c.recv_bytes = block * n;
  c.send_bytes = block;
  c.send = send;
  c.recv = recv;
  c.shape = shape_of("allgather", {static_cast<long long>(block)});
  c.build = [block](coll::Program& p, const coll::Team& t, const std::vector<char*>& s, const std::vector<char*>& r,
                    coll::Scratch& sc, const coll::Choice& ch) {
    coll::build_allgather(p, t, in(s), r, block, ch.exchange, sc);
  };
  c.staged_bytes = block;
  c.staged = [send, recv, block](coll::Program& p, const coll::Staged& s) {
    coll::build_staged_allgather(p, s, static_cast<const char*>(send), static_cast<char*>(recv), block);
  };
}

void alltoall_call(CollCall& c, int n, const void* send, void* recv, size_t block) {
  c.bytes = c.send_bytes = c.recv_bytes = block * n;
  c.send = send;
  c.recv = recv;
  c.shape = shape_of("alltoall", {static_cast<long long>(block)});
  c.build = [block](coll::Program& p, const coll::Team& t, const std::vector<char*>& s, const std::vector<char*>& r,
                    coll::Scratch& sc, const coll::Choice& ch) {
    coll::build_alltoall(p, t, in(s), r, block, ch.exchange, sc);
  };
  c.staged_bytes = block;
  c.staged = [send, recv, block](coll::Program& p, const coll::Staged& s) {
    coll::build_staged_alltoall(p, s, static_cast<const char*>(send), static_cast<char*>(recv), block);
  };
}

void alltoallv_call(CollCall& c, int n, int me, const void* send, const std::vector<size_t>& send_at,
                    const std::vector<size_t>& send_len, size_t send_span, void* recv,
                    const std::vector<size_t>& recv_at, const std::vector<size_t>& recv_len, size_t recv_span) {
  size_t total = 0;
  for (size_t b : recv_len) total += b;
  c.bytes = total;
  c.send = send;
  c.send_bytes = send_span;
  c.recv = recv;
  c.recv_bytes = recv_span;
  c.send_at.assign(send_at.begin(), send_at.end());
  c.send_len.assign(send_len.begin(), send_len.end());
  c.recv_len.assign(recv_len.begin(), recv_len.end());
  c.shape = v_shape("alltoallv", n, me, 0, recv_len, recv_at);
  c.build = [me, bytes = recv_len, at = recv_at](coll::Program& p, const coll::Team& t, const std::vector<char*>& s,
                                                 const std::vector<char*>& r, coll::Scratch&, const coll::Choice& ch) {
    coll::build_allgatherv_pull(p, t, me, in(s), r, bytes, at, ch.exchange);
  };
}

void bcast_call(CollCall& c, void* buf, size_t bytes, int root) {
  c.bytes = c.recv_bytes = bytes;
  c.recv = buf;
  c.shape = shape_of("bcast", {static_cast<long long>(bytes), root});
  c.build = [bytes, root](coll::Program& p, const coll::Team& t, const std::vector<char*>&,
                          const std::vector<char*>& r, coll::Scratch& sc, const coll::Choice& ch) {
    coll::build_bcast(p, t, r, bytes, root, ch.bcast, &sc);
  };
}

}  // namespace gpustripe::mpi
