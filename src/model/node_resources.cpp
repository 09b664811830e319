#include "model/node_resources.hpp"

#include <algorithm>

#include "common/error.hpp"
#include "common/log.hpp"
#include "topology/topology.hpp"

namespace gpustripe {
namespace {

std::string gpu_tag(int g) { return format("gpu%d", g); }

}  // namespace

std::string Route::name() const {
  if (kind == PathKind::Direct) return "direct";
  return std::string(path_kind_name(kind)) + std::to_string(via);
}

int NodeResources::add(const std::string& name, double gbps) {
  resources_.push_back({name, gbps});
  return static_cast<int>(resources_.size()) - 1;
}

int NodeResources::find(const std::string& name) const {
  for (size_t i = 0; i < resources_.size(); ++i)
    if (resources_[i].name == name) return static_cast<int>(i);
  return -1;
}

NodeResources::NodeResources(const Topology& topo, const std::vector<std::pair<std::string, double>>& overrides) {
  gpus_ = topo.gpu_count();
  const int n = gpus_;
  // Resource indices per GPU; -1 where the node has no such resource (no NVLink).
  std::vector<int> egress(n, -1), ingress(n, -1), d2h(n, -1), h2d(n, -1), ce(n, -1);
  for (int g = 0; g < n; ++g) {
    const GpuInfo& info = topo.gpu(g);
    double nvl = topo.nvlink_egress_gbps(g);
    if (nvl > 0) {
      egress[g] = add("nvlink_egress[" + gpu_tag(g) + "]", nvl);
      ingress[g] = add("nvlink_ingress[" + gpu_tag(g) + "]", topo.nvlink_ingress_gbps(g));
    }
    const char* link = info.host_link == HostLinkKind::PCIe ? "pcie" : "host_nvlink";
    d2h[g] = add(format("%s_d2h[%s]", link, gpu_tag(g).c_str()), topo.host_link_gbps(g));
    h2d[g] = add(format("%s_h2d[%s]", link, gpu_tag(g).c_str()), topo.host_link_gbps(g));
  }
  // Copy engines: each runs one copy at a time at up to the GPU's fastest link; more
  // concurrent copies than engines share them.
  for (int g = 0; g < n; ++g) {
    const GpuInfo& info = topo.gpu(g);
    double fastest = std::max(topo.nvlink_egress_gbps(g), topo.host_link_gbps(g));
    if (info.copy_engines > 0) ce[g] = add("copy_engines[" + gpu_tag(g) + "]", info.copy_engines * fastest);
  }
  // Per-pair bundles on a mesh, one resource per direction.
  std::vector<std::vector<int>> pair(n, std::vector<int>(n, -1));
  for (const GpuLink& l : topo.gpu_links) {
    if (l.a < 0 || l.b < 0 || l.a >= n || l.b >= n) continue;
    pair[l.a][l.b] = add(format("nvlink[%s>%s]", gpu_tag(l.a).c_str(), gpu_tag(l.b).c_str()), l.gbps());
    pair[l.b][l.a] = add(format("nvlink[%s>%s]", gpu_tag(l.b).c_str(), gpu_tag(l.a).c_str()), l.gbps());
  }
  std::vector<int> socket_ids;
  std::vector<int> memory;
  for (const SocketInfo& s : topo.sockets) {
    socket_ids.push_back(s.id);
    // A detected node does not know its memory bandwidth; a calibrated profile does, so
    // its figure creates the resource (the overrides below then set it).
    std::string name = format("host_memory[socket%d]", s.id);
    bool calibrated = std::any_of(overrides.begin(), overrides.end(), [&](const auto& o) { return o.first == name; });
    memory.push_back(s.memory_gbps > 0 || calibrated ? add(name, s.memory_gbps > 0 ? s.memory_gbps : 1.0) : -1);
  }
  auto socket_index = [&](int id) {
    auto it = std::find(socket_ids.begin(), socket_ids.end(), id);
    GS_REQUIRE(it != socket_ids.end(), GPUSTRIPE_ERR_TOPOLOGY, "socket %d is not listed in '%s'", id, topo.name.c_str());
    return static_cast<int>(it - socket_ids.begin());
  };
  std::vector<std::vector<int>> xsocket(socket_ids.size(), std::vector<int>(socket_ids.size(), -1));
  for (const SocketLink& l : topo.socket_links) {
    int a = socket_index(l.a), b = socket_index(l.b);
    xsocket[a][b] = add(format("inter_socket[%d>%d]", l.a, l.b), l.gbps);
    xsocket[b][a] = add(format("inter_socket[%d>%d]", l.b, l.a), l.gbps);
  }

  for (const auto& o : overrides) {
    int i = find(o.first);
    if (i < 0) {
      GS_LOG_WARN(Subsys::Model, "profile capacity '%s' names no resource of '%s': ignored", o.first.c_str(),
                  topo.name.c_str());
      continue;
    }
    resources_[static_cast<size_t>(i)].gbps = o.second;
  }

  auto use = [](Hop& h, int r, double w = 1.0) {
    if (r >= 0) h.uses.emplace_back(r, w);
  };
  // A peer copy a -> b over NVLink (bundle or switch), or PCIe peer-to-peer through the host bridges.
  auto peer_hop = [&](int a, int b) {
    Hop h;
    h.kind = HopKind::Peer;
    h.from = a;
    h.to = b;
    h.issuer = a;
    if (topo.nvlinks_between(a, b) > 0) {
      use(h, egress[a]);
      use(h, ingress[b]);
      use(h, pair[a][b]);
    } else {
      use(h, d2h[a]);
      use(h, h2d[b]);
      int sa = socket_index(topo.gpu(a).socket), sb = socket_index(topo.gpu(b).socket);
      if (sa != sb) use(h, xsocket[sa][sb]);
    }
    use(h, ce[a]);
    return h;
  };
  auto host_hop = [&](int g, int sock, bool to_host) {
    Hop h;
    h.kind = to_host ? HopKind::D2H : HopKind::H2D;
    h.from = to_host ? g : -1 - socket_ids[sock];
    h.to = to_host ? -1 - socket_ids[sock] : g;
    h.issuer = g;
    use(h, to_host ? d2h[g] : h2d[g]);
    use(h, memory[sock]);
    int sg = socket_index(topo.gpu(g).socket);
    if (sg != sock) use(h, to_host ? xsocket[sg][sock] : xsocket[sock][sg]);
    use(h, ce[g]);
    return h;
  };

  routes_.assign(n, std::vector<std::vector<Route>>(n));
  for (int s = 0; s < n; ++s) {
    for (int d = 0; d < n; ++d) {
      if (s == d) continue;
      std::vector<Route>& out = routes_[s][d];
      if (topo.can_access_peer(s, d)) {
        Route r;
        r.hops.push_back(peer_hop(s, d));
        out.push_back(r);
      }
      // Staging through a GPU only over NVLink on both hops: through PCIe it competes
      // with the host paths for the same links and never pays.
      for (int g = 0; g < n; ++g) {
        if (g == s || g == d || !topo.can_access_peer(s, g) || !topo.can_access_peer(g, d)) continue;
        if (topo.nvlinks_between(s, g) == 0 || topo.nvlinks_between(g, d) == 0) continue;
        Route r;
        r.kind = PathKind::GpuStaged;
        r.via = g;
        r.hops.push_back(peer_hop(s, g));
        Hop relay = peer_hop(g, d);
        r.hops.push_back(relay);
        out.push_back(r);
      }
      std::vector<int> socks{socket_index(topo.gpu(s).socket), socket_index(topo.gpu(d).socket)};
      if (socks[1] == socks[0]) socks.pop_back();
      for (int k : socks) {
        Route r;
        r.kind = PathKind::HostStaged;
        r.via = socket_ids[k];
        r.hops.push_back(host_hop(s, k, true));
        r.hops.push_back(host_hop(d, k, false));
        out.push_back(r);
      }
    }
  }
}

const std::vector<Route>& NodeResources::routes(int src, int dst) const {
  GS_REQUIRE(src >= 0 && src < gpus_ && dst >= 0 && dst < gpus_, GPUSTRIPE_ERR_INVALID_DEVICE,
             "transfer %d->%d: valid GPUs are 0-%d", src, dst, gpus_ - 1);
  GS_REQUIRE(src != dst, GPUSTRIPE_ERR_INVALID_DEVICE, "transfer %d->%d: source and destination are the same GPU", src,
             dst);
  return routes_[src][dst];
}

const Route* NodeResources::route(int src, int dst, PathKind kind, int via) const {
  for (const Route& r : routes(src, dst))
    if (r.kind == kind && (kind == PathKind::Direct || r.via == via)) return &r;
  return nullptr;
}

}  // namespace gpustripe
