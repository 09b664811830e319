// Topologies built in code for the model tests, and a shortcut to plan on them.
#pragma once
#include <string>

#include "model/model_planner.hpp"
#include "topology/topology.hpp"

namespace gpustripe::test {

// n GPUs on one socket; NVSwitch with `links` x `gbps` per GPU, or (mesh) every pair
// linked by `links` x `gbps`; host link `host_gbps` per direction; host memory `mem_gbps` (0: unbounded).
inline Topology make_node(int n, bool nvswitch, int links, double gbps, double host_gbps, double mem_gbps,
                          const std::string& name = "test node") {
  Topology t;
  t.name = name;
  t.origin = "test";
  SocketInfo s;
  s.memory_gbps = mem_gbps;
  t.sockets.push_back(s);
  for (int i = 0; i < n; ++i) {
    GpuInfo g;
    g.index = i;
    g.name = "Test GPU";
    g.uuid = "GPU-test-" + name + "-" + std::to_string(i);
    g.copy_engines = 3;
    g.cc_major = 9;
    g.sm_count = 100;
    g.memory_bytes = 1ull << 34;
    g.pcie_gen = 5;
    g.pcie_width = 16;
    g.host_gbps = host_gbps;
    g.nvswitch = nvswitch;
    g.nvlinks = nvswitch ? links : links * (n - 1);
    g.nvlink_gbps = gbps;
    t.gpus.push_back(g);
  }
  if (!nvswitch)
    for (int a = 0; a < n; ++a)
      for (int b = a + 1; b < n; ++b) t.gpu_links.push_back({a, b, links, gbps});
  t.peer_access.assign(n, std::vector<uint8_t>(n, 1));
  for (int i = 0; i < n; ++i) t.peer_access[i][i] = 0;
  t.validate();
  return t;
}

inline SearchOptions default_options() { return SearchOptions{}; }

inline double share_of(const Plan& p, PathKind kind) {
  uint64_t b = 0;
  for (const PathPlan& x : p.paths)
    if (x.kind == kind) b += x.bytes;
  return static_cast<double>(b) / static_cast<double>(p.bytes);
}

inline int count_paths(const Plan& p, PathKind kind) {
  int c = 0;
  for (const PathPlan& x : p.paths) c += x.kind == kind;
  return c;
}

}  // namespace gpustripe::test
