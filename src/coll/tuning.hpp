// The collectives' tuning numbers: pipeline chunking, scratch, and the message sizes at which
// one schedule hands over to the next. They are not settings: a user has no reason to change
// them, and the defaults are the crossovers the schedules were measured at (docs/coll.md tells
// how each was found). A communicator holds one (Comm::create); tests build one with other
// values to reach a schedule's pipelining and corner cases at small sizes. Forcing a schedule
// by name is GPUSTRIPE_COLL_ALGO's job, not this struct's.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

namespace gpustripe::coll {

struct Tuning {
  // --- Pipelining ---------------------------------------------------------------------------
  // Chunk of a rank's block in reduce-scatter, allreduce and reduce pipelines: enough chunks
  // that the pipeline's fill and drain stay small next to the whole, each well above a copy's
  // fixed cost. Blocks of 512K per chunk or more get at least min_chunks, never above max_chunks.
  uint64_t chunk = uint64_t(32) << 20;
  int min_chunks = 4;
  int max_chunks = 16;
  // Scatter-allgather broadcast: chunk of a member's piece (up to 32 chunks).
  uint64_t bcast_chunk = uint64_t(2) << 20;
  // Chain broadcast: chunk passed along the ranks (up to 64 chunks).
  uint64_t chain_chunk = uint64_t(8) << 20;
  // Most scratch per rank for the pipeline slots of copy-engine reductions: up to it every chunk
  // gets its own slot, so no copy waits for a reduction; round-major reductions need a whole
  // block per peer within it.
  uint64_t scratch_max = uint64_t(1) << 30;

  // --- Alltoall and allgather ---------------------------------------------------------------
  // Largest message per rank done by copy kernels that store into the peers (sm), where every
  // pair maps the other's memory: one kernel per rank with the GPUs' barrier inside, against
  // ~30 us per call of copy-engine, graph and barrier latency. Above, the copy engines' rounds
  // (with the host share) run faster than the kernels' NVLink stores. The same crossover holds for
  // teams of 2 and 4 on NVSwitch H100 nodes (bench/results, `*-coll-{2,4}gpu-sm-max-*`): a pair's
  // kernels store 1.11-1.15x faster than its copy engines at 64M-128M (on 2x H200 through the MPI
  // interposer 1.06-1.11x at 64M: `*-mpi-coll-sm-max-ab-*`).
  uint64_t sm_max = uint64_t(128) << 20;
  // Smallest peer block sent in permutation rounds (one copy per NVLink port and direction);
  // below, all peers at once, where per-copy latency dominates. Also the smallest broadcast over
  // more than 2 ranks done by scatter-allgather.
  uint64_t rounds_min = uint64_t(1) << 20;
  // Smallest peer block that gets a host-path share.
  uint64_t host_min = uint64_t(64) << 20;
  // The host-path fraction of every peer block (0..0.5); negative: automatic (measured on
  // NVSwitch nodes, else from the planner and the nominal link figures: select.cpp).
  double host_share = -1;

  // --- Broadcast ----------------------------------------------------------------------------
  // Teams of 2 that map each other's memory: largest broadcast done by a copy kernel; above,
  // copy engines (larger teams take the copy kernels at every size: each member's egress
  // carries a piece of the message). A host-paced pair (TeamResources::host_paced) times the
  // kernel against the root's copy up to here instead (select.hpp's measured_candidates).
  uint64_t bcast_sm_max_2 = uint64_t(256) << 20;
  // Smallest broadcast sent as a chain (every GPU sends and receives the message once) over
  // more than 2 ranks, or 2 whose team asks for it (TeamResources::chain_pairs).
  uint64_t chain_min = uint64_t(32) << 20;
  // The fraction of a broadcast sent through pinned host memory beside the NVLink form (0..0.5,
  // at every size); negative: automatic -- the planner's host path for the pair where the team
  // asks for it (2 ranks across processes, select.hpp's wants_bcast_host_share), else none.
  double bcast_host_share = -1;

