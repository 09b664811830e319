#include "common/text_file.hpp"

#include "common/config.hpp"
#include "common/error.hpp"
#include "common/log.hpp"
#include "model/model_planner.hpp"
#include "model/profile.hpp"
#include "topology/topology.hpp"

namespace gpustripe {
namespace {

const StringSetting kPlan{"GPUSTRIPE_PLAN", "model",
                          "How transfers are split: model (contention-aware model), table (gpustripe tune's table), "
                          "or a fixed spec such as 'direct,host0:0.095x8,gpu2:0.1x4' (docs/model.md)"};

}  // namespace

std::unique_ptr<Planner> make_planner_with(const Topology& topo, ModelParams params, const std::string& kind) {
  if (kind.empty() || kind == "model") {
    GS_LOG_INFO(Subsys::Model, "planner: model over %s", params.source.c_str());
    return std::make_unique<ModelPlanner>(topo, std::move(params), search_options_from_env());
  }
  if (kind == "table") {
    std::string path = default_table_path(topo);
    GS_REQUIRE(file_exists(path), GPUSTRIPE_ERR_IO,
               "GPUSTRIPE_PLAN=table: cannot read plan table %s (run gpustripe tune)", path.c_str());
    std::string table = read_text_file(path, "plan table");
    GS_LOG_INFO(Subsys::Model, "planner: table %s", path.c_str());
    return std::make_unique<TablePlanner>(topo, std::move(params), plan_table_from_json(table, path),
                                          search_options_from_env());
  }
  GS_LOG_INFO(Subsys::Model, "planner: fixed spec '%s'", kind.c_str());
  return std::make_unique<FixedPlanner>(topo, std::move(params), kind);
}

std::unique_ptr<Planner> make_planner(const Topology& topo, bool emulated) {
  return make_planner_with(topo, resolve_params(topo, "", emulated), kPlan.get());
}

}  // namespace gpustripe
