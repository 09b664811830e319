// A backend over another one (the emulated one in the tests) that "captures" by recording
// the copies enqueued by the capturing thread, and "replays" by enqueueing them in that order
// on the launch stream (a valid serial execution of the captured graph: every dependency
// points backwards in enqueue order). It counts what CUDA would refuse: waiting outside a
// capture on an event last recorded inside one. Used by the engine's and the collectives'
// graph-mode tests.
#pragma once
#include <cstdint>
#include <mutex>
#include <set>
#include <thread>
#include <utility>
#include <vector>

#include "forwarding_backend.hpp"

namespace gpustripe {

class RecordingGraphBackend : public ForwardingBackend {
 public:
  using ForwardingBackend::ForwardingBackend;
  const char* name() const override { return "recording-graphs"; }
  // CUDA refuses to wait outside a capture on an event last recorded inside one
  // (cudaErrorCapturedEvent): such waits are counted.
  void record_event(EventHandle e, StreamHandle s) override {
    std::lock_guard<std::mutex> lock(mu_);
    if (graph_ && capturer_ == std::this_thread::get_id()) {
      captured_events_.insert(e);
      return;
    }
    captured_events_.erase(e);
    in_->record_event(e, s);
  }
  void wait_event(StreamHandle s, EventHandle e) override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (graph_ && capturer_ == std::this_thread::get_id()) return;
      if (captured_events_.count(e)) ++waits_on_captured_events;
    }
    in_->wait_event(s, e);
  }
  void synchronize_event(EventHandle e) override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (captured_events_.count(e)) ++waits_on_captured_events;
    }
    in_->synchronize_event(e);
  }
  void copy_async(void* dst, int dd, const void* src, int sd, size_t n, StreamHandle s) override {
    if (capturing()) graph_->push_back({dst, dd, src, sd, n});
    else in_->copy_async(dst, dd, src, sd, n, s);
  }
  bool supports_graphs() const override { return true; }
  void begin_capture(StreamHandle) override {
    std::lock_guard<std::mutex> lock(mu_);
    capturer_ = std::this_thread::get_id();
    graph_ = new std::vector<Op>();
    ++captures;
  }
  GraphExecHandle end_capture(StreamHandle) override {
    std::lock_guard<std::mutex> lock(mu_);
    capturer_ = std::thread::id();
    std::vector<HostRange> host;
    for (const Op& op : *graph_) {
      if (op.dd == kHostDevice) host.push_back({reinterpret_cast<uintptr_t>(op.dst), op.n});
      if (op.sd == kHostDevice) host.push_back({reinterpret_cast<uintptr_t>(op.src), op.n});
    }
    captured_host_ranges.push_back(std::move(host));
    return std::exchange(graph_, nullptr);
  }
  void launch_graph(GraphExecHandle g, StreamHandle s) override {
    for (const Op& op : *static_cast<std::vector<Op>*>(g)) in_->copy_async(op.dst, op.dd, op.src, op.sd, op.n, s);
    ++launches;
  }
  void destroy_graph(GraphExecHandle g) override {
    delete static_cast<std::vector<Op>*>(g);
    ++destroyed;
  }
  int captures = 0, launches = 0, destroyed = 0, waits_on_captured_events = 0;
  // Per capture, in order: the host memory its copies read or write (the staging it baked in).
  struct HostRange {
    uintptr_t begin;
    size_t bytes;
  };
  std::vector<std::vector<HostRange>> captured_host_ranges;

 private:
  struct Op {
    void* dst;
    int dd;
    const void* src;
    int sd;
    size_t n;
  };
  bool capturing() {
    std::lock_guard<std::mutex> lock(mu_);
    return graph_ && capturer_ == std::this_thread::get_id();
  }
  std::mutex mu_;
  std::thread::id capturer_;
  std::vector<Op>* graph_ = nullptr;
  std::set<EventHandle> captured_events_;
};

}  // namespace gpustripe
