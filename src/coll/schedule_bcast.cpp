// Broadcast. Sending the whole message from the root to every member makes the root's
// NVLink egress carry (n-1) copies. Scatter-allgather sends each non-root member one
// piece (the root's egress carries the message once) and lets the members forward
// their pieces to each other; chunks pipeline the two steps. A chain passes chunks along
// the members, each GPU sending and receiving the message once. The kernel forms (sm) do
// the scatter-allgather in one copy kernel per member: each reads its piece from the root
// and stores it into every member at once. A host share sends the message's tail through
// pinned host memory beside any of these forms (the root's D2H, the members' H2D).
#include <algorithm>

#include "backend/backend.hpp"
#include "coll/schedules.hpp"
#include "common/error.hpp"

namespace gpustripe::coll {
namespace {

// The NVLink forms over [0, bytes) of every member's buffer.
void build_forms(Program& p, const Team& t, const std::vector<char*>& bufs, size_t bytes, int root,
                 const BcastOpts& o) {
  const int n = t.size();
  if (n == 1 || bytes == 0) return;
  std::vector<int> others;
  for (int r = 1; r < n; ++r) others.push_back((root + r) % n);
  const int chunks = std::max(1, o.chunks);
  const size_t step = (bytes + chunks - 1) / chunks;

  if (o.kernel) {
    // Member q reads piece q from the root and stores it into every non-root member: every
    // member's egress carries a piece (reading the whole message per member, or the root
    // storing it into every member, holds them near half that rate). A member's kernel copies
    // share one lane (one copy kernel where they are not fused).
    const int m = static_cast<int>(others.size());
    const size_t piece = ((bytes + m - 1) / m + 255) / 256 * 256;
    for (int q = 0; q < m; ++q) {
      const int k = others[q];
      const size_t off = std::min(bytes, q * piece), len = std::min(piece, bytes - off);
      // Member k's own copy first, then the other members from k's position on.
      for (int s = 0; s < m; ++s) {
        const int d = others[(q + s) % m];
        p.kernel_copy(t.rank[k], kLaneOut, bufs[d] + off, t.dev[d], bufs[root] + off, t.dev[root], len);
      }
    }
    return;
  }

  if (o.chain) {
    // hop h: member chain[h] sends to chain[h+1]; chunk c goes once the previous hop delivered it.
    std::vector<int> chain{root};
    chain.insert(chain.end(), others.begin(), others.end());
    const size_t cstep = (step + 255) / 256 * 256;
    for (int c = 0; c < chunks; ++c) {
      const size_t off = std::min(bytes, c * cstep), len = std::min(cstep, bytes - off);
      if (len == 0) break;
      const int lane = c % 2 == 0 ? kLaneOut : kLaneOut2;
      int got = -1;
      for (int h = 0; h + 1 < n; ++h) {
        const int from = chain[h], to = chain[h + 1];
        got = p.copy(t.rank[from], lane, bufs[to] + off, t.dev[to], bufs[from] + off, t.dev[from], len, {got});
      }
    }
    return;
  }

  for (int c = 0; c < chunks; ++c) {
    const size_t coff = std::min(bytes, c * step), clen = std::min(step, bytes - coff);
    if (clen == 0) break;
    if (!o.scatter_allgather || n == 2) {
      for (int k : others)
        p.copy(t.rank[root], kLaneOut, bufs[k] + coff, t.dev[k], bufs[root] + coff, t.dev[root], clen);
      continue;
    }
    const int m = static_cast<int>(others.size());
    const size_t piece = ((clen + m - 1) / m + 255) / 256 * 256;
    for (int q = 0; q < m; ++q) {
      const size_t off = coff + std::min(clen, q * piece), len = std::min(piece, coff + clen - off);
      if (len == 0) continue;
      const int k = others[q];
      int got = p.copy(t.rank[root], kLaneOut, bufs[k] + off, t.dev[k], bufs[root] + off, t.dev[root], len);
      for (int s = 1; s < m; ++s) {
        int d = others[(q + s) % m];
        p.copy(t.rank[k], kLaneOut, bufs[d] + off, t.dev[d], bufs[k] + off, t.dev[k], len, {got});
      }
    }
  }
}

// [at, at + bytes) of every member's buffer through `host`: chunk c D2H by the root on its
// D2H lane, then H2D by every other member on its H2D lane once the root's copy is done.
void build_host_tail(Program& p, const Team& t, const std::vector<char*>& bufs, size_t at, size_t bytes, int root,
                     int chunks, char* host) {
  const size_t parts = static_cast<size_t>(std::max(1, chunks));
  const size_t step = ((bytes + parts - 1) / parts + 255) / 256 * 256;
  for (size_t off = 0; off < bytes; off += step) {
    const size_t len = std::min(step, bytes - off);
    const int d2h = p.copy(t.rank[root], kLaneD2H, host + off, kHostDevice, bufs[root] + at + off, t.dev[root], len);
    for (int r = 1; r < t.size(); ++r) {
      const int k = (root + r) % t.size();
      p.copy(t.rank[k], kLaneH2D, bufs[k] + at + off, t.dev[k], host + off, kHostDevice, len, {d2h});
    }
  }
}

}  // namespace

void build_bcast(Program& p, const Team& t, const std::vector<char*>& bufs, size_t bytes, int root,
                 const BcastOpts& o, Scratch* scratch) {
  if (t.size() == 1 || bytes == 0) return;
  // Whole 256-byte units, so that the NVLink part keeps the alignment the forms' pieces have.
  const double share = std::clamp(o.host_share, 0.0, 0.5);
  const size_t host_bytes = static_cast<size_t>(static_cast<double>(bytes) * share) / 256 * 256;
  GS_REQUIRE(host_bytes == 0 || scratch, GPUSTRIPE_ERR_INTERNAL, "bcast: a host share without host scratch");
  build_forms(p, t, bufs, bytes - host_bytes, root, o);
  if (host_bytes > 0)
    build_host_tail(p, t, bufs, bytes - host_bytes, host_bytes, root, o.host_chunks, scratch->host(host_bytes));
}

}  // namespace gpustripe::coll
