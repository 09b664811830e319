// How the processes of one node find each other before they share anything: the few
// collectives over bytes that setting up a channel or a collective team needs. The MPI
// interposer drives it with PMPI calls; the PyTorch backend with the process group's
// key-value store. Every member calls each operation at the same point, in the same order.
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
};

// A Bootstrap from functions (bindings and tests): allgather as above; barrier and bcast
// take the defaults.
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
