// Schema-1 topology files (docs/topology-schema.md): reading with errors that name
// the file, the line and the field, and writing (Topology::to_json).
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>

#include "common/error.hpp"
#include "topology/json_locator.hpp"
#include "topology/topology.hpp"

namespace gpustripe {
namespace {

using json = nlohmann::json;
constexpr int kSchemaVersion = 1;

// Edit distance, to suggest the key a typo meant.
size_t distance(const std::string& a, const std::string& b) {
  std::vector<size_t> prev(b.size() + 1), cur(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) prev[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    cur[0] = i;
    for (size_t j = 1; j <= b.size(); ++j)
      cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1)});
    std::swap(prev, cur);
  }
  return prev[b.size()];
}

std::string shown(const json& v) {
  std::string s = v.dump();
  return s.size() > 40 ? s.substr(0, 37) + "..." : s;
}

// Reads one file's JSON into a Topology. Every error names origin:line: path.
class Reader {
 public:
  Reader(const json& root, const std::string& text, std::string origin)
      : root_(root), loc_(text), origin_(std::move(origin)) {}

  Topology read() {
    if (loc_.first_duplicate()) fail(*loc_.first_duplicate(), "this key appears twice in its object");
    expect_object(root_, "");
    keys(root_, "", {"schema", "name", "description", "sources", "driver_version", "sockets", "socket_links", "gpus",
                     "gpu_links", "peer_access"});
    int schema = integer(root_, "", "schema");
    if (schema != kSchemaVersion)
      fail("schema", format("unsupported schema version %d: this build reads version %d", schema, kSchemaVersion));
    Topology t;
    t.origin = origin_;
    t.name = string(root_, "", "name");
    t.description = opt_string(root_, "", "description", "");
    t.driver_version = opt_string(root_, "", "driver_version", "");
    if (const json* s = opt_array(root_, "", "sources"))
      for (size_t k = 0; k < s->size(); ++k) t.sources.push_back(string_value((*s)[k], element_path("sources", k)));

    const json& sockets = array(root_, "", "sockets");
    for (size_t k = 0; k < sockets.size(); ++k) t.sockets.push_back(socket(sockets[k], element_path("sockets", k), k));
    if (const json* sl = opt_array(root_, "", "socket_links"))
      for (size_t k = 0; k < sl->size(); ++k) t.socket_links.push_back(socket_link((*sl)[k], element_path("socket_links", k)));
    const json& gpus = array(root_, "", "gpus");
    for (size_t k = 0; k < gpus.size(); ++k) t.gpus.push_back(gpu(gpus[k], element_path("gpus", k), k, t));
    if (const json* gl = opt_array(root_, "", "gpu_links"))
      for (size_t k = 0; k < gl->size(); ++k) t.gpu_links.push_back(gpu_link((*gl)[k], element_path("gpu_links", k)));
    t.peer_access = peer_access(t.gpus.size());

    if (auto issue = t.find_issue()) fail(issue->path, issue->message);
    return t;
  }

 private:
  [[noreturn]] void fail(const std::string& path, const std::string& msg) const {
    GS_THROW(GPUSTRIPE_ERR_TOPOLOGY, "%s:%d: %s: %s", origin_.c_str(), loc_.line_of(path),
             path.empty() ? "(top level)" : path.c_str(), msg.c_str());
  }

  void expect_object(const json& v, const std::string& path) const {
    if (!v.is_object()) fail(path, "expected an object, got " + shown(v));
  }

  // Unknown keys are errors, so a typo does not silently fall back to a default.
  void keys(const json& obj, const std::string& path, std::initializer_list<const char*> allowed) const {
    for (auto it = obj.begin(); it != obj.end(); ++it) {
      const std::string& k = it.key();
      if (std::any_of(allowed.begin(), allowed.end(), [&](const char* a) { return k == a; })) continue;
      std::string best;
      size_t best_d = 3;  // suggest only close matches
      std::string all;
      for (const char* a : allowed) {
        all += (all.empty() ? "" : ", ") + std::string(a);
        size_t d = distance(k, a);
        if (d < best_d) best_d = d, best = a;
      }
      fail(member_path(path, k), "unknown key" + (best.empty() ? std::string() : " (did you mean \"" + best + "\"?)") +
                                     "; allowed here: " + all);
    }
  }

