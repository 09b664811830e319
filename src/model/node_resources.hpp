// The node as the model sees it: shared resources with capacities (NVLink egress and
// ingress per GPU, per-pair link bundles on meshes, the host link of each GPU in each
// direction, host memory per socket, inter-socket links, copy engines per GPU) and the
// routes a transfer can take between two GPUs, each hop naming the resources it loads.
#pragma once
#include <string>
#include <utility>
#include <vector>

#include "model/hop.hpp"
#include "model/plan.hpp"

namespace gpustripe {

struct Topology;

struct Resource {
  std::string name;  // "nvlink_egress[gpu0]": also what the CLI prints as the bottleneck
  double gbps = 0;   // capacity, GB/s
};

struct Hop {
  HopKind kind = HopKind::Peer;
  int from = 0, to = 0;  // GPU index, or -1 - socket for host memory
  int issuer = 0;        // GPU whose copy engine runs it
  std::vector<std::pair<int, double>> uses;  // (resource index, bytes moved on it per byte of the hop)
};

struct Route {
  PathKind kind = PathKind::Direct;
  int via = -1;  // staging GPU or host socket
  std::vector<Hop> hops;
  std::string name() const;  // "direct", "gpu2", "host0" (the fixed-spec grammar's words)
};

class NodeResources {
 public:
  // Capacities are the topology's nominal figures, replaced by `capacities` entries
  // of the same name (a calibration profile). Unknown names in `overrides` are ignored
  // with a warning (a profile of a node with fewer GPUs cannot match, see profile.cpp).
  NodeResources(const Topology& topo, const std::vector<std::pair<std::string, double>>& overrides);

  int gpu_count() const { return gpus_; }
  const std::vector<Resource>& resources() const { return resources_; }
  int find(const std::string& name) const;  // -1 when absent
  // Every route src -> dst: direct first (when the pair has peer access), then GPU-staged
  // (both hops over NVLink), then host-staged through each socket of src and dst.
  const std::vector<Route>& routes(int src, int dst) const;
  // The route of a given kind and staging device, nullptr when the node has none.
  const Route* route(int src, int dst, PathKind kind, int via) const;

 private:
  int add(const std::string& name, double gbps);
  int gpus_ = 0;
  std::vector<Resource> resources_;
  std::vector<std::vector<std::vector<Route>>> routes_;  // [src][dst]
};

}  // namespace gpustripe
