#include "engine/engine.hpp"

#include <algorithm>
#include <unordered_map>

#include "common/error.hpp"
#include "common/log.hpp"
#include "engine/graph_cache.hpp"
#include "engine/lanes.hpp"
#include "engine/staging.hpp"
#include "engine/validate.hpp"
#include "model/planner.hpp"
#include "model/schedule_cost.hpp"
#include "topology/topology.hpp"

namespace gpustripe {
namespace {

constexpr uint64_t kMinStagingBytes = 4096;
constexpr uint64_t kChunkAlign = 4096;
constexpr int kApartLane = -4;    // lane key: the staged part of a copy issued apart (detached), one per area
constexpr int kDetachedLane = -5;  // lane key (from, kDetachedLane, to): direct paths of detached copies

// A direct path at the start of the transfer and one staged path after it: the shape whose
// staged part a detached copy runs apart from its direct path.
bool direct_plus_one_staged(const Plan& plan) {
  return plan.paths.size() == 2 && plan.paths[0].kind == PathKind::Direct && plan.paths[1].kind != PathKind::Direct &&
         plan.paths[0].offset == 0 && plan.paths[1].offset == plan.paths[0].bytes;
}

std::string plan_key(const Plan& plan, const void* dst, const void* src) {
  std::string key = format("%p %p %d %d %llu:", src, dst, plan.src, plan.dst, static_cast<unsigned long long>(plan.bytes));
  for (const PathPlan& p : plan.paths)
    key += format(" %d/%d/%llu/%llu/%d/%d/%d", static_cast<int>(p.kind), p.via, static_cast<unsigned long long>(p.offset),
                  static_cast<unsigned long long>(p.bytes), p.chunks, p.taper_head, p.taper_tail);
  return key;
}

}  // namespace

EngineOptions EngineOptions::from_settings() {
  const EngineShape shape = EngineShape::from_settings();
  EngineOptions o;
  o.host_staging = shape.host_staging;
  o.gpu_staging = shape.gpu_staging;
  return o;
}

Engine::Engine(Backend& backend, const Topology& topo, Planner* planner, EngineOptions options)
    : backend_(backend), topo_(topo), planner_(planner), opt_(options) {
  static std::atomic<uint64_t> next_id{1};
  id_ = next_id++;  // never reused, unlike the address: keys of the per-thread plan caches
  ndev_ = backend_.device_count();
  // Checked here, at context creation, not at the first staged copy: a staged path cuts its
  // data into pieces of at most half an area, and an area under a page holds none.
  const std::pair<const char*, uint64_t> areas[] = {{"GPUSTRIPE_HOST_STAGING", opt_.host_staging},
                                                     {"GPUSTRIPE_GPU_STAGING", opt_.gpu_staging}};
  for (const auto& [name, bytes] : areas)
    GS_REQUIRE(bytes >= kMinStagingBytes, GPUSTRIPE_ERR_CONFIG, "%s=%llu: a staging area needs at least %llu bytes",
               name, static_cast<unsigned long long>(bytes), static_cast<unsigned long long>(kMinStagingBytes));
  opt_.host_lanes = std::clamp(opt_.host_lanes, 1, 8);
  graphs_ = backend_.supports_graphs() && opt_.graphs;
  lanes_ = std::make_unique<LaneSet>(backend_);
  sockets_ = std::max(1, static_cast<int>(topo_.sockets.size()));
  // One host area per source GPU: transfers from different GPUs (both directions of a
  // pair, say) never wait for each other's staging space, also when replayed as graphs.
  host_areas_.resize(2 * static_cast<size_t>(sockets_) * ndev_);
  gpu_areas_.resize(ndev_);
  caller_events_.assign(ndev_, nullptr);
  capture_streams_.assign(ndev_, nullptr);
  graphs_cache_ = std::make_unique<GraphCache>(backend_, std::max<size_t>(1, opt_.graph_cache));
  tails_ = std::make_unique<ResourceTails>(backend_);
  peer_enabled_.reset(new std::atomic<bool>[static_cast<size_t>(ndev_) * ndev_]);
  for (int i = 0; i < ndev_ * ndev_; ++i) peer_enabled_[i] = false;
  GS_LOG_DEBUG(Subsys::Engine, "engine on %s backend, %d devices, graphs %s, host relay lanes %d", backend_.name(),
               ndev_, graphs_ ? "on" : "off", opt_.host_lanes);
}

Engine::~Engine() {
  // Staging memory and lanes may still be in use by enqueued work: drain it first.
  try {
    std::lock_guard<std::mutex> lock(mu_);
    tails_->synchronize_all();
    graphs_cache_.reset();
    tails_.reset();
    lanes_.reset();  // Lane destructors synchronize their streams before destroying them
    for (EventHandle e : caller_events_)
      if (e) backend_.destroy_event(e);
    for (StreamHandle s : capture_streams_)
      if (s) backend_.destroy_stream(s);
    host_areas_.clear();
    gpu_areas_.clear();
  } catch (const std::exception& e) {
    GS_LOG_ERROR(Subsys::Engine, "engine teardown: %s", e.what());
  }
}

EngineStats Engine::stats() const {
  EngineStats s;
  s.plain_copies = plain_copies_;
  s.schedules = schedules_;
  s.graph_captures = graph_captures_;
  s.graph_launches = graph_launches_;
  s.staging_bytes = staging_bytes_;
  return s;
}

Plan Engine::current_plan(int src, int dst, uint64_t bytes) {
  GS_REQUIRE(planner_, GPUSTRIPE_ERR_NOT_SUPPORTED, "this engine has no planner: every copy is one plain copy");
  return *cached_plan(src, dst, bytes);
}

void Engine::copy_async(void* dst, int dst_dev, const void* src, int src_dev, uint64_t bytes, StreamHandle stream) {
  const CopyAllocations allocs = check_copy(backend_, dst, dst_dev, src, src_dev, bytes);
  if (bytes == 0) return;
  if (src_dev == dst_dev) {  // device-local: the copy engine of that GPU, nothing to split
    backend_.copy_async_prechecked(dst, dst_dev, src, src_dev, bytes, stream);
    ++plain_copies_;
    return;
  }
  if (!planner_) {
    ensure_peer(src_dev, dst_dev);
    backend_.copy_async_prechecked(dst, dst_dev, src, src_dev, bytes, stream);
    ++plain_copies_;
    return;
  }
  RunMode mode;
  mode.src_alloc = allocs.src;
  mode.dst_alloc = allocs.dst;
  execute(*cached_plan(src_dev, dst_dev, bytes), dst, src, stream, mode);
}

// The planner's answer costs about a microsecond, which small copies notice (the added
// latency budget is 2 us): each thread keeps the plans it used last, per engine. No lock.
std::shared_ptr<const Plan> Engine::cached_plan(int src, int dst, uint64_t bytes) {
  struct Key {
    uint64_t engine, bytes;
    int src, dst;
    bool operator==(const Key& o) const {
      return engine == o.engine && bytes == o.bytes && src == o.src && dst == o.dst;
    }
  };
  struct Hash {
    size_t operator()(const Key& k) const {
      return std::hash<uint64_t>()(k.bytes * 1000003u ^ k.engine * 7919u ^ static_cast<uint64_t>(k.src * 64 + k.dst));
    }
  };
  thread_local std::unordered_map<Key, std::shared_ptr<const Plan>, Hash> cache;
  Key key{id_, bytes, src, dst};
  auto it = cache.find(key);
  if (it != cache.end()) return it->second;
  if (cache.size() >= 512) cache.clear();  // bounded: a thread sweeping sizes starts over
  auto plan = std::make_shared<const Plan>(planner_->plan(src, dst, bytes));
  cache.emplace(key, plan);
  return plan;
}

void Engine::copy_direct_prechecked(void* dst, int dst_dev, const void* src, int src_dev, uint64_t bytes,
                                    StreamHandle stream) {
  check_device("src", src_dev, ndev_);
  check_device("dst", dst_dev, ndev_);
  if (bytes == 0) return;
  if (src_dev != dst_dev) ensure_peer(src_dev, dst_dev);
  backend_.copy_async_prechecked(dst, dst_dev, src, src_dev, bytes, stream);
  ++plain_copies_;
}

void Engine::copy(void* dst, int dst_dev, const void* src, int src_dev, uint64_t bytes, StreamHandle stream) {
  copy_async(dst, dst_dev, src, src_dev, bytes, stream);
  backend_.synchronize_stream(stream);
}

void Engine::copy_async_from_dst(void* dst, int dst_dev, const void* src, int src_dev, uint64_t bytes,
                                 StreamHandle stream) {
  const CopyAllocations allocs = check_copy(backend_, dst, dst_dev, src, src_dev, bytes);
  if (bytes == 0) return;
  std::shared_ptr<const Plan> plan = planner_ && src_dev != dst_dev ? cached_plan(src_dev, dst_dev, bytes) : nullptr;
  const bool plain = !plan || (plan->single_path() && plan->paths[0].kind == PathKind::Direct) ||
                     std::any_of(plan->paths.begin(), plan->paths.end(),
                                 [](const PathPlan& p) { return p.kind == PathKind::GpuStaged; });
  if (src_dev != dst_dev) ensure_peer(dst_dev, src_dev);  // dst's context reads src
  if (plain) {
    backend_.copy_async_prechecked(dst, dst_dev, src, src_dev, bytes, stream);
    ++plain_copies_;
    return;
  }
  RunMode mode;
  mode.replay = false;  // a graph is captured from a stream of the source GPU
  mode.caller_on_dst = true;
  mode.src_alloc = allocs.src;
  mode.dst_alloc = allocs.dst;
  execute(*plan, dst, src, stream, mode);
}

void Engine::copy_with_plan(const Plan& plan, void* dst, const void* src, StreamHandle stream) {
  run_given(plan, dst, src, stream, RunMode{});
}

void Engine::copy_with_plan_detached(const Plan& plan, void* dst, const void* src, StreamHandle stream,
                                     bool second_area, bool replay) {
  RunMode mode;
  mode.replay = replay;
  mode.own_area = second_area;
  mode.apart = true;
  mode.detached = true;
  run_given(plan, dst, src, stream, mode);
}

void Engine::run_given(const Plan& plan, void* dst, const void* src, StreamHandle stream, RunMode mode) {
  const CopyAllocations allocs = check_copy(backend_, dst, plan.dst, src, plan.src, plan.bytes);
  mode.src_alloc = allocs.src;
  mode.dst_alloc = allocs.dst;
  if (plan.bytes == 0) return;
  if (plan.src == plan.dst) {
    backend_.copy_async_prechecked(dst, plan.dst, src, plan.src, plan.bytes, stream);
    ++plain_copies_;
    return;
  }
  execute(plan, dst, src, stream, mode);
}

void Engine::check_plan(const Plan& plan) const {
  plan.check();
  const int sockets = sockets_;
  for (const PathPlan& p : plan.paths) {
    if (p.kind == PathKind::HostStaged)
      GS_REQUIRE(p.via >= 0 && p.via < sockets, GPUSTRIPE_ERR_INVALID_ARGUMENT,
                 "plan stages through host socket %d; the node has %d", p.via, sockets);
    if (p.kind == PathKind::GpuStaged)
      GS_REQUIRE(p.via >= 0 && p.via < ndev_ && p.via != plan.src && p.via != plan.dst, GPUSTRIPE_ERR_INVALID_ARGUMENT,
                 "plan %d->%d stages through GPU %d, which is not a third GPU of the node", plan.src, plan.dst, p.via);
  }
}

void Engine::ensure_peer(int a, int b) {
  std::atomic<bool>& done = peer_enabled_[a * ndev_ + b];
  if (done.load(std::memory_order_acquire)) return;
  if (backend_.can_access_peer(a, b)) backend_.enable_peer_access(a, b);
  done.store(true, std::memory_order_release);
}

void Engine::execute(const Plan& plan, void* dst, const void* src, StreamHandle stream, RunMode mode) {
  if (plan.single_path() && plan.paths[0].kind == PathKind::Direct) {
    ensure_peer(plan.src, plan.dst);
    backend_.copy_async_prechecked(dst, plan.dst, src, plan.src, plan.bytes, stream);
    ++plain_copies_;
    return;
  }
  check_plan(plan);
  for (const PathPlan& p : plan.paths) {
    if (p.kind == PathKind::Direct) ensure_peer(plan.src, plan.dst);
    if (p.kind == PathKind::GpuStaged) {
      ensure_peer(plan.src, p.via);
      ensure_peer(p.via, plan.dst);
    }
  }
  GS_LOG_TRACE(Subsys::Engine, "copy %d->%d %llu bytes: %s", plan.src, plan.dst,
               static_cast<unsigned long long>(plan.bytes), plan.describe().c_str());
  std::lock_guard<std::mutex> lock(mu_);
  if (mode.apart && direct_plus_one_staged(plan)) {
    run_apart(plan, static_cast<char*>(dst), static_cast<const char*>(src), stream, mode, kApartLane,
              mode.own_area ? 1 : 0);
    return;
  }
  run_schedule(plan, dst, src, stream, mode);
}

bool Engine::run_schedule(const Plan& plan, void* dst, const void* src, StreamHandle stream, RunMode mode) {
  const bool replayable =
      mode.replay && (opt_.replay_gpu_staged || std::none_of(plan.paths.begin(), plan.paths.end(), [](const PathPlan& p) {
                   return p.kind == PathKind::GpuStaged;
                 }));
  if (graphs_ && replayable) {
    try {
      if (launch_graph(plan, static_cast<char*>(dst), static_cast<const char*>(src), stream, mode)) return true;
    } catch (const Error& e) {
      // Capture is an optimisation: where it fails (a driver that refuses a node, say) the
      // schedule is enqueued directly from now on. Nothing was launched for this copy.
      GS_LOG_WARN(Subsys::Engine, "CUDA graph capture failed, replaying schedules is off from now on: %s", e.what());
      tails_->synchronize_all();
      graphs_ = false;
    }
  }
  enqueue_schedule(plan, static_cast<char*>(dst), static_cast<const char*>(src), stream, false, mode);
  ++schedules_;
  return false;
}

void Engine::run_apart(const Plan& plan, char* dst, const char* src, StreamHandle caller, const RunMode& mode,
                       int lane_key, int lane_index) {
  // Detached: neither path waits for the caller's earlier work; the direct path queues on the
  // link's lane of detached copies instead of the caller's stream.
  EventHandle start = nullptr;
  if (!mode.detached) {
    start = caller_event(plan.src);
    backend_.record_event(start, caller);
  }
  Lane* direct_lane = mode.detached ? &lanes_->get(plan.src, kDetachedLane, plan.dst) : nullptr;
  StreamHandle ds = direct_lane ? direct_lane->stream() : caller;
  const PathPlan& direct = plan.paths[0];
  const std::vector<uint64_t> edge = chunk_edges(direct);
  for (int c = 0; c < direct.chunks; ++c)
    backend_.copy_async_prechecked(dst + direct.offset + edge[c], plan.dst, src + direct.offset + edge[c], plan.src,
                                   edge[c + 1] - edge[c], ds);
  // The staged path alone, at its offset: a schedule (and a graph) of its own.
  Plan staged = plan;
  staged.paths.erase(staged.paths.begin());
  Lane& lane = lanes_->get(plan.src, lane_key, lane_index);
  if (start) backend_.wait_event(lane.stream(), start);
  RunMode staged_mode = mode;
  staged_mode.apart = false;  // detached stays: an enqueued staged part then forks nothing from the lane
  run_schedule(staged, dst, src, lane.stream(), staged_mode);
  backend_.wait_event(caller, lane.mark().event);
  if (direct_lane) backend_.wait_event(caller, direct_lane->mark().event);
}

StagingArea& Engine::host_area(int socket, int src, bool queues) {
  auto& a = host_areas_.at((queues ? static_cast<size_t>(sockets_) * ndev_ : 0) + static_cast<size_t>(socket) * ndev_ + src);
  if (!a) {
    a = std::make_unique<StagingArea>(backend_, kHostDevice, opt_.host_staging);
    staging_bytes_ += a->capacity();
  }
  return *a;
}

StagingArea& Engine::gpu_area(int gpu) {
  auto& a = gpu_areas_.at(gpu);
  if (!a) {
    a = std::make_unique<StagingArea>(backend_, gpu, opt_.gpu_staging);
    staging_bytes_ += a->capacity();
  }
  return *a;
}

EventHandle Engine::caller_event(int dev) {
  // One per device suffices: waits take the mark at the time of the call, under mu_.
  EventHandle& e = caller_events_.at(dev);
  if (!e) e = backend_.create_event(dev, false);
  return e;
}

// The 2-D pipeline. The direct path goes on the caller's stream itself (so it starts with
// no cross-stream hop and ends where the caller's later work waits), as one copy per chunk.
// A staged path moves each chunk (split into pieces of at most half the staging area, so
// two pieces are always in flight) into the staging area on a src->via lane, which first
// waits for the caller's earlier work; the via->dst lane relays it once the piece has
// arrived (one event per piece). A first hop into staging waits for the relay that last
// read those bytes. At the end the caller's stream waits for the relay lanes only: every
// first hop is followed by a relay that waited for it.
void Engine::enqueue_schedule(const Plan& plan, char* dst, const char* src, StreamHandle caller, bool capturing,
                              RunMode mode) {
  const int S = plan.src, D = plan.dst;
  auto on_caller = [&](const PathPlan& p) { return p.kind == PathKind::Direct; };
  // The caller's earlier work, for the lanes to wait on; recorded before the direct copy
  // goes on the caller's stream, so that the other paths do not wait for it. Detached (the
  // staged part of copy_with_plan_detached, enqueued): the lanes wait for nothing of the
  // caller's, only for the earlier readers of the staging ranges they reuse.
  EventHandle start = nullptr;
  if (!mode.detached && !std::all_of(plan.paths.begin(), plan.paths.end(), on_caller)) {
    start = caller_event(mode.caller_on_dst ? D : S);
    backend_.record_event(start, caller);
  }
  std::vector<Lane*> forked, finals;
  auto fork = [&](Lane& lane) -> Lane& {
    if (std::find(forked.begin(), forked.end(), &lane) == forked.end()) {
      if (start) backend_.wait_event(lane.stream(), start);
      forked.push_back(&lane);
    }
    return lane;
  };
  auto final_lane = [&](Lane& lane) -> Lane& {
    if (std::find(finals.begin(), finals.end(), &lane) == finals.end()) finals.push_back(&lane);
    return lane;
  };
  // Direct paths first: the copy engine starts on them while the rest is being enqueued.
  std::vector<const PathPlan*> order;
  for (const PathPlan& p : plan.paths)
    if (p.kind == PathKind::Direct) order.push_back(&p);
  for (const PathPlan& p : plan.paths)
    if (p.kind != PathKind::Direct) order.push_back(&p);

  // A captured graph must not depend on marks outside it: it tracks its own staging uses.
  StagingUses local_uses;
  // Staging ranges whose relay has no mark yet: each relay lane is marked once, at the end,
  // unless a later piece of this schedule reuses one of its ranges first.
  struct Pending {
    StagingUses* uses;
    Lane* lane;
    uint64_t begin, end;
  };
  std::vector<Pending> pending;
  auto settle = [&](Lane* lane) -> LaneMark {
    LaneMark m = lane->mark(capturing);
    for (auto it = pending.begin(); it != pending.end();) {
      if (it->lane != lane) {
        ++it;
        continue;
      }
      it->uses->set(it->begin, it->end, m);
      it = pending.erase(it);
    }
    return m;
  };
  auto settle_overlapping = [&](const StagingUses* uses, uint64_t begin, uint64_t end) {
    for (bool again = true; again;) {
      again = false;
      for (const Pending& p : pending)
        if (p.uses == uses && p.begin < end && begin < p.end) {
          settle(p.lane);
          again = true;
          break;
        }
    }
  };

  for (const PathPlan* pp : order) {
    const PathPlan& path = *pp;
    if (path.kind == PathKind::Direct) {
      StreamHandle s = caller;
      const std::vector<uint64_t> edge = chunk_edges(path);
      for (int c = 0; c < path.chunks; ++c) {
        uint64_t b = edge[c], e = edge[c + 1];
        backend_.copy_async_prechecked(dst + path.offset + b, D, src + path.offset + b, S, e - b, s);
      }
      continue;
    }
    const bool host = path.kind == PathKind::HostStaged;
    StagingArea& area = host ? host_area(path.via, S, mode.own_area) : gpu_area(path.via);
    const int mid = host ? kHostDevice : path.via;
    // One first-hop stream keeps the chunks leaving the source GPU in order, one at a time.
    const int relay_lanes = host ? opt_.host_lanes : 1;
    StagingUses& uses = capturing ? local_uses : area.uses();
    uint64_t local_cursor = 0;
    uint64_t& cursor = capturing ? local_cursor : area.cursor();
    const uint64_t max_piece = std::max<uint64_t>(kChunkAlign, area.capacity() / 2 / kChunkAlign * kChunkAlign);
    int q = 0;  // piece counter: pieces alternate between the lanes
    const std::vector<uint64_t> edge = chunk_edges(path);
    for (int c = 0; c < path.chunks; ++c) {
      uint64_t cb = edge[c], ce = edge[c + 1];
      for (uint64_t b = cb; b < ce; ++q) {
        uint64_t n = std::min(max_piece, ce - b);
        Lane& first = fork(lanes_->get(S, mid, 0));
        Lane& relay = final_lane(lanes_->get(mid, D, q % relay_lanes));
        uint64_t at = area.take(n, cursor);
        settle_overlapping(&uses, at, at + n);
        for (const LaneMark& m : uses.overlapping(at, at + n)) first.wait(m);
        char* slot = area.base() + at;
        backend_.copy_async_prechecked(slot, mid, src + path.offset + b, S, n, first.stream());
        relay.wait(first.mark(capturing));
        backend_.copy_async_prechecked(dst + path.offset + b, D, slot, mid, n, relay.stream());
        pending.push_back({&uses, &relay, at, at + n});
        b += n;
      }
    }
  }
  // Every first hop is followed by a relay that waited for it: the caller waits for the
  // lanes that write dst, which covers every read of src as well.
  for (Lane* lane : finals) backend_.wait_event(caller, settle(lane).event);
  // A capture must end with every stream it forked joined straight back to where it began.
  if (capturing)
    for (Lane* lane : forked)
      if (std::find(finals.begin(), finals.end(), lane) == finals.end()) backend_.wait_event(caller, lane->mark(true).event);
}

void Engine::prepare(const Plan& plan, bool second_area) {
  caller_event(plan.src);
  for (const PathPlan& p : plan.paths) {
    if (p.kind == PathKind::HostStaged) {
      host_area(p.via, plan.src, second_area);
      lanes_->get(plan.src, kHostDevice, 0);
      for (int k = 0; k < opt_.host_lanes; ++k) lanes_->get(kHostDevice, plan.dst, k);
    } else if (p.kind == PathKind::GpuStaged) {
      gpu_area(p.via);
      lanes_->get(plan.src, p.via);
      lanes_->get(p.via, plan.dst);
    }
  }
}

bool Engine::launch_graph(const Plan& plan, char* dst, const char* src, StreamHandle caller, const RunMode& mode) {
  const bool second_area = mode.own_area;
  // The allocations, not only the pointers: a graph's copies refer to the allocations they were
  // captured over. A buffer freed and reallocated at the same address (a peer's buffer unmapped
  // and a new one mapped at the same address, say) is another allocation, and replaying the old
  // graph over it crashed inside cuGraphLaunch (the 2-rank `bench mpi`'s window-64 512 MB row,
  // whose buffers came back at the addresses of the window-16 row's).
  std::string key = plan_key(plan, dst, src) + (second_area ? " area2" : "") +
                    format(" alloc %llx+%llx#%llx %llx+%llx#%llx", static_cast<unsigned long long>(mode.src_alloc.base),
                           static_cast<unsigned long long>(mode.src_alloc.size),
                           static_cast<unsigned long long>(mode.src_alloc.buffer_id),
                           static_cast<unsigned long long>(mode.dst_alloc.base),
                           static_cast<unsigned long long>(mode.dst_alloc.size),
                           static_cast<unsigned long long>(mode.dst_alloc.buffer_id));
  GraphExecHandle g = graphs_cache_->find(key);
  if (!g) {
    // A transfer seen once is enqueued directly: capturing costs more than that, and pays
    // only when the same transfer comes again.
    if (!graphs_cache_->seen_before(key)) return false;
    // Cached graphs are still replayed; new ones are not captured once the cache thrashes.
    if (graphs_cache_->thrashing()) {
      if (!thrash_logged_)
        GS_LOG_INFO(Subsys::Engine, "transfers repeat over more keys than the graph cache holds (%zu): "
                    "new transfers are enqueued, not captured", graphs_cache_->size());
      thrash_logged_ = true;
      return false;
    }
    // Captured on an engine stream of the source GPU, never on the caller's (other threads
    // may enqueue on it meanwhile); the graph is then launched on the caller's stream.
    StreamHandle& cs = capture_streams_.at(plan.src);
    if (!cs) cs = backend_.create_stream(plan.src);
    prepare(plan, second_area);
    // Named fields, never positional: the capture must stage in the area whose users the
    // replay below waits for and marks (an area mixed up here lets two replays fill one
    // host range at once).
    RunMode capture_mode;
    capture_mode.own_area = second_area;
    backend_.begin_capture(cs);
    try {
      enqueue_schedule(plan, dst, src, cs, true, capture_mode);
    } catch (...) {
      try {
        backend_.destroy_graph(backend_.end_capture(cs));
      } catch (...) {
      }
      throw;
    }
    g = backend_.end_capture(cs);
    graphs_cache_->insert(key, g);
    ++graph_captures_;
  }
  // A replay conflicts with other work only through staging memory (the graph bakes its
  // addresses in, from the start of each area): it waits for every earlier reader of the
  // areas it uses, replayed or enqueued, and then stands for all their bytes itself.
  std::vector<std::pair<StagingArea*, int>> areas;
  for (const PathPlan& p : plan.paths) {
    if (p.kind == PathKind::HostStaged)
      areas.push_back({&host_area(p.via, plan.src, second_area),
                       ResourceTails::host_area((second_area ? sockets_ * ndev_ : 0) + p.via * ndev_ + plan.src)});
    if (p.kind == PathKind::GpuStaged) areas.push_back({&gpu_area(p.via), ResourceTails::gpu_area(p.via)});
  }
  for (auto& [area, id] : areas)
    for (const LaneMark& m : area->uses().overlapping(0, area->capacity())) backend_.wait_event(caller, m.event);
  backend_.launch_graph(g, caller);
  for (auto& [area, id] : areas) {
    EventHandle e = tails_->record(id, caller, plan.src);
    area->uses().set(0, area->capacity(), LaneMark{caller, e});
  }
  ++graph_launches_;
  return true;
}

}  // namespace gpustripe
