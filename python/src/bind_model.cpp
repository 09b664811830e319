// The performance model and planner for Python: gpustripe.Model, Plan, plan(),
// plan_concurrent(), calibrate() with a progress callback, and PlanTimer (forced plans
// run by the engine, for model-check and tune).
#include <nanobind/stl/function.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/unique_ptr.h>
#include <nanobind/stl/vector.h>

#include <optional>

#include "bindings.hpp"
#include "common/text_file.hpp"
#include "common/error.hpp"
#include "core/context.hpp"
#include "model/calibrate.hpp"
#include "model/node_model.hpp"
#include "model/plan_timing.hpp"
#include "model/profile.hpp"
#include "model/model_planner.hpp"

namespace gpustripe::py {
namespace {

std::unique_ptr<NodeModel> open_model(const std::optional<std::string>& topology, const std::optional<std::string>& profile) {
  return NodeModel::open(topology.value_or(""), profile.value_or(""));
}

std::vector<TransferSpec> to_specs(const std::vector<std::tuple<int, int, uint64_t>>& t) {
  std::vector<TransferSpec> out;
  for (const auto& x : t) out.push_back({std::get<0>(x), std::get<1>(x), std::get<2>(x)});
  return out;
}

std::string path_name(const PathPlan& p) {
  return p.kind == PathKind::Direct ? "direct" : std::string(path_kind_name(p.kind)) + std::to_string(p.via);
}

void bind_model(nb::module_& m) {
  nb::class_<PathPlan>(m, "PathPlan", "One path of a plan: bytes [offset, offset + bytes) in `chunks` chunks")
      .def_prop_ro("kind", [](const PathPlan& p) { return std::string(path_kind_name(p.kind)); },
                   "'direct', 'gpu' (staged through GPU `via`) or 'host' (through host memory of socket `via`)")
      .def_ro("via", &PathPlan::via)
      .def_ro("offset", &PathPlan::offset)
      .def_ro("bytes", &PathPlan::bytes)
      .def_ro("chunks", &PathPlan::chunks)
      .def_ro("taper_head", &PathPlan::taper_head, "leading chunks that grow x2 each to the steady size")
      .def_ro("taper_tail", &PathPlan::taper_tail, "trailing chunks that shrink /2 each")
      .def_prop_ro("chunk_edges", [](const PathPlan& p) { return chunk_edges(p); },
                   "chunk boundaries relative to `offset` (chunks + 1 values, 0 to bytes)")
      .def_ro("predicted_us", &PathPlan::predicted_us)
      .def_prop_ro("name", &path_name, "'direct', 'gpu2', 'host0': the plan-spec word")
      .def("__repr__", [](const PathPlan& p) {
        return format("PathPlan(%s, offset=%llu, bytes=%llu, chunks=%d)", path_name(p).c_str(),
                      static_cast<unsigned long long>(p.offset), static_cast<unsigned long long>(p.bytes), p.chunks);
      });

  nb::class_<Plan>(m, "Plan", "How one transfer is split over paths and chunks, with the model's predicted time")
      .def_ro("src", &Plan::src)
      .def_ro("dst", &Plan::dst)
      .def_ro("bytes", &Plan::bytes)
      .def_ro("paths", &Plan::paths)
      .def_ro("predicted_us", &Plan::predicted_us)
      .def_prop_ro("predicted_gbps", &Plan::predicted_gbps)
      .def_ro("bottleneck", &Plan::bottleneck, "the saturated resource bounding the time, e.g. 'nvlink_egress[gpu0]'")
      .def_ro("source", &Plan::source, "'model', 'single', 'table' or 'fixed'")
      .def("describe", &Plan::describe, "short form: 'direct 90.5% x1 + host0 9.5% x8'")
      .def_prop_ro("spec", &format_plan_spec, "the plan as a GPUSTRIPE_PLAN spec")
      .def("check", &Plan::check)
      .def("__repr__", [](const Plan& p) {
        return format("Plan(%d->%d, %llu bytes: %s, %.1f us, %.1f GB/s)", p.src, p.dst,
                      static_cast<unsigned long long>(p.bytes), p.describe().c_str(), p.predicted_us,
                      p.predicted_gbps());
      });

  nb::class_<NodeModel>(m, "Model",
                        "A node's topology with the model planner over its parameters: a calibration profile when "
                        "one matches (GPUSTRIPE_PROFILE, the cache), else nominal figures (see .source)")
      .def("__init__",
           [](NodeModel* self, std::optional<std::string> topology, std::optional<std::string> profile) {
             new (self) NodeModel(std::move(*open_model(topology, profile)));
           },
           nb::arg("topology") = nb::none(), nb::arg("profile") = nb::none(),
           "topology: shipped name or .json path (None: this node); profile: path (None: default order)")
      .def_ro("source", &NodeModel::source)
      .def_prop_ro("topology_name", [](const NodeModel& n) { return n.topo.name; })
      .def_prop_ro("fingerprint", [](const NodeModel& n) { return n.topo.fingerprint(); })
      .def_prop_ro("gpu_count", [](const NodeModel& n) { return n.topo.gpu_count(); })
      .def("plan", [](NodeModel& n, int src, int dst, uint64_t bytes) { return n.planner->plan(src, dst, bytes); },
           nb::arg("src"), nb::arg("dst"), nb::arg("bytes"), "the planner's plan (cached by size class)")
      .def("plan_exact",
           [](NodeModel& n, int src, int dst, uint64_t bytes) { return n.planner->plan_exact(src, dst, bytes); },
           "the plan searched at exactly this size (no cache)")
      .def("plan_concurrent",
           [](NodeModel& n, const std::vector<std::tuple<int, int, uint64_t>>& t) {
             return n.planner->plan_concurrent(to_specs(t));
           },
           nb::arg("transfers"), "plans for [(src, dst, bytes), ...] running at once")
      .def("fixed",
           [](NodeModel& n, const std::string& spec, int src, int dst, uint64_t bytes) {
             return build_fixed_plan(n.planner->model(), parse_plan_spec(spec), src, dst, bytes);
           },
           nb::arg("spec"), nb::arg("src"), nb::arg("dst"), nb::arg("bytes"),
           "the plan a spec such as 'direct,host0:0.095x8' gives, with predicted times")
      .def("plan_paths",
           [](NodeModel& n, int src, int dst, uint64_t bytes, const std::vector<std::string>& names) {
             SearchOptions o = n.planner->options();
             return plan_for_routes(n.planner->model(), src, dst, bytes, names, o);
           },
           nb::arg("src"), nb::arg("dst"), nb::arg("bytes"), nb::arg("paths"),
           "the model's split over exactly these paths, e.g. ['direct', 'host0']")
      .def("with_engine_call_us",
           [](const NodeModel& n, double us, const std::string& why) {
             GS_REQUIRE(us > 0, GPUSTRIPE_ERR_INVALID_ARGUMENT, "engine call cost %g us: must be positive", us);
             ModelParams p = n.planner->model().params();
             p.engine_call_us = us;
             p.source += "; " + why;
             return NodeModel::with(n.topo, std::move(p));
           },
           nb::arg("us"), nb::arg("why"),
           "the same model with the engine's host cost per call replaced (`why` is appended to .source)")
      .def("predict", [](NodeModel& n, const Plan& p) { return n.planner->predict_us(p); },
           "predicted time (us) of a plan alone on the node")
      .def("predict_concurrent",
           [](NodeModel& n, std::vector<Plan> plans) {
             n.planner->model().predict(plans);
             return plans;
           },
           "the plans with predicted times when they all run at once")
      .def("routes",
           [](const NodeModel& n, int src, int dst) {
             std::vector<std::string> out;
             for (const Route& r : n.planner->model().node().routes(src, dst)) out.push_back(r.name());
             return out;
           },
           "names of every path src -> dst can take")
      .def("resources",
           [](const NodeModel& n) {
             std::vector<std::pair<std::string, double>> out;
             for (const Resource& r : n.planner->model().node().resources()) out.emplace_back(r.name, r.gbps);
             return out;
           },
           "the shared resources and their capacities (GB/s)")
      .def("hop_params",
           [](const NodeModel& n) {
             nb::dict d;
             const ModelParams& p = n.planner->model().params();
             for (int k = 0; k < kHopKinds; ++k)
               d[hop_kind_name(static_cast<HopKind>(k))] =
                   nb::make_tuple(p.hops[static_cast<size_t>(k)].alpha_us, p.hops[static_cast<size_t>(k)].beta_gbps);
             d["epsilon_us"] = p.epsilon_us;
             d["host_call_us"] = p.host_call_us;
             d["engine_call_us"] = n.planner->model().call_us();
             return d;
           },
           "{'peer': (alpha_us, beta_gbps), ..., 'epsilon_us': eps, 'host_call_us': CPU cost per enqueue call, "
           "'engine_call_us': what the model charges per call of the engine's schedule}");

  m.def("plan",
        [](int src, int dst, uint64_t bytes, std::optional<std::string> topology, std::optional<std::string> profile) {
          return open_model(topology, profile)->planner->plan(src, dst, bytes);
        },
        nb::arg("src"), nb::arg("dst"), nb::arg("bytes"), nb::arg("topology") = nb::none(),
        nb::arg("profile") = nb::none(), "The model's plan for one transfer (gpustripe.Model caches; this does not)");
  m.def("plan_concurrent",
        [](const std::vector<std::tuple<int, int, uint64_t>>& t, std::optional<std::string> topology,
           std::optional<std::string> profile) { return open_model(topology, profile)->planner->plan_concurrent(to_specs(t)); },
        nb::arg("transfers"), nb::arg("topology") = nb::none(), nb::arg("profile") = nb::none());
  m.def("default_table_path",
        [](std::optional<std::string> topology) {
          return default_table_path(topology ? load_topology_file(*topology) : node_topology());
        },
        nb::arg("topology") = nb::none(), "GPUSTRIPE_PLAN_TABLE, else the cache path of the node's tuned table");
  m.def(
      "write_plan_table",
      [](const std::string& path, const std::string& fingerprint,
         const std::vector<std::tuple<int, int, uint64_t, std::string, double>>& entries) {
        PlanTable t;
        t.fingerprint = fingerprint;
        for (const auto& e : entries)
          t.entries.push_back({std::get<0>(e), std::get<1>(e), std::get<2>(e), std::get<3>(e), std::get<4>(e)});
        std::string text = plan_table_to_json(t);
        plan_table_from_json(text, path);  // validates every spec before anything is written
        write_text_file(path, text);
      },
      nb::arg("path"), nb::arg("fingerprint"), nb::arg("entries"),
      "Writes a tuned table [(src, dst, bytes, spec, measured_gbps), ...] that GPUSTRIPE_PLAN=table reads");
  m.def("model_cache_dir", &cache_dir, "where calibrate writes profiles by default");
  m.def("default_profile_path",
        [](std::optional<std::string> topology) {
          return default_profile_path(topology ? load_topology_file(*topology) : node_topology());
        },
        nb::arg("topology") = nb::none(), "GPUSTRIPE_PROFILE, else the cache path for the node");

  m.def(
      "calibrate",
      [](Context& ctx, bool quick, int reps, std::optional<std::string> out, nb::object progress) {
        CalibrationOptions o;
        o.quick = quick;
        o.reps = reps;
        CalibrationProgress cb;
        if (!progress.is_none())
          cb = [&progress](double f, const std::string& step) {
            nb::gil_scoped_acquire gil;
            progress(f, step);
          };
        Profile p = without_gil([&] { return calibrate(ctx.backend(), ctx.topology(), o, cb); });
        std::string path = out.value_or(default_profile_path(ctx.topology()));
        save_profile(p, path);
        return std::make_pair(path, profile_to_json(p));
      },
      nb::arg("context"), nb::arg("quick") = false, nb::arg("reps") = 0, nb::arg("out") = nb::none(),
      nb::arg("progress") = nb::none(),
      "Measures the node's model parameters through the backend, writes the profile to `out` (default: "
      "GPUSTRIPE_PROFILE or the cache) and returns (path, profile JSON text). progress(fraction, step).");

  auto timing_dict = [](const PlanTiming& r) {
    nb::dict d;
    d["us"] = r.median_us;
    d["min_us"] = r.min_us;
    d["max_us"] = r.max_us;
    d["reps"] = r.reps;
    d["host_us"] = r.host_us;
    d["samples_us"] = r.samples_us;
    return d;
  };
  nb::class_<PlanTimer>(m, "PlanTimer", "Times forced plans with the engine; buffers of max_bytes on every GPU")
      .def(nb::init<Context&, uint64_t>(), nb::arg("context"), nb::arg("max_bytes"), nb::keep_alive<1, 2>())
      .def(
          "time",
          [timing_dict](PlanTimer& t, const Plan& p, int warmup, int reps, const std::string& mode) {
            GS_REQUIRE(mode == "back-to-back" || mode == "isolated", GPUSTRIPE_ERR_INVALID_ARGUMENT,
                       "timing mode '%s': back-to-back or isolated", mode.c_str());
            const PlanTimingMode m = mode == "isolated" ? PlanTimingMode::Isolated : PlanTimingMode::BackToBack;
            PlanTiming r = without_gil([&] { return t.time(p, warmup, reps, m); });
            return timing_dict(r);
          },
          nb::arg("plan"), nb::arg("warmup") = 5, nb::arg("reps") = 20, nb::arg("mode") = "back-to-back",
          "{'us': median, 'min_us', 'max_us', 'reps', 'host_us': median host time of one call, 'samples_us': every "
          "repetition in order} of copy_with_plan, "
          "timed as gpustripe bench times its rows (mode 'back-to-back': repetitions back to back, device events "
          "on the source's stream) or from an idle stream ('isolated': drained before each repetition)")
      .def(
          "time_concurrent",
          [timing_dict](PlanTimer& t, const std::vector<Plan>& plans, int warmup, int reps) {
            PlanTiming r = without_gil([&] { return t.time_concurrent(plans, warmup, reps); });
            return timing_dict(r);
          },
          nb::arg("plans"), nb::arg("warmup") = 5, nb::arg("reps") = 20,
          "the same dict as time() for `plans` run at once, each on its own stream of its source GPU, until "
          "the last one ends (back to back); each transfer has its own range of the buffers")
      .def(
          "host_cost",
          [](PlanTimer& t) {
            EngineCallCost c = without_gil([&] { return t.host_cost(); });
            nb::dict d;
            d["per_call_us"] = c.per_call_us;
            d["per_plan_us"] = c.per_plan_us;
            d["calls"] = c.calls;
            return d;
          },
          "the engine's host cost per call in this process, as calibrate measures engine_call_us: "
          "{'per_call_us', 'per_plan_us', 'calls'} (per_call_us 0 where the engine replays the probe plan)");
}

BindingRegistrar reg(20, bind_model);

}  // namespace
}  // namespace gpustripe::py
