// Schedule builders: each appends one collective's copies and reductions to a
// Program, given per-member device pointers and devices only. A Team is the set of
// ranks a builder works on (the whole communicator, or a socket's ranks inside a
// hierarchical schedule). The choice among builders is select.hpp's.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "coll/program.hpp"
#include "coll/scratch.hpp"
#include "coll/types.hpp"

namespace gpustripe::coll {

struct Team {
  std::vector<int> rank;  // program rank of member m
  std::vector<int> dev;   // its device
  int size() const { return static_cast<int>(rank.size()); }
};

// Element ranges [off, off+cnt) that split `count` into `parts` blocks, as even as the
// alignment (in elements) allows; later blocks may be shorter or empty.
struct Blocks {
  std::vector<size_t> off, cnt;
};
Blocks split_blocks(size_t count, int parts, size_t align_elems);
// `parts` blocks of `count` elements each, back to back (reduce-scatter's per-rank blocks).
Blocks equal_blocks(size_t count, int parts);

struct ExchangeOpts {
  bool rounds = true;        // permutation rounds on one lane per rank; else one lane per peer, all at once
  // Every block by a copy kernel on the sender's SMs, stored straight into the receivers'
  // buffers (needs peer mappings; no host share): in per-rank graphs one kernel per rank with
  // the GPUs' barrier inside, no copy-engine or barrier-kernel latency per call.
  bool kernel = false;
  double host_share = 0;     // fraction of each peer block sent through pinned host memory
  int host_chunks = 4;       // pipeline depth of the host path (D2H of chunk c+1 beside H2D of chunk c)
};

// A collective staged through slots its team mapped once: every rank's kernel stores what each
// peer needs of its input into that peer's slot for it (only stores cross NVLink), the ranks' GPUs
// meet (a Barrier op), and each rank reduces or copies what its slots received into its own
// buffers. A call needs no rank's buffers but its own, so the ranks' hosts need not meet to make
// it (mpi/coll_team.hpp's staged calls). The builders append rank `me`'s ops only; a slot is
// written again by the next call once every rank is past this one (the runner's exit barrier).
struct Staged {
  int me = 0, n = 0;
  int dev = 0;                 // this rank's GPU: its copies and kernels run there
  // Every rank's slot area as this process addresses it (areas[me]: its own), and its GPU. Rank r's
  // area holds a slot of `unit` bytes per peer: slot(r, q) is where rank q stores for r.
  std::vector<char*> areas;
  std::vector<int> area_dev;
  size_t unit = 0;
  char* slot(int r, int q) const { return areas[r] + (q - (q > r ? 1 : 0)) * unit; }
  // Where this rank's send and recv lie (a GPU, or kHostDevice).
  int send_dev = 0, recv_dev = 0;
  // Whether this rank's send and recv are memory of `dev` its kernels may read and write
  // (else copy engines move them, and a reduction's result goes through `temp`, a device
  // buffer of `dev`, and is copied out: host buffers, buffers overlapping oddly).
  bool direct = true;
  char* temp = nullptr;
  // Smallest allreduce (bytes per rank) made in two shots (staged_twoshot); every rank of a call
  // has the same, so every rank's program has the same barriers.
  size_t twoshot_min = SIZE_MAX;
};
// The most each rank stores into one peer's slot for a team of n whose areas are `area` bytes.
size_t staged_unit(size_t area, int n);
// recv = op over ranks of send (count elements; in place when send == recv). One shot: every peer
// gets the whole input, then one kernel per rank reduces its own input and its slots. Two shots
// (staged_twoshot): peer q gets block q (staged_blocks) in its slot's first half, each rank reduces
// its block into its output and every peer's slot's second half (staged_half on), the GPUs meet
// again, and each rank copies the peers' blocks out of its slots.
bool staged_twoshot(const Staged& s, size_t count, DataType dt);
Blocks staged_blocks(const Staged& s, size_t count, DataType dt);
size_t staged_half(const Staged& s);
void build_staged_allreduce(Program& p, const Staged& s, const char* send, char* recv, size_t count, DataType dt,
                            RedOp op);
// recv (count elements) = op over ranks of block `me` of send (n blocks of count elements): peer q
// gets block q.
void build_staged_reduce_scatter(Program& p, const Staged& s, const char* send, char* recv, size_t count, DataType dt,
                                 RedOp op);
// Block r of recv = rank r's send (block bytes): every peer gets the block, each rank copies its
// slots into its output.
void build_staged_allgather(Program& p, const Staged& s, const char* send, char* recv, size_t block);
// Block r of recv = block `me` of rank r's send (blocks of `block` bytes; send and recv may
// overlap only where s.direct is false): peer q gets block q, each rank copies its slots out.
void build_staged_alltoall(Program& p, const Staged& s, const char* send, char* recv, size_t block);

// Alltoall: block j of send[i] -> block i of recv[j]; blocks of `block` bytes. Not in place
// (the communicator copies in-place input aside first).
void build_alltoall(Program& p, const Team& t, const std::vector<const char*>& send, const std::vector<char*>& recv,
                    size_t block, const ExchangeOpts& o, Scratch& scratch);
// Allgather: send[i] (block bytes) -> block i of every recv[j]. In place when send[i] == recv[i] + i*block.
void build_allgather(Program& p, const Team& t, const std::vector<const char*>& send, const std::vector<char*>& recv,
                     size_t block, const ExchangeOpts& o, Scratch& scratch);
// Allgather of blocks of different sizes, as member `me` sees it: member i's send[i]
// (bytes[i] bytes) -> recv[me] + at[i], copied by me's copy engines (each member pulls what
// it receives, so it needs no other member's layout: MPI_Allgatherv's displacements are the
// receiver's own). Only member me's ops are right; the program has no waits between members.
// In place when send[me] == recv[me] + at[me]. o.rounds: one copy at a time in round order,
// else one lane per peer.
void build_allgatherv_pull(Program& p, const Team& t, int me, const std::vector<const char*>& send,
                           const std::vector<char*>& recv, const std::vector<size_t>& bytes,
                           const std::vector<size_t>& at, const ExchangeOpts& o);
// Scatter of blocks of different sizes by member `me` (the root): send[me] + at[j] (bytes[j]
// bytes) -> recv[j], pushed by me's copy engines; no copy where recv[j] is null (the root in
// place). Only me's ops; the program has no waits between members.
void build_scatterv_push(Program& p, const Team& t, int me, const std::vector<const char*>& send,
                         const std::vector<char*>& recv, const std::vector<size_t>& bytes,
                         const std::vector<size_t>& at, const ExchangeOpts& o);

struct ReduceOpts {
  bool pull = false;  // kernels read peers' memory; else copy engines copy into scratch first
  int chunks = 1;     // pipeline depth
  int slots = 4;      // scratch slots per peer (copy mode): bounds scratch to slots chunks
  int reduce_lane = kLaneLocal;  // the lane of copy mode's reductions
  // twoshot: the inputs are first pushed by their owners' kernels into the reducing member's
  // scratch (only stores cross NVLink, no loads); the reductions wait for other GPUs' pushes.
  bool push = false;
  // The waits between GPUs of this schedule become flags in per-rank graphs (the executor's
  // flags_preferred), as for the exchanges' host path.
  bool flags = false;
  // Allreduce in copy mode (ce_twoshot): each chunk's reduction kernel stores its result into
  // every member's output itself (as two-shot does) instead of copy engines gathering it after.
  bool ag_stores = false;
  // Copy mode, round-major (chunks/slots unused): rounds 1..n-2 each move
  // whole blocks, one copy per sender (as the exchanges' rounds), and the owner folds each round
  // into its output while the next one moves; the last round's block goes in pieces that halve
  // down to `tail` bytes, each folded in as it lands, so the only work after the last copy is a
  // two-input reduction of the tail piece. Scratch: a whole block per peer.
  bool by_round = false;
  size_t tail = 0;  // bytes of the last piece (0: the last round in one piece)
  int fold_blocks_per_sm = 0;  // round-major: the folds' kernels' most blocks per SM (0: the reducer's own)
  // Round-major allreduce (rs_ag_copy): each block gathered whole after its last fold (one copy
  // per round) instead of piece by piece; and the share of it sent through pinned host memory.
  bool gather_whole = false;
  double gather_host_share = 0;
};

// The pipeline's pieces of every block: piece c of a block of cnt elements is
// [start[c], start[c+1]) clipped to cnt (round-major: the last round's pieces), or chunk c of
// `chunks` even chunks (start empty). Callers that follow a reduce-scatter piece by piece
// (allgather, reduce to a root) take the ranges from here.
struct Pieces {
  std::vector<size_t> start;
  int chunks = 1;
  size_t align = 1;
  int count() const { return start.empty() ? chunks : static_cast<int>(start.size()) - 1; }
  std::pair<size_t, size_t> of(size_t cnt, int c) const;  // (offset, length) in elements
};
Pieces pieces_of(const Blocks& b, const ReduceOpts& o, size_t esz);

// Reduce-scatter over blocks b (elements): out[j] (block j's result at member j) =
// op over i of send[i] + b.off[j]. Returns, per chunk c and member j, the op that
// finishes that chunk (index into p, or -1): result[c][j].
// more_out (optional): per member j, member k's output of block j's result (k != j; nullptr
// at k == j), for an allreduce whose reductions store into every member (copy mode only).
std::vector<std::vector<int>> build_reduce_scatter(Program& p, const Team& t, const std::vector<const char*>& send,
                                                   const std::vector<char*>& out, const Blocks& b, DataType dt,
                                                   RedOp op, const ReduceOpts& o, Scratch& scratch,
                                                   const std::vector<std::vector<char*>>& more_out = {});

// Allreduce as reduce-scatter pipelined into allgather, chunk by chunk.
void build_allreduce_rs_ag(Program& p, const Team& t, const std::vector<const char*>& send,
                           const std::vector<char*>& recv, size_t count, DataType dt, RedOp op, const ReduceOpts& o,
                           Scratch& scratch);
// Allreduce in one step: every member reduces all members' inputs (latency path).
void build_allreduce_oneshot(Program& p, const Team& t, const std::vector<const char*>& send,
                             const std::vector<char*>& recv, size_t count, DataType dt, RedOp op, Scratch& scratch);
// Allreduce in one kernel per member: member j reduces block j of every input (reading
// peers) and writes the result into block j of every member's output. Reads and writes
// peers' memory: needs peer access between every pair.
void build_allreduce_twoshot(Program& p, const Team& t, const std::vector<const char*>& send,
                             const std::vector<char*>& recv, size_t count, DataType dt, RedOp op,
                             const ReduceOpts& o, Scratch& scratch);
// Three stages over groups (sockets) of equal size: reduce-scatter inside each group,
// allreduce of each block across groups, allgather inside each group.
void build_allreduce_hier(Program& p, const Team& t, const std::vector<std::vector<int>>& groups,
                          const std::vector<const char*>& send, const std::vector<char*>& recv, size_t count,
                          DataType dt, RedOp op, const ReduceOpts& o, Scratch& scratch);
// The allreduce schedule named by the selection (select.hpp's Choice::name): oneshot,
// twoshot, hier (over `groups`), else reduce-scatter pipelined into allgather.
void build_allreduce(Program& p, const Team& t, const std::string& schedule,
                     const std::vector<std::vector<int>>& groups, const std::vector<const char*>& send,
                     const std::vector<char*>& recv, size_t count, DataType dt, RedOp op, const ReduceOpts& o,
                     Scratch& scratch);

struct BcastOpts {
  bool scatter_allgather = true;  // root scatters pieces, members forward them; else root sends to all
  // A chain root -> root+1 -> ... -> root+n-1 in chunks: every GPU receives the message once
  // and sends it once (all but the last), each link direction carries it once; the chunks
  // alternate between two lanes on every sender, so one chunk's wait for its predecessor
  // overlaps the copy of the one before. Takes precedence over scatter_allgather.
  bool chain = false;
  int chunks = 1;
  // Copy kernels (needs peer mappings), one per non-root member: member q reads piece q of
  // the root's buffer and stores it into every non-root member's buffer (the root's egress
  // carries the message once, as scatter-allgather, with no wait between the two steps).
  // False: copy engines (the forms above).
  bool kernel = false;
  // The tail of the message (this fraction, 0..0.5) goes through pinned host memory beside the
  // form above, which carries the rest: the root copies it D2H into the scratch's host buffer in
  // host_chunks chunks, and every other member copies each chunk H2D once it is there (a wait
  // on the root's copy: a flag across processes), so the D2H of chunk c+1 runs beside the H2D of
  // chunk c. Each lane carries a GPU's host link one way: the root's egress to the host, the
  // members' ingress from it.
  double host_share = 0;
  int host_chunks = 2;
};
// `scratch`: where the host share is staged (needed when o.host_share leaves any bytes to it).
void build_bcast(Program& p, const Team& t, const std::vector<char*>& bufs, size_t bytes, int root,
                 const BcastOpts& o, Scratch* scratch = nullptr);

// Reduce to root: reduce-scatter, then each member sends its block to root's recv.
void build_reduce(Program& p, const Team& t, const std::vector<const char*>& send, char* recv_root, size_t count,
                  DataType dt, RedOp op, int root, const ReduceOpts& o, Scratch& scratch);
// Inclusive scan (exclusive: without member me's own input) as member `me` sees it:
// recv[me] = op over send[0..me] in member order, the earlier members' inputs pulled into me's
// scratch by its copy engines, then one reduction. Only me's ops; the program has no waits
// between members, so no member may write a buffer another reads (no in place). Member 0 of
// an exclusive scan gets nothing.
void build_scan_pull(Program& p, const Team& t, int me, bool exclusive, const std::vector<const char*>& send,
                     const std::vector<char*>& recv, size_t count, DataType dt, RedOp op, Scratch& scratch);

}  // namespace gpustripe::coll
