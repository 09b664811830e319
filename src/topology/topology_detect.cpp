// The running node: CUDA runtime for the GPUs and peer access, NVML (loaded at run
// time, nvml_loader.hpp) for NVLink, PCIe link and NUMA placement, sysfs as a fallback.
#include <algorithm>
#include <cctype>
#include <fstream>
#include <map>
#include <set>

#include "common/error.hpp"
#include "common/log.hpp"
#include "topology/nvml_loader.hpp"
#include "topology/topology.hpp"

#ifdef GPUSTRIPE_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

namespace gpustripe {

#ifndef GPUSTRIPE_HAVE_CUDA

Topology detect_topology() {
  GS_THROW(GPUSTRIPE_ERR_NOT_SUPPORTED, "cannot detect the node: this gpustripe was built without CUDA");
}

#else

namespace {

#define GS_CUDA_TOPO(call, dev)                                                                                  \
  do {                                                                                                           \
    cudaError_t e_ = (call);                                                                                     \
    if (e_ != cudaSuccess)                                                                                       \
      GS_THROW(GPUSTRIPE_ERR_CUDA, "%s on device %d: %s (%s)", #call, (dev), cudaGetErrorName(e_), cudaGetErrorString(e_)); \
  } while (0)

std::string uuid_text(const cudaUUID_t& u) {
  const unsigned char* b = reinterpret_cast<const unsigned char*>(u.bytes);
  std::string s = "GPU-";
  for (int i = 0; i < 16; ++i) {
    if (i == 4 || i == 6 || i == 8 || i == 10) s += '-';
    s += format("%02x", b[i]);
  }
  return s;
}

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::tolower(c); });
  return s;
}

// sysfs numa_node of a PCI device; -1 there means "no NUMA affinity" (one node).
int sysfs_numa_node(const std::string& bus_id) {
  std::ifstream in("/sys/bus/pci/devices/" + lower(bus_id) + "/numa_node");
  int n = -1;
  if (in >> n && n >= 0) return n;
  return 0;
}

std::string cpu_model() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("model name", 0) == 0 || line.rfind("cpu\t", 0) == 0) {
      size_t c = line.find(':');
      if (c != std::string::npos) return line.substr(line.find_first_not_of(" \t", c + 1));
    }
  return "";
}

// Nominal NVLink speed per link per direction by generation (GB/s), when NVML cannot tell.
double nvlink_gbps_by_cc(int major) {
  if (major == 6) return 20;      // NVLink 1
  if (major == 7 || major == 8) return 25;  // NVLink 2, 3
  if (major == 9) return 26.5625;  // NVLink 4, as NVML reports it
  if (major >= 10) return 50;      // NVLink 5
  return 0;
}
double nvlink_gbps_by_version(unsigned v) {
  switch (v) {
    case 1: return 20;
    case 2: case 3: return 25;
    case 4: return 26.5625;
    case 5: return 50;
    default: return 0;
  }
}
// NVLink ports of an SXM part of a generation (used only without NVML).
int nvlinks_by_cc(int major) { return major == 7 ? 6 : major == 8 ? 12 : major >= 9 ? 18 : 0; }

struct PciAddr {
  unsigned domain = 0, bus = 0, device = 0;
  bool operator==(const PciAddr& o) const { return domain == o.domain && bus == o.bus && device == o.device; }
};

// What NVML says about one GPU's NVLinks and host link.
struct NvmlGpu {
  bool ok = false;
  int active_links = 0;
  double gbps_per_link = 0;
  int switch_links = 0, cpu_links = 0;
  std::map<int, int> links_to_gpu;  // peer index -> links
  int pcie_gen = 0, pcie_width = 0;
  int numa_node = -1;
};

