#include "coll/select.hpp"


#include <algorithm>
#include <cmath>

#include "common/config.hpp"
#include "common/error.hpp"
#include "common/log.hpp"
#include "common/text_file.hpp"
#include "model/planner.hpp"

namespace gpustripe::coll {
namespace {

const StringSetting kAlgo{"GPUSTRIPE_COLL_ALGO", "auto",
                          "Force a collective schedule instead of the automatic choice (to compare schedules or "
                          "avoid one): auto, or a comma list of names, each operation taking the first that is its "
                          "own (rounds, all_at_once, sm, rs_copy, rs_pull, oneshot, twoshot, rs_ag_copy, "
                          "rs_ag_pull, hier, ce_twoshot, direct, scatter_ag, chain, reduce_copy, reduce_pull)"};

// Measured on a 4x H200 node: copy engines reach ~82% of the
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
int chunks_for(size_t block_bytes, const Tuning& t) {
  return chunks_for(block_bytes, t.chunk, static_cast<uint64_t>(std::max(1, t.max_chunks)),
                    static_cast<uint64_t>(std::max(1, t.min_chunks)));
}

std::string pct(double f) {
  return format("%.1f%%", f * 100);
}

}  // namespace

std::string forced_schedules() { return kAlgo.get(); }

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
  }
  else if (name == "direct" || name == "scatter_ag" || name == "chain") s += format(" chunks=%d", bcast.chunks);
  else if (name == "sm") {
    if (bcast.kernel) s += " form=pieces";
  }
  else if (name != "oneshot" && name != "twoshot")
    s += format(" chunks=%d slots=%d%s", reduce.chunks, reduce.slots, reduce.pull ? "" : " copies=sender");
  if (bcast.host_share > 0) s += " host=" + pct(bcast.host_share) + format(" host_chunks=%d", bcast.host_chunks);
  if (reduce.push) s += " push";
  if (reduce.flags) s += " flags";
  if (reduce.by_round) s += " by_round tail=" + format_size(reduce.tail);
  if (reduce.gather_whole) s += " gather=whole";
  if (reduce.gather_host_share > 0) s += " gather_host=" + pct(reduce.gather_host_share);
  return s + ": " + why;
}

bool wants_host_share(CollOp op, const TeamResources& res, size_t bytes, const Tuning& t) {
  if (res.nvswitch && res.n > 2) return false;  // measured shares, no planner (choose_schedule)
  return (op == CollOp::AllToAll || op == CollOp::AllGather) && t.host_share < 0 &&
         bytes / std::max(1, res.n) >= t.host_min && auto_host_share(op, res) > 0;
}

bool wants_bcast_host_share(const TeamResources& res, const Tuning& t) { return res.n == 2 && t.bcast_host_share < 0; }

PlannedHost plan_pair_host(Planner& planner, const std::vector<int>& devices, uint64_t bytes) {
  PlannedHost least;
  if (bytes == 0) return least;
  for (int a : devices)
    for (int b : devices) {
      if (a == b) continue;
      PlannedHost h{0, 0};
      try {
        const Plan plan = planner.plan(a, b, bytes);
        for (const PathPlan& path : plan.paths)
          if (path.kind == PathKind::HostStaged) {
            h.share += static_cast<double>(path.bytes) / static_cast<double>(plan.bytes);
            h.chunks = std::max(h.chunks, path.chunks);
          }
      } catch (const Error& e) {
        GS_LOG_INFO(Subsys::Coll, "planner gave no plan for %llu bytes from GPU %d to %d: %s",
                    static_cast<unsigned long long>(bytes), a, b, e.what());
        return PlannedHost{};
      }
      if (least.share < 0 || h.share < least.share) least = h;
    }
  return least;
}

std::vector<std::string> measured_candidates(CollOp op, const TeamResources& res, size_t bytes, const Tuning& t) {
  if (op != CollOp::Bcast || !res.host_paced || res.n != 2 || !res.all_peer || bytes == 0 ||
      bytes > t.bcast_sm_max_2 || (res.chain_pairs && bytes >= t.chain_min) || !forced(op).empty())
    return {};
  return {"sm", "direct"};
}

