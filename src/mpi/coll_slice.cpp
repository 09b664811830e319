#include "mpi/coll_slice.hpp"

#include <algorithm>
#include <map>
#include <set>
#include <utility>

#include "common/config.hpp"
#include "common/error.hpp"
#include "common/log.hpp"
#include "ipc/wait.hpp"

namespace gpustripe::mpi {

using coll::Op;

namespace {
const ChoiceSetting kCopyStreams{
    "GPUSTRIPE_MPI_COLL_COPY_STREAMS", "mapping",
    "MPI collectives across processes: a copy to or from another rank's buffer runs on a stream of the GPU that "
    "buffer lives on (mapping: the IPC mapping's own context; 4x H200, 4 ranks, 256M: alltoall 299 GB/s busbw vs 32 "
    "with own) or of this rank's GPU (own)",
    {"own", "mapping"}};
}  // namespace

bool mapping_streams() { return kCopyStreams.get() == "mapping"; }

int copy_stream_device(const coll::Op& op, int device) {
  if (op.src_dev != device && op.src_dev != kHostDevice) return op.src_dev;
  if (op.dst_dev != device && op.dst_dev != kHostDevice) return op.dst_dev;
  return device;
}

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
  std::vector<uint8_t> remote(ops.size(), 0), marked(ops.size(), 0), enqueued(ops.size(), 0);
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
  // An op can go once the other ranks' ops it needs have completed and this rank's
  // have been enqueued (their marks exist; same-lane ones are earlier in the queue).
  auto ready = [&](size_t i) {
    for (int d : ops[i].deps) {
      if (ops[d].rank == rank_) {
        if (!enqueued[d]) return false;
      } else if (flags_.op(d).load(std::memory_order_acquire) < run_id) {
        return false;
      }
    }
    return true;
  };
  const bool on_mapping = mapping_streams();
  std::map<int, size_t> last_on_lane;  // this rank's latest op per program lane
  auto enqueue = [&](size_t i) {
    const Op& op = ops[i];
    // A copy to or from another rank's buffer may run on a stream of that buffer's GPU:
    // the IPC mapping lives in that GPU's context here (see copy_stream_device).
    const int sd = op.kind == Op::Copy && on_mapping ? copy_stream_device(op, device) : device;
    Lane& l = lane(sd, op.lane);
    if (std::find(used.begin(), used.end(), &l) == used.end()) used.push_back(&l);
    for (int d : op.deps)
      if (ops[d].rank == rank_ && marks[d].event && marks[d].stream != l.stream()) l.wait(marks[d]);
    // A program lane's ops run in order even when they land on streams of different GPUs.
    auto prev = last_on_lane.find(op.lane);
    if (prev != last_on_lane.end() && marks[prev->second].event && marks[prev->second].stream != l.stream())
      l.wait(marks[prev->second]);
    last_on_lane[op.lane] = i;
    if (op.kind == Op::Copy) {
      backend_.copy_async(op.dst, op.dst_dev, op.src, op.src_dev, op.bytes, l.stream());
    } else {
      // Schedule builders make copies, reductions and barriers only (other kinds are the
      // coll executor's own).
      GS_REQUIRE(op.kind == Op::Reduce, GPUSTRIPE_ERR_INTERNAL, "collective step %zu of kind %d across processes", i,
                 static_cast<int>(op.kind));
      reducer_.reduce_async(coll::reduce_args(op), sd, l.stream());
    }
    if (marked[i] || on_mapping) marks[i] = l.mark();
    if (remote[i]) {
      EventHandle e = event(sd, next_event++);
      backend_.record_event(e, l.stream());
      pending.emplace_back(i, e);
    }
    enqueued[i] = 1;
  };

  // Segments between Barrier ops. Inside one, this rank's ops wait in one queue per lane
  // (program order: a lane's ops rely on running in that order) and each queue's head goes
  // as soon as it is ready, so a step waiting for another rank holds back its own lane
  // only: later chunks' copies on other lanes are already queued on the GPU.
  size_t begin = 0;
  while (begin <= ops.size()) {
    size_t end = begin;
    while (end < ops.size() && ops[end].kind != Op::Barrier) ++end;
    std::map<int, std::vector<size_t>> queues;
    for (size_t i = begin; i < end; ++i)
      if (ops[i].rank == rank_) queues[ops[i].lane].push_back(i);
    std::map<int, size_t> head;
    size_t left = 0;
    for (auto& q : queues) left += q.second.size();
    ipc::Waiter w(format("collective: rank %d waiting for the other ranks' steps", rank_), check_peers_);
    while (left > 0) {
      bool progressed = false;
      for (auto& [ln, q] : queues) {
        size_t& h = head[ln];
        while (h < q.size() && ready(q[h])) {
          enqueue(q[h++]);
          --left;
          progressed = true;
        }
      }
      publish_done();  // what the other ranks may be waiting for
      if (progressed) w.progressed();
      else w.pause();
    }
    // The end of a segment: everything before it, on every rank, is complete after this.
    for (Lane* l : used) backend_.synchronize_stream(l->stream());
    for (auto& p : pending) flags_.op(p.first).store(run_id, std::memory_order_release);
    pending.clear();
    used.clear();
    next_event = 0;
    std::fill(marks.begin(), marks.end(), LaneMark{});
    barrier(end < ops.size() ? "collective schedule barrier" : "collective end");
    begin = end + 1;
  }
}

}  // namespace gpustripe::mpi
