#include "mpi/coll_slice.hpp"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <thread>
#include <utility>

#include "common/config.hpp"
#include "common/error.hpp"
#include "common/log.hpp"
#include "ipc/wait.hpp"
#include "mpi/coll_watchdog.hpp"

namespace gpustripe::mpi {

using coll::Op;


// Segment layout: host counters, the exchange's messages, then the op words on their own
// pages (registered for the GPUs).
constexpr size_t kPage = 4096;
size_t counters_bytes() { return 2 * TeamFlags::kMaxRanks * sizeof(uint64_t); }
size_t info_offset() { return counters_bytes(); }
size_t ops_offset() {
  size_t end = info_offset() + 2 * TeamFlags::kMaxRanks * TeamFlags::kInfoBytes;
  return (end + kPage - 1) / kPage * kPage;
}

size_t TeamFlags::segment_bytes() { return ops_offset() + kWords * sizeof(uint32_t); }

TeamFlags::TeamFlags(ipc::ShmSegment seg) : seg_(std::move(seg)) {
  GS_REQUIRE(seg_.size() >= segment_bytes(), GPUSTRIPE_ERR_INTERNAL, "collective flags segment %s: %zu bytes of %zu",
             seg_.name().c_str(), seg_.size(), segment_bytes());
}

std::atomic<uint64_t>& TeamFlags::arrived(int r) const {
  return reinterpret_cast<std::atomic<uint64_t>*>(seg_.data())[r];
}

std::atomic<uint64_t>& TeamFlags::posted(int r) const {
  return reinterpret_cast<std::atomic<uint64_t>*>(seg_.data())[kMaxRanks + r];
}

void* TeamFlags::info(int parity, int r) const {
  return static_cast<char*>(seg_.data()) + info_offset() + (static_cast<size_t>(parity) * kMaxRanks + r) * kInfoBytes;
}

uint32_t* TeamFlags::op_words() const {
  return reinterpret_cast<uint32_t*>(static_cast<char*>(seg_.data()) + ops_offset());
}

std::atomic<uint32_t>& TeamFlags::op(size_t i) const {
  return reinterpret_cast<std::atomic<uint32_t>*>(op_words())[i];
}

SliceRunner::SliceRunner(Backend& backend, coll::Reducer& reducer, int rank, int nranks, TeamFlags& flags,
                         std::function<void()> check_peers, std::function<void()> check_alive)
    : backend_(backend), reducer_(reducer), rank_(rank), nranks_(nranks), flags_(flags),
      check_peers_(std::move(check_peers)), check_alive_(std::move(check_alive)), lanes_(backend),
      watch_enqueue_(format("collective: rank %d enqueueing its part", rank)),
      watch_gpu_(format("collective: rank %d's GPU work waiting for the other ranks' steps", rank)),
      release_ordered_fn_([this] { release_ordered(); }) {
  GS_REQUIRE(nranks <= TeamFlags::kMaxRanks, GPUSTRIPE_ERR_NOT_SUPPORTED,
             "collective over %d ranks of a node: at most %d", nranks, TeamFlags::kMaxRanks);
  // A step waiting for another rank's step waits on its GPU stream for a flag in shared host
  // memory that the other rank's stream writes: everything is enqueued at once, no host in between.
  dev_flags_ = backend_.register_host(flags_.op_words(), flags_.op_words_bytes());
  if (static_cast<unsigned>(nranks) < std::thread::hardware_concurrency()) spin_ = std::chrono::microseconds(250);
}

SliceRunner::~SliceRunner() {
  try {
    settle();  // no stream of this process may still wait on the segment's words
  } catch (const Error& e) {
    GS_LOG_WARN(Subsys::Mpi, "closing the collectives of rank %d: %s", rank_, e.what());
  }
  for (auto& kv : ordered_events_)
    for (EventHandle e : {kv.second.in, kv.second.fork, kv.second.done, kv.second.join, kv.second.last})
      if (e) {
        try {
          backend_.destroy_event(e);
        } catch (...) {
        }
      }
  if (dev_flags_) {
    try {
      backend_.unregister_host(flags_.op_words());
    } catch (...) {
    }
  }
}

// Keyed apart from other lanes of the device by a negative index, as the coll executor does.
Lane& SliceRunner::lane(int device, int role) { return lanes_.get(device, device, -1 - role); }


namespace {
double us_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
}
}  // namespace