Choice choose_schedule(CollOp op, const TeamResources& res, size_t bytes, size_t esz, const Tuning& t,
                       const PlannedHost& planned_host, const std::string& measured_form) {
  const double planned = planned_host.share;
  (void)esz;
  t.validate();
  Choice c;
  const int n = std::max(1, res.n);
  std::string force = forced(op);
  std::string size = format_size(bytes);
  auto why_forced = [&](const std::string& name) {
    return "GPUSTRIPE_COLL_ALGO=" + kAlgo.get() + " picks " + name;
  };

  if (op == CollOp::AllToAll || op == CollOp::AllGather) {
    const size_t block = bytes / n;  // one peer's block
    // Not where a host share is asked for: kernels store over NVLink only.
    const bool sm = res.all_peer && n > 1 && bytes <= t.sm_max && t.host_share <= 0;
    c.name = !force.empty() ? force : sm ? "sm" : block >= t.rounds_min ? "rounds" : "all_at_once";
    GS_REQUIRE(c.name != "sm" || res.all_peer, GPUSTRIPE_ERR_NOT_SUPPORTED,
               "schedule sm stores into peers' memory, but not every pair of these GPUs can");
    c.exchange.rounds = c.name == "rounds";
    c.exchange.kernel = c.name == "sm";
    c.why = !force.empty() ? why_forced(c.name)
            : c.exchange.kernel
                ? format("%s <= %s: one copy kernel per rank stores every block into its peer, the GPUs' barrier "
                         "inside",
                         size.c_str(), format_size(t.sm_max).c_str())
            : c.exchange.rounds
                ? format("%s blocks >= %s: permutation rounds keep one copy per NVLink port and direction",
                         format_size(block).c_str(), format_size(t.rounds_min).c_str())
                : format("%s blocks < %s: all peers at once, per-copy latency dominates", format_size(block).c_str(),
                         format_size(t.rounds_min).c_str());
    const bool measured = res.nvswitch && n > 2;  // the node kind measured_host_share was measured on (4x H200)
    if (c.exchange.kernel) {
      // kernels store over NVLink only: no host share
    } else if (t.host_share < 0 && measured) {
      if (block >= t.host_min) {
        c.exchange.host_share = measured_host_share(op, block);
        c.why += format("; host share %s: measured on NVSwitch nodes (all GPUs on the host path both ways)",
                        pct(c.exchange.host_share).c_str());
      }
    } else if (t.host_share < 0) {
      if (block >= t.host_min) {
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
      c.exchange.host_share = t.host_share;
      if (t.host_share > 0) c.why += "; host share " + pct(t.host_share) + " from the communicator's tuning";
    }
    c.exchange.host_chunks = measured ? 2 : std::clamp(chunks_for(block, t), 2, 16);
    return c;
  }

  if (op == CollOp::Bcast) {
    // Copy kernels in pieces beat the copy engines' chain and scatter-allgather at every size on
    // more than 2 GPUs (no per-copy latency, and every member's egress carries a piece).
    if (!measured_form.empty() && force.empty()) {
      const auto cands = measured_candidates(op, res, bytes, t);
      GS_REQUIRE(std::find(cands.begin(), cands.end(), measured_form) != cands.end(), GPUSTRIPE_ERR_INTERNAL,
                 "broadcast of %s: '%s' is no measured candidate here", size.c_str(), measured_form.c_str());
    }
    c.name = !force.empty()                                                          ? force
             : !measured_form.empty()                                                 ? measured_form
             : res.all_peer && n > 1 && (n > 2 || bytes <= t.bcast_sm_max_2)          ? "sm"
             : (n > 2 || res.chain_pairs) && bytes >= t.chain_min                     ? "chain"
             : n > 2 && bytes >= t.rounds_min                                         ? "scatter_ag"
                                                                                      : "direct";
    GS_REQUIRE(c.name != "sm" || res.all_peer, GPUSTRIPE_ERR_NOT_SUPPORTED,
               "schedule sm stores into peers' memory, but not every pair of these GPUs can");
    c.bcast.kernel = c.name == "sm";
    c.bcast.scatter_allgather = c.name == "scatter_ag";
    c.bcast.chain = c.name == "chain";
    c.bcast.chunks = c.bcast.chain ? chunks_for(bytes, t.chain_chunk, 64, 8)
                                   : chunks_for(bytes / std::max(1, n - 1), t.bcast_chunk, 32);
    c.why = !force.empty() ? why_forced(c.name)
            : !measured_form.empty() ? size + " between 2 host-paced ranks: the form their timed calls of the size picked"
            : c.bcast.kernel
                ? size + (n > 2 ? "" : " <= " + format_size(t.bcast_sm_max_2) + " (2 GPUs)") +
                      ": copy kernels, the GPUs' barrier inside (pieces)"
            : c.bcast.chain
                ? size + " >= " + format_size(t.chain_min) + " over " + std::to_string(n) +
                      " ranks: chunks pass along the ranks, every GPU sends and receives the message once"
            : c.bcast.scatter_allgather
                ? size + " over " + std::to_string(n) + " ranks: root sends each byte once, members forward pieces"
                : size + (n > 2 ? " below " + format_size(t.rounds_min) : std::string(" between 2 ranks")) +
                      ": root sends to all";
    // The host share: the tuning's, or for 2 members the planner's for the pair (the broadcast is
    // then one transfer, which the model plans as the engine runs it). None over more members:
    // one D2H feeding several H2Ds is no transfer the model plans, and measured on 4 GPUs it lost.
    if (t.bcast_host_share >= 0) {
      c.bcast.host_share = t.bcast_host_share;
      const size_t host_bytes = static_cast<size_t>(static_cast<double>(bytes) * t.bcast_host_share);
      c.bcast.host_chunks = std::clamp(chunks_for(host_bytes, t.bcast_chunk, 16, 2), 2, 16);
      if (c.bcast.host_share > 0)
        c.why += "; host share " + pct(c.bcast.host_share) + " from the communicator's tuning";
    } else if (n == 2 && planned_host.share > 0) {
      c.bcast.host_share = std::min(planned_host.share, 0.5);
      c.bcast.host_chunks = std::clamp(planned_host.chunks, 1, 32);
      c.why += "; host share " + pct(c.bcast.host_share) +
               format(" in %d chunks: the planner's for the pair", c.bcast.host_chunks);
    }
    return c;
  }

  // Reductions. Per-rank block sizes decide chunking; peers' memory must be mapped to pull.
  // Kernels reading the peers skip the copy engines' per-copy latency and the scratch round
  // trip; two-shot in one kernel per rank has no copies and no waits between GPUs inside the
  // call. So wherever peers are mapped, kernels do it, up to the copy-engine crossovers
  // (rs_copy_min and ar_copy_min over more than 2 GPUs, ar_ce_min_2 on 2).
  const size_t block = bytes / n;
  const bool pull_ok = res.all_peer;
  c.reduce.chunks = chunks_for(block, t);
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
  } else if (op == CollOp::ReduceScatter && pull_ok && n > 2 && bytes >= t.rs_copy_min) {
    c.name = "rs_copy";
    c.why = size + " >= " + format_size(t.rs_copy_min) +
            ": copy engines move the inputs in rounds, kernels reduce chunk c while chunk c+1 moves";
  } else if (op == CollOp::AllReduce && pull_ok && n > 2 && bytes >= t.ar_copy_min) {
    c.name = "rs_ag_copy";
    c.why = size + " >= " + format_size(t.ar_copy_min) +
            ": copy engines move the inputs in rounds and gather the reduced blocks";
  } else if (op == CollOp::AllReduce && pull_ok && n == 2 && bytes >= t.ar_ce_min_2) {
    c.name = "ce_twoshot";
    c.why = size + " >= " + format_size(t.ar_ce_min_2) +
            " (2 GPUs): copy engines move each input's half to its owner in one round, kernels fold it in and "
            "store the result into both outputs";
  } else if (op == CollOp::AllReduce && pull_ok && bytes <= t.oneshot_max) {
    c.name = "oneshot";
    c.why = size + " <= " + format_size(t.oneshot_max) + ": one kernel per rank reads every input (latency path)";
  } else if (op == CollOp::AllReduce && pull_ok) {
    c.name = "twoshot";
    c.why = size + ": one kernel per rank reduces its block from every input and writes it into every output";
  } else if (pull_ok) {
    c.name = std::string(prefix) + "pull";
    c.why = size + ": kernels read peers' blocks directly, no copies to wait for";
  } else {
    c.name = std::string(prefix) + "copy";
    c.why = "not every pair maps peer memory: copy engines move blocks, kernels reduce locally";
  }
  c.reduce.pull = c.name.find("pull") != std::string::npos;
  // A pulled reduce-scatter has nothing to overlap its chunks with: one kernel per rank.
  if (c.name == "oneshot" || c.name == "twoshot" || c.name == "rs_pull") c.reduce.chunks = 1;
  // Pushed inputs pay off for allreduce at push_min..push_max per rank on more than 2 GPUs;
  // above, the per-rank graphs with the pushes' flags fall behind the kernels' loads.
  if (c.name == "twoshot" && n > 2 && bytes >= t.push_min && bytes <= t.push_max) c.reduce.push = true;
  // Copy-engine reductions: their inputs cross NVLink in the alltoall's permutation rounds, so
  // they take, like it, flags for their waits between GPUs.
  c.reduce.ag_stores = c.name == "ce_twoshot";
  const bool copy_engines =
      c.name == "rs_copy" || c.name == "rs_ag_copy" || c.name == "reduce_copy" || c.name == "ce_twoshot";
  if (copy_engines) c.reduce.flags = n > 2;
  // Round-major: a whole block per peer in scratch (else chunks). Chunked copies pay a copy's
  // latency per chunk and the last chunk's full reduction after the last copy; whole blocks
  // per round hide the first, halving tail pieces shorten the second.
  const bool rounds = t.rs_order == Tuning::Order::Rounds ||
                      (t.rs_order == Tuning::Order::Auto && res.all_peer);
  if (copy_engines && rounds && block * static_cast<uint64_t>(std::max(1, n - 1)) <= t.scratch_max) {
    c.reduce.by_round = true;
    c.reduce.tail = t.rs_tail;
    c.reduce.fold_blocks_per_sm = std::clamp(t.fold_blocks_per_sm, 0, 64);
    // Gathering each block whole after the last round costs one copy per round instead of one per piece.
    if (c.name == "rs_ag_copy") {
      c.reduce.gather_whole = true;
      c.reduce.gather_host_share = t.gather_host_share;
    }
  }
  // Slots: as many as chunks when the scratch allows (no copy ever waits for a reduction).
  const uint64_t chunk_bytes = std::max<uint64_t>(1, (block + c.reduce.chunks - 1) / c.reduce.chunks);
  const uint64_t fit = t.scratch_max / (chunk_bytes * std::max(1, n - 1));
  c.reduce.slots = static_cast<int>(std::clamp<uint64_t>(fit, 2, std::max(2, c.reduce.chunks)));
  return c;
}

}  // namespace gpustripe::coll
