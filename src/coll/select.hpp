// Which schedule a collective gets, from the team's resources and the message size,
// with the reason in words (logged at debug, kept as the communicator's last_schedule).
// GPUSTRIPE_COLL_ALGO forces a schedule by name; the size crossovers are the communicator's
// Tuning (tuning.hpp).
#pragma once
#include <cstddef>
#include <string>
#include <vector>

#include "coll/schedules.hpp"
#include "coll/tuning.hpp"
#include "coll/types.hpp"

namespace gpustripe {
class Backend;
class Planner;
struct Topology;
}  // namespace gpustripe

namespace gpustripe::coll {

// What the choice depends on, gathered once per communicator (describe_team).
struct TeamResources {
  int n = 0;
  bool all_peer = true;        // every pair maps the other's memory: kernels may read peers
  bool chain_pairs = false;    // 2 members: broadcasts from Tuning::chain_min as a chain (2-lane chunks)
  bool nvswitch = false;       // every GPU's NVLinks go into a switch
  std::vector<std::vector<int>> socket_groups;  // members by CPU socket; >1 group of equal size enables hier
  double nvlink_gbps = 0;      // smallest NVLink egress of a member, nominal
  double host_gbps = 0;        // smallest host link of a member, nominal, per direction
  bool emulated = false;
  // Every call's host waits for its end before the next call (the MPI interposer's blocking
  // calls; set by its team): a kernel's launch is then on every call's path, not hidden behind
  // the previous call's run on the GPUs. Where the forms' order depends on that, the team times
  // them (measured_candidates).
  bool host_paced = false;
};

// The resources of a team on GPUs `devices` (member m on devices[m]): the smallest nominal
// link figures, whether every pair maps the other's memory and every GPU sits on NVSwitch,
// and the members by CPU socket when there are several sockets with equally many members
// (unequal groups: none, flat schedules only). No GPUs: no links, no switch.
TeamResources describe_team(Backend& backend, const Topology& topo, const std::vector<int>& devices);

struct Choice {
  std::string name;  // alltoall/allgather: rounds | all_at_once | sm; reduce_scatter: rs_copy | rs_pull;
                     // allreduce: oneshot | twoshot | rs_ag_copy | rs_ag_pull | hier; bcast: direct | scatter_ag |
                     // chain | sm;
                     // reduce: reduce_copy | reduce_pull
  ExchangeOpts exchange;
  ReduceOpts reduce;
  BcastOpts bcast;
  std::string why;
  std::string describe() const;  // "rs_ag_copy chunks=8 host=0%: why"
};

// What the planner gives the host path of the transfers a schedule makes: the fraction of the
// bytes it carries and its pipeline depth (chunks); share < 0: no planner was asked.
struct PlannedHost {
  double share = -1;
  int chunks = 0;
};

// bytes: the size per rank as nccl-tests reports it (the send buffer, for allgather
// the receive buffer, for bcast the message).
// planned: alltoall/allgather: the host fraction the planner gives one round of the exchange
// (plan_concurrent over the round's transfers; the automatic share takes the smaller of it and
// the nominal bound auto_host_share()); bcast: the planner's host path for the pair's one
// transfer (plan_pair_host), which a 2-member team that asks for it (wants_bcast_host_share)
// takes as it is, share and chunks.
// Throws ERR_CONFIG for a tuning out of range or an unknown name in GPUSTRIPE_COLL_ALGO.
// measured: the form the team's timing of its own calls picked among measured_candidates()
// (empty: none, the size decides); a forced schedule still wins.
Choice choose_schedule(CollOp op, const TeamResources& res, size_t bytes, size_t elem_size,
                       const Tuning& tuning = Tuning(), const PlannedHost& planned = {},
                       const std::string& measured = {});

// The schedules between which no constant can say which is faster, so a team times its own
// calls of the size (the candidates in the order they are tried), or none: a host-paced pair's
// broadcast where it would take the copy kernel and the copy-engine alternative is the root's
// copy (sm, direct). Back to back on the GPUs the kernel leads; with the host waiting for
// every call, its launch weighs against the copy engine's cheaper enqueue, and where the two
// cross depends on the node's hosts. None when GPUSTRIPE_COLL_ALGO forces the op's schedule.
std::vector<std::string> measured_candidates(CollOp op, const TeamResources& res, size_t bytes,
                                             const Tuning& tuning = Tuning());

// Whether choose_schedule would consider an automatic host share for this exchange
// (so the caller knows when asking the planner is worth it).
bool wants_host_share(CollOp op, const TeamResources& res, size_t bytes, const Tuning& tuning = Tuning());
// The same for a broadcast: 2 members (the broadcast is then one transfer, the planner's own
// case) with no share forced by the tuning. The caller asks only where a host share can run as
// planned: the cross-process teams, whose broadcasts have no fused kernel a host path would
// break up (the single-process communicator's sm broadcast is one kernel per GPU with the GPUs'
// barrier inside).
bool wants_bcast_host_share(const TeamResources& res, const Tuning& tuning = Tuning());

// The planner's host path for `bytes` from one of `devices` to another, for a caller that does
// not know yet which two (every rank of a cross-process team must choose alike before it learns
// its peers' GPUs): the smallest share over every ordered pair, with that plan's chunks (the
// pipeline depth of its host paths). share 0 where some pair's plan has no host path (the model
// says it does not pay, e.g. for small messages); share < 0 when the planner gives no plan.
PlannedHost plan_pair_host(Planner& planner, const std::vector<int>& devices, uint64_t bytes);

// GPUSTRIPE_COLL_ALGO's text, as choose_schedule reads it (a key for caches of its choices).
std::string forced_schedules();

// The names GPUSTRIPE_COLL_ALGO accepts for an op.
std::vector<std::string> schedule_names(CollOp op);

// Host-path fraction of each peer block for an exchange that reaches the host-share
// threshold, from nominal link figures (see select.cpp); 0 when the host path cannot pay.
double auto_host_share(CollOp op, const TeamResources& res);

}  // namespace gpustripe::coll
