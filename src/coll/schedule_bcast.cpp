// Broadcast. Sending the whole message from the root to every member makes the root's
// NVLink egress carry (n-1) copies. Scatter-allgather sends each non-root member one
// piece (the root's egress carries the message once) and lets the members forward
// their pieces to each other; chunks pipeline the two steps. A chain passes chunks along
// the members, each GPU sending and receiving the message once. The kernel forms (sm) do
// the scatter-allgather in one copy kernel per member: each reads its piece from the root
// and stores it into every member at once.
#include <algorithm>

#include "coll/schedules.hpp"

namespace gpustripe::coll {

void build_bcast(Program& p, const Team& t, const std::vector<char*>& bufs, size_t bytes, int root,
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

}  // namespace gpustripe::coll
