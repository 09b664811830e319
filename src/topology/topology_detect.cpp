// The running node: CUDA runtime for the GPUs and peer access, NVML (loaded at run
// time, nvml_loader.hpp) for NVLink, PCIe link and NUMA placement, sysfs as a
// fallback. The queries are here; topology_assemble.cpp turns them into a Topology.
#include "common/error.hpp"
#include "topology/topology.hpp"

#ifdef GPUSTRIPE_HAVE_CUDA
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <mutex>
#include <optional>

#include "common/log.hpp"
#include "topology/nvml_loader.hpp"
#include "topology/topology_assemble.hpp"
#endif

namespace gpustripe {

#ifndef GPUSTRIPE_HAVE_CUDA

Topology detect_topology() {
  GS_THROW(GPUSTRIPE_ERR_NOT_SUPPORTED, "cannot detect the node: this gpustripe was built without CUDA");
}

#else

namespace {

#define GS_CUDA_TOPO(call, dev)                                                                              \
  do {                                                                                                       \
    cudaError_t e_ = (call);                                                                                 \
    if (e_ != cudaSuccess)                                                                                   \
      GS_THROW(GPUSTRIPE_ERR_CUDA, "%s on device %d: %s (%s)", #call, (dev), cudaGetErrorName(e_),           \
               cudaGetErrorString(e_));                                                                      \
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

// sysfs numa_node of a PCI device; -1 there means "no NUMA affinity" (one node).
int sysfs_numa_node(std::string bus_id) {
  std::transform(bus_id.begin(), bus_id.end(), bus_id.begin(), [](unsigned char c) { return std::tolower(c); });
  // C stdio, not iostreams: a Python process on the GPU machine crashed inside
  // istream::operator>> here (seen under pytest and the collectives benchmark).
  FILE* f = std::fopen(("/sys/bus/pci/devices/" + bus_id + "/numa_node").c_str(), "r");
  int n = -1;
  if (f) {
    if (std::fscanf(f, "%d", &n) != 1) n = -1;
    std::fclose(f);
  }
  return n >= 0 ? n : 0;
}

std::string cpu_model() {
  FILE* f = std::fopen("/proc/cpuinfo", "r");
  if (!f) return "";
  char buf[512];
  std::string model;
  while (model.empty() && std::fgets(buf, sizeof buf, f)) {
    std::string line(buf);
    if (!line.empty() && line.back() == '\n') line.pop_back();
    if (line.rfind("model name", 0) == 0 || line.rfind("cpu\t", 0) == 0) {  // x86 / POWER
      size_t c = line.find(':');
      size_t v = c == std::string::npos ? c : line.find_first_not_of(" \t", c + 1);
      if (v != std::string::npos) model = line.substr(v);
    }
  }
  std::fclose(f);
  return model;
}

struct PciAddr {
  unsigned domain = 0, bus = 0, device = 0;
  bool operator==(const PciAddr& o) const { return domain == o.domain && bus == o.bus && device == o.device; }
};

NvmlReport query_nvml(const nvml::Api& a, int dev, const std::string& bus_id, const std::vector<PciAddr>& gpu_addrs) {
  NvmlReport q;
  nvml::Device h = nullptr;
  nvml::Return r = a.DeviceGetHandleByPciBusId_v2(bus_id.c_str(), &h);
  if (r != nvml::kSuccess) {
    GS_LOG_WARN(Subsys::Topology, "NVML has no device at %s (GPU %d): %s; NVLink inferred from CUDA", bus_id.c_str(),
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
    int peer = -1;
    if (a.DeviceGetNvLinkRemotePciInfo_v2(h, link, &remote) == nvml::kSuccess)
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
  // else 0: assemble_topology() takes the GPU generation's speed (see link_gbps there).
  unsigned gen = 0, width = 0, cgen = 0, cwidth = 0;
  if (a.DeviceGetMaxPcieLinkGeneration(h, &gen) == nvml::kSuccess) q.pcie_gen = static_cast<int>(gen);
  if (a.DeviceGetMaxPcieLinkWidth(h, &width) == nvml::kSuccess) q.pcie_width = static_cast<int>(width);
  a.DeviceGetCurrPcieLinkGeneration(h, &cgen);
  a.DeviceGetCurrPcieLinkWidth(h, &cwidth);
  GS_LOG_INFO(Subsys::Topology,
              "GPU %d (%s): %d NVLinks up (v%u, %.3f GB/s each; %d to a switch, %d to the CPU), PCIe max Gen%u x%u, "
              "now Gen%u x%u",
              dev, bus_id.c_str(), q.active_links, version, q.gbps_per_link, q.switch_links, q.cpu_links, gen, width,
              cgen, cwidth);
  unsigned numa = 0;
  if (a.DeviceGetNumaNodeId && a.DeviceGetNumaNodeId(h, &numa) == nvml::kSuccess) q.numa_node = static_cast<int>(numa);
  return q;
}

}  // namespace

// The node does not change while a process runs, and a detection costs NVML queries
// (tens of milliseconds): every Context of the process shares the first answer.
static Topology detect_topology_uncached();

Topology detect_topology() {
  static std::mutex mu;
  static std::optional<Topology> cached;
  std::lock_guard<std::mutex> lock(mu);
  if (!cached) cached = detect_topology_uncached();
  return *cached;
}

static Topology detect_topology_uncached() {
  int n = 0;
  cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess || n == 0)
    GS_THROW(GPUSTRIPE_ERR_NOT_SUPPORTED, "no GPU visible to CUDA (cudaGetDeviceCount: %s)",
             e == cudaSuccess ? "0 devices" : cudaGetErrorName(e));
  NodeReport r;
  r.gpus.resize(size_t(n));
  r.sysfs_numa.resize(size_t(n));
  std::vector<PciAddr> addrs(static_cast<size_t>(n));
  for (int d = 0; d < n; ++d) {
    cudaDeviceProp p{};
    GS_CUDA_TOPO(cudaGetDeviceProperties(&p, d), d);
    GpuInfo& g = r.gpus[size_t(d)];
    g.index = d;
    g.name = p.name;
    g.uuid = uuid_text(p.uuid);
    char bus[32] = {};
    GS_CUDA_TOPO(cudaDeviceGetPCIBusId(bus, sizeof(bus), d), d);
    g.pci_bus_id = bus;
    addrs[size_t(d)] = {unsigned(p.pciDomainID), unsigned(p.pciBusID), unsigned(p.pciDeviceID)};
    g.cc_major = p.major;
    g.cc_minor = p.minor;
    g.sm_count = p.multiProcessorCount;
    g.memory_bytes = p.totalGlobalMem;
    g.copy_engines = p.asyncEngineCount;
    r.sysfs_numa[size_t(d)] = sysfs_numa_node(g.pci_bus_id);
  }
  r.peer_access.assign(size_t(n), std::vector<uint8_t>(size_t(n), 0));
  r.native_atomics = r.peer_access;
  for (int i = 0; i < n; ++i)
    for (int j = 0; j < n; ++j) {
      if (i == j) continue;
      int can = 0, atom = 0;
      GS_CUDA_TOPO(cudaDeviceCanAccessPeer(&can, i, j), i);
      if (can) GS_CUDA_TOPO(cudaDeviceGetP2PAttribute(&atom, cudaDevP2PAttrNativeAtomicSupported, i, j), i);
      r.peer_access[size_t(i)][size_t(j)] = can != 0;
      r.native_atomics[size_t(i)][size_t(j)] = atom != 0;
    }
  r.cpu = cpu_model();

  std::string why;
  if (const nvml::Api* a = nvml::api(&why)) {
    char drv[96] = {};
    if (a->SystemGetDriverVersion(drv, sizeof(drv)) == nvml::kSuccess) r.driver_version = drv;
    for (int d = 0; d < n; ++d) r.nvml.push_back(query_nvml(*a, d, r.gpus[size_t(d)].pci_bus_id, addrs));
  } else {
    GS_LOG_WARN(Subsys::Topology,
                "NVML unavailable (%s): NVLink counts and speeds are inferred from CUDA peer attributes and the "
                "compute capability; PCIe generation and width are unknown",
                why.c_str());
  }
  return assemble_topology(r);
}

#endif  // GPUSTRIPE_HAVE_CUDA

}  // namespace gpustripe
