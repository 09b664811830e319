// describe_team (select.hpp): the facts of the node a team's schedule choice rests on, for
// the single-process communicator and the MPI interposer's teams alike.
#include <algorithm>
#include <map>

#include "backend/backend.hpp"
#include "coll/select.hpp"
#include "common/log.hpp"
#include "topology/topology.hpp"

namespace gpustripe::coll {

TeamResources describe_team(Backend& backend, const Topology& topo, const std::vector<int>& devices) {
  TeamResources res;
  const int n = static_cast<int>(devices.size());
  res.n = n;
  res.emulated = backend.emulated();
  res.nvswitch = n > 0;
  res.nvlink_gbps = res.host_gbps = n > 0 ? 1e30 : 0;
  std::map<int, std::vector<int>> by_socket;
  for (int i = 0; i < n; ++i) {
    const GpuInfo& g = topo.gpu(devices[i]);
    res.nvswitch = res.nvswitch && g.nvswitch;
    res.nvlink_gbps = std::min(res.nvlink_gbps, topo.nvlink_egress_gbps(devices[i]));
    res.host_gbps = std::min(res.host_gbps, topo.host_link_gbps(devices[i]));
    by_socket[g.socket].push_back(i);
    for (int j = 0; j < n; ++j)
      if (i != j && !backend.can_access_peer(devices[i], devices[j])) res.all_peer = false;
  }
  if (by_socket.size() > 1) {
    size_t g = by_socket.begin()->second.size();
    bool equal = std::all_of(by_socket.begin(), by_socket.end(), [&](auto& kv) { return kv.second.size() == g; });
    if (equal)
      for (auto& kv : by_socket) res.socket_groups.push_back(kv.second);
    else
      GS_LOG_INFO(Subsys::Coll, "GPUs of the team sit on %zu sockets in unequal numbers: flat schedules only",
                  by_socket.size());
  }
  return res;
}

}  // namespace gpustripe::coll