uint64_t SliceRunner::arrive() {
  const uint64_t n = ++barriers_;
  flags_.arrived(rank_).store(n, std::memory_order_release);
  return n;
}

bool SliceRunner::arrived(uint64_t n) const {
  for (int r = 0; r < nranks_; ++r)
    if (flags_.arrived(r).load(std::memory_order_acquire) < n) return false;
  return true;
}

void SliceRunner::barrier(const char* what) {
  const auto t0 = std::chrono::steady_clock::now();
  struct Add {
    double& to;
    std::chrono::steady_clock::time_point t0;
    ~Add() { to += us_since(t0); }
  } add{barrier_us_, t0};
  const uint64_t n = arrive();
  // The others there first, or while this host polls on (ready_soon): no waiter, no yield.
  if (ready_soon([&] { return arrived(n); })) return;
  ipc::Waiter w(format("%s: rank %d waiting for the other ranks of the collective", what, rank_), check_peers_);
  while (!arrived(n)) w.pause();
}

uint64_t SliceRunner::post(const void* mine, size_t bytes) {
  GS_REQUIRE(bytes <= TeamFlags::kMessageBytes, GPUSTRIPE_ERR_INTERNAL, "collective exchange of %zu bytes", bytes);
  // Two slots per rank: a rank posting call k+2 reuses call k's slot, and it got past call
  // k+1's exchange only after every rank posted k+1, i.e. had finished reading call k's.
  const uint64_t n = ++exchanges_;
  char* slot = static_cast<char*>(flags_.info(static_cast<int>(n & 1), rank_));
  const uint64_t len = bytes;
  std::memcpy(slot, &len, sizeof len);
  std::memcpy(slot + sizeof len, mine, bytes);
  flags_.posted(rank_).store(n, std::memory_order_release);
  return n;
}

bool SliceRunner::collect(uint64_t n, size_t bytes, void* all) const {
  for (int r = 0; r < nranks_; ++r)
    if (flags_.posted(r).load(std::memory_order_acquire) < n) return false;
  for (int r = 0; r < nranks_; ++r) {
    const char* slot = static_cast<const char*>(flags_.info(static_cast<int>(n & 1), r));
    uint64_t len = 0;
    std::memcpy(&len, slot, sizeof len);
    std::memcpy(static_cast<char*>(all) + r * bytes, slot + sizeof len, std::min<uint64_t>(len, bytes));
  }
  return true;
}

void SliceRunner::exchange(const void* mine, size_t bytes, void* all) {
  const uint64_t n = post(mine, bytes);
  if (ready_soon([&] { return collect(n, bytes, all); })) return;
  ipc::Waiter w(format("collective entry: rank %d waiting for the other ranks to call it", rank_), check_peers_);
  while (!collect(n, bytes, all)) w.pause();
}

const coll::CrossSlots& SliceRunner::checked_slots(const coll::Program& prog, const coll::CrossSlots* given,
                                                   coll::CrossSlots& computed) {
  GS_REQUIRE(prog.ops().size() <= TeamFlags::kMaxOps, GPUSTRIPE_ERR_NOT_SUPPORTED,
             "a collective schedule of %zu ops: the cross-process flags hold %zu", prog.ops().size(),
             TeamFlags::kMaxOps);
  GS_REQUIRE(prog.nranks() == nranks_, GPUSTRIPE_ERR_INTERNAL, "program for %d ranks on a team of %d", prog.nranks(),
             nranks_);
  ++runs_;
  launched_at_ = {};
  if (!given) computed = coll::cross_slots(prog);
  const coll::CrossSlots& slots = given ? *given : computed;
  GS_REQUIRE(slots.size() <= TeamFlags::kMaxOps, GPUSTRIPE_ERR_NOT_SUPPORTED,
             "a collective schedule with %zu dependencies between ranks: the cross-process flags hold %zu",
             slots.size(), TeamFlags::kMaxOps);
  return slots;
}

