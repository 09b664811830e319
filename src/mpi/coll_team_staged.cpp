// CollTeam's staged calls (coll::Staged): a stream-ordered call stores what each peer needs into
// that peer's slot for it, which every rank mapped at the team's first such call, so no rank needs
// to learn another's buffers of the call and the hosts do not meet: the caller's thread enqueues
// the call at once, and the ranks' GPUs meet instead (the runner's barrier between the stores and
// the reads; no entry barrier: a call writes only its own buffers and the slots the run before it
// let go at its exit). The runner's exit barrier is what lets the next call store again: every
// rank has read its slots by then.
#include <chrono>

#include "common/error.hpp"
#include "common/log.hpp"
#include "mpi/coll_team.hpp"

namespace gpustripe::mpi {
namespace {

constexpr size_t kStagedProgramsKept = 256;
constexpr size_t kHeadAlign = 256;  // the slots start where the kernels' widest accesses may

// One rank's part of the staging's setup, exchanged once.
struct StageNote {
  int32_t ok = 0;
  int32_t device = -1;
  Backend::IpcMemHandle handle;
};

}  // namespace

bool CollTeam::stageable(const CollCall& call) const {
  // (A staged form comes with its shape, which keys its Program: coll_calls.cpp.)
  return call.staged && !call.shape.empty() && call.staged_bytes > 0 && call.staged_bytes <= stage_limit() &&
         (call.stream || call.ready) && !call.after;
}

size_t CollTeam::stage_limit() const {
  if (!runner_ || !runner_->stream_flags() || stage_state_.load(std::memory_order_acquire) == kStageOff) return 0;
  return coll::staged_unit(tuning_.staged_max, n_);
}

void CollTeam::setup_staging(const CollCall& call) {
  // Each rank makes its slot (on its first stageable call's GPU), then all agree: staging is on
  // only where every rank has one and every pair of their GPUs maps each other (the kernels read
  // the peers' slots).
  StageNote mine;
  std::string why;
  if (call.device < 0) {
    why = "its buffers are on no one GPU";
  } else if (!res_.all_peer) {
    why = "the node's GPUs do not all map each other's memory";
  } else {
    try {
      // The GPUs' barrier words first (zero before any barrier), then the slots.
      stage_head_ = (coll::mapped_barrier_bytes(n_) + kHeadAlign - 1) / kHeadAlign * kHeadAlign;
      stage_.bytes = stage_head_ + tuning_.staged_max;
      stage_.p = static_cast<char*>(backend_.alloc_device(call.device, stage_.bytes));
      stage_.dev = call.device;
      StreamHandle s = backend_.create_stream(call.device);
      backend_.memset_async(stage_.p, call.device, 0, stage_head_, s);
      backend_.synchronize_stream(s);
      backend_.destroy_stream(s);
      mine.handle = backend_.ipc_export(stage_.p);
      mine.device = call.device;
      mine.ok = 1;
    } catch (const Error& e) {
      why = e.what();
    }
  }
  std::vector<StageNote> all(static_cast<size_t>(n_));
  runner_->exchange(&mine, sizeof mine, all.data());
  bool ok = true;
  for (int i = 0; i < n_ && ok; ++i) {
    ok = all[i].ok != 0;
    for (int j = 0; j < n_ && ok; ++j)
      if (i != j && all[i].device != all[j].device) ok = peer_ok(all[i].device, all[j].device);
  }
  // Every rank maps the others' slots, then all agree again: a rank that could not map one
  // leaves staging off on every rank. The GPUs' barriers go on the areas' words where every rank
  // can run them there (else on the runner's stream flags, on every rank).
  struct Mapped {
    int32_t ok = 1;       // this rank mapped every other's area
    int32_t barrier = 0;  // and runs the GPUs' barriers on the areas' words
  } mapped;
  if (ok) {
    stage_dev_ = call.device;
    stage_slots_.assign(static_cast<size_t>(n_), nullptr);
    stage_devs_.assign(static_cast<size_t>(n_), -1);
    for (int r = 0; r < n_; ++r) {
      stage_devs_[r] = all[r].device;
      if (r == rank_) {
        stage_slots_[r] = stage_.p;
        continue;
      }
      try {
        stage_slots_[r] = static_cast<char*>(backend_.ipc_open(all[r].handle, -1, stage_dev_));
      } catch (const Error& e) {
        why = format("mapping rank %d's slot: %s", r, e.what());
        mapped.ok = 0;
        break;
      }
    }
    if (mapped.ok) {
      try {
        stage_barrier_ = coll::make_mapped_barrier(backend_, rank_, stage_dev_,
                                                   std::vector<void*>(stage_slots_.begin(), stage_slots_.end()));
      } catch (const Error& e) {
        GS_LOG_INFO(Subsys::Mpi, "rank %d: staged calls' GPU barriers on the stream flags (%s)", rank_, e.what());
      }
      mapped.barrier = stage_barrier_ ? 1 : 0;
    }
  } else if (why.empty()) {
    why = "another rank cannot take it";
  }
  std::vector<Mapped> all_mapped(static_cast<size_t>(n_));
  runner_->exchange(&mapped, sizeof mapped, all_mapped.data());
  bool barrier = true;
  for (const Mapped& m : all_mapped) {
    ok = ok && m.ok != 0;
    barrier = barrier && m.barrier != 0;
  }
  if (!barrier) stage_barrier_.reset();
  if (ok) {
    GS_LOG_DEBUG(Subsys::Mpi, "rank %d: calls up to %zu bytes staged through slots on GPU %d", rank_,
                 static_cast<size_t>(tuning_.staged_max), stage_dev_);
    stage_state_.store(kStageOn, std::memory_order_release);
    return;
  }
  GS_LOG_INFO(Subsys::Mpi, "rank %d: collectives not staged (%s): every call meets the other ranks", rank_,
              why.c_str());
  close_staging();
  stage_state_.store(kStageOff, std::memory_order_release);
}

void CollTeam::close_staging() {
  stage_barrier_.reset();
  for (int r = 0; r < static_cast<int>(stage_slots_.size()); ++r) {
    if (r == rank_ || !stage_slots_[r]) continue;
    try {
      backend_.ipc_close(stage_slots_[r]);
    } catch (const Error& e) {
      GS_LOG_WARN(Subsys::Mpi, "closing rank %d's staging slot: %s", r, e.what());
    }
  }
  stage_slots_.clear();
  staged_programs_.clear();
  if (stage_.p) {
    try {
      backend_.free_device(stage_.p);
    } catch (const Error& e) {
      GS_LOG_WARN(Subsys::Mpi, "freeing the staging slot: %s", e.what());
    }
  }
  stage_ = Owned{};
  stage_dev_ = -1;
}

bool CollTeam::run_staged(const CollCall& call) {
  using Clock = std::chrono::steady_clock;
  auto us = [](Clock::time_point a, Clock::time_point b) { return std::chrono::duration<double, std::micro>(b - a).count(); };
  if (!stageable(call)) return false;
  const Clock::time_point t0 = Clock::now();
  if (stage_state_.load(std::memory_order_acquire) == kStageUnset) setup_staging(call);
  if (stage_state_.load(std::memory_order_acquire) != kStageOn) return false;
  if (stage_barrier_) stage_barrier_->check();  // an earlier staged call's GPU gave up on a peer
  // This rank's buffers where its kernels read and write them; anything else (host memory,
  // another GPU, buffers overlapping in a way the call's own schedules refuse) goes through the
  // slot and a temporary buffer, so the call never declines where the others take it.
  const bool direct = call.eligible && call.device == stage_dev_;
  char* tmp = direct ? nullptr : temp(stage_dev_, call.staged_bytes);
  std::string key = call.shape;
  auto put = [&key](const auto& v) { key.append(reinterpret_cast<const char*>(&v), sizeof v); };
  put(call.send);
  put(call.recv);
  put(tmp);
  auto it = staged_programs_.find(key);
  const bool build = it == staged_programs_.end();
  if (build) {
    if (staged_programs_.size() >= kStagedProgramsKept) staged_programs_.clear();
    it = staged_programs_.emplace(key, Cached{coll::Program(n_), {}}).first;
    coll::Staged s;
    s.me = rank_;
    s.n = n_;
    s.dev = stage_dev_;
    for (char* a : stage_slots_) s.areas.push_back(a + stage_head_);
    s.area_dev = stage_devs_;
    s.unit = coll::staged_unit(tuning_.staged_max, n_);
    s.direct = direct;
    s.temp = tmp;
    s.twoshot_min = tuning_.staged_twoshot_min;
    s.send_dev = s.recv_dev = stage_dev_;
    if (!direct) {
      auto where = [this](const void* p) {
        const p2p::MemLoc l = ep_.mover().locate(p);
        return l.device ? l.dev : kHostDevice;
      };
      s.send_dev = where(call.send);
      s.recv_dev = where(call.recv);
    }
    try {
      call.staged(it->second.prog, s);
    } catch (...) {
      staged_programs_.erase(it);
      throw;
    }
    it->second.slots = coll::cross_slots(it->second.prog);
  }
  const Cached& c = it->second;
  const Clock::time_point t1 = Clock::now();
  // On the caller's stream itself only where it is surely a stream of the slots' GPU (its
  // buffers are there); else on the origin stream, which a caller that asked for its stream then
  // joins (a blocking call's results are there for its stream's later work either way).
  const bool on_stream = call.on_stream && !call.ready;
  runner_->run_ordered(c.prog, stage_dev_, call.stream, &c.slots, call.ready, on_stream && direct, /*entry=*/false,
                       stage_barrier_.get());
  if (on_stream && !direct) runner_->join_ordered(stage_dev_, call.stream);
  ++times_.calls;
  ++times_.ordered;
  ++times_.staged;
  if (build) ++times_.built;
  if (call.entered != Clock::time_point{}) times_.lookup += us(call.entered, t0);
  times_.map += us(t0, t1);
  times_.run += us(t1, Clock::now());
  return true;
}

}  // namespace gpustripe::mpi
