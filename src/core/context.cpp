#include "core/context.hpp"

#include "common/error.hpp"
#include "common/log.hpp"

namespace gpustripe {

Context::Context() {
  bool emulated = false;
  topo_ = node_topology(&emulated);
  backend_ = make_backend(topo_);
  if (backend_->emulated())
    GS_LOG_INFO(Subsys::Api, "no GPU visible: running on %d emulated devices of %s", backend_->device_count(),
                topo_.name.c_str());
  planner_ = make_planner(topo_, backend_->emulated());
  start();
}

Context::Context(Topology topo, std::unique_ptr<Backend> backend, std::unique_ptr<Planner> planner)
    : topo_(std::move(topo)), backend_(std::move(backend)), planner_(std::move(planner)) {
  GS_REQUIRE(backend_ != nullptr, GPUSTRIPE_ERR_INVALID_ARGUMENT, "context without a backend");
  start();
}

void Context::start() {
  default_streams_.assign(backend_->device_count(), nullptr);
  engine_ = std::make_unique<Engine>(*backend_, topo_, planner_.get());
}

Context::~Context() {
  engine_.reset();  // drains the engine's work before the backend goes
  for (StreamHandle s : default_streams_)
    if (s) {
      try {
        backend_->synchronize_stream(s);
        backend_->destroy_stream(s);
      } catch (const std::exception& e) {
        GS_LOG_ERROR(Subsys::Api, "context teardown: %s", e.what());
      }
    }
}

std::string Context::device_label() const {
  if (emulated()) {
    // The shipped file's name when the topology came from one ("emulated-h200x4").
    std::string origin = topo_.origin;
    size_t slash = origin.rfind('/');
    std::string file = slash == std::string::npos ? origin : origin.substr(slash + 1);
    if (file.size() > 5 && file.compare(file.size() - 5, 5, ".json") == 0) file = file.substr(0, file.size() - 5);
    return "emulated-" + (file.empty() ? std::string("node") : file);
  }
  return topo_.gpus.empty() ? std::string("cuda") : topo_.gpus[0].name;
}

StreamHandle Context::default_stream(int dev) {
  if (!emulated()) return nullptr;
  GS_REQUIRE(dev >= 0 && dev < device_count(), GPUSTRIPE_ERR_INVALID_DEVICE, "device %d is not a GPU of this context (0..%d)",
             dev, device_count() - 1);
  std::lock_guard<std::mutex> lock(mu_);
  StreamHandle& s = default_streams_[dev];
  if (!s) s = backend_->create_stream(dev);
  return s;
}

}  // namespace gpustripe
