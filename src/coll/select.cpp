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
// engines' schedules pay ~30 us per call of copy-node, graph and barrier latency (session 2
// timelines; NCCL's alltoall at 4M per rank takes ~27 us in all). Session 3 r2 (4x H200, busbw
// GB/s, alltoall sm / copy-engine schedules / NCCL): 1M 58/22/52, 4M 159/79/145, 16M 272/188/257,
// 64M 328/303, 128M 341/336, 256M 346/369 (rounds with the host share); allgather alike (64M
// 325/299, 256M 345/382). At 2 ranks: 16M 262/187, 64M 287/293.
const SizeSetting kSmMax{"GPUSTRIPE_COLL_SM_MAX", "128M",
                         "Largest alltoall/allgather per rank (the nccl-tests size) done by copy kernels that store "
                         "into the peers (sm) on more than 2 GPUs, where every pair maps the other's memory"};
const SizeSetting kSmMax2{"GPUSTRIPE_COLL_SM_MAX_2", "32M",
                          "GPUSTRIPE_COLL_SM_MAX for a team of 2 GPUs"};
// Session 3 r2 (4x H200, busbw GB/s, bcast sm pieces / chain or scatter-allgather / NCCL): 1M 65/23/38,
// 4M 177/66/131, 16M 265/134/226, 64M 283/236/309 (NCCL of session 2), 256M 335/303/348, 1G 357/341/360;
// at 2 ranks sm 86-374 vs NCCL 42-366 at 1M-1G (copy-engine direct 377 at 1G).
const SizeSetting kBcastSmMax{"GPUSTRIPE_COLL_BCAST_SM_MAX", "64G",
                              "Largest broadcast done by copy kernels (sm) on more than 2 GPUs, where every pair maps "
                              "the other's memory"};
// 2 GPUs, r2/r3 (busbw GB/s, sm / copy-engine direct): 256M 369/337-338, 1G 373-374/376-377.
const SizeSetting kBcastSmMax2{"GPUSTRIPE_COLL_BCAST_SM_MAX_2", "256M",
                               "GPUSTRIPE_COLL_BCAST_SM_MAX for a team of 2 GPUs"};
// r2, 4 ranks: pull 54/76/94/107 and push 55/76/92/104 at 1M/2M/4M/8M (the root's egress carries the
// message 3 times), pieces 65/121/177/209.
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
// Round 2 on 4x H200 (busbw GB/s, 16M/64M/256M): reduce-scatter with kernels reading the peers
// 144/203/251 vs copy engines into scratch 58-86/185/225-258; allreduce 150/192/200 vs
// 80/204/230-297 (32M chunks). Reduce-scatter reads with kernels at every size; allreduce
// up to 32M, then copies.
const SizeSetting kPullMax{"GPUSTRIPE_COLL_PULL_MAX", "64G",
                           "Largest size per rank for which reduce-scatter and reduce read peers with kernels "
                           "instead of copy engines"};
const SizeSetting kArPullMax{"GPUSTRIPE_COLL_AR_PULL_MAX", "32M",
                             "Largest allreduce per rank whose reduce-scatter reads peers with kernels"};
// Copies driven by the receiver (its copy engine reading a peer) ran at a third of the
// senders' speed in round 2 (reduce-scatter 256M: 105 vs 225 GB/s) and stalled per-rank
// graphs; the MPI interposer's processes map peers' scratch, not their send buffers.
const StringSetting kRsCopies{"GPUSTRIPE_COLL_RS_COPIES", "sender",
                              "Whose copy engines move reduce-scatter/allreduce/reduce inputs into scratch: "
                              "sender (pushes into the owner's scratch) or receiver (the owner reads its peers)"};
const SizeSetting kScratchMax{"GPUSTRIPE_COLL_SCRATCH_MAX", "1G",
                              "Most scratch per rank for the pipeline slots of reductions (up to it, every chunk "
                              "gets its own slot and no copy waits for a reduction)"};
// Round 1 of session 2 (4x H200, busbw GB/s at 64M/256M): chain 239/302, scatter_ag 196/207.
const SizeSetting kChainMin{"GPUSTRIPE_COLL_CHAIN_MIN", "32M",
                            "Smallest broadcast over more than 2 ranks sent as a chain (below: scatter-allgather "
                            "from GPUSTRIPE_COLL_ROUNDS_MIN, else direct)"};
const SizeSetting kChainChunk{"GPUSTRIPE_COLL_CHAIN_CHUNK", "8M",
                              "Pipeline chunk of chain broadcasts (up to 64 chunks)"};
const BoolSetting kBcastLanes{"GPUSTRIPE_COLL_BCAST_LANES", "0",
                              "Scatter-allgather broadcast: a lane per destination (the root and every "
                              "forwarder send to all at once), else one lane per rank"};
