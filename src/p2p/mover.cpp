#include "p2p/mover.hpp"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <memory>
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
constexpr int kStreams = 2;  // streams per GPU that the p2p layer's copies take in turn
}  // namespace

Mover::Mover(Backend* backend, CopyFn copy) : backend_(backend), copy_(std::move(copy)) {
  if (backend_ && !copy_)
    copy_ = [b = backend_](void* dst, int dd, const void* src, int sd, size_t n, StreamHandle s, const Hints&) {
      b->copy_async(dst, dd, src, sd, n, s);
      return std::function<void()>();
    };
}

Mover::~Mover() {
  if (!backend_) return;
  // Copies still in flight write into peers' buffers: let them land first.
  while (!pending_.empty()) {
    try {
      backend_->synchronize_event(pending_.begin()->second.event);
    } catch (...) {
    }
    finish(pending_.begin());
  }
  for (EventHandle e : free_events_) backend_->destroy_event(e);
  for (auto& kv : streams_)
    for (StreamHandle st : kv.second.all) backend_->destroy_stream(st);
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

StreamHandle Mover::stream_for(int dev) {
  Streams& ss = streams_[dev];
  if (ss.all.empty()) {
    for (int i = 0; i < kStreams; ++i) ss.all.push_back(backend_->create_stream(dev));
  }
  StreamHandle s = ss.all[ss.next];
  ss.next = (ss.next + 1) % ss.all.size();
  return s;
}

uint64_t Mover::start(void* dst, int dst_dev, const void* src, int src_dev, size_t bytes, const Hints& hints) {
  uint64_t ticket = next_ticket_++;
  if (bytes == 0) return ticket;
  if (dst_dev == kHostDevice && src_dev == kHostDevice) {
    std::memcpy(dst, src, bytes);
    return ticket;
  }
  GS_REQUIRE(backend_, GPUSTRIPE_ERR_INTERNAL, "device copy without a backend");
  int dev = src_dev != kHostDevice ? src_dev : dst_dev;
  StreamHandle s = stream_for(dev);
  std::function<void()> after = copy_(dst, dst_dev, src, src_dev, bytes, s, hints);
  trace("c_enq", -1, 0, 0, bytes);
  EventHandle e = nullptr;
  for (auto it = free_events_.begin(); it != free_events_.end(); ++it)
    if (event_dev_[*it] == dev) {
      e = *it;
      free_events_.erase(it);
      break;
    }
  if (!e) {
    e = backend_->create_event(dev, false);
    event_dev_[e] = dev;
  }
  backend_->record_event(e, s);
  pending_[ticket] = Pending{e, std::move(after), s};
  order_[s].tickets.push_back(ticket);
  return ticket;
}

void Mover::finish(std::map<uint64_t, Pending>::iterator it) {
  Order& o = order_[it->second.stream];
  auto pos = std::find(o.tickets.begin(), o.tickets.end(), it->first);
  if (pos != o.tickets.end()) o.tickets.erase(pos);
  free_events_.push_back(it->second.event);
  std::function<void()> after = std::move(it->second.after);
  pending_.erase(it);
  if (after) after();
}

void Mover::finish_through(StreamHandle stream, uint64_t ticket) {
  Order& o = order_[stream];
  while (!o.tickets.empty()) {
    const uint64_t t = o.tickets.front();
    auto it = pending_.find(t);
    if (it != pending_.end()) finish(it);
    else o.tickets.pop_front();
    if (t == ticket) return;
  }
}

bool Mover::done(uint64_t ticket) {
  auto it = pending_.find(ticket);
  if (it == pending_.end()) return true;
  const StreamHandle s = it->second.stream;
  Order& o = order_[s];
  while (!o.tickets.empty() && o.busy_pass != pass_) {
    const uint64_t oldest = o.tickets.front();
    auto p = pending_.find(oldest);
    if (p == pending_.end()) {
      o.tickets.pop_front();
      continue;
    }
    if (!backend_->query_event(p->second.event)) {
      o.busy_pass = pass_;
      break;
    }
    finish(p);
    if (oldest == ticket) return true;
  }
  return pending_.find(ticket) == pending_.end();
}

void Mover::copy_now_prechecked(void* dst, int dst_dev, const void* src, int src_dev, size_t bytes) {
  GS_REQUIRE(dst_dev == kHostDevice || src_dev == kHostDevice, GPUSTRIPE_ERR_INTERNAL,
             "copy_now_prechecked: host <-> device copies only");
  if (bytes == 0 || (dst_dev == kHostDevice && src_dev == kHostDevice)) {
    if (bytes) std::memcpy(dst, src, bytes);
    return;
  }
  GS_REQUIRE(backend_, GPUSTRIPE_ERR_INTERNAL, "device copy without a backend");
  int dev = src_dev != kHostDevice ? src_dev : dst_dev;
  StreamHandle s = stream_for(dev);
  backend_->copy_async_prechecked(dst, dst_dev, src, src_dev, bytes, s);
  backend_->synchronize_stream(s);
}

void Mover::copy_now(void* dst, int dst_dev, const void* src, int src_dev, size_t bytes) {
  uint64_t t = start(dst, dst_dev, src, src_dev, bytes);
  auto it = pending_.find(t);
  if (it == pending_.end()) return;
  const StreamHandle s = it->second.stream;
  backend_->synchronize_event(it->second.event);
  finish_through(s, t);
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

Mover::CopyFn engine_copy(Engine& engine, ipc::Channel* board) {
  // Concurrent plans by the loads they were made for: planning costs tens of
  // microseconds per message, and the loads repeat (the pairs of a benchmark, the
  // same exchange step after step). Bounded: cleared when it grows past kMaxPlans.
  constexpr size_t kMaxPlans = 256;
  struct State {
    std::map<std::vector<uint64_t>, Plan> plans;
    CopyQueues own;  // this rank's copies in flight, per GPU pair
    std::map<std::pair<int, int>, uint64_t> direct_limits;  // direct_limit per GPU pair
    std::map<std::tuple<int, int, uint64_t>, bool> splits;  // (src, dst, bytes): planned alone, direct + host
    std::map<std::tuple<int, int, uint64_t>, Plan> window_plans;  // windows' plans, per size
    std::map<std::pair<int, int>, bool> second_area;  // per GPU pair: the area the last copy staged in
  };
  auto st = std::make_shared<State>();
  // The callers (the endpoint's pull and push, copy_now) pass ranges they have checked against
  // their allocations (Mover::check_within, the mapping cache's bounds), so the copies below
  // that skip the engine's pointer queries write nothing they were not meant to.
  // Tests reach windows with small messages through GPUSTRIPE_TEST's window_min.
  const uint64_t window_min = parse_size(test_hook("window_min", kWindowMin), "GPUSTRIPE_TEST window_min");
  return [&engine, board, st, window_min](void* dst, int dd, const void* src, int sd, size_t n,
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
    auto lim = st->direct_limits.find({sd, dd});
    if (lim == st->direct_limits.end()) lim = st->direct_limits.emplace(std::make_pair(sd, dd), direct_limit(engine, sd, dd)).first;
    if (n <= lim->second) {
      engine.copy_direct_prechecked(dst, dd, src, sd, n, s);
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
      if (reverse) {
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
