#include <cmath>
#include <nlohmann/json.hpp>

#include "common/config.hpp"
#include "common/error.hpp"
#include "common/log.hpp"
#include "model/model_planner.hpp"
#include "model/profile.hpp"
#include "topology/topology.hpp"

namespace gpustripe {
namespace {

const StringSetting kPlanTable{"GPUSTRIPE_PLAN_TABLE", "",
                               "Tuned plan table for GPUSTRIPE_PLAN=table (gpustripe tune writes it); empty: "
                               "$XDG_CACHE_HOME/gpustripe/table-<fingerprint>.json"};

using nlohmann::json;

}  // namespace

std::string plan_table_to_json(const PlanTable& t) {
  json entries = json::array();
  for (const PlanTable::Entry& e : t.entries)
    entries.push_back({{"src", e.src}, {"dst", e.dst}, {"bytes", e.bytes}, {"spec", e.spec}, {"gbps", e.gbps}});
  json j = {{"schema", 1}, {"fingerprint", t.fingerprint}, {"created", t.created}, {"entries", entries}};
  return j.dump(1) + "\n";
}

PlanTable plan_table_from_json(const std::string& text, const std::string& origin) {
  PlanTable t;
  try {
    json j = json::parse(text);
    GS_REQUIRE(j.at("schema").get<int>() == 1, GPUSTRIPE_ERR_CONFIG, "%s: not a schema-1 plan table", origin.c_str());
    t.fingerprint = j.at("fingerprint").get<std::string>();
    t.created = j.value("created", "");
    for (const json& e : j.at("entries")) {
      PlanTable::Entry x;
      x.src = e.at("src").get<int>();
      x.dst = e.at("dst").get<int>();
      x.bytes = e.at("bytes").get<uint64_t>();
      x.spec = e.at("spec").get<std::string>();
      x.gbps = e.value("gbps", 0.0);
      parse_plan_spec(x.spec);  // reject a bad entry now, not at the first transfer of its size
      t.entries.push_back(x);
    }
  } catch (const json::exception& e) {
    GS_THROW(GPUSTRIPE_ERR_CONFIG, "%s: plan table: %s", origin.c_str(), e.what());
  }
  return t;
}

std::string default_table_path(const Topology& topo) {
  std::string p = kPlanTable.get();
  return p.empty() ? cache_dir() + "/table-" + topo.fingerprint() + ".json" : p;
}

TablePlanner::TablePlanner(const Topology& topo, ModelParams params, PlanTable table, SearchOptions opt)
    : fallback_(topo, std::move(params), opt), table_(std::move(table)) {
  GS_REQUIRE(table_.fingerprint == topo.fingerprint(), GPUSTRIPE_ERR_CONFIG,
             "plan table was tuned on node %s, this node is %s: rerun gpustripe tune", table_.fingerprint.c_str(),
             topo.fingerprint().c_str());
  for (const PlanTable::Entry& e : table_.entries) by_pair_[{e.src, e.dst}].emplace_back(e.bytes, parse_plan_spec(e.spec));
}

Plan TablePlanner::plan(int src, int dst, uint64_t bytes) {
  auto it = by_pair_.find({src, dst});
  if (it == by_pair_.end() || bytes == 0) return fallback_.plan(src, dst, bytes);
  const std::vector<SpecTerm>* best = nullptr;
  double dist = 1e300;
  for (const auto& e : it->second) {
    double d = std::fabs(std::log2(static_cast<double>(e.first)) - std::log2(static_cast<double>(bytes)));
    if (d < dist) {
      dist = d;
      best = &e.second;
    }
  }
  Plan p = build_fixed_plan(fallback_.model(), *best, src, dst, bytes);
  p.source = "table";
  return p;
}

std::vector<Plan> TablePlanner::plan_concurrent(const std::vector<TransferSpec>& transfers) {
  std::vector<Plan> plans;
  for (const TransferSpec& t : transfers) plans.push_back(plan(t.src, t.dst, t.bytes));
  fallback_.model().predict(plans);
  return plans;
}

double TablePlanner::predict_us(const Plan& plan) { return fallback_.predict_us(plan); }

}  // namespace gpustripe