NvmlGpu query_nvml(const nvml::Api& a, int dev, const std::string& bus_id, const std::vector<PciAddr>& gpu_addrs) {
  NvmlGpu q;
  nvml::Device h = nullptr;
  nvml::Return r = a.DeviceGetHandleByPciBusId_v2(bus_id.c_str(), &h);
  if (r != nvml::kSuccess) {
    GS_LOG_WARN(Subsys::Topology, "NVML has no device at %s (GPU %d): %s; NVLink fields from CUDA only", bus_id.c_str(),
                dev, nvml::error_string(r).c_str());
    return q;
  }
  q.ok = true;
  unsigned version = 0;
  for (unsigned link = 0; link < nvml::kMaxLinks; ++link) {
    int active = 0;
    if (a.DeviceGetNvLinkState(h, link, &active) != nvml::kSuccess || !active) continue;
    ++q.active_links;
    if (!version) a.DeviceGetNvLinkVersion(h, link, &version);
    int type = -1;
    if (a.DeviceGetNvLinkRemoteDeviceType) a.DeviceGetNvLinkRemoteDeviceType(h, link, &type);
    nvml::PciInfo remote{};
    bool have_remote = a.DeviceGetNvLinkRemotePciInfo_v2(h, link, &remote) == nvml::kSuccess;
    int peer = -1;
    if (have_remote)
      for (size_t g = 0; g < gpu_addrs.size(); ++g)
        if (gpu_addrs[g] == PciAddr{remote.domain, remote.bus, remote.device}) peer = static_cast<int>(g);
    if (type == nvml::kNvlinkDeviceSwitch) ++q.switch_links;
    else if (type == nvml::kNvlinkDeviceIbmNpu) ++q.cpu_links;
    else if (peer >= 0) ++q.links_to_gpu[peer];
    else ++q.switch_links;  // neither a GPU we see nor a CPU: a switch port (old drivers lack the type query)
  }
  nvml::FieldValue f[2] = {};
  f[0].field_id = nvml::kFieldNvlinkSpeedMbpsCommon;
  f[1].field_id = nvml::kFieldNvlinkLinkCount;
  if (q.active_links && a.DeviceGetFieldValues(h, 2, f) == nvml::kSuccess && f[0].nvml_return == nvml::kSuccess &&
      f[0].value.ui > 0)
    q.gbps_per_link = f[0].value.ui / 1000.0;  // MB/s per link per direction
  else if (q.active_links)
    q.gbps_per_link = nvlink_gbps_by_version(version);
  unsigned gen = 0, width = 0, cgen = 0, cwidth = 0;
  if (a.DeviceGetMaxPcieLinkGeneration(h, &gen) == nvml::kSuccess) q.pcie_gen = static_cast<int>(gen);
  if (a.DeviceGetMaxPcieLinkWidth(h, &width) == nvml::kSuccess) q.pcie_width = static_cast<int>(width);
  a.DeviceGetCurrPcieLinkGeneration(h, &cgen);
  a.DeviceGetCurrPcieLinkWidth(h, &cwidth);
  // Idle GPUs train their link down to save power: the maximum is the link's nominal rate.
  GS_LOG_DEBUG(Subsys::Topology, "GPU %d: PCIe max Gen%u x%u, now Gen%u x%u; %d NVLinks active (v%u, %.3f GB/s)", dev,
               gen, width, cgen, cwidth, q.active_links, version, q.gbps_per_link);
  unsigned numa = 0;
  if (a.DeviceGetNumaNodeId && a.DeviceGetNumaNodeId(h, &numa) == nvml::kSuccess) q.numa_node = static_cast<int>(numa);
  return q;
}

}  // namespace