  // --- Reductions ---------------------------------------------------------------------------
  // Largest allreduce per rank done in one step (every rank reduces all inputs: the latency
  // path); above, two-shot.
  uint64_t oneshot_max = uint64_t(256) << 10;
  // Allreduce over more than 2 GPUs from push_min to push_max per rank: two-shot with the inputs
  // pushed by their owners' kernels into scratch first (only stores cross NVLink).
  uint64_t push_min = uint64_t(32) << 20;
  uint64_t push_max = uint64_t(64) << 20;
  // Over more than 2 GPUs that map each other's memory: smallest allreduce done by rs_ag_copy
  // and smallest reduce-scatter done by rs_copy (copy engines move the inputs in rounds; their
  // rate beats the kernels' loads once whole blocks per round hide the per-copy latency).
  uint64_t ar_copy_min = uint64_t(128) << 20;
  uint64_t rs_copy_min = uint64_t(256) << 20;
  // Teams of 2 that map each other's memory: smallest allreduce done by ce_twoshot (the copy
  // engines move each input's half into its owner's scratch in one round, the folds' kernels
  // store the result into both outputs): from here the copy engines' rate beats the two-shot
  // kernels' NVLink loads by more than the copies' fixed cost.
  uint64_t ar_ce_min_2 = uint64_t(256) << 20;
  // How copy-engine reductions order their copies: chunk by chunk (every chunk in all rounds,
  // then the next) or round-major (whole blocks per round, each folded in while the next moves,
  // the last round in pieces halving down to rs_tail, 0: in one piece). Auto: round-major where
  // the GPUs map each other's memory, else chunks.
  enum class Order { Auto, Chunks, Rounds };
  Order rs_order = Order::Auto;
  uint64_t rs_tail = uint64_t(8) << 20;
  // Round-major: most thread blocks per SM of the folds' kernels (0: the reducer's own); few
  // leave room beside them for the flags' one-thread wait and signal kernels.
  int fold_blocks_per_sm = 1;
  // Round-major allreduce: the fraction of every reduced block gathered through pinned host
  // memory beside NVLink (0..0.5).
  double gather_host_share = 0.05;

  // --- Staged calls -------------------------------------------------------------------------
  // Cross-process teams whose calls are stream-ordered (mpi/coll_team.hpp; the PyTorch
  // backend's): each rank's area of slots, one per peer, that the team maps once (schedules.hpp's
  // Staged). An allreduce, reduce-scatter or allgather whose part for one peer (the allreduce's
  // input, a reduce-scatter's or allgather's block) fits a slot (staged_unit) is staged through
  // them, so that no call waits for the other ranks' hosts to meet it; larger ones take their own
  // schedule after the hosts' meeting. Up to 32M a call's host time (the meeting) weighs more in
  // training than the slots' extra pass on the GPUs (docs/torch.md, "Staged calls"). 0: no staging.
  uint64_t staged_max = uint64_t(32) << 20;
  // Smallest staged allreduce (per rank) made in two shots (schedules.hpp's build_staged_allreduce):
  // each rank reduces only its block, then stores its result into the peers' slots. Where the GPUs
  // set the pace (the largest staged calls) two shots run faster; smaller calls run at the host's
  // pace either way, and below this one shot keeps its single barrier (bench/results/README.md,
  // "two-shot staged allreduce").
  uint64_t staged_twoshot_min = uint64_t(8) << 20;

  // --- Replay -------------------------------------------------------------------------------
  // Repeated calls (same buffers, size, type) replayed as CUDA graphs (CUDA backend).
  bool graphs = true;

  // Throws ERR_CONFIG naming the field when a value is out of its range.
  void validate() const;
  // Sets the field `name` (as spelled above; rs_order: auto, chunks or rounds) from text (sizes
  // with K/M/G suffixes), for tools and tests that pass tuning as text (the MPI test programs'
  // processes). Throws ERR_CONFIG for an unknown name or a value that does not parse.
  void set(const std::string& name, const std::string& value);
};

}  // namespace gpustripe::coll
