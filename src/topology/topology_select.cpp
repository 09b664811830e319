// Which topology: finding the shipped files (next to the library, in the wheel, in
// the source tree), resolving a name or a path, and choosing the node we run on.
#include <dirent.h>
#include <dlfcn.h>
#include <sys/stat.h>

#include <algorithm>

#include "common/config.hpp"
#include "common/error.hpp"
#include "common/text_file.hpp"
#include "common/log.hpp"
#include "topology/topology.hpp"

namespace gpustripe {
namespace {

const StringSetting kTopologyDir{"GPUSTRIPE_TOPOLOGY_DIR", "",
                                 "Directory of the shipped topology files, for an installation that moved them; empty: "
                                 "next to libgpustripe, else the source tree"};
const StringSetting kTopology{"GPUSTRIPE_TOPOLOGY", "",
                              "Topology to run on: a shipped name (h200x4) or a JSON file; empty: the detected node, "
                              "or h200x4 emulated when no GPU is visible"};

bool is_dir(const std::string& p) {
  struct stat st;
  return stat(p.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}
bool is_file(const std::string& p) {
  struct stat st;
  return stat(p.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

// Directory holding libgpustripe.so (or the executable it is linked into).
std::string library_dir() {
  Dl_info info;
  if (dladdr(reinterpret_cast<void*>(&library_dir), &info) == 0 || !info.dli_fname) return "";
  std::string f = info.dli_fname;
  size_t slash = f.rfind('/');
  return slash == std::string::npos ? "." : f.substr(0, slash);
}

std::string read_file(const std::string& path) { return read_text_file(path, "topology file"); }

}  // namespace

std::string topology_dir() {
  std::string env = kTopologyDir.get();
  if (!env.empty()) {
    GS_REQUIRE(is_dir(env), GPUSTRIPE_ERR_IO, "GPUSTRIPE_TOPOLOGY_DIR='%s' is not a directory", env.c_str());
    return env;
  }
  // Wheel: gpustripe/libgpustripe.so + gpustripe/topologies. Install: lib/ + share/gpustripe/topologies.
  std::string lib = library_dir();
  if (!lib.empty())
    for (const char* rel : {"/topologies", "/../topologies", "/../share/gpustripe/topologies"})
      if (is_dir(lib + rel)) return lib + rel;
#ifdef GPUSTRIPE_SOURCE_TOPOLOGY_DIR
  if (is_dir(GPUSTRIPE_SOURCE_TOPOLOGY_DIR)) return GPUSTRIPE_SOURCE_TOPOLOGY_DIR;
#endif
  GS_THROW(GPUSTRIPE_ERR_IO, "cannot find the shipped topology files: set GPUSTRIPE_TOPOLOGY_DIR (looked next to '%s')",
           lib.c_str());
}

std::vector<std::string> shipped_topologies() {
  std::string dir = topology_dir();
  std::vector<std::string> names;
  DIR* d = opendir(dir.c_str());
  GS_REQUIRE(d, GPUSTRIPE_ERR_IO, "cannot list topology directory '%s'", dir.c_str());
  while (dirent* e = readdir(d)) {
    std::string n = e->d_name;
    if (n.size() > 5 && n.compare(n.size() - 5, 5, ".json") == 0) names.push_back(n.substr(0, n.size() - 5));
  }
  closedir(d);
  std::sort(names.begin(), names.end());
  return names;
}

Topology load_topology_file(const std::string& name_or_path) {
  GS_REQUIRE(!name_or_path.empty(), GPUSTRIPE_ERR_INVALID_ARGUMENT, "empty topology name");
  std::string path = name_or_path;
  // A bare name ("h200x4") is a shipped file; anything with a slash or a .json ending is a path.
  bool bare = name_or_path.find('/') == std::string::npos &&
              !(name_or_path.size() > 5 && name_or_path.compare(name_or_path.size() - 5, 5, ".json") == 0);
  if (bare && !is_file(name_or_path)) {
    std::string dir = topology_dir();
    path = dir + "/" + name_or_path + ".json";
    if (!is_file(path)) {
      std::string names;
      for (const std::string& n : shipped_topologies()) names += (names.empty() ? "" : ", ") + n;
      GS_THROW(GPUSTRIPE_ERR_IO, "no topology named '%s' in %s (shipped: %s); or give a path to a .json file",
               name_or_path.c_str(), dir.c_str(), names.c_str());
    }
  } else {
    GS_REQUIRE(is_file(path), GPUSTRIPE_ERR_IO, "topology file '%s' does not exist", path.c_str());
  }
  Topology t = load_topology_text(read_file(path), path);
  GS_LOG_DEBUG(Subsys::Topology, "loaded topology '%s' from %s", t.name.c_str(), path.c_str());
  return t;
}

Topology node_topology(bool* emulated) {
  std::string chosen = kTopology.get();
  if (!chosen.empty()) {
    if (emulated) *emulated = true;
    return load_topology_file(chosen);
  }
  try {
    Topology t = detect_topology();
    if (emulated) *emulated = false;
    return t;
  } catch (const Error& e) {
    if (e.status() != GPUSTRIPE_ERR_NOT_SUPPORTED) throw;
    GS_LOG_INFO(Subsys::Topology, "%s: running on the default emulated node %s (set GPUSTRIPE_TOPOLOGY)", e.what(),
                kDefaultTopology);
  }
  if (emulated) *emulated = true;
  return load_topology_file(kDefaultTopology);
}

}  // namespace gpustripe
