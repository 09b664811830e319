// A device window's synchronization (win.hpp): fence, passive target (lock, lock_all,
// flush) and generalized active target (post/start/complete/wait), on the window's
// shared segment. Every wait is a Waiter: bounded by GPUSTRIPE_TIMEOUT and ended at
// once with ERR_PEER_FAILED when a member of the window died.
#include <algorithm>

#include "common/error.hpp"
#include "ipc/wait.hpp"
#include "mpi/win.hpp"
#include "mpi/win_shared.hpp"

namespace gpustripe::mpi {

void DeviceWindow::require_epoch(int target, const char* call) const {
  if (fence_epoch_ || lock_all_ || locked_.count(target) || access_.count(target)) return;
  throw WinError(MPI_ERR_RMA_SYNC, format("%s to rank %d outside an access epoch of it (no fence, lock or start "
                                          "open)", call, target));
}

void DeviceWindow::idle() {
  check_members();
  // Messages of this rank's other requests move on meanwhile: a peer may wait in a receive
  // for this rank's send before it comes to the window's synchronization.
  rt_.endpoint().progress();
}

void DeviceWindow::barrier(const char* what) {
  const uint64_t seq = ++barrier_seq_;
  shm().slot(rank_).barrier.store(seq, std::memory_order_release);
  ipc::Waiter w(format("%s: rank %d waiting for the other ranks of the window", what, rank_), [this] { idle(); });
  for (int r = 0; r < n_; ++r)
    while (shm().slot(r).barrier.load(std::memory_order_acquire) < seq) w.pause();
}

void DeviceWindow::fence(int assert_) {
  if (!locked_.empty() || lock_all_ || !access_.empty() || !exposure_.empty())
    throw WinError(MPI_ERR_RMA_SYNC, "MPI_Win_fence inside a lock or post/start epoch");
  complete_ops(-1);
  // Also with MPI_MODE_NOPRECEDE: no member may write into a target that has not reached its
  // fence yet (the target may still use its memory).
  barrier("MPI_Win_fence");
  fence_epoch_ = !(assert_ & MPI_MODE_NOSUCCEED);
}

void DeviceWindow::lock(int type, int target, int assert_) {
  require_target(target, "MPI_Win_lock");
  if (target == MPI_PROC_NULL) return;
  if (type != MPI_LOCK_SHARED && type != MPI_LOCK_EXCLUSIVE)
    throw WinError(MPI_ERR_LOCKTYPE, format("MPI_Win_lock: lock type %d", type));
  if (locked_.count(target) || lock_all_)
    throw WinError(MPI_ERR_RMA_SYNC, format("MPI_Win_lock: rank %d is locked by this rank already", target));
  fence_epoch_ = false;  // a passive-target epoch ends the fence's
  const bool nocheck = assert_ & MPI_MODE_NOCHECK;
  if (!nocheck) {
    std::atomic<uint64_t>& word = shm().slot(target).lock;
    ipc::Waiter w(format("MPI_Win_lock(%s) of rank %d by rank %d", type == MPI_LOCK_SHARED ? "shared" : "exclusive",
                         target, rank_),
                  [this] { idle(); });
    for (;;) {
      uint64_t v = word.load(std::memory_order_acquire);
      if (type == MPI_LOCK_EXCLUSIVE) {
        if (v == 0 && word.compare_exchange_weak(v, WinShared::kExclusive | uint64_t(rank_ + 1),
                                                 std::memory_order_acq_rel))
          break;
      } else if (!(v & WinShared::kExclusive) && word.compare_exchange_weak(v, v + 1, std::memory_order_acq_rel)) {
        break;
      }
      w.pause();
    }
  }
  locked_[target] = type | (nocheck ? kNoCheck : 0);
}

void DeviceWindow::release_lock(int target, int how) {
  if (how & kNoCheck) return;
  std::atomic<uint64_t>& word = shm().slot(target).lock;
  if ((how & ~kNoCheck) == MPI_LOCK_EXCLUSIVE) word.store(0, std::memory_order_release);
  else word.fetch_sub(1, std::memory_order_acq_rel);
}

void DeviceWindow::unlock(int target) {
  require_target(target, "MPI_Win_unlock");
  if (target == MPI_PROC_NULL) return;
  auto it = locked_.find(target);
  if (it == locked_.end())
    throw WinError(MPI_ERR_RMA_SYNC, format("MPI_Win_unlock: rank %d is not locked by this rank", target));
  complete_ops(target);
  release_lock(target, it->second);
  locked_.erase(it);
}

void DeviceWindow::lock_all(int assert_) {
  if (lock_all_ || !locked_.empty())
    throw WinError(MPI_ERR_RMA_SYNC, "MPI_Win_lock_all while this rank holds a lock of the window");
  for (int t = 0; t < n_; ++t) {
    try {
      lock(MPI_LOCK_SHARED, t, assert_);
    } catch (...) {
      for (auto& kv : locked_) release_lock(kv.first, kv.second);
      locked_.clear();
      throw;
    }
  }
  lock_all_ = true;
}

void DeviceWindow::unlock_all() {
  if (!lock_all_) throw WinError(MPI_ERR_RMA_SYNC, "MPI_Win_unlock_all without MPI_Win_lock_all");
  complete_ops(-1);
  for (auto& kv : locked_) release_lock(kv.first, kv.second);
  locked_.clear();
  lock_all_ = false;
}

void DeviceWindow::flush(int target) {
  if (target != -1) {
    require_target(target, "MPI_Win_flush");
    if (target == MPI_PROC_NULL) return;
  }
  if (!lock_all_ && (target == -1 ? locked_.empty() : !locked_.count(target)))
    throw WinError(MPI_ERR_RMA_SYNC, "MPI_Win_flush outside a passive-target epoch (MPI_Win_lock / lock_all)");
  complete_ops(target);
}

std::vector<int> DeviceWindow::group_ranks(MPI_Group g) const {
  int n = 0;
  check_mpi(PMPI_Group_size(g, &n), "MPI_Group_size");
  MPI_Group wg;
  check_mpi(PMPI_Win_get_group(win_, &wg), "MPI_Win_get_group");
  std::vector<int> in(n), out(n);
  for (int i = 0; i < n; ++i) in[i] = i;
  int rc = PMPI_Group_translate_ranks(g, n, in.data(), wg, out.data());
  PMPI_Group_free(&wg);
  check_mpi(rc, "MPI_Group_translate_ranks");
  for (int r : out)
    if (r == MPI_UNDEFINED) throw WinError(MPI_ERR_GROUP, "a group with a rank outside the window");
  return out;
}

void DeviceWindow::post(MPI_Group group, int assert_) {
  if (!exposure_.empty()) throw WinError(MPI_ERR_RMA_SYNC, "MPI_Win_post while an exposure epoch is open");
  fence_epoch_ = false;
  std::vector<int> origins = group_ranks(group);
  for (int o : origins) {
    exposure_.insert(o);
    shm().posted(n_, rank_, o).fetch_add(1, std::memory_order_acq_rel);
  }
  if (origins.empty()) exposure_.insert(-1);  // an empty exposure epoch is still open until wait
}

void DeviceWindow::start(MPI_Group group, int assert_) {
  if (!access_.empty()) throw WinError(MPI_ERR_RMA_SYNC, "MPI_Win_start while an access epoch is open");
  fence_epoch_ = false;
  std::vector<int> targets = group_ranks(group);
  ipc::Waiter w(format("MPI_Win_start: rank %d waiting for its targets' MPI_Win_post", rank_),
                [this] { idle(); });
  for (int t : targets) {
    // Each post of t to this rank opens one access epoch here.
    while (shm().posted(n_, t, rank_).load(std::memory_order_acquire) <= started_[t]) w.pause();
    ++started_[t];
    access_.insert(t);
  }
  if (targets.empty()) access_.insert(-1);
}

void DeviceWindow::complete() {
  if (access_.empty()) throw WinError(MPI_ERR_RMA_SYNC, "MPI_Win_complete without MPI_Win_start");
  complete_ops(-1);
  for (int t : access_)
    if (t >= 0) shm().completed(n_, t, rank_).fetch_add(1, std::memory_order_acq_rel);
  access_.clear();
}

bool DeviceWindow::test() {
  if (exposure_.empty()) throw WinError(MPI_ERR_RMA_SYNC, "MPI_Win_wait / MPI_Win_test without MPI_Win_post");
  check_members();
  for (int o : exposure_)
    if (o >= 0 && shm().completed(n_, rank_, o).load(std::memory_order_acquire) <= waited_[o]) return false;
  for (int o : exposure_)
    if (o >= 0) ++waited_[o];
  exposure_.clear();
  return true;
}

void DeviceWindow::wait() {
  if (exposure_.empty()) throw WinError(MPI_ERR_RMA_SYNC, "MPI_Win_wait without MPI_Win_post");
  ipc::Waiter w(format("MPI_Win_wait: rank %d waiting for its origins' MPI_Win_complete", rank_),
                [this] { idle(); });
  while (!test()) w.pause();
}

void DeviceWindow::acc_lock(int target) {
  std::atomic<uint32_t>& word = shm().slot(target).acc_lock;
  ipc::Waiter w(format("accumulate into rank %d by rank %d", target, rank_), [this] { idle(); });
  for (;;) {
    uint32_t v = 0;
    if (word.compare_exchange_weak(v, static_cast<uint32_t>(rank_ + 1), std::memory_order_acq_rel)) return;
    w.pause();
  }
}

void DeviceWindow::acc_unlock(int target) { shm().slot(target).acc_lock.store(0, std::memory_order_release); }

}  // namespace gpustripe::mpi
