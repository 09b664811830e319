// Streams, events and copies of the emulated backend (memory: emulated_memory.cpp).
#include "backend/emulated/emulated_backend.hpp"

#include <unistd.h>

#include <atomic>
#include <thread>

#include "backend/emulated/shm_segment.hpp"
#include "backend/pointer_check.hpp"
#include "common/log.hpp"
#include "common/shm_reclaim.hpp"
#include "topology/topology.hpp"

namespace gpustripe::emu {
namespace {

std::string where(int dev) { return dev == kHostDevice ? std::string("host") : format("GPU %d", dev); }

}  // namespace

EmulatedBackend::EmulatedBackend(const Topology& topo)
    : device_count_(static_cast<int>(topo.gpus.size())),
      peer_access_(topo.peer_access),
      delay_(InjectedDelay::from_settings()),
      memory_used_(topo.gpus.size(), 0) {
  reclaim_dead_segments_once();
  // Uses the topology's fields only, so it does not depend on how the topology was made.
  for (const GpuInfo& g : topo.gpus) memory_limit_.push_back(g.memory_bytes);
  GS_LOG_INFO(Subsys::Backend, "emulated backend: %d GPUs of '%s' in host memory (jitter %lld us, %s)", device_count_,
              topo.name.c_str(), static_cast<long long>(delay_.jitter_us()),
              delay_.gbps() > 0 ? format("%.1f GB/s per copy", delay_.gbps()).c_str() : "memcpy speed");
}

EmulatedBackend::~EmulatedBackend() {
  // Streams drain before memory goes away; whatever the caller did not free is released.
  streams_.clear();
  events_.clear();
  for (const Allocation& a : table_.take_all()) release(a);
  for (auto& kv : pools_) close(kv.second.fd);
  for (auto& kv : imported_pools_) close(kv.second);
}

void EmulatedBackend::check_device(const char* call, const char* what, int dev) const {
  if (dev < 0 || dev >= device_count_)
    GS_THROW(GPUSTRIPE_ERR_INVALID_DEVICE, "%s: %s %d is not a device (the emulated node has GPUs 0..%d)", call, what, dev,
             device_count_ - 1);
}

EmuStream& EmulatedBackend::stream(StreamHandle s, const char* call) {
  GS_REQUIRE(s != nullptr, GPUSTRIPE_ERR_INVALID_ARGUMENT,
             "%s: null stream (the emulated backend has no default stream: use create_stream)", call);
  std::lock_guard<std::mutex> lock(mu_);
  auto it = streams_.find(s);
  GS_REQUIRE(it != streams_.end(), GPUSTRIPE_ERR_INVALID_ARGUMENT, "%s: %p is not a live stream of this backend", call, s);
  return *it->second;
}

EmuEvent& EmulatedBackend::event(EventHandle e, const char* call) {
  GS_REQUIRE(e != nullptr, GPUSTRIPE_ERR_INVALID_ARGUMENT, "%s: null event", call);
  std::lock_guard<std::mutex> lock(mu_);
  auto it = events_.find(e);
  GS_REQUIRE(it != events_.end(), GPUSTRIPE_ERR_INVALID_ARGUMENT, "%s: %p is not a live event of this backend", call, e);
  return *it->second;
}

void EmulatedBackend::drain_all_streams() {
  // The streams' work so far, waited for without the lock: as on a GPU, other threads may enqueue
  // meanwhile (work a waited-for stream may itself wait on: a flag another thread's work writes).
  std::vector<std::pair<std::shared_ptr<EmuStream>, uint64_t>> all;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& [handle, st] : streams_) all.emplace_back(st, st->last_ticket());
  }
  for (auto& [st, ticket] : all) st->wait_done(ticket);
}

bool EmulatedBackend::can_access_peer(int dev, int peer) {
  check_device("can_access_peer", "dev", dev);
  check_device("can_access_peer", "peer", peer);
  if (dev == peer) return false;  // as cudaDeviceCanAccessPeer
  return static_cast<size_t>(dev) < peer_access_.size() && static_cast<size_t>(peer) < peer_access_[dev].size() &&
         peer_access_[dev][peer] != 0;
}

void EmulatedBackend::enable_peer_access(int dev, int peer) {
  GS_REQUIRE(can_access_peer(dev, peer), GPUSTRIPE_ERR_NOT_SUPPORTED,
             "enable_peer_access: GPU %d cannot access GPU %d's memory on this node", dev, peer);
  std::lock_guard<std::mutex> lock(mu_);
  peers_enabled_.insert({dev, peer});
}

