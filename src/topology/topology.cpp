// Queries on a Topology and its consistency check. Reading and writing the JSON
// form is in topology_file.cpp, detection in topology_detect.cpp.
#include "topology/topology.hpp"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <set>

#include "common/error.hpp"

namespace gpustripe {
namespace {

const char* host_link_name(HostLinkKind k) { return k == HostLinkKind::NVLink ? "nvlink" : "pcie"; }

const GpuLink* find_link(const std::vector<GpuLink>& links, int i, int j) {
  for (const GpuLink& l : links)
    if ((l.a == i && l.b == j) || (l.a == j && l.b == i)) return &l;
  return nullptr;
}

// FNV-1a: stable across runs and builds (std::hash is not), enough to key profiles.
uint64_t fnv1a(const std::string& s) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : s) {
    h ^= c;
    h *= 1099511628211ull;
  }
  return h;
}

std::string fmt_gbps(double v) { return format("%.1f", v); }

// HBM sizes: binary for older parts (16/32/40 GiB), decimal on H200's datasheet (141 GB).
std::string fmt_memory(uint64_t bytes) {
  if (bytes % (1ull << 30) == 0) return format("%llu GiB", static_cast<unsigned long long>(bytes >> 30));
  return format("%.1f GB", bytes / 1e9);
}

// Appends strings only (numbers go through format()), in the shape of a stream.
struct TextOut {
  std::string text;
  TextOut& operator<<(const std::string& s) {
    text += s;
    return *this;
  }
  TextOut& operator<<(const char* s) {
    text += s;
    return *this;
  }
};

std::vector<std::string> split_words(const std::string& text) {
  std::vector<std::string> words(1);
  for (char ch : text) {
    if (ch == ' ' || ch == '\t' || ch == '\n') {
      if (!words.back().empty()) words.emplace_back();
    } else {
      words.back() += ch;
    }
  }
  if (words.back().empty()) words.pop_back();
  return words;
}

// Word-wraps `text` to lines of at most `width` characters, each starting with `indent`.
std::string wrap(const std::string& text, size_t width, const std::string& indent) {
  std::string line, out;
  for (const std::string& word : split_words(text)) {
    if (!line.empty() && line.size() + 1 + word.size() > width) {
      out += indent + line + "\n";
      line.clear();
    }
    line += (line.empty() ? "" : " ") + word;
  }
  if (!line.empty()) out += indent + line + "\n";
  return out;
}

}  // namespace

double pcie_gbps(int gen, int width) {
  // GT/s per lane x encoding (8b/10b to Gen2, 128b/130b from Gen3) / 8 bits; Gen6 is
  // PAM4 FLIT at 64 GT/s with 242/256 efficiency.
  static const double per_lane[] = {0, 0.25, 0.5, 8 * 128.0 / 130 / 8, 16 * 128.0 / 130 / 8, 32 * 128.0 / 130 / 8,
                                    64 * 242.0 / 256 / 8, 128 * 242.0 / 256 / 8};
  if (gen < 1 || gen > 7 || width <= 0) return 0;
  return per_lane[gen] * width;
}

const GpuInfo& Topology::gpu(int i) const {
  if (i < 0 || i >= gpu_count()) {
    if (gpus.empty()) GS_THROW(GPUSTRIPE_ERR_INVALID_DEVICE, "GPU %d: the node '%s' has no GPUs", i, name.c_str());
    GS_THROW(GPUSTRIPE_ERR_INVALID_DEVICE, "GPU %d does not exist: valid GPUs are 0-%d on '%s'", i, gpu_count() - 1,
             name.c_str());
  }
  return gpus[static_cast<size_t>(i)];
}

bool Topology::can_access_peer(int i, int j) const {
  gpu(i);
  gpu(j);
  if (i == j) return false;
  return peer_access.at(static_cast<size_t>(i)).at(static_cast<size_t>(j)) != 0;
}

bool Topology::has_nvswitch() const {
  return std::any_of(gpus.begin(), gpus.end(), [](const GpuInfo& g) { return g.nvswitch; });
}

