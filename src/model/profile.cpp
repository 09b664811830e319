#include "model/profile.hpp"


#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <nlohmann/json.hpp>
#include <sys/stat.h>

#include "common/config.hpp"
#include "common/error.hpp"
#include "common/log.hpp"
#include "common/text_file.hpp"
#include "model/multipath_model.hpp"
#include "topology/topology.hpp"

namespace gpustripe {
namespace {

const StringSetting kProfile{"GPUSTRIPE_PROFILE", "",
                             "Calibration profile of this node (gpustripe calibrate writes it); empty: "
                             "$XDG_CACHE_HOME/gpustripe/profile-<fingerprint>.json, else nominal topology figures"};

using nlohmann::json;

}  // namespace

std::string profile_to_json(const Profile& p) {
  json hops = json::object();
  for (int k = 0; k < kHopKinds; ++k) {
    const HopParams& h = p.params.hops[static_cast<size_t>(k)];
    hops[hop_kind_name(static_cast<HopKind>(k))] = {{"alpha_us", h.alpha_us}, {"beta_gbps", h.beta_gbps}};
  }
  json j = {{"schema", p.schema},
            {"fingerprint", p.fingerprint},
            {"driver", p.driver},
            {"backend", p.backend},
            {"topology", p.topology},
            {"created", p.created},
            {"hops", hops},
            {"epsilon_us", p.params.epsilon_us},
            {"host_call_us", p.params.host_call_us},
            {"engine_call_us", p.params.engine_call_us},
            {"graph_launch_us", p.params.graph_launch_us},
            {"graph_node_us", p.params.graph_node_us},
            {"graph_start_us", p.params.graph_start_us},
            {"graph_epsilon_us", p.params.graph_epsilon_us},
            {"join_us", p.params.join_us},
            {"graph_join_us", p.params.graph_join_us},
            {"lane_jitter_us", p.params.lane_jitter_us},
            {"graph_lane_jitter_us", p.params.graph_lane_jitter_us},
            {"capacities", p.params.capacities},
            {"measurements", json::parse(p.measurements_json.empty() ? "{}" : p.measurements_json)}};
  return j.dump(1) + "\n";
}

Profile profile_from_json(const std::string& text, const std::string& origin) {
  Profile p;
  std::string field = "(document)";
  try {
    json j = json::parse(text);
    field = "schema";
    p.schema = j.at("schema").get<int>();
    GS_REQUIRE(p.schema == 1, GPUSTRIPE_ERR_PROFILE, "%s: profile schema %d, this library reads schema 1",
               origin.c_str(), p.schema);
    field = "fingerprint";
    p.fingerprint = j.at("fingerprint").get<std::string>();
    field = "driver";
    p.driver = j.value("driver", "");
    p.backend = j.value("backend", "");
    p.topology = j.value("topology", "");
    p.created = j.value("created", "");
    field = "hops";
    for (auto it = j.at("hops").begin(); it != j.at("hops").end(); ++it) {
      field = "hops." + it.key();
      HopParams& h = p.params.hop(hop_kind_from_name(it.key()));
      h.alpha_us = it.value().at("alpha_us").get<double>();
      h.beta_gbps = it.value().at("beta_gbps").get<double>();
      GS_REQUIRE(h.alpha_us >= 0 && h.beta_gbps >= 0, GPUSTRIPE_ERR_PROFILE, "%s: %s: negative alpha or beta",
                 origin.c_str(), field.c_str());
    }
    field = "epsilon_us";
    p.params.epsilon_us = j.at("epsilon_us").get<double>();
    field = "host_call_us";  // optional: profiles written before it was measured keep the nominal figure
    if (j.contains("host_call_us")) p.params.host_call_us = j.at("host_call_us").get<double>();
    field = "engine_call_us";
    if (j.contains("engine_call_us")) p.params.engine_call_us = j.at("engine_call_us").get<double>();
    field = "graph_launch_us";
    if (j.contains("graph_launch_us")) p.params.graph_launch_us = j.at("graph_launch_us").get<double>();
    field = "graph_node_us";
    if (j.contains("graph_node_us")) p.params.graph_node_us = j.at("graph_node_us").get<double>();
    field = "graph_start_us";
    if (j.contains("graph_start_us")) p.params.graph_start_us = j.at("graph_start_us").get<double>();
    field = "graph_epsilon_us";
    if (j.contains("graph_epsilon_us")) p.params.graph_epsilon_us = j.at("graph_epsilon_us").get<double>();
    field = "join_us";
    if (j.contains("join_us")) p.params.join_us = j.at("join_us").get<double>();
    field = "graph_join_us";
    if (j.contains("graph_join_us")) p.params.graph_join_us = j.at("graph_join_us").get<double>();
    field = "lane_jitter_us";  // optional: profiles written before it was measured have none
    if (j.contains("lane_jitter_us")) p.params.lane_jitter_us = j.at("lane_jitter_us").get<double>();
    field = "graph_lane_jitter_us";
    if (j.contains("graph_lane_jitter_us")) p.params.graph_lane_jitter_us = j.at("graph_lane_jitter_us").get<double>();
    GS_REQUIRE(p.params.epsilon_us >= 0 && p.params.host_call_us >= 0 && p.params.engine_call_us >= 0 &&
                   p.params.graph_launch_us >= 0 &&
                   p.params.graph_node_us >= 0 && p.params.graph_start_us >= 0 && p.params.join_us >= 0 &&
                   p.params.lane_jitter_us >= 0,
               GPUSTRIPE_ERR_PROFILE, "%s: negative epsilon_us, host_call_us, engine_call_us, join_us, lane_jitter_us or graph costs",
               origin.c_str());
    field = "capacities";
    for (auto it = j.at("capacities").begin(); it != j.at("capacities").end(); ++it) {
      field = "capacities." + it.key();
      double v = it.value().get<double>();
      GS_REQUIRE(v > 0, GPUSTRIPE_ERR_PROFILE, "%s: %s: capacity must be positive", origin.c_str(), field.c_str());
      p.params.capacities[it.key()] = v;
    }
    if (j.contains("measurements")) p.measurements_json = j["measurements"].dump();
  } catch (const json::exception& e) {
    GS_THROW(GPUSTRIPE_ERR_PROFILE, "%s: %s: %s", origin.c_str(), field.c_str(), e.what());
  } catch (const Error& e) {
    if (std::string(e.what()).find(origin) != std::string::npos) throw;
    GS_THROW(e.status(), "%s: %s: %s", origin.c_str(), field.c_str(), e.what());
  }
  p.params.source = "profile " + origin;
  return p;
}

Profile load_profile(const std::string& path) {
  return profile_from_json(read_text_file(path, "profile"), path);
}


void save_profile(const Profile& p, const std::string& path) { write_text_file(path, profile_to_json(p)); }

std::string profile_fingerprint(const Topology& topo, bool emulated) {
  return topo.fingerprint() + (emulated ? "-emulated" : "");
}

std::string profile_mismatch(const Profile& p, const Topology& topo, bool emulated) {
  // Checked before the fingerprint: profiles of emulated devices written under the plain
  // fingerprint of the node they emulate must not pass for that node's.
  if (p.backend == "emulated" && !emulated)
    return format("it was measured on emulated devices (this host's memcpy speeds), not on the GPUs of '%s'",
                  topo.name.c_str());
  std::string fp = profile_fingerprint(topo, emulated);
  if (p.fingerprint != fp)
    return format("it was measured on node '%s' (fingerprint %s), this node is %s", p.topology.c_str(),
                  p.fingerprint.c_str(), fp.c_str());
  if (!p.driver.empty() && !topo.driver_version.empty() && p.driver != topo.driver_version)
    return format("it was measured with driver %s, this node runs %s", p.driver.c_str(), topo.driver_version.c_str());
  return "";
}

std::string cache_dir() {
  std::string xdg = environment_variable("XDG_CACHE_HOME");
  if (!xdg.empty()) return xdg + "/gpustripe";
  std::string home = environment_variable("HOME");
  return (home.empty() ? std::string("/tmp") : home) + "/.cache/gpustripe";
}

std::string cached_profile_path(const Topology& topo, bool emulated) {
  return cache_dir() + "/profile-" + profile_fingerprint(topo, emulated) + ".json";
}

std::string default_profile_path(const Topology& topo, bool emulated) {
  std::string p = kProfile.get();
  return p.empty() ? cached_profile_path(topo, emulated) : p;
}

ModelParams resolve_params(const Topology& topo, const std::string& explicit_path, bool emulated) {
  std::string named = explicit_path.empty() ? kProfile.get() : explicit_path;
  if (!named.empty()) {
    Profile p = load_profile(named);
    std::string why = profile_mismatch(p, topo, emulated);
    GS_REQUIRE(why.empty(), GPUSTRIPE_ERR_PROFILE, "profile %s does not belong to this node: %s", named.c_str(),
               why.c_str());
    GS_LOG_INFO(Subsys::Model, "model parameters from profile %s", named.c_str());
    return p.params;
  }
  std::string cached = cached_profile_path(topo, emulated);
  if (file_exists(cached)) {
    try {
      Profile p = load_profile(cached);
      std::string why = profile_mismatch(p, topo, emulated);
      if (why.empty()) {
        GS_LOG_INFO(Subsys::Model, "model parameters from cached profile %s", cached.c_str());
        return p.params;
      }
      GS_LOG_WARN(Subsys::Model, "ignoring cached profile %s: %s", cached.c_str(), why.c_str());
    } catch (const Error& e) {
      GS_LOG_WARN(Subsys::Model, "ignoring cached profile: %s", e.what());
    }
  }
  ModelParams nominal = nominal_params(topo);
  GS_LOG_INFO(Subsys::Model, "no calibration profile for this node: using the %s (run `gpustripe calibrate`)",
              nominal.source.c_str());
  return nominal;
}

}  // namespace gpustripe