StreamHandle EmulatedBackend::create_stream(int dev) {
  check_device("create_stream", "dev", dev);
  auto st = std::make_shared<EmuStream>(dev, delay_, errors_);
  StreamHandle h = st.get();
  std::lock_guard<std::mutex> lock(mu_);
  streams_.emplace(h, std::move(st));
  return h;
}

void EmulatedBackend::destroy_stream(StreamHandle s) {
  std::shared_ptr<EmuStream> st;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = streams_.find(s);
    GS_REQUIRE(it != streams_.end(), GPUSTRIPE_ERR_INVALID_ARGUMENT, "destroy_stream: %p is not a live stream", s);
    st = std::move(it->second);
    streams_.erase(it);
  }
  st.reset();  // drains the queue, then joins the worker (or the last drain_all_streams holding it does)
}

EventHandle EmulatedBackend::create_event(int dev, bool timing) {
  check_device("create_event", "dev", dev);
  auto ev = std::make_unique<EmuEvent>(dev, timing);
  EventHandle h = ev.get();
  std::lock_guard<std::mutex> lock(mu_);
  events_.emplace(h, std::move(ev));
  return h;
}

void EmulatedBackend::destroy_event(EventHandle e) {
  std::lock_guard<std::mutex> lock(mu_);
  // Pending records and waits hold the Mark, not the event, so this is safe at any time.
  GS_REQUIRE(events_.erase(e) == 1, GPUSTRIPE_ERR_INVALID_ARGUMENT, "destroy_event: %p is not a live event", e);
}

void EmulatedBackend::record_event(EventHandle e, StreamHandle s) {
  EmuEvent& ev = event(e, "record_event");
  EmuStream& st = stream(s, "record_event");
  // CUDA refuses an event of another device's context; so does the emulation, to catch it in CI.
  GS_REQUIRE(ev.device == st.device(), GPUSTRIPE_ERR_INVALID_ARGUMENT,
             "record_event: the event belongs to GPU %d, the stream to GPU %d", ev.device, st.device());
  auto mark = std::make_shared<Mark>();
  {
    std::lock_guard<std::mutex> lock(ev.mu);
    ev.mark = mark;
  }
  st.enqueue("record_event", [mark] { mark->complete(); });
}

void EmulatedBackend::wait_event(StreamHandle s, EventHandle e) {
  EmuStream& st = stream(s, "wait_event");
  std::shared_ptr<Mark> mark = event(e, "wait_event").current();
  if (!mark || mark->done()) return;  // nothing to wait for
  st.enqueue("wait_event", [mark] { mark->wait(); });
}

bool EmulatedBackend::query_event(EventHandle e) {
  std::shared_ptr<Mark> mark = event(e, "query_event").current();
  return !mark || mark->done();
}

bool EmulatedBackend::query_stream(StreamHandle s) {
  EmuStream& st = stream(s, "query_stream");
  return st.is_done(st.last_ticket());
}

void EmulatedBackend::synchronize_event(EventHandle e) {
  std::shared_ptr<Mark> mark = event(e, "synchronize_event").current();
  if (mark) mark->wait();
  errors_.rethrow_pending();
}

void EmulatedBackend::synchronize_stream(StreamHandle s) {
  EmuStream& st = stream(s, "synchronize_stream");
  st.wait_done(st.last_ticket());
  errors_.rethrow_pending();
}

float EmulatedBackend::elapsed_ms(EventHandle start, EventHandle end) {
  EmuEvent& a = event(start, "elapsed_ms");
  EmuEvent& b = event(end, "elapsed_ms");
  GS_REQUIRE(a.timing && b.timing, GPUSTRIPE_ERR_INVALID_ARGUMENT,
             "elapsed_ms: both events must be created with timing (start %s, end %s)", a.timing ? "has" : "has not",
             b.timing ? "has" : "has not");
  std::shared_ptr<Mark> ma = a.current(), mb = b.current();
  GS_REQUIRE(ma && mb, GPUSTRIPE_ERR_INVALID_ARGUMENT, "elapsed_ms: the %s event was never recorded", ma ? "end" : "start");
  GS_REQUIRE(ma->done() && mb->done(), GPUSTRIPE_ERR_INVALID_ARGUMENT,
             "elapsed_ms: the %s event has not completed yet (synchronize it first)", ma->done() ? "end" : "start");
  return std::chrono::duration<float, std::milli>(mb->completed_at() - ma->completed_at()).count();
}

