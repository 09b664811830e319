// The three planners behind make_planner() (GPUSTRIPE_PLAN=model|table|<spec>), exposed
// for the CLI, the bindings and the tests, which build them over a given topology/profile.
#pragma once
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "model/multipath_model.hpp"
#include "model/plan_search.hpp"
#include "model/plan_spec.hpp"
#include "model/planner.hpp"

namespace gpustripe {

// Search options from GPUSTRIPE_HOST_PATH and GPUSTRIPE_GPU_PATHS, with the planner's staged
// margin (throws ERR_CONFIG on values that do not parse).
SearchOptions search_options_from_env();

// Planner over the contention-aware model. One transfer's path set is cached per (src, dst,
// size class): a quarter of an octave, searched at the class's centre; a request splits the
// exact size over the cached paths (closed form, chunk counts) and falls back to the first
// path alone where that is faster.
class ModelPlanner : public Planner {
 public:
  // `shape`: the engine's schedule the plans are costed for (default: the engine's settings).
  ModelPlanner(const Topology& topo, ModelParams params, SearchOptions opt,
               EngineShape shape = EngineShape::from_settings());
  Plan plan(int src, int dst, uint64_t bytes) override;
  std::vector<Plan> plan_concurrent(const std::vector<TransferSpec>& transfers) override;
  double predict_us(const Plan& plan) override;
  // The plan for exactly this size, bypassing the cache (tests, `gpustripe plan --exact`).
  Plan plan_exact(int src, int dst, uint64_t bytes) const;
  const MultipathModel& model() const { return model_; }
  const SearchOptions& options() const { return opt_; }

 private:
  MultipathModel model_;
  SearchOptions opt_;
  std::mutex mu_;
  struct SizeClass {
    std::vector<const Route*> routes;  // the paths searched at the class's centre
    double first_rate = 0;             // bytes/us of routes[0] alone on the node
  };
  std::unordered_map<uint64_t, SizeClass> cache_;
  std::unordered_map<std::string, std::vector<Plan>> concurrent_cache_;  // exact transfer sets
};

// GPUSTRIPE_PLAN=<spec>: the same split for every transfer.
class FixedPlanner : public Planner {
 public:
  FixedPlanner(const Topology& topo, ModelParams params, const std::string& spec);
  Plan plan(int src, int dst, uint64_t bytes) override;
  std::vector<Plan> plan_concurrent(const std::vector<TransferSpec>& transfers) override;
  double predict_us(const Plan& plan) override;

 private:
  MultipathModel model_;
  std::vector<SpecTerm> spec_;
  std::string text_;
};

// A tuned table (gpustripe tune): per pair, the best spec measured at each size.
struct PlanTable {
  std::string fingerprint;
  std::string created;
  struct Entry {
    int src = 0, dst = 0;
    uint64_t bytes = 0;
    std::string spec;
    double gbps = 0;  // measured
  };
  std::vector<Entry> entries;
};
std::string plan_table_to_json(const PlanTable& t);
PlanTable plan_table_from_json(const std::string& text, const std::string& origin);  // ERR_CONFIG on bad text
// GPUSTRIPE_PLAN_TABLE, else $XDG_CACHE_HOME/gpustripe/table-<fingerprint>.json.
std::string default_table_path(const Topology& topo);

// GPUSTRIPE_PLAN=table: the table's spec at the nearest tuned size (log scale) of the pair;
// pairs the table lacks fall back to the model.
class TablePlanner : public Planner {
 public:
  TablePlanner(const Topology& topo, ModelParams params, PlanTable table, SearchOptions opt);
  Plan plan(int src, int dst, uint64_t bytes) override;
  std::vector<Plan> plan_concurrent(const std::vector<TransferSpec>& transfers) override;
  double predict_us(const Plan& plan) override;

 private:
  ModelPlanner fallback_;
  PlanTable table_;
  std::map<std::pair<int, int>, std::vector<std::pair<uint64_t, std::vector<SpecTerm>>>> by_pair_;
};

// make_planner with explicit parameters and GPUSTRIPE_PLAN's value (`kind`).
std::unique_ptr<Planner> make_planner_with(const Topology& topo, ModelParams params, const std::string& kind);

}  // namespace gpustripe