  const json& required(const json& obj, const std::string& path, const char* key) const {
    auto it = obj.find(key);
    if (it == obj.end()) fail(member_path(path, key), "missing required field");
    return *it;
  }

  int int_value(const json& v, const std::string& path) const {
    if (!v.is_number_integer()) fail(path, "expected an integer, got " + shown(v));
    if (v.is_number_unsigned() ? v.get<uint64_t>() > 0x7fffffffull
                               : (v.get<int64_t>() > 0x7fffffff || v.get<int64_t>() < -0x7fffffff))
      fail(path, "integer out of range: " + shown(v));
    return v.get<int>();
  }
  int integer(const json& obj, const std::string& path, const char* key) const {
    return int_value(required(obj, path, key), member_path(path, key));
  }
  int opt_integer(const json& obj, const std::string& path, const char* key, int def) const {
    return obj.contains(key) ? integer(obj, path, key) : def;
  }
  uint64_t bytes(const json& obj, const std::string& path, const char* key) const {
    const json& v = required(obj, path, key);
    std::string p = member_path(path, key);
    if (!v.is_number_integer()) fail(p, "expected an integer number of bytes, got " + shown(v));
    if (!v.is_number_unsigned()) fail(p, "must be >= 0, got " + shown(v));
    return v.get<uint64_t>();
  }
  double number(const json& obj, const std::string& path, const char* key) const {
    const json& v = required(obj, path, key);
    if (!v.is_number()) fail(member_path(path, key), "expected a number, got " + shown(v));
    double d = v.get<double>();
    if (d < 0) fail(member_path(path, key), "must be >= 0, got " + shown(v));
    return d;
  }
  double opt_number(const json& obj, const std::string& path, const char* key, double def) const {
    return obj.contains(key) ? number(obj, path, key) : def;
  }
  bool boolean(const json& obj, const std::string& path, const char* key) const {
    const json& v = required(obj, path, key);
    if (!v.is_boolean()) fail(member_path(path, key), "expected true or false, got " + shown(v));
    return v.get<bool>();
  }
  std::string string_value(const json& v, const std::string& path) const {
    if (!v.is_string()) fail(path, "expected a string, got " + shown(v));
    return v.get<std::string>();
  }
  std::string string(const json& obj, const std::string& path, const char* key) const {
    return string_value(required(obj, path, key), member_path(path, key));
  }
  std::string opt_string(const json& obj, const std::string& path, const char* key, const char* def) const {
    return obj.contains(key) ? string(obj, path, key) : def;
  }
  const json& array(const json& obj, const std::string& path, const char* key) const {
    const json& v = required(obj, path, key);
    if (!v.is_array()) fail(member_path(path, key), "expected an array, got " + shown(v));
    return v;
  }
  const json* opt_array(const json& obj, const std::string& path, const char* key) const {
    return obj.contains(key) ? &array(obj, path, key) : nullptr;
  }
  const json& object(const json& obj, const std::string& path, const char* key) const {
    const json& v = required(obj, path, key);
    expect_object(v, member_path(path, key));
    return v;
  }

  SocketInfo socket(const json& v, const std::string& p, size_t k) const {
    expect_object(v, p);
    keys(v, p, {"id", "numa_node", "cpu", "memory_gbps"});
    SocketInfo s;
    s.id = integer(v, p, "id");
    s.numa_node = opt_integer(v, p, "numa_node", s.id);
    s.cpu = opt_string(v, p, "cpu", "");
    s.memory_gbps = opt_number(v, p, "memory_gbps", 0);
    return s;
  }

  SocketLink socket_link(const json& v, const std::string& p) const {
    expect_object(v, p);
    keys(v, p, {"a", "b", "kind", "gbps"});
    SocketLink l;
    l.a = integer(v, p, "a");
    l.b = integer(v, p, "b");
    l.kind = string(v, p, "kind");
    l.gbps = number(v, p, "gbps");
    return l;
  }