void SliceRunner::run(const coll::Program& prog, int device, const coll::CrossSlots* given) {
  const auto& ops = prog.ops();
  coll::CrossSlots computed;
  const coll::CrossSlots& slots = checked_slots(prog, given, computed);
  enqueued_behind_ = false;  // a host-ordered run starts once the one before it has ended
  // Segments between Barrier ops: everything before a barrier, on every rank, is complete
  // after it (every rank's done word has reached the segment's part), and so is the program
  // at its end. A program that ends with a Barrier op (the kernel schedules, which write into
  // the peers' buffers) is complete after it: the end would be a second wait that orders
  // nothing.
  size_t begin = 0;
  while (begin <= ops.size()) {
    size_t end = begin;
    while (end < ops.size() && ops[end].kind != Op::Barrier) ++end;
    if (end == begin && begin > 0) break;  // nothing after the last Barrier op
    // Ends once every rank's part of the segment is done (the done words): the barrier.
    run_watched(cross_waits(prog, slots, begin, end), [&](std::vector<Lane*>& used, uint32_t part) {
      return enqueue_streams(prog, slots, begin, end, device, lanes_, nullptr, false, dev_flags_, 1, used, nullptr,
                             part);
    });
    begin = end + 1;
  }
}

void SliceRunner::run_watched(const std::vector<uint32_t>& waits,
                              const std::function<bool(std::vector<Lane*>&, uint32_t)>& enqueue) {
  const std::function<void()> release = [this, &waits] {
    for (uint32_t w : waits) flags_.op(w).store(1, std::memory_order_release);
  };
  // A part whose streams wait for no other rank (the kernel schedules' parts, between the hosts'
  // barriers) cannot leave a driver call blocked behind a dead peer, and has no flag to release:
  // the drain's own waiter checks the peers and bounds the time. Only parts with such waits
  // arm the watchdog (a lock, an allocation and a list entry per part).
  std::optional<WaitWatch> watch;
  if (!waits.empty()) watch.emplace(watch_gpu_, check_alive_, release);
  auto rethrow = [&] {
    if (watch) watch->rethrow();
  };
  std::vector<Lane*> used;
  uint32_t part = 0;
  try {
    const bool announced = enqueue(used, next_part());
    part = announce_done(used, announced);
    enqueued_at_ = std::chrono::steady_clock::now();
  } catch (...) {
    // What was enqueued may wait on the peers: let it run out before the error leaves.
    release();
    sync_streams(used);
    throw;
  }
  wait_done(part, used, release, rethrow);
  rethrow();  // released by the watch: the streams ran past waits nobody satisfied
  reset_edges(waits);
}

uint32_t SliceRunner::next_part() const {
  return dev_flags_ ? static_cast<uint32_t>(parts_ + 1) : 0;
}

uint32_t SliceRunner::announce_done(const std::vector<Lane*>& used, bool announced) {
  const uint32_t n = static_cast<uint32_t>(++parts_);
  const size_t word = TeamFlags::kDoneWord + static_cast<size_t>(rank_);
  if (announced) return n;  // the part's last kernel writes the word
  if (used.empty() || !dev_flags_) {
    // Nothing of this part on a stream here, or streams that cannot write the segment: the
    // host writes once they are done.
    for (Lane* l : used) backend_.synchronize_stream(l->stream());
    flags_.op(word).store(n, std::memory_order_release);
    return n;
  }
  // One write after every stream of the part: the others join the first (an event each; the
  // kernel schedules' parts are one stream, and then this is the write alone).
  Lane& last = *used.front();
  for (size_t i = 1; i < used.size(); ++i) last.wait(used[i]->mark());
  backend_.stream_write_flag(last.stream(), dev_flags_ + word, n);
  return n;
}

