#include "coll/select.hpp"


#include <algorithm>
#include <cmath>

#include "common/config.hpp"
#include "common/error.hpp"
#include "common/text_file.hpp"

namespace gpustripe::coll {
namespace {

const StringSetting kAlgo{"GPUSTRIPE_COLL_ALGO", "auto",
                          "Force collective schedules: auto, or a comma list of names, each op taking the first that "
                          "is its own (rounds, all_at_once, rs_copy, rs_pull, oneshot, twoshot, rs_ag_copy, rs_ag_pull, hier, ce_twoshot, "
                          "direct, scatter_ag, chain, reduce_copy, reduce_pull, sm)"};
const SizeSetting kChunk{"GPUSTRIPE_COLL_CHUNK", "32M",
                         "Pipeline chunk of a rank's block in reduce-scatter/allreduce/reduce/bcast schedules "
                         "(blocks of 2M and more get at least 4 chunks)"};
const IntSetting kMaxChunks{"GPUSTRIPE_COLL_MAX_CHUNKS", "16", "Most pipeline chunks of one collective"};
const IntSetting kMinChunks{"GPUSTRIPE_COLL_MIN_CHUNKS", "4",
                            "Fewest pipeline chunks of a reduction whose block is 512K per chunk or more"};
const SizeSetting kBcastChunk{"GPUSTRIPE_COLL_BCAST_CHUNK", "2M",
                              "Pipeline chunk of a member's piece in scatter-allgather broadcasts (up to 32 chunks)"};
const StringSetting kHostShare{"GPUSTRIPE_COLL_HOST_SHARE", "auto",
                               "Fraction of each alltoall/allgather peer block sent through pinned host memory: "
                               "auto (from the node's link figures, above GPUSTRIPE_COLL_HOST_MIN) or 0..0.5"};
const SizeSetting kHostMin{"GPUSTRIPE_COLL_HOST_MIN", "64M",
                           "Smallest peer block of alltoall/allgather that gets an automatic host-path share"};
const ChoiceSetting kLocalCopy{"GPUSTRIPE_COLL_LOCAL_COPY", "engine",
                               "Alltoall/allgather: each rank's own block by a copy engine or by a copy kernel "
                               "(which leaves the copy engines to the peer blocks)",
                               {"engine", "kernel"}};
const IntSetting kHostChunks{"GPUSTRIPE_COLL_HOST_CHUNKS", "0",
                             "Alltoall/allgather host share: pipeline chunks of each peer block's host part "
                             "(0: from GPUSTRIPE_COLL_CHUNK, 2-16)"};
const IntSetting kRoundLanes{"GPUSTRIPE_COLL_ROUND_LANES", "1",
                             "Alltoall/allgather in rounds: lanes that each carry a piece of every peer block, "
                             "side by side (1-4)"};
// Copy kernels with the GPUs' barrier inside: one kernel per rank and call, where the copy
// engines' schedules pay ~30 us per call of copy-node, graph and barrier latency (NCCL's alltoall
// at 4M per rank takes ~27 us in all). The kernels win while that latency dominates; the copy
// engines' rounds (with the host share) overtake them above 128M per rank on 4 GPUs and above 32M
// on 2, where the kernels' NVLink stores run below the copy engines' rate. The defaults' results
// against NCCL: bench/results/2026-11-22-coll-{4,2}gpu-nvidia-h200.json.
const SizeSetting kSmMax{"GPUSTRIPE_COLL_SM_MAX", "128M",
                         "Largest alltoall/allgather per rank (the nccl-tests size) done by copy kernels that store "
                         "into the peers (sm) on more than 2 GPUs, where every pair maps the other's memory"};
const SizeSetting kSmMax2{"GPUSTRIPE_COLL_SM_MAX_2", "32M",
                          "GPUSTRIPE_COLL_SM_MAX for a team of 2 GPUs"};
// Broadcast by copy kernels in pieces beats the copy engines' chain and scatter-allgather at every
// size on 4 GPUs (no per-copy latency, and every member's egress carries a piece).
const SizeSetting kBcastSmMax{"GPUSTRIPE_COLL_BCAST_SM_MAX", "64G",
                              "Largest broadcast done by copy kernels (sm) on more than 2 GPUs, where every pair maps "
                              "the other's memory"};
// 2 GPUs: the kernel leads the copy engines' direct copy to 256M; at 1G they are even.
const SizeSetting kBcastSmMax2{"GPUSTRIPE_COLL_BCAST_SM_MAX_2", "256M",
                               "GPUSTRIPE_COLL_BCAST_SM_MAX for a team of 2 GPUs"};
// Pieces: every member's egress carries a share of the message; in pull and push the root's egress
// carries the whole message once per member, which holds them near half the pieces' rate at 2-8M
// on 4 ranks.
const ChoiceSetting kBcastSmForm{"GPUSTRIPE_COLL_BCAST_SM_FORM", "pieces",
                                 "Broadcast by copy kernels: pieces (member q reads piece q from the root and stores "
                                 "it into every member), pull (every member reads the whole message from the root) or "
                                 "push (the root stores it into every member)",
                                 {"pieces", "pull", "push"}};
const DoubleSetting kBcastHostShare{"GPUSTRIPE_COLL_BCAST_HOST_SHARE", "0",
                                    "Broadcast by copy kernels from GPUSTRIPE_COLL_BCAST_HOST_MIN: the fraction "
                                    "(0..0.5) of the message sent root -> pinned host -> members beside NVLink"};
const SizeSetting kBcastHostMin{"GPUSTRIPE_COLL_BCAST_HOST_MIN", "64M",
                                "Smallest broadcast by copy kernels that gets GPUSTRIPE_COLL_BCAST_HOST_SHARE"};
const IntSetting kBcastHostChunks{"GPUSTRIPE_COLL_BCAST_HOST_CHUNKS", "4",
                                  "Pipeline chunks of a broadcast's host part (D2H of chunk c+1 beside H2D of c)"};
const SizeSetting kRoundsMin{"GPUSTRIPE_COLL_ROUNDS_MIN", "1M",
                             "Smallest peer block for which exchanges run in permutation rounds (below: all at once)"};
// Kernels reading the peers skip the copy engines' per-copy latency and the scratch round trip:
// reduce-scatter reads with kernels at every size (rs_copy takes over from GPUSTRIPE_COLL_RS_COPY_MIN
// where it maps peers); allreduce up to 32M, above which copies into scratch run faster.
const SizeSetting kPullMax{"GPUSTRIPE_COLL_PULL_MAX", "64G",
                           "Largest size per rank for which reduce-scatter and reduce read peers with kernels "
                           "instead of copy engines"};
const SizeSetting kArPullMax{"GPUSTRIPE_COLL_AR_PULL_MAX", "32M",
                             "Largest allreduce per rank whose reduce-scatter reads peers with kernels"};
// Copies driven by the receiver (its copy engine reading a peer) run at about half the senders'
// speed and stall per-rank graphs; the MPI interposer's processes map peers' scratch, not their
// send buffers.
const StringSetting kRsCopies{"GPUSTRIPE_COLL_RS_COPIES", "sender",
                              "Whose copy engines move reduce-scatter/allreduce/reduce inputs into scratch: "
                              "sender (pushes into the owner's scratch) or receiver (the owner reads its peers)"};
const SizeSetting kScratchMax{"GPUSTRIPE_COLL_SCRATCH_MAX", "1G",
                              "Most scratch per rank for the pipeline slots of reductions (up to it, every chunk "
                              "gets its own slot and no copy waits for a reduction)"};
// A chain pipelines chunks through every rank, each link carrying the message once; scatter-allgather
// pays two phases of per-copy latency and falls behind the chain from tens of MB.
const SizeSetting kChainMin{"GPUSTRIPE_COLL_CHAIN_MIN", "32M",
                            "Smallest broadcast over more than 2 ranks sent as a chain (below: scatter-allgather "
                            "from GPUSTRIPE_COLL_ROUNDS_MIN, else direct)"};
const SizeSetting kChainChunk{"GPUSTRIPE_COLL_CHAIN_CHUNK", "8M",
                              "Pipeline chunk of chain broadcasts (up to 64 chunks)"};
// Two-shot in one kernel per rank: no copies (whose graph nodes cost rs_ag_pull ~75 us of
// host time per call at 4-32M) and no waits between GPUs inside the call, so it leads rs_ag_pull
// and the chunked rs_ag_copy at every size (the round-major rs_ag_copy takes over from
// GPUSTRIPE_COLL_AR_COPY_MIN).
const SizeSetting kTwoshotMax{"GPUSTRIPE_COLL_TWOSHOT_MAX", "64G",
                              "Largest allreduce per rank done by two-shot kernels (each rank reduces its block "
                              "from every input and writes it into every output); above: reduce-scatter and "
                              "allgather by copy engines"};
// The kernels alone (rs_pull, twoshot) move less per GPU than the copy engines do in the alltoall
// pattern; a copy-engine share is the way to add the copy engines' rate beside them.
const DoubleSetting kCeShare{"GPUSTRIPE_COLL_CE_SHARE", "0",
                             "Fraction (0..0.9) of each block of rs_pull and twoshot whose inputs copy engines move "
                             "into scratch (twoshot: and whose result they push) while the kernels read the rest"};
const SizeSetting kCeShareMin{"GPUSTRIPE_COLL_CE_SHARE_MIN", "64M",
                              "Smallest reduce-scatter/allreduce per rank that gets GPUSTRIPE_COLL_CE_SHARE"};
const StringSetting kCeCopies{"GPUSTRIPE_COLL_CE_SHARE_COPIES", "receiver",
                              "Whose copy engines move the GPUSTRIPE_COLL_CE_SHARE part: receiver (each owner reads "
                              "its peers: no waits between GPUs) or sender"};
// Two-shot leads one-shot from 1M: one-shot reads every input on every rank, n times the NVLink
// traffic, which costs more than two-shot's second step once the message fills the link.
const BoolSetting kCeLanes{"GPUSTRIPE_COLL_CE_SHARE_LANES", "0",
                           "The GPUSTRIPE_COLL_CE_SHARE copies on a stream per peer (all at once) instead of one"};
// Pushed inputs (only stores over NVLink) pay off for allreduce at 32-64M per rank; above, the
// per-rank graphs with the pushes' GPU flags fall behind the kernels' loads (~15% at 256M).
// Pushed reduce-scatters lose at every size.
const SizeSetting kPushMin{"GPUSTRIPE_COLL_PUSH_MIN", "32M",
                           "Smallest allreduce per rank whose two-shot has its inputs pushed by their owners' kernels "
                           "into scratch first (only stores over NVLink, not loads)"};
const SizeSetting kPushMax{"GPUSTRIPE_COLL_PUSH_MAX", "64M",
                           "Largest allreduce per rank with pushed inputs (see GPUSTRIPE_COLL_PUSH_MIN)"};
const SizeSetting kOneshotMax{"GPUSTRIPE_COLL_ONESHOT_MAX", "256K",
                              "Largest allreduce per rank done in one step (every rank reduces all inputs)"};
// Large messages. In exchange rounds every GPU sends and receives at once and a copy-engine round
// runs near the link's rate per direction; an SM share asks whether stores from the SMs add to that
// (bench/probes/nvlink_mix.cu measures it alone).
const DoubleSetting kSmShare{"GPUSTRIPE_COLL_SM_SHARE", "0",
                             "Fraction (0..0.9) of each alltoall/allgather peer block (from GPUSTRIPE_COLL_SM_SHARE_MIN) "
                             "that copy kernels store into the peers beside the copy engines' rounds"};
const SizeSetting kSmShareMin{"GPUSTRIPE_COLL_SM_SHARE_MIN", "16M",
                              "Smallest alltoall/allgather peer block that gets GPUSTRIPE_COLL_SM_SHARE"};
// Unlike the exchanges' few large host chunks, a reduction's many host pieces slow its NVLink copies
// by more than the host path adds (ce_twoshot to a third of its rate): no host share by default.
const DoubleSetting kRsHostShare{"GPUSTRIPE_COLL_RS_HOST_SHARE", "0",
                                 "Fraction (0..0.5) of each piece of the copy-engine reductions (rs_copy, rs_ag_copy, "
                                 "reduce_copy, ce_twoshot) sent through pinned host memory"};
const DoubleSetting kAgHostShare{"GPUSTRIPE_COLL_AG_HOST_SHARE", "0",
                                 "ce_twoshot allreduce: fraction (0..0.5) of each reduced chunk that reaches the other "
                                 "members through pinned host memory instead of the kernel's stores"};
const DoubleSetting kRsSmShare{"GPUSTRIPE_COLL_RS_SM_SHARE", "0",
                               "Copy-engine reductions (rs_copy, rs_ag_copy, reduce_copy, ce_twoshot): fraction (0..0.9) "
                               "of every piece that the sender's copy kernel stores into the owner's scratch beside "
                               "the copy engines"};
// The copy engines' rounds keep their rate beside a local reduction kernel, above kernels that read
// or store over NVLink (bench/probes/nvlink_mix.cu). But what the copy engines gain on the link the
// chunked schedule loses in its per-chunk waits and copies (~60 us per 16M piece while the host path
// and the flags run beside them): ce_twoshot trails two-shot up to 256M and is even at 1G, so it
// stays forced-only.
const SizeSetting kCeTwoshotMin{"GPUSTRIPE_COLL_CE_TWOSHOT_MIN", "64G",
                                "Smallest allreduce per rank over more than 2 GPUs that maps peers done by ce_twoshot "
                                "(copy engines move the inputs in rounds, kernels store each reduced chunk into every "
                                "member)"};
// Round-major rs_copy (below) draws level with rs_pull near 128M per rank and leads from 256M: the copy engines'
// rate beats the kernels' loads once whole blocks per round hide the per-copy latency (the
// defaults' results: bench/results/2026-11-22-coll-4gpu-nvidia-h200.json).
const SizeSetting kRsCopyMin{"GPUSTRIPE_COLL_RS_COPY_MIN", "256M",
                             "Smallest reduce-scatter per rank over more than 2 GPUs that maps peers done by rs_copy "
                             "(copy engines move the inputs in rounds, flags for the waits between GPUs)"};
const BoolSetting kCopyFlags{"GPUSTRIPE_COLL_COPY_FLAGS", "1",
                             "Copy-engine reductions (rs_copy, rs_ag_copy, reduce_copy) over more than 2 GPUs: their "
                             "waits between GPUs become flags in per-rank graphs (GPUSTRIPE_COLL_GPU_FLAGS=auto)"};
// Chunked rs_copy loses ~7-11 us per copy beyond the copy engines' rate (12 copies of 16M per GPU
// at 256M) plus the last chunk's 4-input reduction after the last copy. Round-major: whole blocks
// per round (as the exchanges' rounds), each folded in while the next moves, the last round in
// halving pieces so the final fold is short. A tail of 4-8M balances the pieces' latency against
// the last fold; a host share of every round costs a little here.
const ChoiceSetting kRsOrder{"GPUSTRIPE_COLL_RS_ORDER", "auto",
                             "Copy-engine reductions (rs_copy, rs_ag_copy, reduce_copy, ce_twoshot): chunks (every "
                             "chunk in all rounds, then the next), rounds (whole blocks per round, folded in as "
                             "they land; the last round in pieces halving down to GPUSTRIPE_COLL_RS_TAIL; no SM "
                             "share; host share: GPUSTRIPE_COLL_RS_ROUNDS_HOST_SHARE), or auto (rounds over more "
                             "than 2 GPUs that map each other's memory or reach it by copy engines, as measured; "
                             "else chunks)",
                             {"auto", "chunks", "rounds"}};
const SizeSetting kRsTail{"GPUSTRIPE_COLL_RS_TAIL", "8M",
                          "GPUSTRIPE_COLL_RS_ORDER=rounds: the last round's smallest (last) piece per block "
                          "(0: the last round in one piece)"};
const IntSetting kRsRoundsLanes{"GPUSTRIPE_COLL_RS_ROUNDS_LANES", "1",
                                "GPUSTRIPE_COLL_RS_ORDER=rounds: lanes (copy engines) the sender's copies take in turn "
                                "(1-3; 2: every copy at once beside the next, much slower than 1)"};
// Gathering each block whole after the last round costs one copy per round instead of one per
// piece, and the piece-by-piece gather's extra copies cost more than its overlap gains. A host
// share of the gather adds the PCIe path beside NVLink (~3% at 256M-1G); 5% keeps a margin before
// the host path's cliff, where a larger share gains little and sometimes loses.
const ChoiceSetting kArGather{"GPUSTRIPE_COLL_AR_GATHER", "whole",
                              "Round-major allreduce (rs_ag_copy with GPUSTRIPE_COLL_RS_ORDER=rounds): gather each "
                              "block piece by piece as its pieces are folded, or whole (one copy per round) after the "
                              "last", {"pieces", "whole"}};
const DoubleSetting kArGatherHostShare{"GPUSTRIPE_COLL_AR_GATHER_HOST_SHARE", "0.05",
                                       "GPUSTRIPE_COLL_AR_GATHER=whole: fraction (0..0.5) of every block gathered "
                                       "through pinned host memory (one D2H by its owner, an H2D by every member)"};
// The folds are local and short; with fewer blocks the flags' one-thread wait and signal kernels
// find room beside them, which outweighs the folds' own speed.
const IntSetting kRsFoldBlocks{"GPUSTRIPE_COLL_RS_FOLD_BLOCKS_PER_SM", "1",
                               "GPUSTRIPE_COLL_RS_ORDER=rounds: most thread blocks per SM of the folds' kernels "
                               "(0: GPUSTRIPE_COLL_REDUCE_BLOCKS_PER_SM)"};
// rs_ag_copy overtakes two-shot between 64M and 128M per rank; two-shot with pushed inputs at 128M
// varies between runs by more than the gap, so pushes stop at GPUSTRIPE_COLL_PUSH_MAX.
const SizeSetting kArCopyMin{"GPUSTRIPE_COLL_AR_COPY_MIN", "128M",
                             "Smallest allreduce per rank over more than 2 GPUs that maps peers done by rs_ag_copy "
                             "(copy-engine reduce-scatter, then the blocks gathered by copy engines)"};
const DoubleSetting kRsRoundsHostShare{"GPUSTRIPE_COLL_RS_ROUNDS_HOST_SHARE", "0",
                                       "GPUSTRIPE_COLL_RS_ORDER=rounds: fraction (0..0.5) of every round's block sent "
                                       "through pinned host memory (one D2H by the sender, one H2D by the owner, "
                                       "beside NVLink)"};

// Measured on the 4x H200 node (shared/HARDWARE.md): copy engines reach ~82% of the
// nominal NVLink figure, PCIe ~85% one way; with every GPU on the host path at once the
// host side gives each ~65% of that. The host share equalises the two paths' finish
// times, then takes half of that: past the balance point throughput falls off a cliff, and
// with both directions busy on every GPU the host side gives less than measured one way.
constexpr double kNvlinkEff = 0.82, kPcieEff = 0.85, kHostConcurrency = 0.65, kShareMargin = 0.5;

// Host share of alltoall/allgather peer blocks on an NVSwitch node with more than 2 GPUs, measured
// on 4x H200 (flags in per-rank graphs, 2 host chunks): an alltoall falls off the cliff past 5%, an
// allgather gains to 7-8% and falls past it at large blocks. In rounds every GPU sends and receives
// at once, and with all GPUs on the host path both ways each gets ~26 GB/s per direction; an
// alltoall crosses PCIe twice per host byte on every GPU, an allgather stages each sender's block
// once. Host traffic slows the rounds beside it, and these shares sit at the measured ceiling;
// nearby shares and chunk counts were within noise (docs/coll.md).
double measured_host_share(CollOp op, size_t block) {
  if (op == CollOp::AllToAll) return 0.05;
  return block < (size_t(128) << 20) ? 0.08 : 0.07;
}

bool is_own(CollOp op, const std::string& name) {
  auto names = schedule_names(op);
  return std::find(names.begin(), names.end(), name) != names.end();
}

// The forced name for this op, or "".
std::string forced(CollOp op) {
  std::string text = kAlgo.get();
  if (text.empty() || text == "auto") return "";
  std::vector<std::string> all;
  for (CollOp o : {CollOp::AllToAll, CollOp::AllGather, CollOp::ReduceScatter, CollOp::AllReduce, CollOp::Bcast,
                   CollOp::Reduce})
    for (auto& nm : schedule_names(o)) all.push_back(nm);
  std::string pick;
  for (const std::string& word : split(text, ',')) {
    GS_REQUIRE(std::find(all.begin(), all.end(), word) != all.end(), GPUSTRIPE_ERR_CONFIG,
               "GPUSTRIPE_COLL_ALGO: unknown schedule '%s'", word.c_str());
    if (pick.empty() && is_own(op, word)) pick = word;
  }
  return pick;
}

// Enough chunks that the pipeline's fill and drain (about one chunk each) stay small next
// to the whole; chunks of at least 512K, so each copy stays well above its fixed cost.
int chunks_for(size_t block_bytes, uint64_t chunk_setting, uint64_t most, uint64_t fewest = 4) {
  uint64_t chunk = std::max<uint64_t>(1, chunk_setting);
  uint64_t want = std::max<uint64_t>((block_bytes + chunk - 1) / chunk, std::min<uint64_t>(fewest, block_bytes >> 19));
  return static_cast<int>(std::clamp<uint64_t>(want, 1, std::max<uint64_t>(1, most)));
}
int chunks_for(size_t block_bytes) {
  return chunks_for(block_bytes, kChunk.get(), static_cast<uint64_t>(std::max<int64_t>(1, kMaxChunks.get())),
                    static_cast<uint64_t>(std::max<int64_t>(1, kMinChunks.get())));
}

std::string pct(double f) {
  return format("%.1f%%", f * 100);
}

}  // namespace

std::vector<std::string> schedule_names(CollOp op) {
  switch (op) {
    case CollOp::AllToAll:
    case CollOp::AllGather: return {"rounds", "all_at_once", "sm"};
    case CollOp::ReduceScatter: return {"rs_copy", "rs_pull"};
    case CollOp::AllReduce: return {"oneshot", "twoshot", "rs_ag_copy", "rs_ag_pull", "hier", "ce_twoshot"};
    case CollOp::Bcast: return {"direct", "scatter_ag", "chain", "sm"};
    case CollOp::Reduce: return {"reduce_copy", "reduce_pull"};
  }
  return {};
}

double auto_host_share(CollOp op, const TeamResources& res) {
  if (res.host_gbps <= 0 || res.nvlink_gbps <= 0 || res.n < 2) return 0;
  double nv = res.nvlink_gbps * kNvlinkEff;
  double host = res.host_gbps * kPcieEff * (res.n > 2 ? kHostConcurrency : 1.0);
  // Both exchanges move (n-1) blocks in and out of every GPU; the host path carries its
  // share of them over the GPU's PCIe link in each direction.
  double balance = host / (nv + host);
  return kShareMargin * balance;
}

std::string Choice::describe() const {
  std::string s = name;
  if (name == "rounds" || name == "all_at_once") {
    s += " host=" + pct(exchange.host_share);
    if (exchange.host_share > 0) s += format(" chunks=%d", exchange.host_chunks);
    if (exchange.local_kernel) s += " local=kernel";
    if (name == "rounds" && exchange.round_lanes > 1) s += format(" lanes=%d", exchange.round_lanes);
    if (exchange.sm_share > 0) s += " sm=" + pct(exchange.sm_share);
  }
  else if (name == "direct" || name == "scatter_ag" || name == "chain") s += format(" chunks=%d", bcast.chunks);
  else if (name == "sm") {
    s += bcast.kernel.empty() ? "" : " form=" + bcast.kernel;
    if (bcast.host_share > 0) s += " host=" + pct(bcast.host_share) + format(" chunks=%d", bcast.host_chunks);
  }
  else if (name != "oneshot" && name != "twoshot")
    s += format(" chunks=%d slots=%d%s", reduce.chunks, reduce.slots,
                reduce.pull ? "" : reduce.receiver_copies ? " copies=receiver" : " copies=sender");
  if (reduce.push) s += " push";
  if (reduce.host_share > 0) s += " host=" + pct(reduce.host_share);
  if (reduce.ag_host_share > 0) s += " ag_host=" + pct(reduce.ag_host_share);
  if (reduce.sm_share > 0) s += " sm=" + pct(reduce.sm_share);
  if (reduce.flags) s += " flags";
  if (reduce.by_round) s += " by_round tail=" + format_size(reduce.tail);
  if (reduce.by_round && reduce.copy_lanes > 1) s += format(" copy_lanes=%d", reduce.copy_lanes);
  if (reduce.gather_whole) s += " gather=whole";
  if (reduce.gather_host_share > 0) s += " gather_host=" + pct(reduce.gather_host_share);
  if (reduce.copy_share > 0)
    s += format(" ce=%s%s", pct(reduce.copy_share).c_str(), reduce.receiver_copies ? " copies=receiver" : " copies=sender");
  return s + ": " + why;
}

bool wants_host_share(CollOp op, const TeamResources& res, size_t bytes) {
  if (res.nvswitch && res.n > 2) return false;  // measured shares, no planner (choose_schedule)
  return (op == CollOp::AllToAll || op == CollOp::AllGather) && kHostShare.get() == "auto" &&
         bytes / std::max(1, res.n) >= kHostMin.get() && auto_host_share(op, res) > 0;
}

Choice choose_schedule(CollOp op, const TeamResources& res, size_t bytes, size_t esz, double planned) {
  Choice c;
  const int n = std::max(1, res.n);
  std::string force = forced(op);
  std::string size = format_size(bytes);
  auto why_forced = [&](const std::string& name) {
    return "GPUSTRIPE_COLL_ALGO=" + kAlgo.get() + " picks " + name;
  };

  if (op == CollOp::AllToAll || op == CollOp::AllGather) {
    const size_t block = bytes / n;  // one peer's block
    const size_t rounds_min = kRoundsMin.get();
    // Not where a host share is asked for by name: kernels store over NVLink only.
    const std::string asked_share = kHostShare.get();
    const bool sm = res.all_peer && n > 1 && bytes <= (n > 2 ? kSmMax.get() : kSmMax2.get()) &&
                    (asked_share == "auto" || parse_double(asked_share, "GPUSTRIPE_COLL_HOST_SHARE") == 0);
    c.name = !force.empty() ? force : sm ? "sm" : block >= rounds_min ? "rounds" : "all_at_once";
    GS_REQUIRE(c.name != "sm" || res.all_peer, GPUSTRIPE_ERR_NOT_SUPPORTED,
               "schedule sm stores into peers' memory, but not every pair of these GPUs can");
    c.exchange.rounds = c.name == "rounds";
    c.exchange.kernel = c.name == "sm";
    c.why = !force.empty() ? why_forced(c.name)
            : c.exchange.kernel
                ? format("%s <= GPUSTRIPE_COLL_SM_MAX%s: one copy kernel per rank stores every block into its peer, "
                         "the GPUs' barrier inside",
                         size.c_str(), n > 2 ? "" : "_2")
            : c.exchange.rounds
                ? format("%s blocks >= %s: permutation rounds keep one copy per NVLink port and direction",
                         format_size(block).c_str(), format_size(rounds_min).c_str())
                : format("%s blocks < %s: all peers at once, per-copy latency dominates", format_size(block).c_str(),
                         format_size(rounds_min).c_str());
    std::string hs = kHostShare.get();
    const bool measured = res.nvswitch && n > 2;  // the node kind measured_host_share was measured on (4x H200)
    if (c.exchange.kernel) {
      hs = "0";  // kernels store over NVLink only
    }
    if (hs == "auto" && measured) {
      if (block >= kHostMin.get()) {
        c.exchange.host_share = measured_host_share(op, block);
        c.why += format("; host share %s: measured on NVSwitch nodes (all GPUs on the host path both ways)",
                        pct(c.exchange.host_share).c_str());
      }
    } else if (hs == "auto") {
      if (block >= kHostMin.get()) {
        double bound = auto_host_share(op, res);
        c.exchange.host_share = planned >= 0 ? std::min(planned, bound) : bound;
        if (c.exchange.host_share > 0)
          c.why += format("; host share %s: %s", pct(c.exchange.host_share).c_str(),
                          planned >= 0 && planned < bound
                              ? format("the planner's for one round (bound %s)", pct(bound).c_str()).c_str()
                              : format("half the balance of nominal links (NVLink %.0f, PCIe %.0f GB/s)%s",
                                       res.nvlink_gbps, res.host_gbps,
                                       planned >= 0 ? format(", planner %s", pct(planned).c_str()).c_str() : "")
                                    .c_str());
      }
    } else {
      double f = parse_double(hs, "GPUSTRIPE_COLL_HOST_SHARE");
      GS_REQUIRE(f >= 0 && f <= 0.5, GPUSTRIPE_ERR_CONFIG, "GPUSTRIPE_COLL_HOST_SHARE=%s: expected auto or 0..0.5",
                 hs.c_str());
      c.exchange.host_share = f;
      if (f > 0) c.why += "; host share " + pct(f) + " from GPUSTRIPE_COLL_HOST_SHARE";
    }
    c.exchange.host_chunks = kHostChunks.get() > 0 ? static_cast<int>(std::min<int64_t>(kHostChunks.get(), 64))
                             : measured                ? 2
                                                       : std::clamp(chunks_for(block), 2, 16);
    c.exchange.local_kernel = kLocalCopy.get() == "kernel";
    c.exchange.round_lanes = static_cast<int>(std::clamp<int64_t>(kRoundLanes.get(), 1, 4));
    if (res.all_peer && block >= kSmShareMin.get()) c.exchange.sm_share = std::clamp(kSmShare.get(), 0.0, 0.9);
    return c;
  }

  if (op == CollOp::Bcast) {
    c.name = !force.empty()                                 ? force
             : res.all_peer && n > 1 && bytes <= (n > 2 ? kBcastSmMax.get() : kBcastSmMax2.get()) ? "sm"
             : (n > 2 || res.chain_pairs) && bytes >= kChainMin.get() ? "chain"
             : n > 2 && bytes >= kRoundsMin.get()            ? "scatter_ag"
                                                             : "direct";
    GS_REQUIRE(c.name != "sm" || res.all_peer, GPUSTRIPE_ERR_NOT_SUPPORTED,
               "schedule sm stores into peers' memory, but not every pair of these GPUs can");
    if (c.name == "sm") {
      c.bcast.kernel = kBcastSmForm.get();
      const double share = kBcastHostShare.get();
      GS_REQUIRE(share >= 0 && share <= 0.5, GPUSTRIPE_ERR_CONFIG,
                 "GPUSTRIPE_COLL_BCAST_HOST_SHARE=%g: expected 0..0.5", share);
      if (bytes >= kBcastHostMin.get()) c.bcast.host_share = share;
      c.bcast.host_chunks = static_cast<int>(std::clamp<int64_t>(kBcastHostChunks.get(), 1, 64));
    }
    c.bcast.scatter_allgather = c.name == "scatter_ag";
    c.bcast.chain = c.name == "chain";
    c.bcast.chunks = c.bcast.chain ? chunks_for(bytes, kChainChunk.get(), 64, 8)
                                   : chunks_for(bytes / std::max(1, n - 1), kBcastChunk.get(), 32);
    c.why = !force.empty() ? why_forced(c.name)
            : !c.bcast.kernel.empty()
                ? size + " <= GPUSTRIPE_COLL_BCAST_SM_MAX" + (n > 2 ? "" : "_2") +
                      ": copy kernels, the GPUs' barrier inside (" + c.bcast.kernel + ")"
            : c.bcast.chain
                ? size + " >= GPUSTRIPE_COLL_CHAIN_MIN over " + std::to_string(n) +
                      " ranks: chunks pass along the ranks, every GPU sends and receives the message once"
            : c.bcast.scatter_allgather
                ? size + " over " + std::to_string(n) + " ranks: root sends each byte once, members forward pieces"
                : size + (n > 2 ? " below GPUSTRIPE_COLL_ROUNDS_MIN" : " between 2 ranks") + ": root sends to all";
    return c;
  }

  // Reductions. Per-rank block sizes decide chunking; peers' memory must be mapped to pull.
  const size_t block = op == CollOp::ReduceScatter ? bytes / n : bytes / n;
  const bool pull_ok = res.all_peer;
  const bool small = bytes <= (op == CollOp::AllReduce ? kArPullMax.get() : kPullMax.get());
  c.reduce.chunks = chunks_for(block);
  const char* prefix = op == CollOp::ReduceScatter ? "rs_" : op == CollOp::AllReduce ? "rs_ag_" : "reduce_";
  if (!force.empty()) {
    c.name = force;
    c.why = why_forced(force);
    if ((force.find("pull") != std::string::npos || force == "oneshot" || force == "twoshot" || force == "ce_twoshot") &&
        !pull_ok)
      GS_THROW(GPUSTRIPE_ERR_NOT_SUPPORTED, "schedule %s reads peers' memory, but not every pair of these GPUs can",
               force.c_str());
  } else if (op == CollOp::AllReduce && res.socket_groups.size() > 1) {
    c.name = "hier";
    c.why = format("%zu sockets of %zu GPUs: reduce-scatter inside sockets, allreduce across, allgather inside",
                   res.socket_groups.size(), res.socket_groups[0].size());
  } else if (op == CollOp::AllReduce && pull_ok && n > 2 && bytes >= kCeTwoshotMin.get()) {
    c.name = "ce_twoshot";
    c.why = size + " >= GPUSTRIPE_COLL_CE_TWOSHOT_MIN: copy engines move the inputs in rounds, kernels store each "
                   "reduced chunk into every member";
  } else if (op == CollOp::ReduceScatter && pull_ok && n > 2 && bytes >= kRsCopyMin.get()) {
    c.name = "rs_copy";
    c.why = size + " >= GPUSTRIPE_COLL_RS_COPY_MIN: copy engines move the inputs in rounds, kernels reduce chunk c "
                   "while chunk c+1 moves";
  } else if (op == CollOp::AllReduce && pull_ok && n > 2 && bytes >= kArCopyMin.get()) {
    c.name = "rs_ag_copy";
    c.why = size + " >= GPUSTRIPE_COLL_AR_COPY_MIN: copy engines move the inputs in rounds and gather the reduced "
                   "blocks";
  } else if (op == CollOp::AllReduce && pull_ok && bytes <= kOneshotMax.get()) {
    c.name = "oneshot";
    c.why = size + " <= GPUSTRIPE_COLL_ONESHOT_MAX: one kernel per rank reads every input (latency path)";
  } else if (op == CollOp::AllReduce && pull_ok && bytes <= kTwoshotMax.get()) {
    c.name = "twoshot";
    c.why = size + " <= GPUSTRIPE_COLL_TWOSHOT_MAX: one kernel per rank reduces its block from every input and "
                   "writes it into every output";
  } else if (pull_ok && small) {
    c.name = std::string(prefix) + "pull";
    c.why = size + (op == CollOp::AllReduce ? " <= GPUSTRIPE_COLL_AR_PULL_MAX" : " <= GPUSTRIPE_COLL_PULL_MAX") +
            ": kernels read peers' blocks directly, no copies to wait for";
  } else {
    c.name = std::string(prefix) + "copy";
    c.why = pull_ok ? size + ": copy engines move blocks into scratch, kernels reduce chunk c while chunk c+1 moves"
                    : "not every pair maps peer memory: copy engines move blocks, kernels reduce locally";
  }
  c.reduce.pull = c.name.find("pull") != std::string::npos;
  // A pulled reduce-scatter has nothing to overlap its chunks with: one kernel per rank.
  if (c.name == "oneshot" || c.name == "twoshot" || c.name == "rs_pull") c.reduce.chunks = 1;
  const std::string copies = kRsCopies.get();
  GS_REQUIRE(copies == "receiver" || copies == "sender", GPUSTRIPE_ERR_CONFIG,
             "GPUSTRIPE_COLL_RS_COPIES=%s: expected receiver or sender", copies.c_str());
  c.reduce.receiver_copies = copies == "receiver";
  if ((c.name == "rs_pull" || c.name == "twoshot") && n > 1 && bytes >= kCeShareMin.get()) {
    const double share = kCeShare.get();
    GS_REQUIRE(share >= 0 && share <= 0.9, GPUSTRIPE_ERR_CONFIG, "GPUSTRIPE_COLL_CE_SHARE=%g: expected 0..0.9", share);
    const std::string by = kCeCopies.get();
    GS_REQUIRE(by == "receiver" || by == "sender", GPUSTRIPE_ERR_CONFIG,
               "GPUSTRIPE_COLL_CE_SHARE_COPIES=%s: expected receiver or sender", by.c_str());
    c.reduce.copy_share = share;
    c.reduce.peer_lanes = kCeLanes.get();
    if (share > 0) c.reduce.receiver_copies = by == "receiver";
  }
  // Measured with 4 GPUs only; 2 keep the kernel reads.
  if (c.name == "twoshot" && n > 2 && bytes >= kPushMin.get() && bytes <= kPushMax.get()) {
    c.reduce.push = true;
    c.reduce.copy_share = 0;
  }
  // Copy-engine reductions: their inputs cross NVLink in the alltoall's permutation rounds, so
  // they take the alltoall's host share and, like it, flags for their waits between GPUs.
  c.reduce.ag_stores = c.name == "ce_twoshot";
  if (c.name == "rs_copy" || c.name == "rs_ag_copy" || c.name == "reduce_copy" || c.name == "ce_twoshot") {
    c.reduce.flags = kCopyFlags.get() && n > 2;
    auto share = [&](const DoubleSetting& setting) {
      const double f = setting.get();
      GS_REQUIRE(f >= 0 && f <= 0.5, GPUSTRIPE_ERR_CONFIG, "%s=%g: expected 0..0.5", setting.name(), f);
      return f;
    };
    c.reduce.host_share = share(kRsHostShare);
    if (res.all_peer) c.reduce.sm_share = std::clamp(kRsSmShare.get(), 0.0, 0.9);
    if (c.reduce.ag_stores) c.reduce.ag_host_share = share(kAgHostShare);
  }
  // Round-major: a whole block per peer in scratch (else chunks), no SM share, a host share of its own.
  if ((c.name == "rs_copy" || c.name == "rs_ag_copy" || c.name == "reduce_copy" || c.name == "ce_twoshot") &&
      (kRsOrder.get() == "rounds" || (kRsOrder.get() == "auto" && (res.all_peer || res.copy_peers) && n > 2)) &&
      block * static_cast<uint64_t>(std::max(1, n - 1)) <= kScratchMax.get()) {
    c.reduce.by_round = true;
    c.reduce.tail = kRsTail.get();
    c.reduce.sm_share = c.reduce.ag_host_share = 0;
    c.reduce.host_share = kRsRoundsHostShare.get();
    c.reduce.copy_lanes = static_cast<int>(std::clamp<int64_t>(kRsRoundsLanes.get(), 1, 3));
    c.reduce.fold_blocks_per_sm = static_cast<int>(std::clamp<int64_t>(kRsFoldBlocks.get(), 0, 64));
    if (c.name == "rs_ag_copy" && kArGather.get() == "whole") {
      c.reduce.gather_whole = true;
      c.reduce.gather_host_share = kArGatherHostShare.get();
      GS_REQUIRE(c.reduce.gather_host_share >= 0 && c.reduce.gather_host_share <= 0.5, GPUSTRIPE_ERR_CONFIG,
                 "GPUSTRIPE_COLL_AR_GATHER_HOST_SHARE=%g: expected 0..0.5", c.reduce.gather_host_share);
    }
    GS_REQUIRE(c.reduce.host_share >= 0 && c.reduce.host_share <= 0.5, GPUSTRIPE_ERR_CONFIG,
               "GPUSTRIPE_COLL_RS_ROUNDS_HOST_SHARE=%g: expected 0..0.5", c.reduce.host_share);
  }
  // Slots: as many as chunks when the scratch allows (no copy ever waits for a reduction).
  const uint64_t chunk_bytes = std::max<uint64_t>(1, (block + c.reduce.chunks - 1) / c.reduce.chunks);
  const uint64_t fit = kScratchMax.get() / (chunk_bytes * std::max(1, n - 1));
  c.reduce.slots = static_cast<int>(std::clamp<uint64_t>(fit, 2, std::max(2, c.reduce.chunks)));
  return c;
}

}  // namespace gpustripe::coll
