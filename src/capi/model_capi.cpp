// C API of the model layer (include/gpustripe/model.h).
#include <gpustripe/model.h>

#include <memory>
#include <string>

#include "common/capi_guard.hpp"
#include "model/node_model.hpp"

struct gpustripe_model {
  std::unique_ptr<gpustripe::NodeModel> m;
};

using gpustripe::capi_guard;

namespace {

gpustripe::NodeModel& deref(gpustripe_model_t m) {
  GS_REQUIRE(m != nullptr, GPUSTRIPE_ERR_INVALID_ARGUMENT, "model handle is NULL");
  return *m->m;
}

gpustripe::PathKind to_kind(gpustripe_path_kind_t k) {
  switch (k) {
    case GPUSTRIPE_PATH_DIRECT: return gpustripe::PathKind::Direct;
    case GPUSTRIPE_PATH_GPU_STAGED: return gpustripe::PathKind::GpuStaged;
    case GPUSTRIPE_PATH_HOST_STAGED: return gpustripe::PathKind::HostStaged;
  }
  GS_THROW(GPUSTRIPE_ERR_INVALID_ARGUMENT, "unknown path kind %d", static_cast<int>(k));
}

gpustripe_path_kind_t from_kind(gpustripe::PathKind k) {
  switch (k) {
    case gpustripe::PathKind::Direct: return GPUSTRIPE_PATH_DIRECT;
    case gpustripe::PathKind::GpuStaged: return GPUSTRIPE_PATH_GPU_STAGED;
    case gpustripe::PathKind::HostStaged: return GPUSTRIPE_PATH_HOST_STAGED;
  }
  return GPUSTRIPE_PATH_DIRECT;
}

}  // namespace

extern "C" {

gpustripe_status_t gpustripe_model_create(const char* topology, const char* profile, gpustripe_model_t* model) {
  return capi_guard(__func__, [&] {
    GS_REQUIRE_ARG(model);
    GS_REQUIRE(!topology || *topology, GPUSTRIPE_ERR_INVALID_ARGUMENT, "topology is an empty string (NULL: this node)");
    auto h = std::make_unique<gpustripe_model>();
    h->m = gpustripe::NodeModel::open(topology ? topology : "", profile ? profile : "");
    *model = h.release();
  });
}

gpustripe_status_t gpustripe_model_destroy(gpustripe_model_t model) {
  return capi_guard(__func__, [&] { delete model; });
}

gpustripe_status_t gpustripe_model_source(gpustripe_model_t model, const char** source) {
  return capi_guard(__func__, [&] {
    GS_REQUIRE_ARG(source);
    *source = deref(model).source.c_str();
  });
}

gpustripe_status_t gpustripe_model_plan(gpustripe_model_t model, int src, int dst, uint64_t bytes,
                                        gpustripe_path_plan_t* paths, int max_paths, int* npaths,
                                        double* predicted_us) {
  return capi_guard(__func__, [&] {
    gpustripe::NodeModel& m = deref(model);
    GS_REQUIRE(max_paths == 0 || paths != nullptr, GPUSTRIPE_ERR_INVALID_ARGUMENT, "argument 'paths' is NULL");
    gpustripe::Plan plan = m.planner->plan(src, dst, bytes);
    const int n = static_cast<int>(plan.paths.size());
    if (n > max_paths) {
      if (npaths) *npaths = n;
      GS_THROW(GPUSTRIPE_ERR_INVALID_SIZE, "the plan has %d paths, room for %d", n, max_paths);
    }
    for (int i = 0; i < n; ++i) {
      const gpustripe::PathPlan& p = plan.paths[static_cast<size_t>(i)];
      paths[i] = {from_kind(p.kind), p.via, p.offset, p.bytes, p.chunks, p.predicted_us};
    }
    if (npaths) *npaths = n;
    if (predicted_us) *predicted_us = plan.predicted_us;
  });
}

gpustripe_status_t gpustripe_model_predict(gpustripe_model_t model, int src, int dst, uint64_t bytes,
                                           const gpustripe_path_plan_t* paths, int npaths, double* predicted_us) {
  return capi_guard(__func__, [&] {
    gpustripe::NodeModel& m = deref(model);
    GS_REQUIRE_ARG(paths);
    GS_REQUIRE_ARG(predicted_us);
    GS_REQUIRE(npaths > 0, GPUSTRIPE_ERR_INVALID_ARGUMENT, "npaths is %d", npaths);
    gpustripe::Plan plan;
    plan.src = src;
    plan.dst = dst;
    plan.bytes = bytes;
    for (int i = 0; i < npaths; ++i) {
      gpustripe::PathPlan p;
      p.kind = to_kind(paths[i].kind);
      p.via = paths[i].via;
      p.offset = paths[i].offset;
      p.bytes = paths[i].bytes;
      p.chunks = paths[i].chunks;
      plan.paths.push_back(p);
    }
    m.planner->model().node().routes(src, dst);  // device errors before tiling errors
    try {
      plan.check();
    } catch (const gpustripe::Error& e) {
      GS_THROW(GPUSTRIPE_ERR_INVALID_ARGUMENT, "%s", e.what());
    }
    *predicted_us = m.planner->predict_us(plan);
  });
}

}  // extern "C"