// Two-shot in one kernel per rank: no copies (whose graph nodes cost rs_ag_pull ~75 us of
// host time per call at 4-32M in round 3) and no waits between GPUs inside the call. r1 of
// session 2 (busbw GB/s, 4M/16M/64M/256M): two-shot 189/273/312/319; rs_ag_pull 99/164 and
// rs_ag_copy 197/292 (64M/256M).
const SizeSetting kTwoshotMax{"GPUSTRIPE_COLL_TWOSHOT_MAX", "64G",
                              "Largest allreduce per rank done by two-shot kernels (each rank reduces its block "
                              "from every input and writes it into every output); above: reduce-scatter and "
                              "allgather by copy engines"};
// Round r1 of session 2 (4x H200): the kernels alone move ~320 GB/s per GPU at 256M (rs_pull,
// twoshot), below the copy engines' ~360 in the alltoall pattern.
const DoubleSetting kCeShare{"GPUSTRIPE_COLL_CE_SHARE", "0",
                             "Fraction (0..0.9) of each block of rs_pull and twoshot whose inputs copy engines move "
                             "into scratch (twoshot: and whose result they push) while the kernels read the rest"};
const SizeSetting kCeShareMin{"GPUSTRIPE_COLL_CE_SHARE_MIN", "64M",
                              "Smallest reduce-scatter/allreduce per rank that gets GPUSTRIPE_COLL_CE_SHARE"};
const StringSetting kCeCopies{"GPUSTRIPE_COLL_CE_SHARE_COPIES", "receiver",
                              "Whose copy engines move the GPUSTRIPE_COLL_CE_SHARE part: receiver (each owner reads "
                              "its peers: no waits between GPUs) or sender"};
// r1 of session 2 (busbw GB/s, 1M/2M): one-shot 60/90, two-shot 78/130.
const BoolSetting kCeLanes{"GPUSTRIPE_COLL_CE_SHARE_LANES", "0",
                           "The GPUSTRIPE_COLL_CE_SHARE copies on a stream per peer (all at once) instead of one"};
// r2 of session 2 (allreduce busbw GB/s, 32M/64M/128M/256M): inputs pushed, per-rank graphs with
// GPU flags 296/321/314/265, loaded by the kernels 279-291/307-311/306-317/318-320. Pushed
// reduce-scatters lost at every size (256M: 205-284 vs 320).
const SizeSetting kPushMin{"GPUSTRIPE_COLL_PUSH_MIN", "32M",
                           "Smallest allreduce per rank whose two-shot has its inputs pushed by their owners' kernels "
                           "into scratch first (only stores over NVLink, not loads)"};
const SizeSetting kPushMax{"GPUSTRIPE_COLL_PUSH_MAX", "64M",
                           "Largest allreduce per rank with pushed inputs (see GPUSTRIPE_COLL_PUSH_MIN)"};
const SizeSetting kOneshotMax{"GPUSTRIPE_COLL_ONESHOT_MAX", "256K",
                              "Largest allreduce per rank done in one step (every rank reduces all inputs)"};
// Large messages (session 3). In exchange rounds every GPU sends and receives at once and a
// copy-engine round runs at ~363 GB/s per direction (session 2 timelines); an SM share asks
// whether stores from the SMs add to that (bench/probes/nvlink_mix.cu measures it alone).
const DoubleSetting kSmShare{"GPUSTRIPE_COLL_SM_SHARE", "0",
                             "Fraction (0..0.9) of each alltoall/allgather peer block (from GPUSTRIPE_COLL_SM_SHARE_MIN) "
                             "that copy kernels store into the peers beside the copy engines' rounds"};
const SizeSetting kSmShareMin{"GPUSTRIPE_COLL_SM_SHARE_MIN", "16M",
                              "Smallest alltoall/allgather peer block that gets GPUSTRIPE_COLL_SM_SHARE"};
// Session 3 r3 (4x H200, busbw GB/s at 256M / 1G per rank): rs_copy with 5% of every piece through
// the host 287 / 308, without 311 / 336 (8%: 252 / 271); ce_twoshot with 5% + 5% 100 / 110, without
// 289 / 329. Unlike the exchanges' few large host chunks, a reduction's many host pieces slowed its
// NVLink copies: no host share by default.
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
// Session 3 r2 probe: the copy engines' rounds run at ~369 GB/s per direction beside a local reduction
// kernel (364), above kernels that read or store over NVLink (305-339). But r3 (busbw GB/s at
// 64M/128M/256M/1G, no host share): ce_twoshot 247/278/289/329 vs two-shot 322/305/320/324, so it
// stays forced-only; rs_copy 238/280/311/336 vs rs_pull 302/313/320/324, so from 1G. What the copy
// engines gain on the link the schedule loses in its per-chunk waits and copies (traces: ~60 us per
// 16M piece while the host path and the flags run beside them).
const SizeSetting kCeTwoshotMin{"GPUSTRIPE_COLL_CE_TWOSHOT_MIN", "64G",
                                "Smallest allreduce per rank over more than 2 GPUs that maps peers done by ce_twoshot "
                                "(copy engines move the inputs in rounds, kernels store each reduced chunk into every "
                                "member)"};
