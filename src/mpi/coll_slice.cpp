#include "mpi/coll_slice.hpp"

#include <algorithm>
#include <set>
#include <utility>

#include "common/error.hpp"
#include "common/log.hpp"
#include "ipc/wait.hpp"

namespace gpustripe::mpi {

using coll::Op;

size_t TeamFlags::segment_bytes() { return (kMaxRanks + kMaxOps) * sizeof(uint64_t); }

TeamFlags::TeamFlags(ipc::ShmSegment seg) : seg_(std::move(seg)) {
  GS_REQUIRE(seg_.size() >= segment_bytes(), GPUSTRIPE_ERR_INTERNAL, "collective flags segment %s: %zu bytes of %zu",
             seg_.name().c_str(), seg_.size(), segment_bytes());
}

std::atomic<uint64_t>& TeamFlags::arrived(int r) const {
  return reinterpret_cast<std::atomic<uint64_t>*>(seg_.data())[r];
}

std::atomic<uint64_t>& TeamFlags::op(size_t i) const {
  return reinterpret_cast<std::atomic<uint64_t>*>(seg_.data())[kMaxRanks + i];
}

SliceRunner::SliceRunner(Backend& backend, coll::Reducer& reducer, int rank, int nranks, TeamFlags& flags,
                         std::function<void()> check_peers)
    : backend_(backend), reducer_(reducer), rank_(rank), nranks_(nranks), flags_(flags),
      check_peers_(std::move(check_peers)), lanes_(backend) {
  GS_REQUIRE(nranks <= TeamFlags::kMaxRanks, GPUSTRIPE_ERR_NOT_SUPPORTED,
             "collectives over %d ranks of a node: at most %d", nranks, TeamFlags::kMaxRanks);
}

SliceRunner::~SliceRunner() {
  for (auto& kv : events_)
    for (EventHandle e : kv.second) {
      try {
        backend_.destroy_event(e);
      } catch (...) {
      }
    }
}

// Keyed apart from other lanes of the device by a negative index, as the coll executor does.
Lane& SliceRunner::lane(int device, int role) { return lanes_.get(device, device, -1 - role); }

EventHandle SliceRunner::event(int device, size_t i) {
  auto& ev = events_[device];
  while (ev.size() <= i) ev.push_back(backend_.create_event(device, false));
  return ev[i];
}

void SliceRunner::barrier(const char* what) {
  const uint64_t n = ++barriers_;
  flags_.arrived(rank_).store(n, std::memory_order_release);
  ipc::Waiter w(format("%s: rank %d waiting for the other ranks of the collective", what, rank_), check_peers_);
  for (int r = 0; r < nranks_; ++r)
    while (flags_.arrived(r).load(std::memory_order_acquire) < n) w.pause();
}

void SliceRunner::run(const coll::Program& prog, int device) {
  const auto& ops = prog.ops();
  GS_REQUIRE(ops.size() <= TeamFlags::kMaxOps, GPUSTRIPE_ERR_NOT_SUPPORTED,
             "a collective schedule of %zu ops: the cross-process flags hold %zu", ops.size(), TeamFlags::kMaxOps);
  GS_REQUIRE(prog.nranks() == nranks_, GPUSTRIPE_ERR_INTERNAL, "program for %d ranks on a team of %d", prog.nranks(),
             nranks_);
  const uint64_t run_id = ++runs_;

  // Which of this rank's ops another rank waits for (flag), or another lane here (mark).
  std::vector<uint8_t> remote(ops.size(), 0), marked(ops.size(), 0);
  for (const Op& op : ops)
    for (int d : op.deps) {
      if (ops[d].rank != rank_) continue;
      if (op.rank != rank_) remote[d] = 1;
      else if (op.lane != ops[d].lane) marked[d] = 1;
    }

  std::vector<LaneMark> marks(ops.size());
  std::vector<std::pair<size_t, EventHandle>> pending;  // this rank's ops others wait for, not yet flagged
  std::vector<Lane*> used;
  size_t next_event = 0;
  auto publish_done = [&] {
    auto done = std::remove_if(pending.begin(), pending.end(), [&](const std::pair<size_t, EventHandle>& p) {
      if (!backend_.query_event(p.second)) return false;
      flags_.op(p.first).store(run_id, std::memory_order_release);
      return true;
    });
    pending.erase(done, pending.end());
  };
  auto drain = [&](const char* what) {
    for (Lane* l : used) backend_.synchronize_stream(l->stream());
    for (auto& p : pending) flags_.op(p.first).store(run_id, std::memory_order_release);
    pending.clear();
    used.clear();
    next_event = 0;
    barrier(what);
  };

  for (size_t i = 0; i < ops.size(); ++i) {
    const Op& op = ops[i];
    if (op.kind == Op::Barrier) {
      // Everything before it, on every rank, is complete after this.
      drain("collective schedule barrier");
      std::fill(marks.begin(), marks.end(), LaneMark{});
      continue;
    }
    if (op.rank != rank_) continue;
    for (int d : op.deps) {
      if (ops[d].rank == rank_) continue;
      if (flags_.op(d).load(std::memory_order_acquire) >= run_id) continue;
      ipc::Waiter w(format("collective: rank %d waiting for rank %d's step %d", rank_, ops[d].rank, d), check_peers_);
      for (;;) {
        publish_done();  // what the other rank may itself be waiting for
        if (flags_.op(d).load(std::memory_order_acquire) >= run_id) break;
        w.pause();
      }
    }
    Lane& l = lane(device, op.lane);
    if (std::find(used.begin(), used.end(), &l) == used.end()) used.push_back(&l);
    for (int d : op.deps)
      if (ops[d].rank == rank_ && marks[d].event && marks[d].stream != l.stream()) l.wait(marks[d]);
    if (op.kind == Op::Copy) {
      backend_.copy_async(op.dst, op.dst_dev, op.src, op.src_dev, op.bytes, l.stream());
    } else {
      coll::ReduceArgs a;
      a.dst = op.dst;
      a.srcs = op.srcs;
      a.count = op.count;
      a.dtype = op.dtype;
      a.op = op.redop;
      reducer_.reduce_async(a, device, l.stream());
    }
    if (marked[i]) marks[i] = l.mark();
    if (remote[i]) {
      EventHandle e = event(device, next_event++);
      backend_.record_event(e, l.stream());
      pending.emplace_back(i, e);
    }
    if (!pending.empty()) publish_done();
  }
  drain("collective end");
}

}  // namespace gpustripe::mpi