Topology detect_topology() {
  int n = 0;
  cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess || n == 0)
    GS_THROW(GPUSTRIPE_ERR_NOT_SUPPORTED, "no GPU visible to CUDA (cudaGetDeviceCount: %s)",
             e == cudaSuccess ? "0 devices" : cudaGetErrorName(e));
  Topology t;
  t.origin = "detected";
  t.gpus.resize(static_cast<size_t>(n));
  std::vector<PciAddr> addrs(static_cast<size_t>(n));
  for (int d = 0; d < n; ++d) {
    cudaDeviceProp p{};
    GS_CUDA_TOPO(cudaGetDeviceProperties(&p, d), d);
    GpuInfo& g = t.gpus[static_cast<size_t>(d)];
    g.index = d;
    g.name = p.name;
    g.uuid = uuid_text(p.uuid);
    char bus[32] = {};
    GS_CUDA_TOPO(cudaDeviceGetPCIBusId(bus, sizeof(bus), d), d);
    g.pci_bus_id = bus;
    addrs[static_cast<size_t>(d)] = {static_cast<unsigned>(p.pciDomainID), static_cast<unsigned>(p.pciBusID),
                                     static_cast<unsigned>(p.pciDeviceID)};
    g.cc_major = p.major;
    g.cc_minor = p.minor;
    g.sm_count = p.multiProcessorCount;
    g.memory_bytes = p.totalGlobalMem;
    g.copy_engines = p.asyncEngineCount;
  }
  t.peer_access.assign(static_cast<size_t>(n), std::vector<uint8_t>(static_cast<size_t>(n), 0));
  std::vector<std::vector<uint8_t>> atomics = t.peer_access;
  for (int i = 0; i < n; ++i)
    for (int j = 0; j < n; ++j) {
      if (i == j) continue;
      int can = 0, atom = 0;
      GS_CUDA_TOPO(cudaDeviceCanAccessPeer(&can, i, j), i);
      t.peer_access[size_t(i)][size_t(j)] = can != 0;
      if (can) GS_CUDA_TOPO(cudaDeviceGetP2PAttribute(&atom, cudaDevP2PAttrNativeAtomicSupported, i, j), i);
      atomics[size_t(i)][size_t(j)] = atom != 0;
    }

  std::string why;
  const nvml::Api* a = nvml::api(&why);
  if (a) {
    char drv[96] = {};
    if (a->SystemGetDriverVersion(drv, sizeof(drv)) == nvml::kSuccess) t.driver_version = drv;
  } else {
    GS_LOG_WARN(Subsys::Topology,
                "NVML unavailable (%s): NVLink counts and speeds are inferred from CUDA peer attributes and the "
                "compute capability, PCIe generation and width are unknown",
                why.c_str());
  }
  std::vector<NvmlGpu> q(static_cast<size_t>(n));
  for (int d = 0; d < n; ++d) {
    GpuInfo& g = t.gpus[size_t(d)];
    if (a) q[size_t(d)] = query_nvml(*a, d, g.pci_bus_id, addrs);
    const NvmlGpu& nq = q[size_t(d)];
    g.numa_node = nq.numa_node >= 0 ? nq.numa_node : sysfs_numa_node(g.pci_bus_id);
    g.pcie_gen = nq.pcie_gen;
    g.pcie_width = nq.pcie_width;
    if (nq.ok) {
      g.nvswitch = nq.switch_links > 0;
      g.nvlinks = g.nvswitch ? nq.switch_links : nq.active_links - nq.cpu_links;
      g.nvlink_gbps = nq.gbps_per_link;
      if (nq.cpu_links > 0) {  // POWER9-style NVLink to the CPU
        g.host_link = HostLinkKind::NVLink;
        g.host_nvlinks = nq.cpu_links;
      }
    }
    g.host_gbps = g.host_link == HostLinkKind::NVLink ? g.host_nvlinks * nq.gbps_per_link : pcie_gbps(g.pcie_gen, g.pcie_width);
  }
  if (a && std::all_of(q.begin(), q.end(), [](const NvmlGpu& x) { return x.ok; })) {
    for (int i = 0; i < n; ++i)
      for (auto [j, count] : q[size_t(i)].links_to_gpu)
        if (i < j && !t.gpus[size_t(i)].nvswitch && !t.gpus[size_t(j)].nvswitch)
          t.gpu_links.push_back({i, j, count, std::min(q[size_t(i)].gbps_per_link, q[size_t(j)].gbps_per_link)});
  } else {
    // Without NVML: a peer pair with native atomics is joined by NVLink (PCIe has none).
    // When every pair is, a Hopper-or-later node is an NVSwitch baseboard; otherwise a
    // mesh of one link per pair (an under-estimate, as the warning says).
    bool all = n > 1;
    for (int i = 0; i < n; ++i)
      for (int j = 0; j < n; ++j)
        if (i != j && !atomics[size_t(i)][size_t(j)]) all = false;
    for (int i = 0; i < n; ++i) {
      GpuInfo& g = t.gpus[size_t(i)];
      if (all && g.cc_major >= 9) {
        g.nvswitch = true;
        g.nvlinks = nvlinks_by_cc(g.cc_major);
        g.nvlink_gbps = nvlink_gbps_by_cc(g.cc_major);
      }
    }
    for (int i = 0; i < n; ++i)
      for (int j = i + 1; j < n; ++j)
        if (atomics[size_t(i)][size_t(j)] && !t.gpus[size_t(i)].nvswitch) {
          double s = nvlink_gbps_by_cc(t.gpus[size_t(i)].cc_major);
          t.gpu_links.push_back({i, j, 1, s});
          for (int e : {i, j}) {
            t.gpus[size_t(e)].nvlinks += 1;
            t.gpus[size_t(e)].nvlink_gbps = s;
          }
        }
  }

  // One socket per NUMA node the GPUs hang off; the link between them is not measurable here.
  std::set<int> numa;
  for (const GpuInfo& g : t.gpus) numa.insert(g.numa_node);
  std::string cpu = cpu_model();
  std::map<int, int> socket_of_numa;
  for (int node : numa) {
    int id = static_cast<int>(t.sockets.size());
    socket_of_numa[node] = id;
    t.sockets.push_back({id, node, cpu, 0});
  }
  for (GpuInfo& g : t.gpus) g.socket = socket_of_numa[g.numa_node];
  for (int s = 0; s < int(t.sockets.size()); ++s)
    for (int u = s + 1; u < int(t.sockets.size()); ++u) t.socket_links.push_back({s, u, "numa", 0});

  const GpuInfo& g0 = t.gpus[0];
  bool same = std::all_of(t.gpus.begin(), t.gpus.end(), [&](const GpuInfo& g) { return g.name == g0.name; });
  t.name = format("%dx %s%s (detected)", n, same ? g0.name.c_str() : "mixed GPUs",
                  t.has_nvswitch() ? ", NVSwitch" : t.gpu_links.empty() ? "" : ", NVLink mesh");
  t.description = a ? "detected through CUDA and NVML" : "detected through CUDA only (NVML unavailable: NVLink inferred)";
  t.validate();
  return t;
}

#endif  // GPUSTRIPE_HAVE_CUDA

}  // namespace gpustripe
