// A communicator over GPUs of this process (like ncclCommInitAll): rank r is
// devices[r], and every call takes one buffer per rank, all valid here. Calls
// check their arguments, choose a schedule (select.hpp), build it from the per-rank
// pointers (schedules.hpp) and enqueue it (executor.hpp). Buffer layouts and in-place
// rules are the C API's (gpustripe/coll.h). One call at a time per communicator.
#pragma once
#include <functional>
#include <map>
#include <set>
#include <tuple>
#include <memory>
#include <string>
#include <vector>

#include "backend/backend.hpp"
#include "coll/select.hpp"
#include "coll/types.hpp"

namespace gpustripe {
struct Topology;
class Context;
class Planner;
}

namespace gpustripe::coll {

class Executor;
class Reducer;
class DeviceBarrier;
class Scratch;
class Program;

class Comm {
 public:
  // Throws ERR_INVALID_DEVICE for a device the backend lacks or listed twice,
  // ERR_INVALID_ARGUMENT for an empty list. Enables peer access where possible.
  // `planner` (optional) refines the host-path share of large exchanges (plan_concurrent).
  // `tuning`: the schedules' chunking and crossovers (ERR_CONFIG when out of range).
  static std::unique_ptr<Comm> create(Backend& backend, const Topology& topo, const std::vector<int>& devices,
                                      Planner* planner = nullptr, const Tuning& tuning = Tuning());
  // Over the context's backend and topology; the context outlives the communicator.
  static std::unique_ptr<Comm> create(Context& ctx, const std::vector<int>& devices,
                                      const Tuning& tuning = Tuning());
  ~Comm();
  Comm(const Comm&) = delete;
  Comm& operator=(const Comm&) = delete;

  int size() const { return static_cast<int>(devices_.size()); }
  int device(int rank) const;
  Backend& backend() { return backend_; }
  const TeamResources& resources() const { return res_; }
  const Tuning& tuning() const { return tuning_; }

  using Streams = std::vector<StreamHandle>;  // empty: blocking call
  void alltoall(const std::vector<const void*>& send, const std::vector<void*>& recv, size_t count, DataType dt,
                const Streams& streams = {});
  void allgather(const std::vector<const void*>& send, const std::vector<void*>& recv, size_t count, DataType dt,
                 const Streams& streams = {});
  void reduce_scatter(const std::vector<const void*>& send, const std::vector<void*>& recv, size_t count,
                      DataType dt, RedOp op, const Streams& streams = {});
  void allreduce(const std::vector<const void*>& send, const std::vector<void*>& recv, size_t count, DataType dt,
                 RedOp op, const Streams& streams = {});
  void bcast(const std::vector<void*>& bufs, size_t count, DataType dt, int root, const Streams& streams = {});
  void reduce(const std::vector<const void*>& send, const std::vector<void*>& recv, size_t count, DataType dt,
              RedOp op, int root, const Streams& streams = {});

  void synchronize();
  // For tests and tools: called with every program the communicator builds (replays of a
  // captured graph build none).
  void set_program_observer(std::function<void(const Program&)> observer) { observer_ = std::move(observer); }
  // Device-side timeline of the last call (per-rank graphs captured with GPUSTRIPE_COLL_TRACE);
  // call after it completed. "" when there is none.
  std::string trace_text() const;
  // "<op> <schedule description>" of the last call.
  const std::string& last_schedule() const { return last_; }

 private:
  Comm(Backend& backend, const Topology& topo, std::vector<int> devices, Planner* planner, const Tuning& tuning);
  // Host fraction of the planner's plans for one permutation round of peer blocks, or -1.
  double planned_host_share(size_t block);
  Choice pick(CollOp op, size_t bytes, DataType dt);
  // Builds (or replays) the program the key names and enqueues it; blocking without streams.
  void run(const std::string& key, const std::function<void(Program&)>& build, const Streams& streams);
  // The call's graph key; takes the buffer ids check_buffer gathered.
  std::string key_of(const std::vector<const void*>& a, const std::vector<void*>& b, size_t count, DataType dt,
                     int redop, int root);
  // Throws ERR_INVALID_POINTER / ERR_INVALID_SIZE when p is null, not memory of rank's
  // device, or [p, p+bytes) leaves its allocation (where the backend knows it); else adds its
  // allocation's id to buffer_ids_.
  void check_buffer(int rank, const void* p, size_t bytes, const char* what);
  void check_count(const std::vector<const void*>& send, const std::vector<void*>& recv, const char* call);
  void check_root(int root);

  Backend& backend_;
  Planner* planner_;
  std::vector<int> devices_;
  Tuning tuning_;
  std::map<size_t, double> planned_share_;  // by peer block size
  std::string buffer_ids_;  // allocation ids of the buffers checked for the call being made
  std::map<std::string, std::pair<Choice, std::string>> choices_;  // by settings + call: choice, description
  TeamResources res_;
  std::unique_ptr<Reducer> reducer_;
  std::unique_ptr<DeviceBarrier> barrier_;
  std::unique_ptr<Scratch> scratch_;
  std::unique_ptr<Executor> exec_;
  std::string last_;
  std::function<void(const Program&)> observer_;
  std::string fingerprint_;  // GPUSTRIPE_COLL_ALGO and GPUSTRIPE_COLL_TRACE of the call being made (set by pick)
  bool flags_preferred_ = false;  // the call's waits between GPUs gain from flags (set by pick)
};

}  // namespace gpustripe::coll
