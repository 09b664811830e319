// A node's topology and the model planner over its parameters, opened by name: what
// the C API (gpustripe_model_t) and Python (gpustripe.Model) hand out.
#pragma once
#include <memory>
#include <string>

#include "model/model_planner.hpp"
#include "topology/topology.hpp"

namespace gpustripe {

struct NodeModel {
  Topology topo;
  std::unique_ptr<ModelPlanner> planner;
  std::string source;  // where the parameters come from

  // `topology`: shipped name or path, "" for the running node (node_topology()).
  // `profile`: path, "" for the default order (resolve_params). Options from the environment.
  static std::unique_ptr<NodeModel> open(const std::string& topology, const std::string& profile);
  // Over a given topology and parameters (calibration results, tests).
  static std::unique_ptr<NodeModel> with(Topology topo, ModelParams params);
};

}  // namespace gpustripe