bool SliceRunner::all_done(uint32_t n) const {
  for (int r = 0; r < nranks_; ++r)
    if (static_cast<int32_t>(flags_.op(TeamFlags::kDoneWord + r).load(std::memory_order_acquire) - n) < 0)
      return false;
  return true;
}

void SliceRunner::wait_done(uint32_t n, const std::vector<Lane*>& used, const std::function<void()>& release,
                            const std::function<void()>& fired) {
  const auto t0 = std::chrono::steady_clock::now();
  try {
    // Every part done already, or while this host polls on: no waiter, no yield, as in barrier().
    if (!ready_soon([&] { return all_done(n); })) {
      ipc::Waiter w(format("collective: rank %d waiting for the GPUs of the ranks to finish their parts", rank_), [&] {
        if (fired) fired();
        if (check_peers_) check_peers_();
      });
      while (!all_done(n)) w.pause();
    }
    drain_us_ += us_since(t0);
  } catch (...) {
    release();
    sync_streams(used);
    throw;
  }
}

void SliceRunner::reset_edges(const std::vector<uint32_t>& waits) {
  for (uint32_t w : waits) flags_.op(w).store(0, std::memory_order_release);
}

// A run between start() and its end: what this rank enqueued, the edge flags its streams wait
// on, the done words' number its streams announce at their end.
struct SliceRunner::Inflight {
  std::vector<Lane*> used;
  std::vector<uint32_t> waits;
  bool enqueued_all = false;
  uint32_t part = 0;  // the done words' number of this part, once enqueued_all
  // host_waits: what advance() enqueues from, one queue per program lane in program order (a
  // lane's ops rely on that order), each head going once its inputs are there.
  bool host_waits = false;
  std::unique_ptr<coll::Program> prog;  // a copy: the caller's may go before the run ends
  coll::CrossSlots slots;
  std::vector<Lane*> stream_of;
  std::vector<uint8_t> needs_mark, enqueued;
  std::vector<LaneMark> marks;
  std::map<int, size_t> last_on_lane;
  std::map<int, std::vector<size_t>> queues;
  std::map<int, size_t> head;
  size_t left = 0;
  size_t batch_end = 0;  // ops before it belong to a kernel-copy batch already launched
};

bool SliceRunner::advance() {
  Inflight& f = *inflight_;
  const auto& ops = f.prog->ops();
  auto ready = [&](size_t i) {
    for (int d : ops[i].deps) {
      if (ops[d].rank == rank_) {
        if (!f.enqueued[d]) return false;
      } else if (flags_.op(f.slots.at({d, rank_})).load(std::memory_order_acquire) == 0) {
        return false;
      }
    }
    return true;
  };
  for (auto& [ln, q] : f.queues) {
    size_t& h = f.head[ln];
    for (; h < q.size() && ready(q[h]); ++h) {
      const size_t i = q[h];
      Lane& l = *f.stream_of[i];
      if (std::find(f.used.begin(), f.used.end(), &l) == f.used.end()) f.used.push_back(&l);
      // A kernel-copy batch shares its dependencies: its ops are ready together, in a row.
      const bool batched = i < f.batch_end;
      if (ops[i].kind == Op::Copy && ops[i].by_kernel && !batched)
        f.batch_end = i + coll::kernel_copy_batch(ops, i).size();
      issue(ops, i, l, l.device(), f.marks, f.last_on_lane, batched);
      if (f.needs_mark[i]) f.marks[i] = l.mark(false);
      for (auto it = f.slots.lower_bound({static_cast<int>(i), -1});
           it != f.slots.end() && it->first.first == static_cast<int>(i); ++it)
        backend_.stream_write_flag(l.stream(), dev_flags_ + it->second, 1);
      f.enqueued[i] = 1;
      --f.left;
    }
  }
  return f.left == 0;
}

void SliceRunner::sync_streams(const std::vector<Lane*>& used) {
  for (Lane* l : used) {
    try {
      backend_.synchronize_stream(l->stream());
    } catch (...) {
    }
  }
}

