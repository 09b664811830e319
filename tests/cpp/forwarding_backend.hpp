// A backend that passes every call to another one (the emulated backend in the tests), so a
// test backend overrides only the calls it records or changes.
#pragma once
#include <atomic>
#include <memory>
#include <utility>

#include "backend/backend.hpp"

namespace gpustripe {

class ForwardingBackend : public Backend {
 public:
  explicit ForwardingBackend(std::unique_ptr<Backend> inner) : in_(std::move(inner)) {}
  bool emulated() const override { return in_->emulated(); }
  int device_count() const override { return in_->device_count(); }
  void* alloc_device(int dev, size_t b) override { return in_->alloc_device(dev, b); }
  void free_device(void* p) override { in_->free_device(p); }
  void* alloc_pinned(size_t b) override { return in_->alloc_pinned(b); }
  void free_pinned(void* p) override { in_->free_pinned(p); }
  PointerInfo pointer_info(const void* p) override { return in_->pointer_info(p); }
  bool can_access_peer(int d, int p) override { return in_->can_access_peer(d, p); }
  void enable_peer_access(int d, int p) override { in_->enable_peer_access(d, p); }
  StreamHandle create_stream(int dev) override { return in_->create_stream(dev); }
  void destroy_stream(StreamHandle s) override { in_->destroy_stream(s); }
  EventHandle create_event(int dev, bool t) override { return in_->create_event(dev, t); }
  void destroy_event(EventHandle e) override { in_->destroy_event(e); }
  void record_event(EventHandle e, StreamHandle s) override { in_->record_event(e, s); }
  void wait_event(StreamHandle s, EventHandle e) override { in_->wait_event(s, e); }
  bool query_event(EventHandle e) override { return in_->query_event(e); }
  bool query_stream(StreamHandle s) override { return in_->query_stream(s); }
  void synchronize_event(EventHandle e) override { in_->synchronize_event(e); }
  void synchronize_stream(StreamHandle s) override { in_->synchronize_stream(s); }
  float elapsed_ms(EventHandle a, EventHandle b) override { return in_->elapsed_ms(a, b); }
  bool thread_stream(StreamHandle s) const override { return in_->thread_stream(s); }
  // copy_async_prechecked keeps Backend's default (this->copy_async), so a test backend that
  // records copies sees the engine's prechecked ones too.
  void copy_async(void* dst, int dd, const void* src, int sd, size_t n, StreamHandle s) override {
    in_->copy_async(dst, dd, src, sd, n, s);
  }
  void memset_async(void* dst, int dev, int v, size_t n, StreamHandle s) override { in_->memset_async(dst, dev, v, n, s); }
  IpcMemHandle ipc_export(const void* p) override { return in_->ipc_export(p); }
  int ipc_export_fd(const IpcMemHandle& h) override { return in_->ipc_export_fd(h); }
  bool ipc_open_needs_fd(const IpcMemHandle& h) override { return in_->ipc_open_needs_fd(h); }
  void* ipc_open(const IpcMemHandle& h, int fd = -1, int reader = -1) override { return in_->ipc_open(h, fd, reader); }
  int ipc_named_device(int owner, int reader) const override { return in_->ipc_named_device(owner, reader); }
  void ipc_close(void* base) override { in_->ipc_close(base); }
  uint32_t* register_host(void* p, size_t b) override { return in_->register_host(p, b); }
  void unregister_host(void* p) override { in_->unregister_host(p); }
  void stream_write_flag(StreamHandle s, uint32_t* f, uint32_t v) override { in_->stream_write_flag(s, f, v); }
  void stream_wait_flag(StreamHandle s, const uint32_t* f, uint32_t v) override { in_->stream_wait_flag(s, f, v); }
  void stream_flag_barrier(StreamHandle s, uint32_t* mine, const uint32_t* const* others, size_t n,
                           uint32_t v) override {
    in_->stream_flag_barrier(s, mine, others, n, v);
  }

 protected:
  std::unique_ptr<Backend> in_;
};

// Counts the driver calls a host makes around its copies: event records, the streams' waits for
// events, completion queries (of events and of streams; `stream_queries` the latter alone), the
// streams' single flag operations and their barriers (one batch of flag operations each), and
// the copies themselves (copy engines').
class CallCountingBackend : public ForwardingBackend {
 public:
  using ForwardingBackend::ForwardingBackend;
  const char* name() const override { return "counting-calls"; }
  void record_event(EventHandle e, StreamHandle s) override {
    ++records;
    in_->record_event(e, s);
  }
  void wait_event(StreamHandle s, EventHandle e) override {
    ++waits;
    in_->wait_event(s, e);
  }
  bool query_event(EventHandle e) override {
    ++queries;
    return in_->query_event(e);
  }
  bool query_stream(StreamHandle s) override {
    ++queries;
    ++stream_queries;
    return in_->query_stream(s);
  }
  void copy_async(void* dst, int dd, const void* src, int sd, size_t n, StreamHandle s) override {
    ++copies;
    in_->copy_async(dst, dd, src, sd, n, s);
  }
  void stream_write_flag(StreamHandle s, uint32_t* f, uint32_t v) override {
    ++writes;
    in_->stream_write_flag(s, f, v);
  }
  void stream_wait_flag(StreamHandle s, const uint32_t* f, uint32_t v) override {
    ++flag_waits;
    in_->stream_wait_flag(s, f, v);
  }
  void stream_flag_barrier(StreamHandle s, uint32_t* mine, const uint32_t* const* others, size_t n,
                           uint32_t v) override {
    ++barriers;
    in_->stream_flag_barrier(s, mine, others, n, v);
  }
  // Takes `s` for a handle that names each thread's own stream (as CUDA's per-thread default).
  void name_thread_streams(StreamHandle s) { thread_streams_ = s; }
  bool thread_stream(StreamHandle s) const override { return s == thread_streams_ || in_->thread_stream(s); }
  std::atomic<int> records{0}, waits{0}, queries{0}, stream_queries{0}, writes{0}, flag_waits{0}, barriers{0},
      copies{0};

 private:
  StreamHandle thread_streams_ = nullptr;
};

}  // namespace gpustripe