void EmulatedBackend::check_range(const char* call, const char* what, const void* p, int dev, size_t bytes) const {
  check_pointer_not_null(call, what, p, bytes);
  std::optional<Allocation> a = table_.find(p);
  check_pointer_range(call, what, p, dev, bytes, a ? a->info() : PointerInfo{});
}

void EmulatedBackend::copy_async(void* dst, int dst_dev, const void* src, int src_dev, size_t bytes, StreamHandle s) {
  EmuStream& st = stream(s, "copy_async");
  if (dst_dev != kHostDevice) check_device("copy_async", "dst_dev", dst_dev);
  if (src_dev != kHostDevice) check_device("copy_async", "src_dev", src_dev);
  if (bytes == 0) return;
  check_range("copy_async", "dst", dst, dst_dev, bytes);
  check_range("copy_async", "src", src, src_dev, bytes);
  const InjectedDelay* delay = &delay_;
  st.enqueue(format("copy_async(%zu bytes, %s -> %s)", bytes, where(src_dev).c_str(), where(dst_dev).c_str()),
             [=] { delay->copy(dst, src, bytes); });
}

void EmulatedBackend::memset_async(void* dst, int dev, int value, size_t bytes, StreamHandle s) {
  EmuStream& st = stream(s, "memset_async");
  if (dev != kHostDevice) check_device("memset_async", "dev", dev);
  if (bytes == 0) return;
  check_range("memset_async", "dst", dst, dev, bytes);
  const InjectedDelay* delay = &delay_;
  st.enqueue(format("memset_async(%zu bytes on %s)", bytes, where(dev).c_str()),
             [=] { delay->fill(dst, value, bytes); });
}

// Host memory is what the emulated GPUs work in: flags need no registration. A stream
// waiting on a flag holds its worker, as a CUDA stream waiting on a value holds its queue.
uint32_t* EmulatedBackend::register_host(void* p, size_t) { return static_cast<uint32_t*>(p); }

void EmulatedBackend::stream_write_flag(StreamHandle s, uint32_t* flag, uint32_t value) {
  stream(s, "stream_write_flag").enqueue(format("write flag %p = %u", static_cast<void*>(flag), value), [=] {
    reinterpret_cast<std::atomic<uint32_t>*>(flag)->store(value, std::memory_order_release);
  });
}

void EmulatedBackend::stream_wait_flag(StreamHandle s, const uint32_t* flag, uint32_t value) {
  stream(s, "stream_wait_flag").enqueue(format("wait flag %p >= %u", static_cast<const void*>(flag), value), [=] {
    // Whoever waits for this stream on the host bounds the wait (and releases the flag
    // when it gives up); this cap only keeps a forgotten worker from spinning forever.
    const auto deadline = Clock::now() + std::chrono::minutes(10);
    const auto* f = reinterpret_cast<const std::atomic<uint32_t>*>(flag);
    struct Stalled {  // counted while the flag is short of the value (wait_for_stalled_streams)
      std::atomic<int>& n;
      bool on = false;
      ~Stalled() {
        if (on) n.fetch_sub(1);
      }
    } stalled{stalled_on_flags_};
    for (unsigned spins = 0; static_cast<int32_t>(f->load(std::memory_order_acquire) - value) < 0; ++spins) {
      if (!stalled.on) {
        stalled.on = true;
        stalled_on_flags_.fetch_add(1);
      }
      if (spins < 64) continue;
      std::this_thread::sleep_for(std::chrono::microseconds(spins < 1024 ? 1 : 50));
      GS_REQUIRE(Clock::now() < deadline, GPUSTRIPE_ERR_TIMEOUT, "stream waited 10 minutes for flag %p to reach %u",
                 static_cast<const void*>(flag), value);
    }
  });
}

void EmulatedBackend::wait_for_stalled_streams(const char* call) const {
  const auto deadline = Clock::now() + std::chrono::minutes(10);  // the flag waits' cap
  while (stalled_on_flags_.load() > 0) {
    std::this_thread::sleep_for(std::chrono::microseconds(50));
    GS_REQUIRE(Clock::now() < deadline, GPUSTRIPE_ERR_TIMEOUT,
               "%s: waited 10 minutes for this process's streams stalled on flags (a mapping waits for them, as "
               "CUDA's do): a stream waits for a flag that only this thread would write later?", call);
  }
}

void EmulatedBackend::enqueue_host_call(StreamHandle s, std::function<void()> fn) {
  GS_REQUIRE(fn != nullptr, GPUSTRIPE_ERR_INVALID_ARGUMENT, "enqueue_host_call: empty function");
  stream(s, "enqueue_host_call").enqueue("host call", std::move(fn));
}

}  // namespace gpustripe::emu
