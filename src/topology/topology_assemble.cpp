#include "topology/topology_assemble.hpp"

#include <algorithm>
#include <set>

#include "common/error.hpp"
#include "common/log.hpp"

namespace gpustripe {
namespace {

// NVLink ports of the SXM part of a generation (used only without NVML).
int nvlinks_by_cc(int major) { return major == 7 ? 6 : major == 8 ? 12 : major >= 9 ? 18 : 0; }

// Per-link speed: NVML's field when it answers; else the GPU generation's. NVML's
// nvmlDeviceGetNvLinkVersion answers an enum on new drivers (6 = NVLink 4.0) and the
// plain major version on old ones, so the version alone cannot be trusted (it read 0
// GB/s on an H200 node, where the speed field is not supported).
double link_gbps(const NvmlReport& q, const GpuInfo& g) {
  if (q.gbps_per_link > 0) return q.gbps_per_link;
  double s = nvlink_gbps_by_cc(g.cc_major);
  GS_LOG_INFO(Subsys::Topology, "GPU %d: NVML gives no NVLink speed; using %.4f GB/s per link for compute capability %d",
              g.index, s, g.cc_major);
  return s;
}

void links_from_nvml(const NodeReport& r, Topology& t) {
  const int n = t.gpu_count();
  std::vector<double> speed(size_t(n), 0.0);
  for (int d = 0; d < n; ++d) {
    GpuInfo& g = t.gpus[size_t(d)];
    const NvmlReport& q = r.nvml[size_t(d)];
    g.nvswitch = q.switch_links > 0;
    g.nvlinks = g.nvswitch ? q.switch_links : q.active_links - q.cpu_links;
    if (q.active_links > 0) speed[size_t(d)] = link_gbps(q, g);
    g.nvlink_gbps = g.nvlinks > 0 ? speed[size_t(d)] : 0;
    if (q.cpu_links > 0) {  // POWER9: NVLink to the CPU carries host traffic
      g.host_link = HostLinkKind::NVLink;
      g.host_nvlinks = q.cpu_links;
    }
  }
  for (int i = 0; i < n; ++i)
    for (auto [j, count] : r.nvml[size_t(i)].links_to_gpu)
      if (i < j && j < n && !t.gpus[size_t(i)].nvswitch && !t.gpus[size_t(j)].nvswitch)
        t.gpu_links.push_back({i, j, count, std::min(speed[size_t(i)], speed[size_t(j)])});
}

// Without NVML: a peer pair with native atomics is joined by NVLink (PCIe has none).
// When every pair is, a Hopper-or-later node is an NVSwitch baseboard; otherwise a
// mesh of one link per pair (an under-estimate, said in the warning).
void links_from_cuda(const NodeReport& r, Topology& t) {
  const int n = t.gpu_count();
  auto atomic = [&](int i, int j) {
    return size_t(i) < r.native_atomics.size() && size_t(j) < r.native_atomics[size_t(i)].size() &&
           r.native_atomics[size_t(i)][size_t(j)];
  };
  bool all = n > 1;
  for (int i = 0; i < n; ++i)
    for (int j = 0; j < n; ++j)
      if (i != j && !atomic(i, j)) all = false;
  for (GpuInfo& g : t.gpus)
    if (all && g.cc_major >= 9) {
      g.nvswitch = true;
      g.nvlinks = nvlinks_by_cc(g.cc_major);
      g.nvlink_gbps = nvlink_gbps_by_cc(g.cc_major);
    }
  for (int i = 0; i < n; ++i)
    for (int j = i + 1; j < n; ++j)
      if (atomic(i, j) && !t.gpus[size_t(i)].nvswitch) {
        double s = nvlink_gbps_by_cc(t.gpus[size_t(i)].cc_major);
        t.gpu_links.push_back({i, j, 1, s});
        for (int e : {i, j}) {
          t.gpus[size_t(e)].nvlinks += 1;
          t.gpus[size_t(e)].nvlink_gbps = s;
        }
      }
}

}  // namespace

double nvlink_gbps_by_version(unsigned v) {
  switch (v) {
    case 1: return 20;
    case 2: case 3: return 25;
    case 4: return 26.5625;  // as NVML reports NVLink 4 (26562 MB/s)
    case 5: return 50;
    default: return 0;
  }
}

double nvlink_gbps_by_cc(int major) {
  if (major == 6) return nvlink_gbps_by_version(1);
  if (major == 7) return nvlink_gbps_by_version(2);
  if (major == 8) return nvlink_gbps_by_version(3);
  if (major == 9) return nvlink_gbps_by_version(4);
  if (major >= 10) return nvlink_gbps_by_version(5);
  return 0;
}

Topology assemble_topology(const NodeReport& r) {
  Topology t;
  t.origin = "detected";
  t.driver_version = r.driver_version;
  t.gpus = r.gpus;
  t.peer_access = r.peer_access;
  const int n = t.gpu_count();
  GS_REQUIRE(n > 0, GPUSTRIPE_ERR_NOT_SUPPORTED, "no GPU visible");
  const bool nvml = r.nvml.size() == size_t(n) &&
                    std::all_of(r.nvml.begin(), r.nvml.end(), [](const NvmlReport& q) { return q.ok; });
  if (r.nvml.size() == size_t(n))
    for (int d = 0; d < n; ++d) {
      t.gpus[size_t(d)].pcie_gen = r.nvml[size_t(d)].pcie_gen;
      t.gpus[size_t(d)].pcie_width = r.nvml[size_t(d)].pcie_width;
    }
  if (nvml) links_from_nvml(r, t);
  else links_from_cuda(r, t);

  for (int d = 0; d < n; ++d) {
    GpuInfo& g = t.gpus[size_t(d)];
    int from_nvml = r.nvml.size() == size_t(n) ? r.nvml[size_t(d)].numa_node : -1;
    int from_sysfs = size_t(d) < r.sysfs_numa.size() ? r.sysfs_numa[size_t(d)] : 0;
    g.numa_node = from_nvml >= 0 ? from_nvml : std::max(0, from_sysfs);
    g.host_gbps = g.host_link == HostLinkKind::NVLink ? g.host_nvlinks * (nvml ? link_gbps(r.nvml[size_t(d)], g) : 0)
                                                      : pcie_gbps(g.pcie_gen, g.pcie_width);
  }

  // One socket per NUMA node the GPUs hang off; how fast the sockets talk is not knowable here.
  std::set<int> numa;
  for (const GpuInfo& g : t.gpus) numa.insert(g.numa_node);
  std::map<int, int> socket_of_numa;
  for (int node : numa) {
    int id = static_cast<int>(t.sockets.size());
    socket_of_numa[node] = id;
    t.sockets.push_back({id, node, r.cpu, 0});
  }
  for (GpuInfo& g : t.gpus) g.socket = socket_of_numa[g.numa_node];
  for (int s = 0; s < int(t.sockets.size()); ++s)
    for (int u = s + 1; u < int(t.sockets.size()); ++u) t.socket_links.push_back({s, u, "numa", 0});

  const GpuInfo& g0 = t.gpus[0];
  bool same = std::all_of(t.gpus.begin(), t.gpus.end(), [&](const GpuInfo& g) { return g.name == g0.name; });
  t.name = format("%dx %s%s (detected)", n, same ? g0.name.c_str() : "mixed GPUs",
                  t.has_nvswitch() ? ", NVSwitch" : t.gpu_links.empty() ? "" : ", NVLink mesh");
  t.description = nvml ? "detected through CUDA and NVML"
                       : "detected through CUDA only (NVML unavailable: NVLink inferred from peer atomics, "
                         "PCIe generation and width unknown)";
  t.validate();
  return t;
}

}  // namespace gpustripe
