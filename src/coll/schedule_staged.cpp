// Collectives staged through slots a team mapped once (schedules.hpp's Staged): no rank needs
// another rank's buffers of the call, so the hosts need not meet to make it.
#include <algorithm>
#include <cstdint>

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
  GS_REQUIRE(bytes <= s.unit, GPUSTRIPE_ERR_INTERNAL, "a staged collective of %zu bytes a peer for slots of %zu",
             bytes, s.unit);
  GS_REQUIRE(s.direct ? s.send_dev == s.dev && s.recv_dev == s.dev : s.temp != nullptr, GPUSTRIPE_ERR_INTERNAL,
             "a staged collective's buffers are not where it reads them");
}

// Stores `bytes` at src + at(q) into every peer q's slot for this rank (host memory: copy engines,
// a lane per peer); returns nothing to wait for: the Barrier op after them is the wait.
template <class At>
void push(Program& p, const Staged& s, const char* src, size_t bytes, At at) {
  for (int d = 1; d < s.n; ++d) {
    const int q = (s.me + d) % s.n;
    staged_copy(p, s, s.direct ? kLaneLocal : kLanePeer0 + d - 1, s.slot(q, s.me), s.area_dev[q], src + at(q),
                s.send_dev, bytes);
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

// Pipelined forms (Staged::chunks > 1): every rank's ops, so that the flags between the ranks'
// streams are numbered alike everywhere (other ranks' buffers stand in as placeholders; only
// this rank's ops run here, and a rank's own extra copies add no flags). Each piece a peer needs
// goes by a copy engine (a lane per peer, beside the kernels), and each piece is reduced or copied
// as soon as every peer's copy of it has landed: the stores of piece c+1 overlap the reduction of
// piece c, with no barrier between.
const char* placeholder(int r, int which) {
  return reinterpret_cast<const char*>((static_cast<uintptr_t>(r) * 2 + which + 2) << 40);
}

struct Piece {
  size_t off, len;  // elements
};
std::vector<Piece> pieces(size_t count, size_t esz, int chunks) {
  const size_t align = std::max<size_t>(1, kSlotAlign / esz);
  size_t per = (count + chunks - 1) / chunks;
  per = (per + align - 1) / align * align;
  std::vector<Piece> out;
  for (size_t off = 0; off < count; off += per) out.push_back({off, std::min(per, count - off)});
  return out;
}

// pushed[r][q][c]: rank r's copy of piece c into rank q's slot for it (part_at(q): where in r's
// send the part for q starts, bytes).
using Pushed = std::vector<std::vector<std::vector<int>>>;
template <class PartAt>
Pushed push_pieces(Program& p, const Staged& s, const char* send, const std::vector<Piece>& pc, size_t esz,
                   PartAt part_at) {
  Pushed pushed(s.n, std::vector<std::vector<int>>(s.n, std::vector<int>(pc.size(), -1)));
  for (int r = 0; r < s.n; ++r) {
    const char* src = r == s.me ? send : placeholder(r, 0);
    const int src_dev = r == s.me ? s.send_dev : s.area_dev[r];
    for (size_t c = 0; c < pc.size(); ++c)
      for (int d = 1; d < s.n; ++d) {
        const int q = (r + d) % s.n;
        pushed[r][q][c] = p.copy(r, kLanePeer0 + d - 1, s.slot(q, r) + pc[c].off * esz, s.area_dev[q],
                                 src + part_at(q) + pc[c].off * esz, src_dev, pc[c].len * esz);
      }
  }
  return pushed;
}

// Piece c of rank r waits for every peer's copy of it into r's slots and, in place, for r's own
// copies of it to the peers.
std::vector<int> arrived(const Pushed& pushed, int r, size_t c) {
  std::vector<int> deps;
  for (size_t q = 0; q < pushed.size(); ++q)
    if (static_cast<int>(q) != r) {
      deps.push_back(pushed[q][r][c]);
      deps.push_back(pushed[r][q][c]);
    }
  return deps;
}

void pipelined_reduce(Program& p, const Staged& s, const char* send, char* recv, size_t count, DataType dt, RedOp op,
                      bool scatter) {
  const size_t esz = dtype_size(dt), bytes = count * esz;
  const std::vector<Piece> pc = pieces(count, esz, s.chunks);
  const Pushed pushed = push_pieces(p, s, send, pc, esz, [&](int q) { return scatter ? q * bytes : size_t(0); });
  for (int r = 0; r < s.n; ++r) {
    const char* own = r == s.me ? send + (scatter ? s.me * bytes : 0) : placeholder(r, 0);
    char* out = r == s.me ? recv : const_cast<char*>(placeholder(r, 1));
    int aside = -1;
    if (r == s.me && !s.direct) {
      aside = p.copy(s.me, kLaneLocal, s.temp, s.dev, own, s.send_dev, bytes);
      own = out = s.temp;
    }
    std::vector<int> reds;
    for (size_t c = 0; c < pc.size(); ++c) {
      const size_t at = pc[c].off * esz;
      std::vector<const void*> srcs;
      for (int i = 0; i < s.n; ++i) srcs.push_back(i == r ? own + at : s.slot(r, i) + at);
      std::vector<int> deps = arrived(pushed, r, c);
      deps.push_back(aside);
      reds.push_back(p.reduce(r, kLaneLocal, out + at, std::move(srcs), pc[c].len, dt, op, std::move(deps)));
    }
    if (r == s.me && !s.direct) p.copy(s.me, kLaneLocal, recv, s.recv_dev, s.temp, s.dev, bytes, reds);
  }
}

void pipelined_allgather(Program& p, const Staged& s, const char* send, char* recv, size_t block) {
  const std::vector<Piece> pc = pieces(block, 1, s.chunks);
  const Pushed pushed = push_pieces(p, s, send, pc, 1, [](int) { return size_t(0); });
  for (int r = 0; r < s.n; ++r) {
    if (r != s.me) {
      // Its ops that wait for the peers' pieces (what numbers the flags); its own block's copy adds none.
      for (size_t c = 0; c < pc.size(); ++c)
        for (int d = 1; d < s.n; ++d) {
          const int q = (r + d) % s.n;
          p.copy(r, kLaneLocal, const_cast<char*>(placeholder(r, 1)) + q * block + pc[c].off, s.area_dev[r],
                 s.slot(r, q) + pc[c].off, s.area_dev[r], pc[c].len, {pushed[q][r][c]});
        }
      continue;
    }
    char* own = recv + s.me * block;
    if (own != send) p.copy(s.me, kLaneOut, own, s.recv_dev, send, s.send_dev, block);
    for (size_t c = 0; c < pc.size(); ++c)
      for (int d = 1; d < s.n; ++d) {
        const int q = (s.me + d) % s.n;
        p.copy(s.me, kLaneLocal, recv + q * block + pc[c].off, s.recv_dev, s.slot(s.me, q) + pc[c].off, s.dev,
               pc[c].len, {pushed[q][s.me][c]});
      }
  }
}

}  // namespace

size_t staged_unit(size_t area, int n) {
  if (n < 2) return 0;
  return area / static_cast<size_t>(n - 1) / kSlotAlign * kSlotAlign;
}

void build_staged_allreduce(Program& p, const Staged& s, const char* send, char* recv, size_t count, DataType dt,
                            RedOp op) {
  const size_t bytes = count * dtype_size(dt);
  check_staged(p, s, bytes);
  if (s.chunks > 1) return pipelined_reduce(p, s, send, recv, count, dt, op, false);
  push(p, s, send, bytes, [](int) { return size_t(0); });
  reduce_slots(p, s, send, recv, count, dt, op);
}

void build_staged_reduce_scatter(Program& p, const Staged& s, const char* send, char* recv, size_t count, DataType dt,
                                 RedOp op) {
  const size_t block = count * dtype_size(dt);
  check_staged(p, s, block);
  if (s.chunks > 1) return pipelined_reduce(p, s, send, recv, count, dt, op, true);
  push(p, s, send, block, [block](int q) { return q * block; });
  reduce_slots(p, s, send + s.me * block, recv, count, dt, op);
}

void build_staged_allgather(Program& p, const Staged& s, const char* send, char* recv, size_t block) {
  check_staged(p, s, block);
  if (s.chunks > 1) return pipelined_allgather(p, s, send, recv, block);
  push(p, s, send, block, [](int) { return size_t(0); });
  // Its own block beside the stores (in place: there already).
  char* own = recv + s.me * block;
  if (own != send) staged_copy(p, s, kLaneLocal, own, s.recv_dev, send, s.send_dev, block);
  p.barrier();
  for (int d = 1; d < s.n; ++d) {
    const int r = (s.me + d) % s.n;
    staged_copy(p, s, s.direct ? kLaneLocal : kLanePeer0 + d - 1, recv + r * block, s.recv_dev, s.slot(s.me, r),
                s.dev, block);
  }
}

}  // namespace gpustripe::coll
