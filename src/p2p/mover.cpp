#include "p2p/mover.hpp"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <exception>
#include <memory>
#include <set>
#include <tuple>

#include "common/config.hpp"
#include "common/error.hpp"
#include "common/log.hpp"
#include "engine/engine.hpp"
#include "ipc/channel.hpp"
#include "model/planner.hpp"
#include "p2p/backlog.hpp"
#include "p2p/trace.hpp"

namespace gpustripe::p2p {
namespace {
// 2: in windows of messages of 1-2 MB, a message's copy no longer queues behind the previous one's,
// which lifts the rate through the interposer by about 40%; larger messages, which fill the link
// alone, and two-way runs change within noise.
constexpr int kStreams = 2;  // streams per GPU that the p2p layer's copies take in turn when busy
}  // namespace

Mover::Mover(Backend* backend, CopyFn copy, PlainFn plain)
    : backend_(backend), copy_(std::move(copy)), plain_(std::move(plain)) {
  if (backend_ && !copy_)
    copy_ = [b = backend_](void* dst, int dd, const void* src, int sd, size_t n, StreamHandle s, const Hints&) {
      b->copy_async(dst, dd, src, sd, n, s);
      return std::function<void()>();
    };
}

Mover::~Mover() {
  if (!backend_) return;
  // Copies still in flight write into peers' buffers: let them land first.
  for (size_t i = 0; i < lanes_.size(); ++i) {
    try {
      close(i);
    } catch (...) {
    }
    Lane& l = lanes_[i];
    while (!l.groups.empty()) {
      try {
        wait_front(l);
      } catch (...) {
      }
      finish_front(l);
    }
  }
  for (auto& kv : devices_)
    for (EventHandle e : kv.second.free_events) backend_->destroy_event(e);
  for (Lane& l : lanes_) backend_->destroy_stream(l.stream);
}

MemLoc Mover::locate(const void* p) const {
  MemLoc loc;
  if (!backend_ || !p) return loc;
  PointerInfo info = backend_->pointer_info(p);
  if (info.kind == MemoryKind::Device) {
    loc.device = true;
    loc.dev = info.device;
    loc.base = info.base;
    loc.size = info.size;
    loc.buffer_id = info.buffer_id;
  }
  return loc;
}

void Mover::check_within(const MemLoc& loc, const void* p, size_t bytes, const char* what) {
  if (!loc.device || loc.size == 0) return;
  uintptr_t u = reinterpret_cast<uintptr_t>(p);
  GS_REQUIRE(u >= loc.base && bytes <= loc.size - (u - loc.base), GPUSTRIPE_ERR_INVALID_POINTER,
             "%s: [%p, +%zu) runs past its allocation on GPU %d [0x%zx, +%zu)", what, p, bytes, loc.dev,
             static_cast<size_t>(loc.base), loc.size);
}

size_t Mover::new_lane(int dev) {
  GS_REQUIRE(lanes_.size() + 1 < (size_t{1} << kLaneBits), GPUSTRIPE_ERR_INTERNAL, "p2p mover: too many streams");
  lanes_.emplace_back();
  lanes_.back().stream = backend_->create_stream(dev);
  lanes_.back().dev = dev;
  return lanes_.size() - 1;
}

size_t Mover::lane_for(int dev) {
  Device& d = devices_[dev];
  if (d.lanes.empty())
    for (int i = 0; i < kStreams; ++i) d.lanes.push_back(new_lane(dev));
  // A copy that finds the last one's stream idle goes there again: a lone copy on the stream
  // that ran the one before completes sooner than on another (bench/probes/w1_floor.cu,
  // local_dtod_stream against local_dtod_stream_turns), which a window-1 message's latency is
  // made of. Copies that find it busy (a window's) take the streams in turn, to overlap.
  const Lane& last = lanes_[d.lanes[d.last]];
  if (last.done + 1 == last.next) return d.lanes[d.last];
  d.last = (d.last + 1) % d.lanes.size();
  return d.lanes[d.last];
}

uint64_t Mover::start(void* dst, int dst_dev, const void* src, int src_dev, size_t bytes, const Hints& hints) {
  if (bytes == 0) return 0;  // ticket 0: nothing in flight
  if (dst_dev == kHostDevice && src_dev == kHostDevice) {
    std::memcpy(dst, src, bytes);
    return 0;
  }
  GS_REQUIRE(backend_, GPUSTRIPE_ERR_INTERNAL, "device copy without a backend");
  const size_t lane = lane_for(src_dev != kHostDevice ? src_dev : dst_dev);
  Lane& l = lanes_[lane];
  seal(l);
  std::function<void()> after;
  if (batching_) {
    Hints h = hints;
    h.batch = &l.batch;
    after = copy_(dst, dst_dev, src, src_dev, bytes, l.stream, h);
  } else {
    after = copy_(dst, dst_dev, src, src_dev, bytes, l.stream, hints);
  }
  trace("c_enq", -1, 0, 0, bytes);
  if (after) l.open_after.push_back(std::move(after));
  return issue(lane, batching_);
}

uint64_t Mover::start_plain(void* dst, int dev, const void* src, int src_named, size_t bytes) {
  return start_plain_on(dev, Backend::BatchCopy{dst, dev, src, src_named, bytes});
}

uint64_t Mover::start_plain_out(void* dst, int dst_named, const void* src, int dev, size_t bytes) {
  return start_plain_on(dev, Backend::BatchCopy{dst, dst_named, src, dev, bytes});
}

uint64_t Mover::start_plain_on(int dev, const Backend::BatchCopy& c) {
  if (c.bytes == 0) return 0;  // ticket 0: nothing in flight
  GS_REQUIRE(backend_ && dev != kHostDevice, GPUSTRIPE_ERR_INTERNAL, "a plain copy on a GPU's stream: GPU %d", dev);
  const size_t lane = lane_for(dev);
  Lane& l = lanes_[lane];
  seal(l);
  put_plain(l, c, batching_);
  trace("p_lean", -1, 0, 0, c.bytes);
  trace("c_enq", -1, 0, 0, c.bytes);
  return issue(lane, batching_);
}

uint64_t Mover::issue(size_t lane, bool together) {
  Lane& l = lanes_[lane];
  const uint64_t seq = l.next++;
  if (!together) {
    close(lane);
  } else if (!l.open) {
    l.open = true;
    open_.push_back(lane);
  }
  return seq << kLaneBits | lane;
}

uint64_t Mover::start_prechecked(void* dst, int dst_dev, const void* src, int src_dev, size_t bytes, bool defer) {
  GS_REQUIRE((dst_dev == kHostDevice) != (src_dev == kHostDevice), GPUSTRIPE_ERR_INTERNAL,
             "start_prechecked: host <-> device copies only");
  if (bytes == 0) return 0;  // ticket 0: nothing in flight
  GS_REQUIRE(backend_, GPUSTRIPE_ERR_INTERNAL, "device copy without a backend");
  const int dev = src_dev != kHostDevice ? src_dev : dst_dev;
  auto it = small_lanes_.find({dev, dst_dev != kHostDevice});
  if (it == small_lanes_.end()) it = small_lanes_.emplace(std::make_pair(dev, dst_dev != kHostDevice), new_lane(dev)).first;
  const size_t lane = it->second;
  Lane& l = lanes_[lane];
  seal(l);
  const bool together = batching_ || defer;
  put_plain(l, Backend::BatchCopy{dst, dst_dev, src, src_dev, bytes}, together);
  return issue(lane, together);
}

void Mover::put_plain(Lane& l, const Backend::BatchCopy& c, bool together) {
  if (!together) {
    backend_->copy_async_prechecked(c.dst, c.dst_dev, c.src, c.src_dev, c.bytes, l.stream);
    return;
  }
  // Enqueued by close(), with the lane's other copies of the pass, in one backend call.
  l.batch.copies.push_back(c);
  if (l.batch.enqueue) return;  // a copy function's enqueue, set before, takes these copies as well
  l.batch.context = backend_;
  l.batch.enqueue = [](void* b, const Backend::BatchCopy* cs, size_t n, StreamHandle on) {
    static_cast<Backend*>(b)->copy_batch_prechecked(cs, n, on);
  };
}

void Mover::begin_batch() {
  // Deferred copies (and those of a pass that threw) are enqueued first. Not marked as this pass's
  // batch: a deferred copy may have waited since the last pass, and its sender's record goes out
  // in this pass if it has landed.
  close_open(false);
  batching_ = true;
}

void Mover::end_batch() { close_open(true); }

void Mover::close_open(bool batch_end) {
  batching_ = false;
  // Each lane is closed even when another's close throws: a copy without an event would never complete.
  std::exception_ptr failed;
  for (size_t lane : open_) {
    try {
      close(lane, batch_end);
    } catch (...) {
      if (!failed) failed = std::current_exception();
    }
  }
  open_.clear();
  if (failed) std::rethrow_exception(failed);
}

void Mover::close(size_t lane, bool batch_end) {
  Lane& l = lanes_[lane];
  l.open = false;
  if (!l.batch.copies.empty()) {
    // Cleared before the call: a copy the backend refused is not enqueued twice.
    std::vector<Backend::BatchCopy> copies;
    copies.swap(l.batch.copies);
    trace("c_batch", -1, 0, 0, copies.size());  // bytes: the number of copies
    try {
      l.batch.enqueue(l.batch.context, copies.data(), copies.size(), l.stream);
      trace("c_batched", -1, 0, 0, copies.size());
    } catch (...) {
      // The copies not recorded yet may not have been enqueued: they fail, never complete unmoved.
      l.failed_from = l.recorded + 1;
      l.failed_upto = l.next - 1;
      l.failure = std::current_exception();
      throw;
    }
    copies.clear();
    l.batch.copies.swap(copies);  // keeps the capacity for the next pass
  }
  if (l.recorded + 1 == l.next) return;
  if (l.groups.empty()) {
    // Alone on its stream: the stream's own completion marks the group (see seal()).
    l.groups.push_back(Group{nullptr, l.next - 1, std::move(l.open_after), batch_end ? pass_ : 0});
    l.open_after.clear();
    l.recorded = l.next - 1;
    return;
  }
  l.groups.push_back(Group{mark(l), l.next - 1, std::move(l.open_after), batch_end ? pass_ : 0});
  l.open_after.clear();
  l.recorded = l.next - 1;
}

EventHandle Mover::mark(Lane& l) {
  Device& d = devices_[l.dev];
  EventHandle e = nullptr;
  if (!d.free_events.empty()) {
    e = d.free_events.back();
    d.free_events.pop_back();
  } else {
    e = backend_->create_event(l.dev, false);
  }
  try {
    backend_->record_event(e, l.stream);
  } catch (...) {
    d.free_events.push_back(e);
    throw;
  }
  return e;
}

void Mover::seal(Lane& l) {
  if (!l.groups.empty() && !l.groups.back().event) l.groups.back().event = mark(l);
}

void Mover::finish_front(Lane& l) {
  Group g = std::move(l.groups.front());
  l.groups.pop_front();
  l.done = g.last;
  if (g.event) devices_[l.dev].free_events.push_back(g.event);
  for (auto& f : g.after) f();
}

void Mover::wait_front(Lane& l) {
  if (EventHandle e = l.groups.front().event) backend_->synchronize_event(e);
  else backend_->synchronize_stream(l.stream);
}

void Mover::poll(Lane& l, uint64_t upto, bool wait) {
  while (!l.groups.empty() && l.done < upto) {
    if (wait) {
      wait_front(l);
    } else {
      // Recorded at the end of this pass's batch, an event is not asked again in the same pass:
      // a copy enqueued microseconds ago has not finished, and the query costs about as much.
      const Group& g = l.groups.front();
      if (l.busy_pass == pass_ || g.pass == pass_) return;
      if (!(g.event ? backend_->query_event(g.event) : backend_->query_stream(l.stream))) {
        trace("c_busy", -1, 0, 0, 0);
        l.busy_pass = pass_;
        return;
      }
      trace("c_seen", -1, 0, 0, 0);
    }
    finish_front(l);
  }
}

bool Mover::idle() const {
  if (!open_.empty()) return false;
  for (const Lane& l : lanes_)
    if (l.done + 1 != l.next) return false;
  return true;
}

bool Mover::done(uint64_t ticket) {
  if (ticket == 0) return true;
  const size_t lane = ticket & ((uint64_t{1} << kLaneBits) - 1);
  const uint64_t seq = ticket >> kLaneBits;
  GS_REQUIRE(lane < lanes_.size(), GPUSTRIPE_ERR_INTERNAL, "p2p mover: unknown ticket %llu",
             static_cast<unsigned long long>(ticket));
  Lane& l = lanes_[lane];
  if (seq >= l.failed_from && seq <= l.failed_upto) std::rethrow_exception(l.failure);
  if (seq <= l.done) return true;
  if (seq > l.recorded) close(lane);
  poll(l, seq, false);
  return seq <= l.done;
}

void Mover::copy_now_prechecked(void* dst, int dst_dev, const void* src, int src_dev, size_t bytes) {
  GS_REQUIRE(dst_dev == kHostDevice || src_dev == kHostDevice, GPUSTRIPE_ERR_INTERNAL,
             "copy_now_prechecked: host <-> device copies only");
  if (bytes == 0 || (dst_dev == kHostDevice && src_dev == kHostDevice)) {
    if (bytes) std::memcpy(dst, src, bytes);
    return;
  }
  GS_REQUIRE(backend_, GPUSTRIPE_ERR_INTERNAL, "device copy without a backend");
  Lane& l = lanes_[lane_for(src_dev != kHostDevice ? src_dev : dst_dev)];
  seal(l);
  StreamHandle s = l.stream;
  backend_->copy_async_prechecked(dst, dst_dev, src, src_dev, bytes, s);
  backend_->synchronize_stream(s);
}

void Mover::copy_now(void* dst, int dst_dev, const void* src, int src_dev, size_t bytes) {
  const uint64_t t = start(dst, dst_dev, src, src_dev, bytes);
  if (t == 0) return;
  Lane& l = lanes_[t & ((uint64_t{1} << kLaneBits) - 1)];
  if ((t >> kLaneBits) > l.recorded) close(t & ((uint64_t{1} << kLaneBits) - 1));
  poll(l, t >> kLaneBits, true);
}

namespace {
// A rank lists its copy on the node's board before it reads the others' and plans, so copies
// that start together are planned with each other (listed after enqueueing, two pairs starting
// at once never saw each other: both took the lone plan's host share, overloading the host path).
//
// Windows: a copy queued behind this rank's own copies to the same GPU (none of other ranks in
// flight), or one with more receives from the same peer posted behind it (a window starting), is
// run detached (Engine::copy_with_plan_detached) with the window's host share, its host-staged
// pieces in the other of the source GPU's two staging areas than the copy before it: the direct
// paths run back to back on a lane of the link, and consecutive messages' host pipelines overlap,
// one filling while the other drains, so the host path can carry the share of a long transfer.
// Detached, the window runs at the rate of whichever chain is slower; the host chain carries
// ~50 GB/s in 8 MB chunks (more than in the lone plan's smaller ones), host-bound past a share of
// ~0.116: the share keeps ~3% of margin below that. Under kWindowMin the replay's cost is not
// covered by the overlap. Shares and sizes measured on 4x H200 (2 ranks, windows of 16 and 64).
constexpr double kWindowShare = 0.113;            // host share of a window's copies
constexpr const char* kWindowMin = "128M";      // the smallest copy run as part of a window
constexpr uint64_t kWindowChunk = 8ull << 20;     // host chunk size of a window's copies

bool direct_alone(const Plan& p) { return p.single_path() && p.paths[0].kind == PathKind::Direct; }
}  // namespace

uint64_t direct_limit(Engine& engine, int src, int dst) {
  constexpr uint64_t kStep = 4096, kMax = uint64_t{1} << 40;
  uint64_t lo = 0, hi = kStep;  // the plan is direct alone at lo (0: vacuously), not at hi
  while (hi <= kMax && direct_alone(engine.current_plan(src, dst, hi))) {
    lo = hi;
    hi *= 2;
  }
  if (hi > kMax) return lo;
  while (hi - lo > kStep) {
    const uint64_t mid = lo + (hi - lo) / 2 / kStep * kStep;
    if (direct_alone(engine.current_plan(src, dst, mid))) lo = mid;
    else hi = mid;
  }
  return lo;
}

Mover::PlainFn engine_plain(Engine& engine) {
  auto limits = std::make_shared<std::map<std::pair<int, int>, uint64_t>>();  // direct_limit per GPU pair
  return [&engine, limits](int sd, int dd, size_t n) {
    if (!engine.planner() || sd == dd || sd == kHostDevice || dd == kHostDevice) return false;
    auto lim = limits->find({sd, dd});
    if (lim == limits->end()) lim = limits->emplace(std::make_pair(sd, dd), direct_limit(engine, sd, dd)).first;
    return n <= lim->second;
  };
}

Mover::CopyFn engine_copy(Engine& engine, ipc::Channel* board) {
  // Concurrent plans by the loads they were made for: planning costs tens of
  // microseconds per message, and the loads repeat (the pairs of a benchmark, the
  // same exchange step after step). Bounded: cleared when it grows past kMaxPlans.
  constexpr size_t kMaxPlans = 256;
  struct State {
    std::map<std::vector<uint64_t>, Plan> plans;
    CopyQueues own;  // this rank's copies in flight, per GPU pair
    std::map<std::tuple<int, int, uint64_t>, bool> splits;  // (src, dst, bytes): planned alone, direct + host
    std::map<std::tuple<int, int, uint64_t>, Plan> window_plans;  // windows' plans, per size
    std::map<std::pair<int, int>, bool> second_area;  // per GPU pair: the area the last copy staged in
    std::set<std::tuple<int, int, uint64_t>> beside_others;  // (src, dst, bytes) once copied beside other pairs
  };
  auto st = std::make_shared<State>();
  // The callers (the endpoint's pull and push, copy_now) pass ranges they have checked against
  // their allocations (Mover::check_within, the mapping cache's bounds), so the copies below
  // that skip the engine's pointer queries write nothing they were not meant to.
  // Tests reach windows with small messages through GPUSTRIPE_TEST's window_min.
  const uint64_t window_min = parse_size(test_hook("window_min", kWindowMin), "GPUSTRIPE_TEST window_min");
  Mover::PlainFn plain = engine_plain(engine);
  return [&engine, board, st, window_min, plain](void* dst, int dd, const void* src, int sd, size_t n,
                                                        StreamHandle s, const Mover::Hints& hints) -> std::function<void()> {
    // Regime: a copy to or from host memory (eager bounces, stream fragments, push from host).
    if (dd == kHostDevice || sd == kHostDevice) {
      engine.backend().copy_async(dst, dd, src, sd, n, s);
      return {};
    }
    // Regime: within one GPU, or an engine without a planner: one checked copy.
    if (!engine.planner() || sd == dd) {
      engine.copy_async(dst, dd, src, sd, n, s);
      return {};
    }
    // Regime: small and mid-size messages, whose lone plan is the direct path alone. With others'
    // copies beside them the plan stays that (transfers on one path alone stay there), so they
    // need neither the board nor the planner: one plain copy, the cost UCX's cuda_ipc pays.
    if (plain(sd, dd, n)) {
      if (hints.batch) {  // enqueued with the other plain copies of the pass, in one backend call
        hints.batch->copies.push_back(Backend::BatchCopy{dst, dd, src, sd, n});
        hints.batch->context = &engine;
        hints.batch->enqueue = [](void* e, const Backend::BatchCopy* c, size_t k, StreamHandle on) {
          static_cast<Engine*>(e)->copy_direct_batch_prechecked(c, k, on);
        };
      } else {
        engine.copy_direct_prechecked(dst, dd, src, sd, n, s);
      }
      trace("p_lean", -1, 0, 0, n);
      return {};
    }
    // Planned for a set of transfers running at once (the concurrent plan of the last one).
    auto concurrent = [&](std::vector<TransferSpec> specs, uint64_t bytes) -> const Plan& {
      std::sort(specs.begin(), specs.end(), [](const TransferSpec& a, const TransferSpec& b) {
        return std::tie(a.src, a.dst, a.bytes) < std::tie(b.src, b.dst, b.bytes);
      });
      specs.push_back(TransferSpec{sd, dd, bytes});
      std::vector<uint64_t> key;
      key.reserve(3 * specs.size());
      for (const TransferSpec& t : specs) key.insert(key.end(), {uint64_t(t.src), uint64_t(t.dst), t.bytes});
      auto it = st->plans.find(key);
      if (it == st->plans.end()) {
        if (st->plans.size() >= kMaxPlans) st->plans.clear();
        Plan plan = engine.planner()->plan_concurrent(specs).back();
        GS_LOG_DEBUG(Subsys::P2p, "GPU %d -> %d, %llu bytes, with %zu other copies in flight: %s", sd, dd,
                     static_cast<unsigned long long>(bytes), specs.size() - 1, plan.describe().c_str());
        it = st->plans.emplace(std::move(key), std::move(plan)).first;
      }
      return it->second;
    };
    int slot = -1;
    if (board) {
      slot = board->publish_transfer(sd, dd, n);
      // Store-then-load between ranks (Dekker): without a full fence both ranks could
      // read the board before the other's entry is visible, and neither see the other.
      std::atomic_thread_fence(std::memory_order_seq_cst);
    }
    try {
      // Other ranks' copies are merged per direction: what the planner needs is the load on
      // each link, and planning one spec per message of a window (64 in osu_bw) cost
      // milliseconds per message (bandwidth fell from 705 to 22 GB/s at 128 MB, 2 ranks).
      std::vector<TransferSpec> specs;
      if (board) {
        for (const ipc::Channel::InFlight& t : board->transfers_of_others()) {
          if (t.src_dev == t.dst_dev) continue;
          auto same = std::find_if(specs.begin(), specs.end(),
                                   [&](const TransferSpec& x) { return x.src == t.src_dev && x.dst == t.dst_dev; });
          if (same == specs.end()) specs.push_back(TransferSpec{t.src_dev, t.dst_dev, t.bytes});
          else same->bytes += t.bytes;
        }
      }
      // The other way: listed on the board, or known to the caller before the peer lists it
      // (this rank's own messages to the peer are in flight: both directions start together,
      // and the first copies would otherwise plan alone). Not yet listed, the peer's copy is
      // taken to be of this one's size (a Sendrecv's halves, a two-way window's messages).
      const bool reverse_listed = std::any_of(specs.begin(), specs.end(), [&](const TransferSpec& x) {
        return x.src == dd && x.dst == sd;
      });
      const bool reverse = hints.both_ways || reverse_listed;
      const CopyQueues::Queue queued = st->own.queued(sd, dd);
      const bool behind = queued.copies > 0 && specs.empty();
      const bool window = n >= window_min && (behind || (hints.ahead > 0 && queued.copies == 0 && specs.empty()));
      // Whether this size alone splits into direct + host, kept per size: a plan copy per
      // message is what windows of small messages would notice.
      auto lone_splits = [&] {
        auto key = std::make_tuple(sd, dd, uint64_t{n});
        auto it = st->splits.find(key);
        if (it != st->splits.end()) return it->second;
        if (st->splits.size() >= kMaxPlans) st->splits.clear();
        return st->splits[key] = direct_plus_host(engine.current_plan(sd, dd, n));
      };
      // Another pair's copies beside a two-way exchange, or on a GPU of this copy: a staged path
      // would run its pieces on GPUs and host links that other processes are moving data through
      // at the same time, in their own contexts, which the model does not see: there the direct
      // path alone (bench/results/*-mpi-np4-host-path-*: a 4-rank halo exchange and two-way pairs
      // slowed several times by the staged plans the model chose). A lone pair, both ways or not,
      // and pairs on GPUs of their own keep the model's plan.
      // A copy of a shape that ran so once keeps the direct path when it comes again with nothing
      // of the others listed: the ranks of a program that repeats its exchange (a halo exchange
      // between compute steps) arrive apart, and the first of them to plan sees none of the
      // traffic the others are about to start beside it.
      const auto shape = std::make_tuple(sd, dd, uint64_t{n});
      const bool listed_beside = std::any_of(specs.begin(), specs.end(), [&](const TransferSpec& x) {
        const bool this_pair = (x.src == sd && x.dst == dd) || (x.src == dd && x.dst == sd);
        const bool shares_gpu = x.src == sd || x.src == dd || x.dst == sd || x.dst == dd;
        return !this_pair && (reverse || shares_gpu);
      });
      bool beside_others = listed_beside;
      if (listed_beside) {
        if (st->beside_others.size() >= kMaxPlans) st->beside_others.clear();
        st->beside_others.insert(shape);
      } else {
        beside_others = st->beside_others.count(shape) > 0;
      }
      if (beside_others) {
        // Regime: other pairs' traffic through this copy's GPUs, or beside a two-way exchange.
        trace("p_direct", -1, 0, 0, n);
        engine.copy_direct_prechecked(dst, dd, src, sd, n, s);
      } else if (reverse) {
        // Regime: traffic the other way (Sendrecv, two-way windows): the model's plan with it in
        // flight. Where that is the direct path alone, one plain copy; where the host path pays
        // beside the reverse traffic, the plan, and in a window of such copies (more of this
        // rank's to the same GPU in flight or posted) detached, alternating staging areas, so that
        // one message's host pipeline drains while the next one's fills, as one-way windows do.
        // What the plan needs of the other way is whether it runs for the whole of this copy: its
        // bytes past this copy's change nothing here, and summed over a window's messages in flight
        // they would make a new plan (tens of microseconds) for nearly every copy.
        for (TransferSpec& x : specs)
          if (x.src == dd && x.dst == sd) x.bytes = std::min<uint64_t>(x.bytes, n);
        if (!reverse_listed) specs.push_back(TransferSpec{dd, sd, n});
        const Plan& plan = concurrent(specs, n);
        if (direct_alone(plan)) {
          trace("p_direct", -1, 0, 0, n);
          engine.copy_direct_prechecked(dst, dd, src, sd, n, s);
        } else {
          const bool in_window = n >= window_min && direct_plus_host(plan) &&
                                 (queued.copies > 0 || hints.ahead > 0);
          trace(in_window ? "p_twoway_window" : "p_twoway", -1, queued.copies, host_staged_bytes(plan) * 1000000 / n, n);
          if (in_window) {
            bool& second = st->second_area[{sd, dd}];
            second = !second;
            engine.copy_with_plan_detached(plan, dst, src, s, second);
          } else {
            engine.copy_with_plan(plan, dst, src, s);
            st->second_area[{sd, dd}] = false;
          }
        }
      } else if (!specs.empty()) {
        // Regime: other ranks' copies in flight: planned with them.
        trace("p_concurrent", -1, 0, 0, n);
        engine.copy_with_plan(concurrent(specs, n), dst, src, s);
      } else if (window && lone_splits()) {
        // Regime: a window of large messages to one peer: the same plan for every copy of this
        // size (its graph captured once), in the staging area the copy before it did not use.
        auto key = std::make_tuple(sd, dd, uint64_t{n});
        auto it = st->window_plans.find(key);
        if (it == st->window_plans.end()) {
          if (st->window_plans.size() >= kMaxPlans) st->window_plans.clear();
          it = st->window_plans.emplace(key, queued_split(engine.current_plan(sd, dd, n), kWindowShare, kWindowChunk)).first;
        }
        bool& second = st->second_area[{sd, dd}];
        second = !second;
        trace(behind ? "p_window" : "p_window_first", -1, queued.copies,
              host_staged_bytes(it->second) * 1000000 / n, n);
        engine.copy_with_plan_detached(it->second, dst, src, s, second);
      } else {
        // Regime: a large message alone: the engine's lone plan.
        engine.copy_async(dst, dd, src, sd, n, s);
        st->second_area[{sd, dd}] = false;  // a planner's plan stages in the first area
      }
    } catch (...) {
      if (board) board->retire_transfer(slot);
      throw;
    }
    st->own.add(sd, dd, n);
    return [board, slot, st, sd, dd, n] {
      if (board) board->retire_transfer(slot);
      st->own.remove(sd, dd, n);
    };
  };
}

}  // namespace gpustripe::p2p
