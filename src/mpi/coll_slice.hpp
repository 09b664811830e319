// One rank's part of a collective Program, run in this process.
//
// Every rank of a node communicator builds the same Program with the coll layer's
// schedule builders, over its own view of the other ranks' buffers (IPC mappings),
// and enqueues only the ops placed on its rank, on its own GPU. Ordering inside the
// rank is the coll executor's (lanes are streams, a dependency on another lane is an
// event). A dependency on another rank's op crosses processes through shared memory:
// the owner's host sets the op's flag once the op's event has completed (it polls its
// pending ops while it works through its part), and the dependent's host waits for
// the flag before it enqueues the dependent op. A Barrier op, and the end of the
// program, is a barrier of the ranks' hosts after each has drained its streams, so a
// collective returns only when every rank's copies into this rank's buffers are done.
// Waits are bounded by GPUSTRIPE_TIMEOUT and fail early when a rank dies.
#pragma once
#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <vector>

#include "backend/backend.hpp"
#include "coll/program.hpp"
#include "coll/reduce.hpp"
#include "engine/lanes.hpp"
#include "ipc/shm_segment.hpp"

namespace gpustripe::mpi {

// The flags a team's ranks share (one POSIX shared-memory segment per team).
class TeamFlags {
 public:
  static constexpr size_t kMaxOps = size_t(1) << 16;
  static constexpr int kMaxRanks = 256;
  static size_t segment_bytes();
  explicit TeamFlags(ipc::ShmSegment seg);
  // The run number in which op i last completed (written by its rank only).
  std::atomic<uint64_t>& op(size_t i) const;
  // How many barriers rank r has reached.
  std::atomic<uint64_t>& arrived(int r) const;

 private:
  ipc::ShmSegment seg_;
};

// GPUSTRIPE_MPI_COLL_COPY_STREAMS=mapping: copies touching another rank's buffer run on a
// stream of that buffer's GPU (where its IPC mapping lives in this process), ordered with
// the rest of their program lane by events.
bool mapping_streams();
// The GPU whose stream runs `op` then: the source's when it is another GPU's, else the
// destination's, else this rank's `device`.
int copy_stream_device(const coll::Op& op, int device);

class SliceRunner {
 public:
  // check_peers throws when a rank of the team is gone (called while waiting).
  SliceRunner(Backend& backend, coll::Reducer& reducer, int rank, int nranks, TeamFlags& flags,
              std::function<void()> check_peers);
  ~SliceRunner();
  SliceRunner(const SliceRunner&) = delete;
  SliceRunner& operator=(const SliceRunner&) = delete;

  // Runs this rank's ops of `prog` (program rank == team rank) on streams of `device`
  // and returns once every rank has finished its part. Every rank runs the same program
  // at the same point.
  void run(const coll::Program& prog, int device);
  // A barrier of the team's hosts.
  void barrier(const char* what);

 private:
  Lane& lane(int device, int role);
  EventHandle event(int device, size_t i);

  Backend& backend_;
  coll::Reducer& reducer_;
  int rank_, nranks_;
  TeamFlags& flags_;
  std::function<void()> check_peers_;
  LaneSet lanes_;
  std::map<int, std::vector<EventHandle>> events_;  // by device
  uint64_t runs_ = 0;      // the value this run's flags carry
  uint64_t barriers_ = 0;  // barriers this rank has reached
};

}  // namespace gpustripe::mpi