int Topology::nvlinks_between(int i, int j) const {
  const GpuInfo& a = gpu(i);
  const GpuInfo& b = gpu(j);
  if (i == j) return 0;
  if (a.nvswitch && b.nvswitch) return std::min(a.nvlinks, b.nvlinks);
  const GpuLink* l = find_link(gpu_links, i, j);
  return l ? l->count : 0;
}

double Topology::direct_gbps(int i, int j) const {
  const GpuInfo& a = gpu(i);
  const GpuInfo& b = gpu(j);
  GS_REQUIRE(i != j, GPUSTRIPE_ERR_INVALID_ARGUMENT, "direct_gbps(%d, %d): a peer copy needs two different GPUs", i, j);
  // Without peer access the driver stages through the host: not a direct path.
  if (!can_access_peer(i, j)) return 0;
  if (a.nvswitch && b.nvswitch) return std::min(nvlink_egress_gbps(i), nvlink_ingress_gbps(j));
  if (const GpuLink* l = find_link(gpu_links, i, j)) return l->gbps();
  // PCIe (or CPU-NVLink) peer-to-peer through the host bridges: the slower host link,
  // and the socket interconnect when the GPUs hang off different sockets.
  double g = std::min(a.host_gbps, b.host_gbps);
  if (a.socket != b.socket) {
    double x = socket_link_gbps(a.socket, b.socket);
    if (x > 0) g = std::min(g, x);  // 0: unknown (detected), do not pretend it is a wall
  }
  return g;
}

double Topology::nvlink_egress_gbps(int i) const {
  const GpuInfo& g = gpu(i);
  if (g.nvswitch) return g.nvlinks * g.nvlink_gbps;
  double sum = 0;
  for (const GpuLink& l : gpu_links)
    if (l.a == i || l.b == i) sum += l.gbps();
  return sum;
}

// NVLink is symmetric per direction: what leaves a GPU can also enter it.
double Topology::nvlink_ingress_gbps(int i) const { return nvlink_egress_gbps(i); }

double Topology::host_link_gbps(int i) const { return gpu(i).host_gbps; }

const SocketInfo& Topology::socket_of(int g) const {
  int s = gpu(g).socket;
  for (const SocketInfo& si : sockets)
    if (si.id == s) return si;
  GS_THROW(GPUSTRIPE_ERR_TOPOLOGY, "GPU %d hangs off socket %d, which '%s' does not list", g, s, name.c_str());
}

double Topology::socket_link_gbps(int a, int b) const {
  auto exists = [&](int s) {
    return std::any_of(sockets.begin(), sockets.end(), [s](const SocketInfo& si) { return si.id == s; });
  };
  GS_REQUIRE(exists(a) && exists(b), GPUSTRIPE_ERR_INVALID_ARGUMENT, "socket_link_gbps(%d, %d): '%s' has %zu socket(s)",
             a, b, name.c_str(), sockets.size());
  if (a == b) return 0;
  for (const SocketLink& l : socket_links)
    if ((l.a == a && l.b == b) || (l.a == b && l.b == a)) return l.gbps;
  GS_THROW(GPUSTRIPE_ERR_TOPOLOGY, "sockets %d and %d of '%s' are not linked", a, b, name.c_str());
}

std::string Topology::fingerprint() const {
  // Only what identifies the hardware: not the name, description or origin, so a
  // file and the detected node it describes differ only where the hardware does.
  std::string c;  // no iostreams here: see common/text_file.hpp
  for (const GpuInfo& g : gpus)
    c += g.name + '|' + g.uuid + '|' +
         format("%d.%d|%d|%llu|", g.cc_major, g.cc_minor, g.sm_count, static_cast<unsigned long long>(g.memory_bytes)) +
         host_link_name(g.host_link) +
         format("%dx%d|%d|%d|%s|%d;", g.pcie_gen, g.pcie_width, g.host_nvlinks, g.nvlinks, g.nvswitch ? "sw" : "mesh",
                g.socket);
  for (const GpuLink& l : gpu_links) c += format("%d-%d:%d;", std::min(l.a, l.b), std::max(l.a, l.b), l.count);
  for (const auto& row : peer_access)
    for (uint8_t v : row) c += std::to_string(int(v));
  std::string first = gpus.empty() ? "none" : gpus[0].name;
  std::string slug;
  for (char ch : first) slug += (std::isalnum(static_cast<unsigned char>(ch)) ? ch : '-');
  return format("%dx%s-%016llx", gpu_count(), slug.c_str(), static_cast<unsigned long long>(fnv1a(c)));
}