  GpuInfo gpu(const json& v, const std::string& p, size_t k, const Topology& t) const {
    expect_object(v, p);
    keys(v, p, {"index", "name", "uuid", "pci_bus_id", "compute_capability", "sm_count", "memory_bytes",
                "copy_engines", "socket", "numa_node", "host", "nvlink"});
    GpuInfo g;
    g.index = opt_integer(v, p, "index", static_cast<int>(k));
    g.name = string(v, p, "name");
    g.uuid = opt_string(v, p, "uuid", "");
    g.pci_bus_id = opt_string(v, p, "pci_bus_id", "");
    std::string cc = string(v, p, "compute_capability");
    char dot = 0, extra = 0;
    if (std::sscanf(cc.c_str(), "%d%c%d%c", &g.cc_major, &dot, &g.cc_minor, &extra) != 3 || dot != '.' ||
        g.cc_major < 1 || g.cc_minor < 0)
      fail(member_path(p, "compute_capability"), "expected \"major.minor\" such as \"9.0\", got \"" + cc + "\"");
    g.sm_count = integer(v, p, "sm_count");
    g.memory_bytes = bytes(v, p, "memory_bytes");
    g.copy_engines = integer(v, p, "copy_engines");
    g.socket = integer(v, p, "socket");
    int numa_default = 0;
    for (const SocketInfo& s : t.sockets)
      if (s.id == g.socket) numa_default = s.numa_node;
    g.numa_node = opt_integer(v, p, "numa_node", numa_default);

    std::string hp = member_path(p, "host");
    const json& h = object(v, p, "host");
    keys(h, hp, {"link", "pcie_gen", "pcie_width", "nvlinks", "gbps"});
    std::string kind = string(h, hp, "link");
    if (kind == "pcie") g.host_link = HostLinkKind::PCIe;
    else if (kind == "nvlink") g.host_link = HostLinkKind::NVLink;
    else fail(member_path(hp, "link"), "expected \"pcie\" or \"nvlink\", got \"" + kind + "\"");
    g.pcie_gen = integer(h, hp, "pcie_gen");
    g.pcie_width = integer(h, hp, "pcie_width");
    g.host_nvlinks = g.host_link == HostLinkKind::NVLink ? integer(h, hp, "nvlinks") : opt_integer(h, hp, "nvlinks", 0);
    g.host_gbps = number(h, hp, "gbps");

    if (v.contains("nvlink")) {
      std::string np = member_path(p, "nvlink");
      const json& n = object(v, p, "nvlink");
      keys(n, np, {"links", "gbps_per_link", "nvswitch"});
      g.nvlinks = integer(n, np, "links");
      g.nvlink_gbps = number(n, np, "gbps_per_link");
      g.nvswitch = boolean(n, np, "nvswitch");
    }
    return g;
  }

  GpuLink gpu_link(const json& v, const std::string& p) const {
    expect_object(v, p);
    keys(v, p, {"a", "b", "links", "gbps_per_link"});
    GpuLink l;
    l.a = integer(v, p, "a");
    l.b = integer(v, p, "b");
    l.count = integer(v, p, "links");
    l.gbps_per_link = number(v, p, "gbps_per_link");
    return l;
  }

  std::vector<std::vector<uint8_t>> peer_access(size_t n) const {
    const json& v = required(root_, "", "peer_access");
    std::vector<std::vector<uint8_t>> m(n, std::vector<uint8_t>(n, 0));
    if (v.is_string()) {
      std::string s = v.get<std::string>();
      if (s != "all" && s != "none") fail("peer_access", "expected \"all\", \"none\" or a matrix of 0/1, got \"" + s + "\"");
      if (s == "all")
        for (size_t i = 0; i < n; ++i)
          for (size_t j = 0; j < n; ++j) m[i][j] = i != j;
      return m;
    }
    if (!v.is_array()) fail("peer_access", "expected \"all\", \"none\" or a matrix of 0/1, got " + shown(v));
    m.assign(v.size(), {});
    for (size_t i = 0; i < v.size(); ++i) {
      std::string rp = element_path("peer_access", i);
      if (!v[i].is_array()) fail(rp, "expected a row of 0/1, got " + shown(v[i]));
      for (size_t j = 0; j < v[i].size(); ++j) {
        const json& e = v[i][j];
        std::string ep = element_path(rp, j);
        if (e.is_boolean()) m[i].push_back(e.get<bool>());
        else if (e.is_number_integer() && (e.get<int64_t>() == 0 || e.get<int64_t>() == 1)) m[i].push_back(uint8_t(e.get<int64_t>()));
        else fail(ep, "expected 0 or 1, got " + shown(e));
      }
    }
    return m;  // shape and symmetry are checked by find_issue()
  }

