// Collectives staged through slots a team mapped once (schedules.hpp's Staged): no rank needs
// another rank's buffers of the call, so the hosts need not meet to make it.
#include <algorithm>

#include "common/error.hpp"
#include "coll/schedules.hpp"

namespace gpustripe::coll {
namespace {

constexpr size_t kSlotAlign = 256;  // every slot starts where the kernels' widest accesses may

// The sources of a reduction, in rank order on every rank (the same additions in the same order:
// every rank's result is the same bits): this rank's own part, and what each peer stored for it.
std::vector<const void*> staged_sources(const Staged& s, const char* own) {
  std::vector<const void*> srcs;
  for (int r = 0; r < s.n; ++r) srcs.push_back(r == s.me ? own : s.slot(s.me, r));
  return srcs;
}

// A copy of this rank's: by its SMs where its buffers are memory its kernels reach (stores over
// NVLink into the peers' slots; a copy engine also moves local device memory at a fraction of what
// a kernel does), else by a copy engine.
int staged_copy(Program& p, const Staged& s, int lane, void* dst, int dst_dev, const void* src, int src_dev,
                size_t bytes, std::vector<int> deps = {}) {
  if (s.direct) return p.kernel_copy(s.me, lane, dst, dst_dev, src, src_dev, bytes, std::move(deps));
  return p.copy(s.me, lane, dst, dst_dev, src, src_dev, bytes, std::move(deps));
}

void check_staged(const Program& p, const Staged& s, size_t bytes) {
  GS_REQUIRE(p.nranks() == s.n && s.n > 1 && s.me >= 0 && s.me < s.n && static_cast<int>(s.areas.size()) == s.n &&
                 static_cast<int>(s.area_dev.size()) == s.n,
             GPUSTRIPE_ERR_INTERNAL, "a staged collective's program and slots do not fit its team");
  GS_REQUIRE(bytes <= s.unit, GPUSTRIPE_ERR_INTERNAL, "a staged collective of %zu bytes for each peer, in slots of %zu",
             bytes, s.unit);
  GS_REQUIRE(s.direct ? s.send_dev == s.dev && s.recv_dev == s.dev : s.temp != nullptr, GPUSTRIPE_ERR_INTERNAL,
             "a staged collective's buffers are not where it reads them");
}

// Stores len(q) bytes at src + at(q) into every peer q's slot for this rank (host memory: copy
// engines, a lane per peer); returns nothing to wait for: the Barrier op after them is the wait.
template <class At, class Len>
void push(Program& p, const Staged& s, const char* src, At at, Len len) {
  for (int d = 1; d < s.n; ++d) {
    const int q = (s.me + d) % s.n;
    staged_copy(p, s, s.direct ? kLaneLocal : kLanePeer0 + d - 1, s.slot(q, s.me), s.area_dev[q], src + at(q),
                s.send_dev, len(q));
  }
}

// Copies len(r) bytes from `from` into this rank's slot for every peer r to recv + at(r), after
// the Barrier op before them.
template <class At, class Len>
void copy_out(Program& p, const Staged& s, size_t from, char* recv, At at, Len len) {
  for (int d = 1; d < s.n; ++d) {
    const int r = (s.me + d) % s.n;
    staged_copy(p, s, s.direct ? kLaneLocal : kLanePeer0 + d - 1, recv + at(r), s.recv_dev, s.slot(s.me, r) + from,
                s.dev, len(r));
  }
}

// Reduces this rank's own part (`own`, of its send) with its slots into recv (through temp where
// the kernels may not write recv).
void reduce_slots(Program& p, const Staged& s, const char* own, char* recv, size_t count, DataType dt, RedOp op) {
  const size_t bytes = count * dtype_size(dt);
  const char* mine = own;
  if (!s.direct) {
    // Its own part where the kernel reads it: the temporary buffer, reduced in place.
    p.copy(s.me, kLaneLocal, s.temp, s.dev, own, s.send_dev, bytes);
    mine = s.temp;
  }
  p.barrier();
  // In place, the kernel reads each element of its own input before it writes it; the peers have
  // stored what they need of it before the barrier.
  char* out = s.direct ? recv : s.temp;
  const int red = p.reduce(s.me, kLaneLocal, out, staged_sources(s, mine), count, dt, op);
  if (!s.direct) p.copy(s.me, kLaneLocal, recv, s.recv_dev, out, s.dev, bytes, {red});
}

}  // namespace

size_t staged_unit(size_t area, int n) {
  if (n < 2) return 0;
  return area / static_cast<size_t>(n - 1) / kSlotAlign * kSlotAlign;
}

namespace {

// Two shots: peer q gets block q of the input (its slot's first half), each rank reduces its own
// block and stores the result into its own output and every peer's slot (second half), and each
// rank copies the peers' results out of its slots. Each input byte crosses NVLink once as in one
// shot, but a rank reduces its block only: the kernels' passes over local memory shrink by n.
void staged_allreduce_twoshot(Program& p, const Staged& s, const char* send, char* recv, const Blocks& b,
                              DataType dt, RedOp op) {
  const size_t esz = dtype_size(dt);
  const size_t half = staged_half(s);
  auto at = [&](int r) { return b.off[r] * esz; };
  auto len = [&](int r) { return b.cnt[r] * esz; };
  push(p, s, send, at, len);
  const char* own = send + at(s.me);
  const size_t mine = len(s.me);
  if (!s.direct) {
    p.copy(s.me, kLaneLocal, s.temp, s.dev, own, s.send_dev, mine);
    own = s.temp;
  }
  p.barrier();
  // The result goes to every peer's slot for this rank, past the half the peer reduces from.
  std::vector<void*> peers;
  for (int d = 1; d < s.n; ++d) {
    const int q = (s.me + d) % s.n;
    peers.push_back(s.slot(q, s.me) + half);
  }
  char* out = s.direct ? recv + at(s.me) : s.temp;
  const int red = p.reduce(s.me, kLaneLocal, out, staged_sources(s, own), b.cnt[s.me], dt, op, {}, peers);
  if (!s.direct) p.copy(s.me, kLaneLocal, recv + at(s.me), s.recv_dev, out, s.dev, mine, {red});
  p.barrier();
  copy_out(p, s, half, recv, at, len);
}

}  // namespace

size_t staged_half(const Staged& s) { return s.unit / 2 / kSlotAlign * kSlotAlign; }

Blocks staged_blocks(const Staged& s, size_t count, DataType dt) {
  const size_t esz = dtype_size(dt);
  // Every block starts where the kernels' widest accesses may (where the element size allows).
  return split_blocks(count, s.n, kSlotAlign % esz == 0 ? kSlotAlign / esz : 1);
}

bool staged_twoshot(const Staged& s, size_t count, DataType dt) {
  const size_t esz = dtype_size(dt);
  if (count * esz < s.twoshot_min) return false;
  // Every rank with a block (the ranks' programs then have the same Barrier ops: an empty
  // reduction adds none, and two barriers in a row are one).
  const Blocks b = staged_blocks(s, count, dt);
  return *std::min_element(b.cnt.begin(), b.cnt.end()) > 0 &&
         *std::max_element(b.cnt.begin(), b.cnt.end()) * esz <= staged_half(s);
}

void build_staged_allreduce(Program& p, const Staged& s, const char* send, char* recv, size_t count, DataType dt,
                            RedOp op) {
  const size_t bytes = count * dtype_size(dt);
  check_staged(p, s, bytes);
  if (staged_twoshot(s, count, dt)) return staged_allreduce_twoshot(p, s, send, recv, staged_blocks(s, count, dt), dt, op);
  push(p, s, send, [](int) { return size_t(0); }, [bytes](int) { return bytes; });
  reduce_slots(p, s, send, recv, count, dt, op);
}

void build_staged_reduce_scatter(Program& p, const Staged& s, const char* send, char* recv, size_t count, DataType dt,
                                 RedOp op) {
  const size_t block = count * dtype_size(dt);
  check_staged(p, s, block);
  push(p, s, send, [block](int q) { return q * block; }, [block](int) { return block; });
  reduce_slots(p, s, send + s.me * block, recv, count, dt, op);
}

void build_staged_allgather(Program& p, const Staged& s, const char* send, char* recv, size_t block) {
  check_staged(p, s, block);
  push(p, s, send, [](int) { return size_t(0); }, [block](int) { return block; });
  // Its own block beside the stores (in place: there already).
  char* own = recv + s.me * block;
  if (own != send) staged_copy(p, s, kLaneLocal, own, s.recv_dev, send, s.send_dev, block);
  p.barrier();
  copy_out(p, s, 0, recv, [block](int r) { return r * block; }, [block](int) { return block; });
}

void build_staged_alltoall(Program& p, const Staged& s, const char* send, char* recv, size_t block) {
  check_staged(p, s, block);
  auto at = [block](int q) { return q * block; };
  auto len = [block](int) { return block; };
  push(p, s, send, at, len);
  // Its own block beside the stores: straight into recv where the buffers are apart (s.direct);
  // else through temp, and into recv once the barrier says no store still reads send.
  char* own = recv + s.me * block;
  staged_copy(p, s, kLaneLocal, s.direct ? own : s.temp, s.direct ? s.recv_dev : s.dev, send + s.me * block,
              s.send_dev, block);
  p.barrier();
  if (!s.direct) p.copy(s.me, kLaneLocal, own, s.recv_dev, s.temp, s.dev, block);
  copy_out(p, s, 0, recv, at, len);
}

}  // namespace gpustripe::coll
