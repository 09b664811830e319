// How the processes of one node find each other before they share anything: the few
// collectives over bytes that setting up a channel or a collective team needs. The MPI
// interposer drives it with PMPI calls; the PyTorch backend with the process group's
// key-value store. Every member calls each operation at the same point, in the same order.
//
// No operation waits without bound: each ends in GPUSTRIPE_ERR_TIMEOUT after
// GPUSTRIPE_TIMEOUT, and, where the implementation can poll (the MPI one), early in
// GPUSTRIPE_ERR_PEER_FAILED when the peer check set by watch_peers throws (a member died:
// a blocking collective would wait for it forever).
#pragma once
#include <cstddef>
#include <functional>

namespace gpustripe::ipc {

class Bootstrap {
 public:
  virtual ~Bootstrap() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // Every member's `bytes` (the same count on all) into all[r * bytes], in rank order. It is
  // a barrier too: no member returns before every member has contributed.
  virtual void allgather(const void* mine, size_t bytes, void* all) = 0;
  virtual void barrier();
  // root's `bytes` into buf on every member (by default through allgather).
  virtual void bcast(void* buf, size_t bytes, int root);
  // vals[i] = the largest of every member's vals[i] (in place; the same n on all): how the
  // members agree on an outcome, e.g. the worst status of a setup step and who had it.
  virtual void allreduce_max(int* vals, size_t n);
  // `check` throws when a member is gone; the waits of later operations call it while they
  // poll (never concurrently with them). The collective team sets it once it knows its peers.
  void watch_peers(std::function<void()> check) { check_peers_ = std::move(check); }

 protected:
  std::function<void()> check_peers_;
};

// A Bootstrap from functions (bindings and tests): allgather as above, bounding its own
// wait by GPUSTRIPE_TIMEOUT (ipc::timeout_seconds(); it cannot be polled, so it does not
// call the peer check); the other operations take the defaults.
class FunctionBootstrap : public Bootstrap {
 public:
  using Allgather = std::function<void(const void* mine, size_t bytes, void* all)>;
  FunctionBootstrap(int rank, int size, Allgather allgather);
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  void allgather(const void* mine, size_t bytes, void* all) override { allgather_(mine, bytes, all); }

 private:
  int rank_, size_;
  Allgather allgather_;
};

}  // namespace gpustripe::ipc