bool SliceRunner::start(const coll::Program& prog, int device, const coll::CrossSlots* given, bool host_waits) {
  GS_REQUIRE(!inflight_, GPUSTRIPE_ERR_INTERNAL, "a collective started before the previous one ended");
  const auto& ops = prog.ops();
  for (const Op& op : ops)
    if (op.kind == Op::Barrier) return false;
  coll::CrossSlots computed;
  const coll::CrossSlots& slots = checked_slots(prog, given, computed);
  std::unique_ptr<Inflight> f = spare_ ? std::move(spare_) : std::make_unique<Inflight>();
  f->waits = cross_waits(prog, slots, 0, ops.size());
  if (host_waits) {
    // Nothing of this rank waits for the other ranks on its streams: no watch either.
    f->host_waits = true;
    f->prog = std::make_unique<coll::Program>(prog);
    f->slots = slots;
    plan_streams(ops, 0, ops.size(), device, lanes_, f->stream_of, f->needs_mark);
    f->enqueued.assign(ops.size(), 0);
    f->marks.resize(ops.size());
    for (size_t i = 0; i < ops.size(); ++i)
      if (ops[i].rank == rank_) f->queues[ops[i].lane].push_back(i);
    for (auto& q : f->queues) f->left += q.second.size();
    inflight_ = std::move(f);
    try {
      poll();
    } catch (...) {
      abandon();
      throw;
    }
    return true;
  }
  const std::function<void()> release = [this, waits = f->waits] {
    for (uint32_t w : waits) flags_.op(w).store(1, std::memory_order_release);
  };
  {
    // Only the enqueueing is watched: a driver call may block behind a flag a dead rank never
    // sets. Later the host polls (poll()), and whoever waits for the call checks the peers.
    // Without such waits nothing can block (run_watched).
    std::optional<WaitWatch> watch;
    if (!f->waits.empty()) watch.emplace(watch_enqueue_, check_alive_, release);
    try {
      const bool announced = enqueue_streams(prog, slots, 0, ops.size(), device, lanes_, nullptr, false, dev_flags_, 1,
                                             f->used, nullptr, next_part());
      f->part = announce_done(f->used, announced);
      enqueued_at_ = std::chrono::steady_clock::now();
      if (watch) watch->rethrow();
    } catch (...) {
      release();
      sync_streams(f->used);
      throw;
    }
  }
  f->enqueued_all = true;
  inflight_ = std::move(f);
  return true;
}

bool SliceRunner::poll() {
  GS_REQUIRE(inflight_ != nullptr, GPUSTRIPE_ERR_INTERNAL, "no collective started");
  Inflight& f = *inflight_;
  if (!f.enqueued_all) {
    if (!advance()) return false;
    f.part = announce_done(f.used, false);
    enqueued_at_ = std::chrono::steady_clock::now();
    f.enqueued_all = true;
  }
  if (!all_done(f.part)) return false;
  reset_edges(f.waits);
  // Emptied, its allocation kept for the next start.
  f = Inflight{};
  spare_ = std::move(inflight_);
  return true;
}

void SliceRunner::abandon() {
  if (!inflight_) return;
  if (!inflight_->host_waits)
    for (uint32_t w : inflight_->waits) flags_.op(w).store(1, std::memory_order_release);
  sync_streams(inflight_->used);
  inflight_.reset();
}

