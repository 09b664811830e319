// What GPUs, links and host paths a node has. Filled from the running node
// (CUDA + NVML, topology_detect.cpp) or from a topology file (JSON, schema in
// docs/topology-schema.md, topology_file.cpp). Bandwidths are nominal figures
// per direction in GB/s (1e9 bytes/s): datasheet or link-training values, never
// fitted to measured transfers. Measured figures live in the model's profile.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace gpustripe {

enum class HostLinkKind { PCIe, NVLink };

struct GpuInfo {
  int index = 0;
  std::string name;
  std::string uuid;        // "GPU-..." as NVML prints it; synthetic in files for nodes we do not have
  std::string pci_bus_id;  // "0000:18:00.0"
  int cc_major = 0, cc_minor = 0;
  int sm_count = 0;
  uint64_t memory_bytes = 0;
  int copy_engines = 0;  // asynchronous copy engines
  int socket = 0;        // CPU socket the GPU hangs off
  int numa_node = 0;
  // Link to the host (its CPU socket).
  HostLinkKind host_link = HostLinkKind::PCIe;
  int pcie_gen = 0, pcie_width = 0;
  int host_nvlinks = 0;    // NVLink links to the CPU (POWER9)
  double host_gbps = 0;    // per direction, nominal
  // NVLink ports of the GPU: to other GPUs directly (mesh) or into an NVSwitch fabric.
  int nvlinks = 0;
  double nvlink_gbps = 0;  // per link per direction
  bool nvswitch = false;   // the GPU's NVLinks go into an NVSwitch fabric
};

// A bundle of NVLinks between two GPUs on a point-to-point mesh (no switch). Symmetric.
struct GpuLink {
  int a = 0, b = 0;
  int count = 0;
  double gbps_per_link = 0;  // per direction
  double gbps() const { return count * gbps_per_link; }
};

struct SocketInfo {
  int id = 0;
  int numa_node = 0;
  std::string cpu;
  double memory_gbps = 0;  // host memory bandwidth, all directions together
};

// A link between CPU sockets (IBM X-bus, Intel UPI, AMD xGMI between sockets).
struct SocketLink {
  int a = 0, b = 0;
  std::string kind;  // "xbus", "upi", "xgmi"; "numa" when detected
  double gbps = 0;   // per direction; 0 = unknown (detected nodes)
};

// One inconsistency found by Topology::find_issue(). `path` uses the schema's
// field names ("gpu_links[1].b"), so the file loader can point at the line.
struct TopologyIssue {
  std::string path;
  std::string message;
};

struct Topology {
  std::string name;         // "4x H200 SXM, NVSwitch"
  std::string description;
  std::vector<std::string> sources;  // datasheets and documents a file's figures come from
  std::string origin;       // "detected" or the file's path
  std::string driver_version;  // detected nodes only
  std::vector<GpuInfo> gpus;
  std::vector<GpuLink> gpu_links;
  std::vector<SocketInfo> sockets;
  std::vector<SocketLink> socket_links;
  // peer_access[i][j]: GPU i can map GPU j's memory (i != j). Square, gpus.size() wide.
  std::vector<std::vector<uint8_t>> peer_access;

  int gpu_count() const { return static_cast<int>(gpus.size()); }
  // Throws ERR_INVALID_DEVICE naming the range when i is not a GPU of this node.
  const GpuInfo& gpu(int i) const;
  bool can_access_peer(int i, int j) const;
  bool has_nvswitch() const;
  // NVLinks usable from i to j: the mesh bundle, or on a switch min(links of i, links of j).
  int nvlinks_between(int i, int j) const;
  // Nominal one-way bandwidth of a direct peer copy i -> j (NVLink, or PCIe peer-to-peer when no NVLink).
  double direct_gbps(int i, int j) const;
  // All NVLink bandwidth leaving / entering GPU i, GPU-GPU links only.
  double nvlink_egress_gbps(int i) const;
  double nvlink_ingress_gbps(int i) const;
  double host_link_gbps(int i) const;  // GPU i <-> its socket, per direction
  const SocketInfo& socket_of(int gpu) const;
  // Bandwidth between two sockets (0 when the same socket; throws when not linked).
  double socket_link_gbps(int a, int b) const;
  // Stable identity of the node's hardware for keying calibration profiles:
  // GPU names + UUIDs + link structure. Same node, same string.
  std::string fingerprint() const;
  // Throws ERR_TOPOLOGY naming the inconsistency (link to a missing GPU, asymmetric peer matrix, ...).
  void validate() const;
  // The first inconsistency validate() would throw for, or none.
  std::optional<TopologyIssue> find_issue() const;
  // Human-readable multi-line description (`gpustripe topo`).
  std::string summary() const;
  // The schema-1 JSON text that load_topology_text() reads back to an equal topology.
  std::string to_json() const;
};

// Nominal PCIe bandwidth per direction in GB/s after encoding overhead
// (Gen3 x16: 15.8, Gen4 x16: 31.5, Gen5 x16: 63.0); 0 for an unknown generation.
double pcie_gbps(int gen, int width);

// Parses a topology file's text. `origin` names it in errors, which carry the
// field's path and line: "h200.json:12: gpus[1].nvlink.links: expected an integer".
Topology load_topology_text(const std::string& text, const std::string& origin);
// Reads and parses a file; `name_or_path` may be a shipped name ("h200x4") or a path.
Topology load_topology_file(const std::string& name_or_path);
// The running node through CUDA and NVML. Throws ERR_NOT_SUPPORTED when built
// without CUDA or no GPU is visible. NVML is loaded at run time; without it the
// NVLink fields are filled from CUDA's peer attributes and a warning is logged.
Topology detect_topology();
// The node gpustripe runs on: the file GPUSTRIPE_TOPOLOGY names when set; else the
// detected node when CUDA sees a GPU; else the default emulated node
// kDefaultTopology (logged at info level). `emulated` (optional) tells which.
constexpr const char* kDefaultTopology = "h200x4";
Topology node_topology(bool* emulated = nullptr);
// Directory of the shipped topology files (GPUSTRIPE_TOPOLOGY_DIR, else next to the library).
std::string topology_dir();
// Names of the shipped topology files, without ".json".
std::vector<std::string> shipped_topologies();

}  // namespace gpustripe