std::optional<TopologyIssue> Topology::find_issue() const {
  auto issue = [](std::string path, std::string msg) { return std::optional<TopologyIssue>({std::move(path), std::move(msg)}); };
  if (gpus.empty()) return issue("gpus", "a node needs at least one GPU");
  if (sockets.empty()) return issue("sockets", "a node needs at least one CPU socket");
  std::set<int> socket_ids;
  for (size_t k = 0; k < sockets.size(); ++k) {
    const SocketInfo& s = sockets[k];
    std::string p = format("sockets[%zu]", k);
    if (s.id != static_cast<int>(k)) return issue(p + ".id", format("sockets must be numbered 0, 1, ... in order: expected %zu, got %d", k, s.id));
    if (s.numa_node < 0) return issue(p + ".numa_node", format("must be >= 0, got %d", s.numa_node));
    if (s.memory_gbps < 0) return issue(p + ".memory_gbps", "must be >= 0 (0 = unknown)");
    socket_ids.insert(s.id);
  }
  const int n = gpu_count();
  auto gpu_range = [&] { return format("the node has GPUs 0-%d", n - 1); };
  for (int i = 0; i < n; ++i) {
    const GpuInfo& g = gpus[static_cast<size_t>(i)];
    std::string p = format("gpus[%d]", i);
    if (g.index != i) return issue(p + ".index", format("GPUs must be numbered 0, 1, ... in order: expected %d, got %d", i, g.index));
    if (g.name.empty()) return issue(p + ".name", "must not be empty");
    if (g.sm_count <= 0) return issue(p + ".sm_count", format("must be > 0, got %d", g.sm_count));
    if (g.memory_bytes == 0) return issue(p + ".memory_bytes", "must be > 0");
    if (g.copy_engines <= 0) return issue(p + ".copy_engines", format("must be > 0, got %d", g.copy_engines));
    if (!socket_ids.count(g.socket))
      return issue(p + ".socket", format("socket %d does not exist: the node has sockets 0-%zu", g.socket, sockets.size() - 1));
    if (g.numa_node < 0) return issue(p + ".numa_node", format("must be >= 0, got %d", g.numa_node));
    if (g.host_gbps < 0) return issue(p + ".host.gbps", "must be >= 0 (0 = unknown)");
    if (g.pcie_gen < 0 || g.pcie_gen > 7) return issue(p + ".host.pcie_gen", format("must be 1-7 (0 = unknown), got %d", g.pcie_gen));
    if (g.pcie_width != 0 && g.pcie_width != 1 && g.pcie_width != 2 && g.pcie_width != 4 && g.pcie_width != 8 &&
        g.pcie_width != 16 && g.pcie_width != 32)
      return issue(p + ".host.pcie_width", format("must be 1, 2, 4, 8, 16 or 32 (0 = unknown), got %d", g.pcie_width));
    if (g.host_link == HostLinkKind::NVLink && g.host_nvlinks <= 0)
      return issue(p + ".host.nvlinks", "a host link of kind nvlink needs nvlinks > 0");
    if (g.host_link == HostLinkKind::PCIe && g.host_nvlinks != 0)
      return issue(p + ".host.nvlinks", "a host link of kind pcie has no NVLinks");
    if (g.nvlinks < 0) return issue(p + ".nvlink.links", format("must be >= 0, got %d", g.nvlinks));
    if (g.nvlinks > 0 && g.nvlink_gbps <= 0) return issue(p + ".nvlink.gbps_per_link", "must be > 0 when the GPU has NVLinks");
    if (g.nvswitch && g.nvlinks == 0) return issue(p + ".nvlink.nvswitch", "a GPU on an NVSwitch needs NVLinks");
  }
  std::vector<int> used(static_cast<size_t>(n), 0);
  for (size_t k = 0; k < gpu_links.size(); ++k) {
    const GpuLink& l = gpu_links[k];
    std::string p = format("gpu_links[%zu]", k);
    if (l.a < 0 || l.a >= n) return issue(p + ".a", format("GPU %d does not exist: %s", l.a, gpu_range().c_str()));
    if (l.b < 0 || l.b >= n) return issue(p + ".b", format("GPU %d does not exist: %s", l.b, gpu_range().c_str()));
    if (l.a == l.b) return issue(p + ".b", format("a link joins two different GPUs, got %d twice", l.a));
    if (l.count <= 0) return issue(p + ".links", format("must be > 0, got %d", l.count));
    if (l.gbps_per_link <= 0) return issue(p + ".gbps_per_link", "must be > 0");
    for (size_t m = 0; m < k; ++m)
      if (find_link({gpu_links[m]}, l.a, l.b))
        return issue(p, format("GPUs %d and %d are already linked by gpu_links[%zu]: give one bundle per pair", l.a, l.b, m));
    for (int e : {l.a, l.b}) {
      const GpuInfo& g = gpus[static_cast<size_t>(e)];
      if (g.nvswitch)
        return issue(p, format("GPU %d's NVLinks go into an NVSwitch: it has no point-to-point links", e));
      used[static_cast<size_t>(e)] += l.count;
      if (used[static_cast<size_t>(e)] > g.nvlinks)
        return issue(p + ".links", format("GPU %d has %d NVLinks (gpus[%d].nvlink.links) but its links use %d", e,
                                          g.nvlinks, e, used[static_cast<size_t>(e)]));
    }
  }
  for (size_t k = 0; k < socket_links.size(); ++k) {
    const SocketLink& l = socket_links[k];
    std::string p = format("socket_links[%zu]", k);
    if (!socket_ids.count(l.a)) return issue(p + ".a", format("socket %d does not exist", l.a));
    if (!socket_ids.count(l.b)) return issue(p + ".b", format("socket %d does not exist", l.b));
    if (l.a == l.b) return issue(p + ".b", "a socket link joins two different sockets");
    if (l.gbps < 0) return issue(p + ".gbps", "must be >= 0 (0 = unknown)");
    for (size_t m = 0; m < k; ++m) {
      const SocketLink& o = socket_links[m];
      if ((o.a == l.a && o.b == l.b) || (o.a == l.b && o.b == l.a))
        return issue(p, format("sockets %d and %d are already linked by socket_links[%zu]", l.a, l.b, m));
    }
  }
  for (size_t a = 0; a < sockets.size(); ++a)
    for (size_t b = a + 1; b < sockets.size(); ++b) {
      bool linked = std::any_of(socket_links.begin(), socket_links.end(), [&](const SocketLink& l) {
        return (l.a == int(a) && l.b == int(b)) || (l.a == int(b) && l.b == int(a));
      });
      if (!linked) return issue("socket_links", format("sockets %zu and %zu are not linked: list every pair", a, b));
    }
  if (peer_access.size() != static_cast<size_t>(n))
    return issue("peer_access", format("must have %d rows (one per GPU), got %zu", n, peer_access.size()));
  for (int i = 0; i < n; ++i) {
    const auto& row = peer_access[static_cast<size_t>(i)];
    if (row.size() != static_cast<size_t>(n))
      return issue(format("peer_access[%d]", i), format("must have %d entries, got %zu", n, row.size()));
  }
  for (int i = 0; i < n; ++i)
    for (int j = 0; j < n; ++j) {
      uint8_t v = peer_access[size_t(i)][size_t(j)], w = peer_access[size_t(j)][size_t(i)];
      if (i == j && v) return issue(format("peer_access[%d][%d]", i, j), "a GPU is not its own peer: use 0 on the diagonal");
      if (v != w)
        return issue(format("peer_access[%d][%d]", i, j),
                     format("the matrix is not symmetric: [%d][%d] = %d but [%d][%d] = %d", i, j, v, j, i, w));
    }
  return std::nullopt;
}

