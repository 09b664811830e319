// gpustripe.Topology and the functions that make one (detect, load, the shipped files).
#include <nanobind/stl/optional.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include "bindings.hpp"
#include "topology/topology.hpp"

namespace gpustripe::py {
namespace {

const char* host_link_name(HostLinkKind k) { return k == HostLinkKind::NVLink ? "nvlink" : "pcie"; }

void bind_topology(nb::module_& m) {
  nb::class_<GpuInfo>(m, "GpuInfo", "One GPU of a topology (read-only). Bandwidths in GB/s per direction.")
      .def_ro("index", &GpuInfo::index)
      .def_ro("name", &GpuInfo::name)
      .def_ro("uuid", &GpuInfo::uuid)
      .def_ro("pci_bus_id", &GpuInfo::pci_bus_id)
      .def_prop_ro("compute_capability", [](const GpuInfo& g) { return std::make_pair(g.cc_major, g.cc_minor); })
      .def_ro("sm_count", &GpuInfo::sm_count)
      .def_ro("memory_bytes", &GpuInfo::memory_bytes)
      .def_ro("copy_engines", &GpuInfo::copy_engines)
      .def_ro("socket", &GpuInfo::socket)
      .def_ro("numa_node", &GpuInfo::numa_node)
      .def_prop_ro("host_link", [](const GpuInfo& g) { return std::string(host_link_name(g.host_link)); },
                   "'pcie' or 'nvlink' (NVLink to the CPU, POWER9)")
      .def_ro("pcie_gen", &GpuInfo::pcie_gen)
      .def_ro("pcie_width", &GpuInfo::pcie_width)
      .def_ro("host_nvlinks", &GpuInfo::host_nvlinks)
      .def_ro("host_gbps", &GpuInfo::host_gbps)
      .def_ro("nvlinks", &GpuInfo::nvlinks)
      .def_ro("nvlink_gbps", &GpuInfo::nvlink_gbps, "per link per direction")
      .def_ro("nvswitch", &GpuInfo::nvswitch)
      .def("__repr__", [](const GpuInfo& g) { return "<GpuInfo " + std::to_string(g.index) + " " + g.name + ">"; });

  nb::class_<GpuLink>(m, "GpuLink", "An NVLink bundle between two GPUs of a mesh.")
      .def_ro("a", &GpuLink::a)
      .def_ro("b", &GpuLink::b)
      .def_ro("count", &GpuLink::count)
      .def_ro("gbps_per_link", &GpuLink::gbps_per_link)
      .def_prop_ro("gbps", &GpuLink::gbps);

  nb::class_<SocketInfo>(m, "SocketInfo", "A CPU socket. memory_gbps 0 = unknown.")
      .def_ro("id", &SocketInfo::id)
      .def_ro("numa_node", &SocketInfo::numa_node)
      .def_ro("cpu", &SocketInfo::cpu)
      .def_ro("memory_gbps", &SocketInfo::memory_gbps);

  nb::class_<SocketLink>(m, "SocketLink", "A link between sockets (xbus, upi, xgmi). gbps 0 = unknown.")
      .def_ro("a", &SocketLink::a)
      .def_ro("b", &SocketLink::b)
      .def_ro("kind", &SocketLink::kind)
      .def_ro("gbps", &SocketLink::gbps);

  nb::class_<Topology>(m, "Topology",
                       "A node's GPUs, links and host paths: detect_topology(), load_topology(name_or_path).")
      .def_ro("name", &Topology::name)
      .def_ro("description", &Topology::description)
      .def_ro("sources", &Topology::sources)
      .def_ro("origin", &Topology::origin, "'detected' or the file's path")
      .def_ro("driver_version", &Topology::driver_version)
      .def_ro("gpus", &Topology::gpus)
      .def_ro("gpu_links", &Topology::gpu_links)
      .def_ro("sockets", &Topology::sockets)
      .def_ro("socket_links", &Topology::socket_links)
      .def_prop_ro("peer_access",
                   [](const Topology& t) {
                     std::vector<std::vector<bool>> m;
                     for (const auto& row : t.peer_access) m.emplace_back(row.begin(), row.end());
                     return m;
                   })
      .def_prop_ro("gpu_count", &Topology::gpu_count)
      .def("gpu", &Topology::gpu, nb::rv_policy::copy, "GpuInfo of GPU i; raises for a GPU the node lacks")
      .def("can_access_peer", &Topology::can_access_peer)
      .def("has_nvswitch", &Topology::has_nvswitch)
      .def("nvlinks_between", &Topology::nvlinks_between)
      .def("direct_gbps", &Topology::direct_gbps, "nominal one-way GB/s of a direct peer copy src -> dst")
      .def("nvlink_egress_gbps", &Topology::nvlink_egress_gbps)
      .def("nvlink_ingress_gbps", &Topology::nvlink_ingress_gbps)
      .def("host_link_gbps", &Topology::host_link_gbps)
      .def("socket_of", &Topology::socket_of, nb::rv_policy::copy)
      .def("socket_link_gbps", &Topology::socket_link_gbps)
      .def("fingerprint", &Topology::fingerprint)
      .def("validate", &Topology::validate)
      .def("summary", &Topology::summary)
      .def("to_json", &Topology::to_json)
      .def("__repr__", [](const Topology& t) { return "<Topology '" + t.name + "' from " + t.origin + ">"; });

  m.def("detect_topology", [] { return without_gil([] { return detect_topology(); }); },
        "The running node (CUDA + NVML). Raises Error(GPUSTRIPE_ERR_NOT_SUPPORTED) without a GPU.");
  m.def("load_topology", &load_topology_file, nb::arg("name_or_path"),
        "A shipped topology by name ('h200x4') or a JSON file by path.");
  m.def("load_topology_text", &load_topology_text, nb::arg("text"), nb::arg("origin") = "<text>");
  m.def(
      "node_topology",
      [] {
        bool emulated = false;
        Topology t = node_topology(&emulated);
        return std::make_pair(t, emulated);
      },
      "(topology, emulated): GPUSTRIPE_TOPOLOGY's file, else the detected node, else the default emulated node.");
  m.def("topology_dir", &topology_dir, "Directory of the shipped topology files.");
  m.def("shipped_topologies", &shipped_topologies, "Names of the shipped topology files.");
  m.def("pcie_gbps", &pcie_gbps, nb::arg("gen"), nb::arg("width"), "Nominal PCIe GB/s per direction.");
  m.attr("DEFAULT_TOPOLOGY") = kDefaultTopology;
}

BindingRegistrar reg(10, bind_topology);

}  // namespace
}  // namespace gpustripe::py
