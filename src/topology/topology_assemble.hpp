// Turns what CUDA and NVML report about the running node into a Topology. Kept
// apart from the queries (topology_detect.cpp) and free of CUDA and NVML, so the
// rules are tested on machines without a GPU.
#pragma once
#include <map>
#include <string>
#include <vector>

#include "topology/topology.hpp"

namespace gpustripe {

// NVML's view of one GPU.
struct NvmlReport {
  bool ok = false;                  // NVML answered for this GPU
  int active_links = 0;             // NVLinks up
  double gbps_per_link = 0;         // per direction
  int switch_links = 0;             // links into an NVSwitch
  int cpu_links = 0;                // links to the CPU (POWER9 NPU)
  std::map<int, int> links_to_gpu;  // peer GPU index -> links straight to it
  int pcie_gen = 0, pcie_width = 0; // maximum of the link (idle links train down)
  int numa_node = -1;               // -1: NVML did not say
};

struct NodeReport {
  // CUDA's fields filled in: index, name, uuid, pci_bus_id, cc, sm_count, memory_bytes, copy_engines.
  std::vector<GpuInfo> gpus;
  std::vector<std::vector<uint8_t>> peer_access;     // cudaDeviceCanAccessPeer
  std::vector<std::vector<uint8_t>> native_atomics;  // cudaDevP2PAttrNativeAtomicSupported (NVLink only)
  std::vector<NvmlReport> nvml;                      // one per GPU; empty when NVML is unavailable
  std::vector<int> sysfs_numa;                       // per GPU, when NVML does not give it
  std::string cpu, driver_version;
};

// Throws ERR_TOPOLOGY when the report is inconsistent (validate()).
Topology assemble_topology(const NodeReport& r);

// Nominal NVLink speed per link per direction (GB/s) by NVLink version / compute
// capability major, for when NVML does not report the speed; 0 when unknown.
double nvlink_gbps_by_version(unsigned version);
double nvlink_gbps_by_cc(int cc_major);

}  // namespace gpustripe
