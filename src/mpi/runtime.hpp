// The interposer's per-process state, made in MPI_Init and torn down in
// MPI_Finalize: the gpustripe Context (backend, planner, engine), the node-local
// channel and p2p endpoint shared with the other ranks of this node, where every
// world rank lives, and the communicators the interposer knows.
//
// Routing (why it is by peer and not by buffer): the receiver does not know whether
// the sender's buffer is device or host memory, and MPI matching needs one ordered
// queue per (sender, communicator). So every message of a known communicator to a
// rank of the same node goes through gpustripe p2p, host buffers included; messages
// to other nodes go through the MPI: host buffers untouched, device buffers staged
// through pinned host memory (or passed through when the MPI is CUDA-aware).
// Communicators the interposer did not see created (MPI_Cart_create, ...) are left
// to the MPI entirely, device buffers staged.
//
//   GPUSTRIPE_TEST=fake_nodes=N  test only: pretend the world is split into N nodes
//                                (contiguous blocks of ranks)
//   GPUSTRIPE_MPI_CUDA_AWARE   auto|yes|no: whether the MPI reads device memory itself
#pragma once
#include <mpi.h>

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <vector>

#include "common/host_ranges.hpp"
#include "core/context.hpp"
#include "ipc/channel.hpp"
#include "p2p/endpoint.hpp"

namespace gpustripe::mpi {

// Throws GPUSTRIPE_ERR_MPI naming `what` and the MPI's error string unless rc is MPI_SUCCESS.
void check_mpi(int rc, const char* what);

struct CommInfo {
  uint64_t ctx = 0;             // the p2p communicator id: equal on every member
  std::vector<int> world_of;    // comm rank -> world rank
  std::map<int, int> rank_of;   // world rank -> comm rank
  bool has_remote = false;      // a member sits on another node
};

class Runtime {
 public:
  // The running instance, or null outside MPI_Init..MPI_Finalize (or when disabled).
  static Runtime* get();
  // Called after PMPI_Init succeeded / before PMPI_Finalize.
  static void start();
  static void stop();

  Context& context() { return *ctx_; }
  p2p::Endpoint& endpoint() { return *ep_; }
  p2p::Mover& mover() { return ep_->mover(); }
  int world_rank() const { return world_rank_; }
  bool cuda_aware() const { return cuda_aware_; }

  // Where a buffer lives: a pointer query (a driver call on CUDA, on the latency path of every
  // message), counted for the tests that check a call makes no more of them than it needs. Not
  // asked of the brk heap and the calling thread's stack on real GPUs (common/host_ranges.hpp):
  // host memory for certain, where an emulated backend keeps its devices' memory in host memory.
  p2p::MemLoc locate(const void* p) {
    if (!emulated_ && in_heap_or_own_stack(p)) return p2p::MemLoc{};
    pointer_queries_.fetch_add(1, std::memory_order_relaxed);
    return ep_->mover().locate(p);
  }
  uint64_t pointer_queries() const { return pointer_queries_.load(std::memory_order_relaxed); }
  bool same_node(int world) const { return node_of_[world] == node_of_[world_rank_]; }
  int local_of(int world) const { return local_of_[world]; }
  int world_of_local(int local) const { return world_of_local_[local]; }

  // Known communicator, or null (then the MPI handles it).
  std::shared_ptr<const CommInfo> comm(MPI_Comm c);
  // After a communicator-making call on `parent` (collective over it): agree on an id
  // and remember `made` (may be MPI_COMM_NULL on ranks that are not in it).
  void register_comm(MPI_Comm parent, MPI_Comm made);
  void forget_comm(MPI_Comm c);

  // Pinned host buffers for the staged path, reused (pinning costs milliseconds).
  struct Pinned {
    char* p = nullptr;
    size_t bytes = 0;
  };
  Pinned staging_alloc(size_t bytes);
  void staging_free(Pinned b);

  // The collectives' state (interpose_coll.cpp), released before everything else here.
  std::shared_ptr<void> coll_state;

 private:
  Runtime();
  ~Runtime();
  void add_comm(MPI_Comm c, uint64_t ctx);

  std::unique_ptr<Context> ctx_;
  std::unique_ptr<ipc::Channel> ch_;
  std::unique_ptr<p2p::Endpoint> ep_;
  MPI_Comm node_comm_ = MPI_COMM_NULL;
  int world_rank_ = 0, world_size_ = 0;
  std::vector<int> node_of_, local_of_, world_of_local_;
  bool cuda_aware_ = false;
  bool emulated_ = true;  // the backend's devices live in host memory (no host_ranges shortcut)
  std::atomic<uint64_t> pointer_queries_{0};
  std::map<MPI_Comm, std::shared_ptr<const CommInfo>> comms_;
  uint64_t next_ctx_ = 16;
  std::multimap<size_t, void*> staging_free_;
};

}  // namespace gpustripe::mpi
