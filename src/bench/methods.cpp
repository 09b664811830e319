#include "bench/methods.hpp"

#include "bench/nccl_loader.hpp"
#include "common/error.hpp"
#include "core/context.hpp"

namespace gpustripe {

StreamFork::StreamFork(Backend& backend, int main_dev) : backend_(backend), main_dev_(main_dev) {
  int n = backend_.device_count();
  streams_.assign(n, nullptr);
  events_.assign(n, nullptr);
  used_.assign(n, false);
  for (int d = 0; d < n; ++d) {
    streams_[d] = backend_.create_stream(d);
    events_[d] = backend_.create_event(d, false);
  }
}

StreamFork::~StreamFork() {
  for (size_t d = 0; d < streams_.size(); ++d) {
    backend_.synchronize_stream(streams_[d]);
    backend_.destroy_event(events_[d]);
    backend_.destroy_stream(streams_[d]);
  }
}

void StreamFork::begin() {
  // Recorded each repetition; a stream that waits only takes the event's current mark.
  backend_.record_event(events_[main_dev_], main());
  forked_ = true;
}

StreamHandle StreamFork::on(int dev) {
  if (dev == main_dev_) return main();
  if (!used_.at(dev)) {
    if (!forked_) begin();
    backend_.wait_event(streams_[dev], events_[main_dev_]);
    used_[dev] = true;
  }
  return streams_[dev];
}

void StreamFork::join() {
  for (size_t d = 0; d < streams_.size(); ++d) {
    if (!used_[d]) continue;
    backend_.record_event(events_[d], streams_[d]);
    backend_.wait_event(main(), events_[d]);
    used_[d] = false;
  }
  forked_ = false;
}

namespace {

class GpustripeMethod : public Method {
 public:
  explicit GpustripeMethod(Context& ctx) : ctx_(ctx) {}
  const char* name() const override { return "gpustripe"; }
  void post(const std::vector<Transfer>& ts, StreamFork& streams) override {
    Engine& engine = ctx_.engine();
    if (ts.size() == 1 || !ctx_.planner()) {
      for (const Transfer& t : ts) engine.copy_async(t.dst, t.dst_dev, t.src, t.src_dev, t.bytes, streams.on(t.src_dev));
      single_ = {};
      last_.clear();
      if (ctx_.planner() && ts.size() == 1 && ts[0].src_dev != ts[0].dst_dev) single_ = ts[0];
      return;
    }
    // Transfers at once share the node: planned together, so their splits leave room for each
    // other. Planned once per set of transfers, not per repetition: at small sizes planning
    // took longer than the copies, and the benchmark would time the planner.
    std::vector<TransferSpec> specs;
    std::string key;
    for (const Transfer& t : ts) {
      specs.push_back({t.src_dev, t.dst_dev, t.bytes});
      key += format("%d>%d:%llu ", t.src_dev, t.dst_dev, static_cast<unsigned long long>(t.bytes));
    }
    if (key != concurrent_key_) {
      concurrent_plans_ = ctx_.planner()->plan_concurrent(specs);
      concurrent_key_ = key;
    }
    const std::vector<Plan>& plans = concurrent_plans_;
    single_ = {};
    last_.clear();
    for (size_t i = 0; i < ts.size(); ++i) {
      engine.copy_with_plan(plans[i], ts[i].dst, ts[i].src, streams.on(ts[i].src_dev));
      last_ += (i ? " | " : "") + plans[i].describe();
    }
  }
  std::string describe() const override {
    if (single_.bytes && last_.empty()) return ctx_.engine().current_plan(single_.src_dev, single_.dst_dev, single_.bytes).describe();
    return last_;
  }

 private:
  Context& ctx_;
  std::string last_, concurrent_key_;
  std::vector<Plan> concurrent_plans_;
  Transfer single_{};  // the last single transfer posted (its row describes the engine's current split)
};

// What cudaMemcpyPeerAsync does: one copy-engine copy on the source GPU's stream, without
// the backend's pointer queries (the buffers are the benchmark's own), as a caller of the
// CUDA API would issue it.
class PeerCopyMethod : public Method {
 public:
  explicit PeerCopyMethod(Context& ctx) : ctx_(ctx) {
    int n = ctx_.device_count();
    for (int a = 0; a < n; ++a)
      for (int b = 0; b < n; ++b)
        if (a != b && ctx_.backend().can_access_peer(a, b)) ctx_.backend().enable_peer_access(a, b);
  }
  const char* name() const override { return "cudaMemcpyPeerAsync"; }
  void post(const std::vector<Transfer>& ts, StreamFork& streams) override {
    for (const Transfer& t : ts)
      ctx_.backend().copy_async_prechecked(t.dst, t.dst_dev, t.src, t.src_dev, t.bytes, streams.on(t.src_dev));
  }

 private:
  Context& ctx_;
};

// NCCL send/recv in one process: a communicator per GPU (ncclCommInitAll), each transfer
// a send on the source GPU's stream and a receive on the destination's, in one group.
class NcclMethod : public Method {
 public:
  explicit NcclMethod(Context& ctx) : lib_(NcclLibrary::get()) {
    GS_REQUIRE(!ctx.emulated(), GPUSTRIPE_ERR_NOT_SUPPORTED, "NCCL needs real GPUs (this context is emulated)");
    GS_REQUIRE(lib_.available(), GPUSTRIPE_ERR_NOT_SUPPORTED, "%s", lib_.why_not().c_str());
    int n = ctx.device_count();
    comms_.assign(n, nullptr);
    std::vector<int> devs(n);
    for (int d = 0; d < n; ++d) devs[d] = d;
    lib_.comm_init_all(comms_.data(), n, devs.data());
  }
  ~NcclMethod() override {
    for (NcclComm* c : comms_)
      if (c) lib_.comm_destroy(c);
  }
  const char* name() const override { return "nccl"; }
  void post(const std::vector<Transfer>& ts, StreamFork& streams) override {
    lib_.group_start();
    for (const Transfer& t : ts) {
      lib_.send(t.src, t.bytes, t.dst_dev, comms_[t.src_dev], streams.on(t.src_dev));
      lib_.recv(t.dst, t.bytes, t.src_dev, comms_[t.dst_dev], streams.on(t.dst_dev));
    }
    lib_.group_end();
  }

 private:
  const NcclLibrary& lib_;
  std::vector<NcclComm*> comms_;
};

}  // namespace

std::unique_ptr<Method> make_gpustripe_method(Context& ctx) { return std::make_unique<GpustripeMethod>(ctx); }
std::unique_ptr<Method> make_peer_copy_method(Context& ctx) { return std::make_unique<PeerCopyMethod>(ctx); }
std::unique_ptr<Method> make_nccl_method(Context& ctx) { return std::make_unique<NcclMethod>(ctx); }

}  // namespace gpustripe