void SliceRunner::issue(const std::vector<Op>& ops, size_t i, Lane& l, int device, const std::vector<LaneMark>& marks,
                        std::map<int, size_t>& last_on_lane, bool batched, uint32_t done_value) {
  const Op& op = ops[i];
  for (int d : op.deps)
    if (ops[d].rank == rank_ && marks[d].event && marks[d].stream != l.stream()) l.wait(marks[d]);
  // A program lane's ops run in order even when they land on streams of different GPUs.
  auto prev = last_on_lane.find(op.lane);
  if (prev != last_on_lane.end() && marks[prev->second].event && marks[prev->second].stream != l.stream())
    l.wait(marks[prev->second]);
  last_on_lane[op.lane] = i;
  if (op.kind == Op::Copy && op.by_kernel) {
    // The copy kernel of the native exchanges (loads and stores over NVLink through the
    // mappings): no copy-engine latency per block at small sizes. The batch that op i opens
    // goes in one launch (its other ops come here with `batched`: nothing to launch).
    if (batched) return;
    coll::CopyArgs a;
    a.segs = coll::copy_segments(coll::kernel_copy_batch(ops, i));
    a.barrier = fused_;
    if (done_value) {
      a.done_word = dev_flags_ + TeamFlags::kDoneWord + rank_;
      a.done_value = done_value;
    }
    reducer_.copy_async(a, device, l.stream());
  } else if (op.kind == Op::Copy) {
    // This rank's GPU drives every copy of its part, from and into the other ranks' buffers
    // as mapped into its own context (CollTeam::map): for CUDA a copy within that context,
    // which it runs over NVLink as NCCL's and UCX's IPC copies are (Backend::ipc_named_device;
    // the team's shared host staging stays host memory).
    backend_.copy_async_prechecked(op.dst, backend_.ipc_named_device(op.dst_dev, device), op.src,
                                   backend_.ipc_named_device(op.src_dev, device), op.bytes, l.stream());
  } else {
    // Schedule builders make copies, reductions and barriers only (other kinds are the
    // coll executor's own).
    GS_REQUIRE(op.kind == Op::Reduce, GPUSTRIPE_ERR_INTERNAL, "collective step %zu of kind %d across processes", i,
               static_cast<int>(op.kind));
    coll::ReduceArgs a = coll::reduce_args(op);
    a.barrier = fused_;
    if (done_value) {
      a.done_word = dev_flags_ + TeamFlags::kDoneWord + rank_;
      a.done_value = done_value;
    }
    reducer_.reduce_async(a, device, l.stream());
  }
}

// Stream flags: every op of this rank in the segment is enqueued at once. A dependency on
// another rank's op is a wait of the dependent's stream for its edge's flag, which the
// owner's stream sets right after the op (cuStreamWaitValue32 / cuStreamWriteValue32 on
// the shared segment): no host takes part until the segment's end.
std::vector<uint32_t> SliceRunner::cross_waits(const coll::Program& prog, const coll::CrossSlots& slots, size_t begin,
                                               size_t end) const {
  const auto& ops = prog.ops();
  std::vector<uint32_t> waits;
  for (size_t i = begin; i < end; ++i) {
    if (ops[i].rank != rank_) continue;
    for (int d : ops[i].deps) {
      if (ops[d].rank == rank_) continue;
      const uint32_t slot = static_cast<uint32_t>(slots.at({d, rank_}));
      if (std::find(waits.begin(), waits.end(), slot) == waits.end()) waits.push_back(slot);
    }
  }
  return waits;
}

