// Calibration profiles: the measured model parameters of one node, as JSON keyed by
// the topology fingerprint (GPU names, UUIDs, link structure) and the driver version.
// Where the planner gets its parameters (resolve_params):
//   1. GPUSTRIPE_PROFILE (or an explicit path): must match the node, else ERR_PROFILE;
//   2. $XDG_CACHE_HOME/gpustripe/profile-<fingerprint>.json (~/.cache when unset):
//      used when it matches, else ignored with a warning;
//   3. the topology's nominal figures (logged at info level, and `gpustripe plan` says so).
// A profile measured on emulated devices holds a host's memcpy speeds, not the GPUs' of the
// topology it emulates: it is keyed by that topology's fingerprint with "-emulated" added,
// and only a context on the emulated backend uses it, never a real node or a topology file.
// No calibration runs implicitly on first use: it takes tens of seconds and moves
// gigabytes between the GPUs, which must not happen inside someone's first copy call.
#pragma once
#include <string>

#include "model/hop.hpp"

namespace gpustripe {

struct Topology;

struct Profile {
  int schema = 1;
  std::string fingerprint;  // Topology::fingerprint() of the node measured
  std::string driver;       // driver version ("" when unknown, e.g. emulated)
  std::string backend;      // "cuda" or "emulated"
  std::string topology;     // the node's name, for people reading the file
  std::string created;      // ISO date
  ModelParams params;
  std::string measurements_json = "{}";  // raw sweeps, kept for `gpustripe calibrate --show` and plots
};

std::string profile_to_json(const Profile& p);
// Throws ERR_PROFILE naming the origin and the field when the text is not a profile.
Profile profile_from_json(const std::string& text, const std::string& origin);
Profile load_profile(const std::string& path);  // ERR_IO when unreadable
void save_profile(const Profile& p, const std::string& path);  // creates directories; ERR_IO on failure
// Writes a whole file through a temporary and a rename, creating directories; ERR_IO on failure.


// What a profile of `topo` is keyed by: its fingerprint, with "-emulated" when measured
// (or to be used) on emulated devices.
std::string profile_fingerprint(const Topology& topo, bool emulated);
// Why a profile does not fit the node (`emulated`: the planner runs on emulated devices of
// it), or "" when it does.
std::string profile_mismatch(const Profile& p, const Topology& topo, bool emulated = false);
std::string cache_dir();  // $XDG_CACHE_HOME/gpustripe or ~/.cache/gpustripe
std::string cached_profile_path(const Topology& topo, bool emulated = false);
// GPUSTRIPE_PROFILE when set, else the cache path.
std::string default_profile_path(const Topology& topo, bool emulated = false);

// The parameters the planner runs on, following the order above. `explicit_path` (the
// CLI's --profile) acts like GPUSTRIPE_PROFILE; `emulated`: for a context on emulated
// devices of `topo`. params.source says where they came from.
ModelParams resolve_params(const Topology& topo, const std::string& explicit_path = "", bool emulated = false);

}  // namespace gpustripe
