// A collective's schedule as data: copies and reductions placed on (rank, lane)
// streams with explicit dependencies. Schedule builders (schedules.hpp) make
// programs from per-rank pointers and devices only, so the same builders serve the
// single-process communicator and, later, one over buffers mapped through IPC.
// The executor (executor.hpp) enqueues a program on a backend; tests inspect
// programs directly (no op reads what another writes without a path of deps).
#pragma once
#include <cstddef>
#include <string>
#include <vector>

#include "coll/types.hpp"

namespace gpustripe::coll {

// Streams of one rank, by role. Copies on one lane run in order; lanes run side by side.
enum Lane : int {
  kLaneOut = 0,     // peer copies this rank pushes (permutation rounds, reduce-scatter phase)
  kLaneLocal = 1,   // device-local copies and reductions
  kLaneOut2 = 2,    // the allgather phase of a pipelined allreduce, beside kLaneOut
  kLaneD2H = 3,     // host path: device to pinned host
  kLaneH2D = 4,     // host path: pinned host to device (on the receiving rank)
  kLanePeer0 = 5,   // all-at-once schedules: one lane per peer offset, kLanePeer0 + (offset - 1)
  // Per-rank graphs (executor): the flags of dependencies between ranks, off the copy lanes,
  // so a copy lane never runs a wait or signal kernel between copies.
  kLaneWait = 40,
  kLaneSignal = 41,
  // The round-major allreduce's gather: its host path, on lanes of its own.
  kLaneAgD2H = 31,
  kLaneAgH2D = 32,
};

struct Op {
  // Signal/Wait: made by the executor only, when it splits a program into per-rank graphs
  // under the GPUs' barrier: a dependency between ranks becomes a flag that the waiting
  // rank's lane spins on (slot `count` of rank `dst_dev`'s flags) and the other rank sets.
  enum Kind { Copy, Reduce, Barrier, Signal, Wait } kind = Copy;
  int rank = 0;  // whose stream runs it
  int lane = 0;
  // Copy: bytes from src (on src_dev, kHostDevice for pinned host) to dst (on dst_dev).
  void* dst = nullptr;
  const void* src = nullptr;
  int dst_dev = 0, src_dev = 0;
  size_t bytes = 0;
  // Reduce: dst = op(srcs...) over count elements, run on rank's device.
  std::vector<const void*> srcs;
  size_t count = 0;
  DataType dtype = GPUSTRIPE_FLOAT32;
  RedOp redop = GPUSTRIPE_SUM;
  std::vector<void*> more_dsts;  // Reduce: further destinations of the same result (two-shot allreduce)
  int blocks_per_sm = 0;         // Reduce: the kernel's most blocks per SM (0: the reducer's setting)
  // Copy: by a copy kernel on the rank's SMs (loads and stores over NVLink) instead of a copy
  // engine. Per-rank graphs run a rank's kernel copies as one kernel with the GPUs' barrier
  // inside (executor.cpp): no copy-node or barrier-kernel latency per call.
  bool by_kernel = false;
  std::vector<int> deps;  // indices of earlier ops this one waits for
};

class Program {
 public:
  explicit Program(int nranks) : nranks_(nranks) {}
  int nranks() const { return nranks_; }
  // Each returns the new op's index; deps must be earlier indices. Empty copies and
  // reductions are not added: they return -1, which deps lists may hold and ignore.
  int copy(int rank, int lane, void* dst, int dst_dev, const void* src, int src_dev, size_t bytes,
           std::vector<int> deps = {});
  int reduce(int rank, int lane, void* dst, std::vector<const void*> srcs, size_t count, DataType dt, RedOp op,
             std::vector<int> deps = {}, std::vector<void*> more_dsts = {}, int blocks_per_sm = 0);
  // A copy by the rank's SMs (Op::by_kernel); the rank's device must map dst's and src's memory.
  int kernel_copy(int rank, int lane, void* dst, int dst_dev, const void* src, int src_dev, size_t bytes,
                  std::vector<int> deps = {});
  // Everything after the barrier waits for everything before it, on every rank.
  void barrier();
  // Executor only (see Op): rank sets flag `slot` of rank `to`; rank waits for its flag `slot`.
  int signal(int rank, int lane, int to, int slot, std::vector<int> deps);
  int wait(int rank, int lane, int slot);
  const std::vector<Op>& ops() const { return ops_; }
  size_t size() const { return ops_.size(); }
  // Totals for logs and tests.
  size_t copy_bytes() const;
  size_t reductions() const;
  std::string summary() const;

 private:
  int add(Op op);
  int nranks_;
  std::vector<Op> ops_;
};

}  // namespace gpustripe::coll