bool SliceRunner::enqueue_streams(const coll::Program& prog, const coll::CrossSlots& slots, size_t begin, size_t end,
                                  int device, LaneSet& set, EventHandle fork, bool capturing, uint32_t* words,
                                  uint32_t value, std::vector<Lane*>& used, Lane* single, uint32_t part) {
  const auto& ops = prog.ops();
  std::vector<Lane*> stream_of;
  std::vector<uint8_t> needs_mark;
  plan_streams(ops, begin, end, device, set, stream_of, needs_mark, single);
  const size_t announcer = part && !fork && !capturing ? announcing_op(ops, slots, begin, end, stream_of) : end;
  std::vector<LaneMark> marks(ops.size());
  std::map<int, size_t> last_on_lane;
  std::set<std::pair<Lane*, int>> waited;  // (stream, slot): one wait is enough
  size_t batch_end = 0;  // ops before it belong to a kernel-copy batch already launched
  for (size_t i = begin; i < end; ++i) {
    const Op& op = ops[i];
    if (op.rank != rank_) continue;
    if (launched_at_ == std::chrono::steady_clock::time_point{}) launched_at_ = std::chrono::steady_clock::now();
    Lane& l = *stream_of[i];
    if (std::find(used.begin(), used.end(), &l) == used.end()) {
      used.push_back(&l);
      if (fork) backend_.wait_event(l.stream(), fork);
    }
    for (int d : op.deps) {
      if (ops[d].rank == rank_) continue;
      const int slot = slots.at({d, rank_});
      if (!waited.insert({&l, slot}).second) continue;
      backend_.stream_wait_flag(l.stream(), words + slot, value);
    }
    const bool batched = i < batch_end;
    if (op.kind == Op::Copy && op.by_kernel && !batched)
      batch_end = std::min(end, i + coll::kernel_copy_batch(ops, i).size());
    issue(ops, i, l, l.device(), marks, last_on_lane, batched, i == announcer ? part : 0);
    if (needs_mark[i]) marks[i] = l.mark(capturing);
    for (auto it = slots.lower_bound({static_cast<int>(i), -1});
         it != slots.end() && it->first.first == static_cast<int>(i); ++it)
      backend_.stream_write_flag(l.stream(), words + it->second, value);
  }
  return announcer != end;
}

size_t SliceRunner::announcing_op(const std::vector<Op>& ops, const coll::CrossSlots& slots, size_t begin, size_t end,
                                  const std::vector<Lane*>& stream_of) const {
  // The kernel schedules' parts: this rank's ops on one stream, the last one kernel (a
  // reduction, or the launch of a batch of kernel copies, as enqueue_streams batches them)
  // after which no edge flag is written. Its end is the part's end.
  size_t last = end, batch = end, batch_end = begin;
  for (size_t i = begin; i < end; ++i) {
    if (ops[i].rank != rank_) continue;
    if (last != end && stream_of[i] != stream_of[last]) return end;
    last = i;
    if (ops[i].kind == Op::Copy && ops[i].by_kernel && i >= batch_end) {
      batch = i;
      batch_end = std::min(end, i + coll::kernel_copy_batch(ops, i).size());
    }
  }
  if (last == end) return end;
  const bool copies = ops[last].kind == Op::Copy && ops[last].by_kernel && last < batch_end;
  if (ops[last].kind != Op::Reduce && !copies) return end;
  const size_t launch = copies ? batch : last;
  auto after = slots.lower_bound({static_cast<int>(launch), -1});
  if (after != slots.end() && after->first.first <= static_cast<int>(last)) return end;
  if (!copies) return reducer_.can_signal(coll::reduce_args(ops[last])) ? last : end;
  coll::CopyArgs a;
  a.segs = coll::copy_segments(coll::kernel_copy_batch(ops, batch));
  return reducer_.can_signal_copy(a) ? batch : end;
}

void SliceRunner::plan_streams(const std::vector<Op>& ops, size_t begin, size_t end, int device, LaneSet& set,
                               std::vector<Lane*>& stream_of, std::vector<uint8_t>& needs_mark, Lane* single) {
  // Each op's stream first: an op needs a mark (an event record: a driver call, which a
  // rank's host pays per op while its GPUs wait for the rest of its part) only where a
  // later op of this rank on another stream waits for it, as a dependency or as the next
  // op of its program lane.
  stream_of.assign(ops.size(), nullptr);
  needs_mark.assign(ops.size(), 0);
  std::map<int, size_t> prev_on_lane;
  for (size_t i = begin; i < end; ++i) {
    const Op& op = ops[i];
    if (op.rank != rank_) continue;
    stream_of[i] = single ? single : &set.get(device, device, -1 - op.lane);
    for (int d : op.deps)
      if (ops[d].rank == rank_ && stream_of[d] != stream_of[i]) needs_mark[d] = 1;
    auto prev = prev_on_lane.find(op.lane);
    if (prev != prev_on_lane.end() && stream_of[prev->second] != stream_of[i]) needs_mark[prev->second] = 1;
    prev_on_lane[op.lane] = i;
  }
}

}  // namespace gpustripe::mpi