// Session 4 r2 (4x H200, busbw GB/s at 64M/128M/256M/1G, one run): round-major rs_copy (below) with
// 1 block per SM per fold 283/321/352/377 vs rs_pull 302/317/325/333 (chunked rs_copy 236/279/319/325).
// r3 at 64M/128M/256M/512M/1G: 278/318/348/366/377 vs rs_pull 294/311/320/322/325; NCCL 262/290/301.
const SizeSetting kRsCopyMin{"GPUSTRIPE_COLL_RS_COPY_MIN", "256M",
                             "Smallest reduce-scatter per rank over more than 2 GPUs that maps peers done by rs_copy "
                             "(copy engines move the inputs in rounds, flags for the waits between GPUs)"};
const BoolSetting kCopyFlags{"GPUSTRIPE_COLL_COPY_FLAGS", "1",
                             "Copy-engine reductions (rs_copy, rs_ag_copy, reduce_copy) over more than 2 GPUs: their "
                             "waits between GPUs become flags in per-rank graphs (GPUSTRIPE_COLL_GPU_FLAGS=auto)"};
// Session 4: s3's chunked rs_copy lost ~7-11 us per copy beyond the copy engines' rate (12 copies
// of 16M per GPU at 256M) plus the last chunk's 4-input reduction (r2 timeline: 16M copies 55-70
// us each, 802 us per call traced vs 691 round-major). Round-major: whole blocks per round (as the
// exchanges' rounds), each folded in while the next moves, the last round in halving pieces.
// r2 at 256M: tail 2M/4M/8M 342/343/350, the last round whole (tail 0) 324; 2 lanes 227; a host
// share of every round 3%/5% 340/339. r3 at 256M/512M/1G: tail 4M/8M/16M 351/351/343, 365/366/361,
// 375/376/376; folds with 2 blocks per SM 349/365/372.
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
                                "(1-3; 2: every copy at once beside the next: r2 227 vs 343 at 256M)"};
// r2, allreduce busbw at 64M/128M/256M/1G: round-major reduce-scatter then each block gathered whole
// 301/330/355/379 (with 5% of it through the host 298/336/363/387, 8% 277/330/364/379; 1 block per SM
// per fold 306/336/358/381) vs gathered piece by piece 278/298/316/354 and two-shot 309/315/319/325.
// r3 at 256M/512M/1G: 5% 369/383/390, 8% 374/389/390, none 359/372/380 (5%: the margin before the
// host path's cliff; r2 at 1G 387 vs 8% 379).
const ChoiceSetting kArGather{"GPUSTRIPE_COLL_AR_GATHER", "whole",
                              "Round-major allreduce (rs_ag_copy with GPUSTRIPE_COLL_RS_ORDER=rounds): gather each "
                              "block piece by piece as its pieces are folded, or whole (one copy per round) after the "
                              "last", {"pieces", "whole"}};
const DoubleSetting kArGatherHostShare{"GPUSTRIPE_COLL_AR_GATHER_HOST_SHARE", "0.05",
                                       "GPUSTRIPE_COLL_AR_GATHER=whole: fraction (0..0.5) of every block gathered "
                                       "through pinned host memory (one D2H by its owner, an H2D by every member)"};
// r2 (4x H200, busbw GB/s at 256M): round-major reduce-scatter 352 with 1 block per SM vs 343 with the
// reducer's 4; allreduce (gathered whole) 358 vs 355. The folds are local and short; with fewer blocks
// the flags' one-thread wait and signal kernels find room beside them.
const IntSetting kRsFoldBlocks{"GPUSTRIPE_COLL_RS_FOLD_BLOCKS_PER_SM", "1",
                               "GPUSTRIPE_COLL_RS_ORDER=rounds: most thread blocks per SM of the folds' kernels "
                               "(0: GPUSTRIPE_COLL_REDUCE_BLOCKS_PER_SM)"};
// r3 (busbw GB/s, 64M/128M/256M, NCCL of the same run 306/326/337): rs_ag_copy 307/344/366, two-shot
// (push to 64M) 326/316/320; r2 at 128M: 336 vs 315. Two-shot with pushed inputs at 128M: 338 in r2, 291 in r3.
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

// Host share of alltoall/allgather peer blocks on an NVSwitch node with more than 2 GPUs, from
// session 2 r2 (4x H200, busbw GB/s at 256M / 1G per rank, flags in per-rank graphs, 2 host
// chunks; no share: 361/390): alltoall 5% 368/393, 7% 342/293 (past the cliff); allgather 5%
// 371/399, 7% 374/405, 9% 381/360. In rounds every GPU sends and receives at once, and with
// all GPUs on the host path both ways each gets ~26 GB/s per direction; an alltoall crosses
// PCIe twice per host byte on every GPU, an allgather stages each sender's block once. Session 4
// (r2 probe, r3 shares +-0.5-1 point and 1 vs 2 chunks): host traffic slows the rounds beside it, and
// these shares sit at the measured ceiling; nothing beat them beyond the run's ~3% noise (docs/coll.md).
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
    const bool measured = res.nvswitch && n > 2;  // the node kind session 2 measured (4x H200)
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
    c.bcast.lane_per_peer = kBcastLanes.get();
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
