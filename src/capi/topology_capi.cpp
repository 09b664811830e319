// C API of the topology layer (include/gpustripe/topology.h).
#include <gpustripe/topology.h>

#include <cstring>

#include "common/capi_guard.hpp"
#include "topology/topology.hpp"

struct gpustripe_topology {
  gpustripe::Topology topo;
};

using gpustripe::capi_guard;

namespace {

const gpustripe::Topology& deref(gpustripe_topology_t t) {
  GS_REQUIRE(t != nullptr, GPUSTRIPE_ERR_INVALID_ARGUMENT, "topology handle is NULL");
  return t->topo;
}

}  // namespace

extern "C" {

gpustripe_status_t gpustripe_topology_detect(gpustripe_topology_t* topo) {
  return capi_guard(__func__, [&] {
    GS_REQUIRE_ARG(topo);
    *topo = new gpustripe_topology{gpustripe::detect_topology()};
  });
}

gpustripe_status_t gpustripe_topology_load(const char* name_or_path, gpustripe_topology_t* topo) {
  return capi_guard(__func__, [&] {
    GS_REQUIRE_ARG(name_or_path);
    GS_REQUIRE_ARG(topo);
    *topo = new gpustripe_topology{gpustripe::load_topology_file(name_or_path)};
  });
}

gpustripe_status_t gpustripe_topology_destroy(gpustripe_topology_t topo) {
  return capi_guard(__func__, [&] { delete topo; });
}

gpustripe_status_t gpustripe_topology_gpu_count(gpustripe_topology_t topo, int* count) {
  return capi_guard(__func__, [&] {
    const gpustripe::Topology& t = deref(topo);
    GS_REQUIRE_ARG(count);
    *count = t.gpu_count();
  });
}

gpustripe_status_t gpustripe_topology_direct_gbps(gpustripe_topology_t topo, int src, int dst, double* gbps) {
  return capi_guard(__func__, [&] {
    const gpustripe::Topology& t = deref(topo);
    GS_REQUIRE_ARG(gbps);
    *gbps = t.direct_gbps(src, dst);
  });
}

gpustripe_status_t gpustripe_topology_to_json(gpustripe_topology_t topo, char* buf, size_t len, size_t* needed) {
  return capi_guard(__func__, [&] {
    const gpustripe::Topology& t = deref(topo);
    GS_REQUIRE_ARG(needed);
    std::string text = t.to_json();
    *needed = text.size() + 1;
    if (!buf && len == 0) return;
    GS_REQUIRE_ARG(buf);
    GS_REQUIRE(len >= text.size() + 1, GPUSTRIPE_ERR_INVALID_SIZE, "buffer of %zu bytes is too small: the JSON needs %zu",
               len, text.size() + 1);
    std::memcpy(buf, text.c_str(), text.size() + 1);
  });
}

}  // extern "C"
