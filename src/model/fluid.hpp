// Sharing of the node's resources by flows that run at once: max-min fair rates
// (progressive filling, the way copy engines and links share bandwidth between
// concurrent copies) and an event-driven fluid simulation of flows of given sizes,
// in which a flow that finishes frees its share for the others.
#pragma once
#include <utility>
#include <vector>

namespace gpustripe {

struct Flow {
  std::vector<std::pair<int, double>> uses;  // (resource, bytes on it per byte of the flow)
  double cap = 0;      // the flow's own limit in bytes/us (0: none)
  double work = 0;     // bytes still to move (fluid simulation only)
  double latency = 0;  // us added to the finish time (startups)
  // Bytes moved after the work: a pipeline's drain (the relay of its last chunk, once the
  // first hop is done), which loads only `tail_uses` (its last hop's resources) and shares
  // them with the flows still running; with no tail_uses, at the flow's last rate.
  double tail = 0;
  std::vector<std::pair<int, double>> tail_uses;
  double tail_cap = 0;
};

struct FairShare {
  std::vector<double> rate;    // bytes/us per flow
  std::vector<int> limited_by; // resource that froze the flow, -1: its own cap
};

// Max-min fair rates for flows all active at once over resources of the given capacities (bytes/us).
FairShare max_min_rates(const std::vector<double>& capacity, const std::vector<Flow>& flows);

struct FluidResult {
  std::vector<double> finish_us;  // per flow: completion of its work plus its latency
  std::vector<int> limited_by;    // what bounded it while all flows ran (see FairShare)
};

// Runs the flows to completion; rates are recomputed each time one finishes.
FluidResult simulate_flows(const std::vector<double>& capacity, std::vector<Flow> flows);

}  // namespace gpustripe
