#include "model/node_model.hpp"

#include "model/profile.hpp"

namespace gpustripe {

std::unique_ptr<NodeModel> NodeModel::open(const std::string& topology, const std::string& profile) {
  // This node's model takes the profile a context here would: that of emulated devices
  // where they stand in for missing GPUs. A topology file's never does (model/profile.hpp).
  bool emulated = false;
  Topology topo = topology.empty() ? node_topology(&emulated) : load_topology_file(topology);
  ModelParams params = resolve_params(topo, profile, emulated);
  return with(std::move(topo), std::move(params));
}

std::unique_ptr<NodeModel> NodeModel::with(Topology topo, ModelParams params) {
  auto m = std::make_unique<NodeModel>();
  m->topo = std::move(topo);
  m->source = params.source;
  m->planner = std::make_unique<ModelPlanner>(m->topo, std::move(params), search_options_from_env());
  return m;
}

}  // namespace gpustripe