void Topology::validate() const {
  if (auto i = find_issue()) GS_THROW(GPUSTRIPE_ERR_TOPOLOGY, "%s: %s: %s", origin.empty() ? name.c_str() : origin.c_str(), i->path.c_str(), i->message.c_str());
}

std::string Topology::summary() const {
  TextOut o;  // not an ostringstream: see common/text_file.hpp
  o << name << "\n";
  if (!description.empty()) o << wrap(description, 96, "  ");
  o << "  origin: " << origin;
  if (!driver_version.empty()) o << ", driver " << driver_version;
  o << "\n  fingerprint: " << fingerprint() << "\n";
  o << "  " << std::to_string(gpu_count()) << " GPU(s), " << std::to_string(sockets.size()) << " socket(s), "
    << (has_nvswitch() ? "NVLink through NVSwitch" : gpu_links.empty() ? "no GPU-GPU NVLink" : "point-to-point NVLink")
    << "\n\n";
  for (const GpuInfo& g : gpus) {
    o << format("  GPU %d  %s  cc %d.%d  %d SMs  %s  %d copy engines  socket %d  NUMA %d\n", g.index,
                g.name.c_str(), g.cc_major, g.cc_minor, g.sm_count, fmt_memory(g.memory_bytes).c_str(),
                g.copy_engines, g.socket, g.numa_node);
    if (!g.uuid.empty() || !g.pci_bus_id.empty())
      o << "         " << (g.uuid.empty() ? "" : g.uuid) << (g.pci_bus_id.empty() ? "" : "  bus " + g.pci_bus_id) << "\n";
    std::string pcie = g.pcie_gen ? format("PCIe Gen%d x%d", g.pcie_gen, g.pcie_width) : std::string("PCIe (gen unknown)");
    std::string host = g.host_link == HostLinkKind::NVLink ? format("%d NVLink to CPU (%s also present)", g.host_nvlinks, pcie.c_str()) : pcie;
    o << "         host: " << host << ", " << (g.host_gbps > 0 ? fmt_gbps(g.host_gbps) + " GB/s" : std::string("bandwidth unknown")) << "\n";
    if (g.nvlinks > 0)
      o << format("         NVLink: %d x %.1f GB/s = %.1f GB/s %s\n", g.nvlinks, g.nvlink_gbps, g.nvlinks * g.nvlink_gbps,
                  g.nvswitch ? "into NVSwitch" : "point-to-point");
    else
      o << "         NVLink: none\n";
  }
  if (!gpu_links.empty()) {
    o << "\n  NVLink bundles (per direction):\n";
    for (const GpuLink& l : gpu_links)
      o << format("    GPU %d <-> GPU %d: %d x %.1f = %.1f GB/s\n", l.a, l.b, l.count, l.gbps_per_link, l.gbps());
  }
  o << "\n  Sockets:\n";
  for (const SocketInfo& s : sockets)
    o << format("    socket %d  NUMA %d  %s  memory %s\n", s.id, s.numa_node, s.cpu.empty() ? "(cpu unknown)" : s.cpu.c_str(),
                s.memory_gbps > 0 ? (fmt_gbps(s.memory_gbps) + " GB/s").c_str() : "bandwidth unknown");
  for (const SocketLink& l : socket_links)
    o << format("    socket %d <-> socket %d: %s %.1f GB/s per direction\n", l.a, l.b, l.kind.c_str(), l.gbps);
  o << "\n  Direct peer copy GB/s (row = from, column = to; 0 = no peer access):\n       ";
  for (int j = 0; j < gpu_count(); ++j) o << format("%8d", j);
  o << "\n";
  for (int i = 0; i < gpu_count(); ++i) {
    o << format("    %2d ", i);
    for (int j = 0; j < gpu_count(); ++j) {
      if (i == j) o << format("%8s", "-");
      else o << format("%8.1f", direct_gbps(i, j));
    }
    o << "\n";
  }
  return o.text;
}

}  // namespace gpustripe