  const json& root_;
  JsonLocator loc_;
  std::string origin_;
};

}  // namespace

Topology load_topology_text(const std::string& text, const std::string& origin) {
  json root;
  try {
    root = json::parse(text);
  } catch (const json::parse_error& e) {
    // nlohmann's message: "[json.exception.parse_error.101] parse error at line 3, column 5: <what>"
    std::string what = e.what();
    size_t colon = what.find(": ", what.find("column"));
    std::string detail = colon == std::string::npos ? what : what.substr(colon + 2);
    size_t upto = std::min<size_t>(e.byte ? e.byte - 1 : 0, text.size());
    int line = 1 + static_cast<int>(std::count(text.begin(), text.begin() + static_cast<long>(upto), '\n'));
    GS_THROW(GPUSTRIPE_ERR_TOPOLOGY, "%s:%d: JSON syntax error: %s", origin.c_str(), line, detail.c_str());
  }
  return Reader(root, text, origin).read();
}

std::string Topology::to_json() const {
  using ojson = nlohmann::ordered_json;
  ojson root;
  root["schema"] = kSchemaVersion;
  root["name"] = name;
  if (!description.empty()) root["description"] = description;
  if (!sources.empty()) root["sources"] = sources;
  if (!driver_version.empty()) root["driver_version"] = driver_version;
  root["sockets"] = ojson::array();
  for (const SocketInfo& s : sockets)
    root["sockets"].push_back({{"id", s.id}, {"numa_node", s.numa_node}, {"cpu", s.cpu}, {"memory_gbps", s.memory_gbps}});
  root["socket_links"] = ojson::array();
  for (const SocketLink& l : socket_links)
    root["socket_links"].push_back({{"a", l.a}, {"b", l.b}, {"kind", l.kind}, {"gbps", l.gbps}});
  root["gpus"] = ojson::array();
  for (const GpuInfo& g : gpus) {
    ojson host = {{"link", g.host_link == HostLinkKind::NVLink ? "nvlink" : "pcie"},
                  {"pcie_gen", g.pcie_gen},
                  {"pcie_width", g.pcie_width}};
    if (g.host_nvlinks) host["nvlinks"] = g.host_nvlinks;
    host["gbps"] = g.host_gbps;
    ojson j = {{"index", g.index},
               {"name", g.name},
               {"uuid", g.uuid},
               {"pci_bus_id", g.pci_bus_id},
               {"compute_capability", format("%d.%d", g.cc_major, g.cc_minor)},
               {"sm_count", g.sm_count},
               {"memory_bytes", g.memory_bytes},
               {"copy_engines", g.copy_engines},
               {"socket", g.socket},
               {"numa_node", g.numa_node},
               {"host", host}};
    if (g.nvlinks > 0) j["nvlink"] = {{"links", g.nvlinks}, {"gbps_per_link", g.nvlink_gbps}, {"nvswitch", g.nvswitch}};
    root["gpus"].push_back(j);
  }
  root["gpu_links"] = ojson::array();
  for (const GpuLink& l : gpu_links)
    root["gpu_links"].push_back({{"a", l.a}, {"b", l.b}, {"links", l.count}, {"gbps_per_link", l.gbps_per_link}});
  bool all = true, none = true;
  for (size_t i = 0; i < peer_access.size(); ++i)
    for (size_t j = 0; j < peer_access[i].size(); ++j) {
      if (i == j) continue;
      all = all && peer_access[i][j];
      none = none && !peer_access[i][j];
    }
  if (all) root["peer_access"] = "all";
  else if (none) root["peer_access"] = "none";
  else {
    ojson m = ojson::array();
    for (const auto& row : peer_access) {
      ojson r = ojson::array();
      for (uint8_t v : row) r.push_back(int(v));
      m.push_back(r);
    }
    root["peer_access"] = m;
  }
  return root.dump(2) + "\n";
}

}  // namespace gpustripe
