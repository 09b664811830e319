// The context: everything one process needs to move data between its GPUs, made once.
//   topology  the detected node when CUDA sees a GPU, else GPUSTRIPE_TOPOLOGY (default h200x4)
//   backend   CUDA, or emulated devices over that topology (GPUSTRIPE_BACKEND)
//   planner   make_planner(topology) (GPUSTRIPE_PLAN)
//   engine    executes the planner's plans on the backend
// The C handle gpustripe_context_t wraps one (context_handle.hpp).
#pragma once
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "backend/backend.hpp"
#include "engine/engine.hpp"
#include "model/planner.hpp"
#include "topology/topology.hpp"

namespace gpustripe {

class Context {
 public:
  // The node gpustripe runs on (logs at info level when it is emulated).
  Context();
  // Given parts (tests, tools); `planner` may be null (plain copies only).
  Context(Topology topo, std::unique_ptr<Backend> backend, std::unique_ptr<Planner> planner);
  ~Context();
  Context(const Context&) = delete;
  Context& operator=(const Context&) = delete;

  const Topology& topology() const { return topo_; }
  Backend& backend() { return *backend_; }
  Planner* planner() { return planner_.get(); }
  Engine& engine() { return *engine_; }
  bool emulated() const { return backend_->emulated(); }
  int device_count() const { return backend_->device_count(); }
  // "cuda" or "emulated"; with the device, for results files: "emulated-h200x4", "NVIDIA H200".
  const char* backend_name() const { return backend_->name(); }
  std::string device_label() const;

  // The stream a NULL stream argument means for a transfer from `dev`: CUDA's legacy
  // default stream (nullptr) on CUDA; on the emulated backend, which has no default
  // stream, a stream of `dev` that the context owns.
  StreamHandle default_stream(int dev);

 private:
  void start();

  Topology topo_;
  std::unique_ptr<Backend> backend_;
  std::unique_ptr<Planner> planner_;
  std::unique_ptr<Engine> engine_;
  std::mutex mu_;
  std::vector<StreamHandle> default_streams_;
};

}  // namespace gpustripe
