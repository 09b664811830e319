// Alltoall and allgather on copy engines. In permutation rounds, round r has member
// i send to member (i + r) mod n: every GPU sends one block and receives one block at
// a time, so no NVLink port carries two copies while another idles. All at once gives
// each peer its own lane (better at small sizes, where per-copy latency dominates).
// A host share sends the tail of each block through pinned host memory beside NVLink.
#include <algorithm>

#include "backend/backend.hpp"
#include "coll/schedules.hpp"

namespace gpustripe::coll {
namespace {

constexpr size_t kAlign = 256;

size_t align_down(size_t v, size_t a) { return v / a * a; }

// The generic exchange: member i sends src(i, j) to dst(i, j) for every j != i, and
// its own block locally. The host tail of each message goes D2H by the sender, H2D by
// the receiver, in chunks; each (i, j) message gets its own staging region.
template <class Src, class Dst>
void exchange(Program& p, const Team& t, size_t block, const ExchangeOpts& o, Scratch& scratch, Src src, Dst dst,
              bool stage_once_per_sender) {
  const int n = t.size();
  if (o.kernel) {
    // Member i's kernel copies every block it sends, its own first, then peers from i+1 on,
    // all on one lane: one copy kernel where they are not fused with the barrier (the executor
    // runs a lane's kernel copies in a row as one). Allgather's blocks share a source: one
    // segment, read once.
    for (int i = 0; i < n; ++i)
      for (int r = 0; r < n; ++r) {
        const int j = (i + r) % n;
        p.kernel_copy(t.rank[i], kLaneOut, dst(i, j), t.dev[j], src(i, j), t.dev[i], block);
      }
    return;
  }

  size_t host_bytes = 0;
  if (o.host_share > 0 && n > 1) host_bytes = align_down(static_cast<size_t>(block * o.host_share), kAlign);
  const size_t nv_bytes = block - host_bytes;

  // Local block first, on its own lane: device-local copies are fast and overlap the rest.
  for (int i = 0; i < n; ++i) p.copy(t.rank[i], kLaneLocal, dst(i, i), t.dev[i], src(i, i), t.dev[i], block);

  // Rounds on one lane per member; all at once on a lane per peer offset.
  for (int r = 1; r < n; ++r)
    for (int i = 0; i < n; ++i) {
      const int j = (i + r) % n;
      const int lane = o.rounds ? kLaneOut : kLanePeer0 + (r - 1);
      p.copy(t.rank[i], lane, dst(i, j), t.dev[j], src(i, j), t.dev[i], nv_bytes);
    }

  if (host_bytes == 0) return;
  const int chunks = std::max(1, o.host_chunks);
  const size_t per_sender = stage_once_per_sender ? host_bytes : host_bytes * n;
  char* host = scratch.host(per_sender * n);
  const size_t step = (host_bytes + chunks - 1) / chunks;
  std::vector<int> staged(n, -1);  // allgather: the one D2H of sender i's current chunk
  for (int c = 0; c < chunks; ++c) {
    size_t off = c * step;
    if (off >= host_bytes) break;
    size_t len = std::min(step, host_bytes - off);
    for (int r = 1; r < n; ++r)
      for (int i = 0; i < n; ++i) {
        int j = (i + r) % n;
        char* stage = host + i * per_sender + (stage_once_per_sender ? 0 : j * host_bytes) + off;
        int d2h;
        if (stage_once_per_sender) {
          if (r == 1) {
            staged[i] = p.copy(t.rank[i], kLaneD2H, stage, kHostDevice, src(i, j) + nv_bytes + off, t.dev[i], len);
          }
          d2h = staged[i];
        } else {
          d2h = p.copy(t.rank[i], kLaneD2H, stage, kHostDevice, src(i, j) + nv_bytes + off, t.dev[i], len);
        }
        p.copy(t.rank[j], kLaneH2D, dst(i, j) + nv_bytes + off, t.dev[j], stage, kHostDevice, len, {d2h});
      }
  }
}

}  // namespace

void build_alltoall(Program& p, const Team& t, const std::vector<const char*>& send, const std::vector<char*>& recv,
                    size_t block, const ExchangeOpts& o, Scratch& scratch) {
  exchange(
      p, t, block, o, scratch, [&](int i, int j) { return send[i] + j * block; },
      [&](int i, int j) { return recv[j] + i * block; }, false);
}

void build_allgather(Program& p, const Team& t, const std::vector<const char*>& send, const std::vector<char*>& recv,
                     size_t block, const ExchangeOpts& o, Scratch& scratch) {
  exchange(
      p, t, block, o, scratch, [&](int i, int) { return send[i]; }, [&](int i, int j) { return recv[j] + i * block; },
      true);
}

void build_allgatherv_pull(Program& p, const Team& t, int me, const std::vector<const char*>& send,
                           const std::vector<char*>& recv, const std::vector<size_t>& bytes,
                           const std::vector<size_t>& at, const ExchangeOpts& o) {
  const int n = t.size();
  char* mine = recv[me];
  if (bytes[me] && mine + at[me] != send[me])
    p.copy(t.rank[me], kLaneLocal, mine + at[me], t.dev[me], send[me], t.dev[me], bytes[me]);
  // Round r: from member me - r, so that members pull from different peers at a time.
  for (int r = 1; r < n; ++r) {
    const int i = (me - r + n) % n;
    if (bytes[i] == 0) continue;
    p.copy(t.rank[me], o.rounds ? kLaneOut : kLanePeer0 + (r - 1), mine + at[i], t.dev[me], send[i], t.dev[i],
           bytes[i]);
  }
}

void build_scatterv_push(Program& p, const Team& t, int me, const std::vector<const char*>& send,
                         const std::vector<char*>& recv, const std::vector<size_t>& bytes,
                         const std::vector<size_t>& at, const ExchangeOpts& o) {
  const int n = t.size();
  for (int r = 0; r < n; ++r) {
    const int j = (me + r) % n;
    if (bytes[j] == 0 || !recv[j] || recv[j] == send[me] + at[j]) continue;
    const int lane = r == 0 ? kLaneLocal : o.rounds ? kLaneOut : kLanePeer0 + (r - 1);
    p.copy(t.rank[me], lane, recv[j], t.dev[j], send[me] + at[j], t.dev[me], bytes[j]);
  }
}

}  // namespace gpustripe::coll
