// Reduce-scatter, allreduce and reduce. Member j owns block j: the block's inputs
// reach j either by copy engines into j's scratch (copy mode: NVLink at copy-engine
// speed, the SMs free for the reduction) or by j's kernel reading peers' memory
// (pull mode: one launch, no copies, best at small sizes). Chunks pipeline the
// transfer of chunk c+1 with the reduction of chunk c, and, for allreduce, the
// allgather of chunk c with both.
#include <algorithm>

#include "coll/schedules.hpp"
#include "common/error.hpp"

namespace gpustripe::coll {
namespace {

constexpr size_t kAlignBytes = 256;

size_t ceil_div(size_t a, size_t b) { return (a + b - 1) / b; }

// Chunk c of a block of cnt elements, cut in `chunks` pieces aligned to `align` elements.
std::pair<size_t, size_t> chunk_of(size_t cnt, int chunks, int c, size_t align) {
  size_t step = ceil_div(ceil_div(cnt, chunks), align) * align;
  size_t off = std::min(cnt, c * step);
  return {off, std::min(step, cnt - off)};
}

// Pushed inputs: member i's kernels store its part of every other member's block j into j's
// scratch (one copy kernel per peer, on a lane each), so that all NVLink traffic is stores.
// Returns per member j its reduction's sources (own input first, then the pushed copies) and
// the pushes it waits for.
struct Pushed {
  std::vector<std::vector<const void*>> srcs;
  std::vector<std::vector<int>> arrived;
};
Pushed push_inputs(Program& p, const Team& t, const std::vector<const char*>& send, const Blocks& b, DataType dt,
                   RedOp op, Scratch& scratch) {
  const int n = t.size();
  const size_t esz = dtype_size(dt);
  size_t most = 0;
  for (size_t c : b.cnt) most = std::max(most, c);
  const size_t slot = ceil_div(most * esz, kAlignBytes) * kAlignBytes;
  Pushed out;
  out.srcs.resize(n);
  out.arrived.resize(n);
  std::vector<char*> scr(n);
  for (int j = 0; j < n; ++j) {
    scr[j] = scratch.device(t.rank[j], slot * (n - 1));
    out.srcs[j].push_back(send[j] + b.off[j] * esz);
  }
  for (int q = 1; q < n; ++q)
    for (int j = 0; j < n; ++j) {
      const int i = (j + q) % n;  // member j's q-th source
      char* at = scr[j] + (q - 1) * slot;
      out.srcs[j].push_back(at);
      out.arrived[j].push_back(
          p.reduce(t.rank[i], kLanePeer0 + (q - 1), at, {send[i] + b.off[j] * esz}, b.cnt[j], dt, op));
    }
  return out;
}

// Scratch bytes of a copy-mode reduce-scatter's slots on every member (build_reduce puts its
// partial results past them).
size_t slot_bytes_of(const Blocks& b, const ReduceOpts& o, size_t esz, int n) {
  if (o.pull || n < 2) return 0;
  const Pieces pc = pieces_of(b, o, esz);
  size_t most = 0;
  for (size_t j = 0; j < b.cnt.size(); ++j)
    most = std::max(most, o.by_round ? b.cnt[j] : pc.of(b.cnt[j], 0).second);
  const size_t slot = ceil_div(most * esz, kAlignBytes) * kAlignBytes;
  const int slots = o.by_round ? 1 : std::max(1, std::min(o.slots, pc.count()));
  return slot * slots * (n - 1);
}

// `share` of cnt elements, aligned down.
size_t share_of(size_t cnt, double share, size_t esz) {
  const size_t align = std::max<size_t>(1, kAlignBytes / esz);
  return share > 0 ? static_cast<size_t>(static_cast<double>(cnt) * share) / align * align : 0;
}
// Pinned staging per block for a share of the largest block.
size_t stage_bytes_of(const Blocks& b, double share, size_t esz) {
  size_t most = 0;
  for (size_t c : b.cnt) most = std::max(most, c);
  return ceil_div(share_of(most, share, esz) * esz, kAlignBytes) * kAlignBytes;
}

// Round-major copy-mode reduce-scatter (ReduceOpts::by_round). Round r: member i's part of
// block j = i + r goes into j's slot r (a permutation, as the exchanges' rounds), whole in
// rounds 1..n-2, in the pieces of pieces_of in round n-1; member j folds each round into its
// output as it lands (the first fold reads j's own input), so at the end only the tail piece's
// two-input fold is left. done[c][j]: the fold that finishes piece c of block j.
std::vector<std::vector<int>> reduce_scatter_by_round(Program& p, const Team& t, const std::vector<const char*>& send,
                                                      const std::vector<char*>& out, const Blocks& b, DataType dt,
                                                      RedOp op, const ReduceOpts& o, Scratch& scratch,
                                                      const std::vector<std::vector<char*>>& more_out) {
  const int n = t.size();
  const size_t esz = dtype_size(dt);
  const Pieces pc = pieces_of(b, o, esz);
  const int pieces = pc.count();
  std::vector<std::vector<int>> done(pieces, std::vector<int>(n, -1));
  const size_t slot_bytes = n > 1 ? slot_bytes_of(b, o, esz, n) / (n - 1) : 0;
  std::vector<char*> scr(n, nullptr);
  for (int j = 0; j < n && n > 1; ++j) scr[j] = scratch.device(t.rank[j], slot_bytes * (n - 1));
  auto slot = [&](int j, int r) { return scr[j] + static_cast<size_t>(r - 1) * slot_bytes; };
  auto own = [&](int j) { return send[j] + b.off[j] * esz; };
  auto more = [&](int j, size_t off) {
    std::vector<void*> m;
    if (!more_out.empty())
      for (char* d : more_out[j])
        if (d) m.push_back(d + off * esz);
    return m;
  };
  std::vector<int> folded(n, -1);  // member j's last fold so far
  for (int r = 1; r < n; ++r) {
    const bool last = r == n - 1;
    // arrived[c][j]: the copy of piece c (the whole block before the last round) into j's slot r.
    std::vector<std::vector<int>> arrived(last ? pieces : 1, std::vector<int>(n, -1));
    auto range = [&](int j, size_t c) {
      return last ? pc.of(b.cnt[j], static_cast<int>(c)) : std::pair<size_t, size_t>{0, b.cnt[j]};
    };
    // The sender's copies one after another on one lane (on two, every copy at once beside
    // the next ran much slower).
    for (int i = 0; i < n; ++i) {
      const int j = (i + r) % n;
      for (size_t c = 0; c < arrived.size(); ++c) {
        auto [off, len] = range(j, c);
        arrived[c][j] = p.copy(t.rank[i], kLaneOut, slot(j, r) + off * esz, t.dev[j],
                               send[i] + (b.off[j] + off) * esz, t.dev[i], len * esz);
      }
    }
    for (int j = 0; j < n; ++j) {
      const char* acc = r == 1 ? own(j) : out[j];
      auto deps = [&](size_t c) { return std::vector<int>{arrived[c][j], folded[j]}; };
      if (!last) {
        folded[j] = p.reduce(t.rank[j], o.reduce_lane, out[j], {acc, slot(j, r)}, b.cnt[j], dt, op, deps(0), {},
                             o.fold_blocks_per_sm);
        continue;
      }
      for (int c = 0; c < pieces; ++c) {
        auto [off, len] = pc.of(b.cnt[j], c);
        done[c][j] = p.reduce(t.rank[j], o.reduce_lane, out[j] + off * esz, {acc + off * esz, slot(j, r) + off * esz},
                              len, dt, op, deps(c), more(j, off), o.fold_blocks_per_sm);
      }
    }
  }
  if (n == 1)
    for (int c = 0; c < pieces; ++c) {
      auto [off, len] = pc.of(b.cnt[0], c);
      done[c][0] = p.reduce(t.rank[0], o.reduce_lane, out[0] + off * esz, {own(0) + off * esz}, len, dt, op, {},
                            more(0, off));
    }
  return done;
}

}  // namespace

std::pair<size_t, size_t> Pieces::of(size_t cnt, int c) const {
  if (start.empty()) return chunk_of(cnt, chunks, c, align);
  const size_t off = std::min(cnt, start[c]);
  return {off, std::min(cnt, start[c + 1]) - off};
}

Pieces pieces_of(const Blocks& b, const ReduceOpts& o, size_t esz) {
  Pieces pc;
  pc.align = std::max<size_t>(1, kAlignBytes / esz);
  pc.chunks = std::max(1, o.chunks);
  if (!o.by_round || o.pull) return pc;
  size_t most = 0;
  for (size_t c : b.cnt) most = std::max(most, c);
  // From the last piece back: tail, 2 tail, 4 tail, ... while the first piece stays larger than
  // the one after it. Each fold (two inputs, local) then runs in less time than the next piece's
  // copy over NVLink (HBM ~3 TB/s for 3 bytes per byte moved vs ~0.39 TB/s).
  std::vector<size_t> sizes;
  size_t rest = most;
  if (o.tail > 0) {
    size_t s = ceil_div(std::max<size_t>(1, o.tail / esz), pc.align) * pc.align;
    while (rest > 2 * s && sizes.size() < 15) {
      sizes.push_back(s);
      rest -= s;
      s *= 2;
    }
  }
  sizes.push_back(rest);
  pc.start.push_back(0);
  for (auto it = sizes.rbegin(); it != sizes.rend(); ++it) pc.start.push_back(pc.start.back() + *it);
  return pc;
}

Blocks split_blocks(size_t count, int parts, size_t align) {
  Blocks b;
  size_t step = ceil_div(ceil_div(count, parts), align) * align;
  for (int i = 0; i < parts; ++i) {
    size_t off = std::min(count, i * step);
    b.off.push_back(off);
    b.cnt.push_back(std::min(step, count - off));
  }
  return b;
}

Blocks equal_blocks(size_t count, int parts) {
  Blocks b;
  for (int j = 0; j < parts; ++j) {
    b.off.push_back(j * count);
    b.cnt.push_back(count);
  }
  return b;
}

std::vector<std::vector<int>> build_reduce_scatter(Program& p, const Team& t, const std::vector<const char*>& send,
                                                   const std::vector<char*>& out, const Blocks& b, DataType dt,
                                                   RedOp op, const ReduceOpts& o, Scratch& scratch,
                                                   const std::vector<std::vector<char*>>& more_out) {
  const int n = t.size();
  const size_t esz = dtype_size(dt);
  const size_t align = std::max<size_t>(1, kAlignBytes / esz);
  if (o.by_round && !o.pull) return reduce_scatter_by_round(p, t, send, out, b, dt, op, o, scratch, more_out);
  const int chunks = std::max(1, o.chunks);
  const int slots = std::max(1, std::min(o.slots, chunks));
  std::vector<std::vector<int>> done(chunks, std::vector<int>(n, -1));

  size_t max_chunk = 0;
  for (int j = 0; j < n; ++j) max_chunk = std::max(max_chunk, chunk_of(b.cnt[j], chunks, 0, align).second);
  const size_t slot_bytes = ceil_div(max_chunk * esz, kAlignBytes) * kAlignBytes;
  std::vector<char*> scr(n, nullptr);
  if (!o.pull && n > 1)
    for (int j = 0; j < n; ++j) scr[j] = scratch.device(t.rank[j], slot_bytes * slots * (n - 1));
  // Slot s, peer index q (0..n-2) of member j.
  auto slot = [&](int j, int s, int q) { return scr[j] + (static_cast<size_t>(s) * (n - 1) + q) * slot_bytes; };
  auto peer_index = [&](int i, int j) { return (i - j - 1 + n) % n; };

  for (int c = 0; c < chunks; ++c) {
    std::vector<std::vector<int>> arrived(n);
    if (!o.pull) {
      const int s = c % slots;
      // Round r: i's piece of block j = i + r, so every GPU sends one piece and receives
      // one at a time (a permutation), pushed by the sender's copy engine (an owner's engine
      // reading its peers ran at a third of the speed, and stalls per-rank graphs).
      for (int r = 1; r < n; ++r)
        for (int i = 0; i < n; ++i) {
          int j = (i + r) % n;
          auto [off, len] = chunk_of(b.cnt[j], chunks, c, align);
          // The slot is free once the reduction of the chunk that used it before has run.
          std::vector<int> deps;
          if (c >= slots) deps.push_back(done[c - slots][j]);
          arrived[j].push_back(p.copy(t.rank[i], kLaneOut, slot(j, s, peer_index(i, j)), t.dev[j],
                                      send[i] + (b.off[j] + off) * esz, t.dev[i], len * esz, deps));
        }
    }
    for (int j = 0; j < n; ++j) {
      auto [off, len] = chunk_of(b.cnt[j], chunks, c, align);
      if (len == 0) continue;
      // Its own input first (in place it is the destination), then the peers from j + 1 on,
      // so that the members' first reads go to different GPUs.
      std::vector<const void*> srcs;
      for (int q = 0; q < n; ++q) {
        const int i = (j + q) % n;
        if (i == j || o.pull) srcs.push_back(send[i] + (b.off[j] + off) * esz);
        else srcs.push_back(slot(j, c % slots, peer_index(i, j)));
      }
      // With more_out, the result goes to every member by the kernel's stores.
      std::vector<void*> more;
      if (!more_out.empty())
        for (char* m : more_out[j])
          if (m) more.push_back(m + off * esz);
      done[c][j] = p.reduce(t.rank[j], o.reduce_lane, out[j] + off * esz, std::move(srcs), len, dt, op, arrived[j],
                            std::move(more));
    }
  }
  return done;
}

void build_allreduce_rs_ag(Program& p, const Team& t, const std::vector<const char*>& send,
                           const std::vector<char*>& recv, size_t count, DataType dt, RedOp op, const ReduceOpts& o,
                           Scratch& scratch) {
  const int n = t.size();
  const size_t esz = dtype_size(dt);
  const size_t align = std::max<size_t>(1, kAlignBytes / esz);
  Blocks b = split_blocks(count, n, align);
  std::vector<char*> out(n);
  for (int j = 0; j < n; ++j) out[j] = recv[j] + b.off[j] * esz;
  const ReduceOpts& whole = o;
  if (o.ag_stores && !o.pull) {
    // Each reduction stores its chunk into every member (only member j writes block j; in
    // place, its inputs from the others were copied into its scratch before it runs).
    std::vector<std::vector<char*>> more(n, std::vector<char*>(n, nullptr));
    for (int j = 0; j < n; ++j)
      for (int k = 0; k < n; ++k)
        if (k != j) more[j][k] = recv[k] + b.off[j] * esz;
    build_reduce_scatter(p, t, send, out, b, dt, op, whole, scratch, more);
    return;
  }
  auto done = build_reduce_scatter(p, t, send, out, b, dt, op, whole, scratch);
  if (o.by_round && o.gather_whole && !o.pull && n > 1) {
    // Round-major: every block gathered whole once its last piece is folded, one copy per round
    // (as the allgather's rounds), its end through pinned host memory (one D2H by its owner, an
    // H2D by every other member) when gather_host_share asks. In place, the writes into recv[k]
    // come after the folds that waited for k's copies out of send[k].
    const size_t stage = stage_bytes_of(b, o.gather_host_share, esz);
    char* host = stage ? scratch.host(stage * n) : nullptr;
    std::vector<int> staged(n, -1);
    for (int r = 1; r < n; ++r)
      for (int j = 0; j < n; ++j) {
        const int k = (j + r) % n;
        std::vector<int> final;
        for (const auto& piece : done) final.push_back(piece[j]);
        const size_t h = host ? share_of(b.cnt[j], o.gather_host_share, esz) : 0, nv = b.cnt[j] - h;
        const size_t at = b.off[j] * esz;
        if (h > 0 && r == 1)
          staged[j] = p.copy(t.rank[j], kLaneAgD2H, host + j * stage, kHostDevice, recv[j] + at + nv * esz, t.dev[j],
                             h * esz, final);
        p.copy(t.rank[j], kLaneOut2, recv[k] + at, t.dev[k], recv[j] + at, t.dev[j], nv * esz, final);
        if (h > 0)
          p.copy(t.rank[k], kLaneAgH2D, recv[k] + at + nv * esz, t.dev[k], host + j * stage, kHostDevice, h * esz,
                 {staged[j]});
      }
    return;
  }
  // Allgather of each reduced chunk, on a lane beside the reduce-scatter copies. In place,
  // the write into recv[k] (== send[k]) comes after the reduction that read send[k]'s chunk.
  const Pieces pc = pieces_of(b, whole, esz);
  const int chunks = static_cast<int>(done.size());
  for (int c = 0; c < chunks; ++c)
    for (int r = 1; r < n; ++r)
      for (int j = 0; j < n; ++j) {
        int k = (j + r) % n;
        auto [off, len] = pc.of(b.cnt[j], c);
        size_t at = (b.off[j] + off) * esz;
        p.copy(t.rank[j], kLaneOut2, recv[k] + at, t.dev[k], recv[j] + at, t.dev[j], len * esz, {done[c][j]});
      }
}

void build_allreduce_oneshot(Program& p, const Team& t, const std::vector<const char*>& send,
                             const std::vector<char*>& recv, size_t count, DataType dt, RedOp op, Scratch& scratch) {
  const int n = t.size();
  const size_t bytes = count * dtype_size(dt);
  std::vector<const char*> in = send;
  bool in_place = false;
  for (int i = 0; i < n; ++i) in_place = in_place || send[i] == recv[i];
  if (in_place) {
    // Member j overwrites its input while the others still read it: read copies instead.
    for (int i = 0; i < n; ++i) {
      char* copy = scratch.device(t.rank[i], bytes);
      p.copy(t.rank[i], kLaneLocal, copy, t.dev[i], send[i], t.dev[i], bytes);
      in[i] = copy;
    }
    p.barrier();
  }
  for (int j = 0; j < n; ++j) {
    std::vector<const void*> srcs(in.begin(), in.end());
    p.reduce(t.rank[j], kLaneLocal, recv[j], std::move(srcs), count, dt, op);
  }
}

void build_allreduce_twoshot(Program& p, const Team& t, const std::vector<const char*>& send,
                             const std::vector<char*>& recv, size_t count, DataType dt, RedOp op,
                             const ReduceOpts& o, Scratch& scratch) {
  const int n = t.size();
  const size_t esz = dtype_size(dt);
  const size_t align = std::max<size_t>(1, kAlignBytes / esz);
  Blocks all = split_blocks(count, n, align);
  if (o.push && n > 1) {
    // Every input pushed to its block's owner first, then the owner's kernel reduces local
    // memory and stores the result into every member (only stores cross NVLink).
    Pushed in = push_inputs(p, t, send, all, dt, op, scratch);
    for (int j = 0; j < n; ++j) {
      const size_t at = all.off[j] * esz;
      std::vector<void*> more;
      for (int q = 1; q < n; ++q) more.push_back(recv[(j + q) % n] + at);
      p.reduce(t.rank[j], kLaneLocal, recv[j] + at, std::move(in.srcs[j]), all.cnt[j], dt, op, in.arrived[j],
               std::move(more));
    }
    return;
  }
  const Blocks& b = all;
  // Block j's elements are read (in every member's send) and written (in every member's
  // recv) by member j's kernel only, each element read everywhere before it is written:
  // in place needs no copy aside. The own buffer first: it is the kernel's dst, and with
  // more members than one launch reads, the one the first launch accumulates into. Then
  // the peers from j + 1 on, so that the members' first reads and writes go to different GPUs.
  for (int j = 0; j < n; ++j) {
    const size_t at = b.off[j] * esz;
    std::vector<const void*> srcs{send[j] + at};
    std::vector<void*> more;
    for (int q = 1; q < n; ++q) {
      const int i = (j + q) % n;
      srcs.push_back(send[i] + at);
      more.push_back(recv[i] + at);
    }
    p.reduce(t.rank[j], kLaneLocal, recv[j] + at, std::move(srcs), b.cnt[j], dt, op, {}, std::move(more));
  }
}

void build_allreduce_hier(Program& p, const Team& t, const std::vector<std::vector<int>>& groups,
                          const std::vector<const char*>& send, const std::vector<char*>& recv, size_t count,
                          DataType dt, RedOp op, const ReduceOpts& o, Scratch& scratch) {
  const size_t g = groups.at(0).size();
  for (const auto& grp : groups)
    GS_REQUIRE(grp.size() == g, GPUSTRIPE_ERR_INTERNAL, "hierarchical allreduce needs groups of equal size");
  const size_t esz = dtype_size(dt);
  Blocks b = split_blocks(count, static_cast<int>(g), std::max<size_t>(1, kAlignBytes / esz));
  const ReduceOpts& flat = o;
  auto sub = [&](const std::vector<int>& members) {
    Team s;
    for (int m : members) {
      s.rank.push_back(t.rank[m]);
      s.dev.push_back(t.dev[m]);
    }
    return s;
  };

  // 1. Inside each group: member l gets the group's partial result of block l in recv.
  for (const auto& grp : groups) {
    std::vector<const char*> s;
    std::vector<char*> out;
    for (size_t l = 0; l < g; ++l) {
      s.push_back(send[grp[l]]);
      out.push_back(recv[grp[l]] + b.off[l] * esz);
    }
    build_reduce_scatter(p, sub(grp), s, out, b, dt, op, flat, scratch);
  }
  p.barrier();
  // 2. Across groups: the l-th members allreduce block l in place (copy mode: the link
  //    between sockets may not map peer memory).
  ReduceOpts across = flat;
  across.pull = false;
  for (size_t l = 0; l < g; ++l) {
    std::vector<int> members;
    std::vector<const char*> s;
    std::vector<char*> r;
    for (const auto& grp : groups) {
      members.push_back(grp[l]);
      s.push_back(recv[grp[l]] + b.off[l] * esz);
      r.push_back(recv[grp[l]] + b.off[l] * esz);
    }
    build_allreduce_rs_ag(p, sub(members), s, r, b.cnt[l], dt, op, across, scratch);
  }
  p.barrier();
  // 3. Inside each group: member l's block to the others, in permutation rounds.
  for (const auto& grp : groups)
    for (size_t r = 1; r < g; ++r)
      for (size_t l = 0; l < g; ++l) {
        size_t k = (l + r) % g;
        size_t at = b.off[l] * esz;
        p.copy(t.rank[grp[l]], kLaneOut, recv[grp[k]] + at, t.dev[grp[k]], recv[grp[l]] + at, t.dev[grp[l]],
               b.cnt[l] * esz);
      }
}

void build_allreduce(Program& p, const Team& t, const std::string& schedule,
                     const std::vector<std::vector<int>>& groups, const std::vector<const char*>& send,
                     const std::vector<char*>& recv, size_t count, DataType dt, RedOp op, const ReduceOpts& o,
                     Scratch& scratch) {
  if (schedule == "oneshot") build_allreduce_oneshot(p, t, send, recv, count, dt, op, scratch);
  else if (schedule == "twoshot") build_allreduce_twoshot(p, t, send, recv, count, dt, op, o, scratch);
  else if (schedule == "hier") build_allreduce_hier(p, t, groups, send, recv, count, dt, op, o, scratch);
  else build_allreduce_rs_ag(p, t, send, recv, count, dt, op, o, scratch);
}

void build_reduce(Program& p, const Team& t, const std::vector<const char*>& send, char* recv_root, size_t count,
                  DataType dt, RedOp op, int root, const ReduceOpts& o, Scratch& scratch) {
  const int n = t.size();
  const size_t esz = dtype_size(dt);
  const size_t align = std::max<size_t>(1, kAlignBytes / esz);
  Blocks b = split_blocks(count, n, align);
  // Non-root members reduce their block into scratch past the reduce-scatter slots
  // (build_reduce_scatter asks for its slots first; asking again for more keeps them).
  const ReduceOpts& whole = o;
  const size_t slots_bytes = slot_bytes_of(b, whole, esz, n);
  std::vector<char*> out(n);
  for (int j = 0; j < n; ++j) {
    if (j == root) out[j] = recv_root + b.off[j] * esz;
    else out[j] = scratch.device(t.rank[j], slots_bytes + b.cnt[j] * esz) + slots_bytes;
  }
  auto done = build_reduce_scatter(p, t, send, out, b, dt, op, whole, scratch);
  const Pieces pc = pieces_of(b, whole, esz);
  const int chunks = static_cast<int>(done.size());
  for (int c = 0; c < chunks; ++c)
    for (int j = 0; j < n; ++j) {
      if (j == root) continue;
      auto [off, len] = pc.of(b.cnt[j], c);
      p.copy(t.rank[j], kLaneOut2, recv_root + (b.off[j] + off) * esz, t.dev[root], out[j] + off * esz, t.dev[j],
             len * esz, {done[c][j]});
    }
}

void build_scan_pull(Program& p, const Team& t, int me, bool exclusive, const std::vector<const char*>& send,
                     const std::vector<char*>& recv, size_t count, DataType dt, RedOp op, Scratch& scratch) {
  if (count == 0 || (exclusive && me == 0)) return;
  const size_t bytes = count * dtype_size(dt), slot = ceil_div(bytes, kAlignBytes) * kAlignBytes;
  char* scr = me > 0 ? scratch.device(t.rank[me], slot * me) : nullptr;
  std::vector<const void*> srcs;
  std::vector<int> landed;
  for (int i = 0; i < me; ++i) {
    char* at = scr + i * slot;
    landed.push_back(p.copy(t.rank[me], kLanePeer0 + (me - 1 - i), at, t.dev[me], send[i], t.dev[i], bytes));
    srcs.push_back(at);
  }
  if (!exclusive) srcs.push_back(send[me]);
  p.reduce(t.rank[me], kLaneLocal, recv[me], srcs, count, dt, op, landed);
}

}  // namespace gpustripe::coll
