// NCCL for the halo application's `--way nccl`, loaded at run time (dlopen of the path
// given, e.g. the nvidia-nccl wheel that PyTorch installs), so the program builds and
// runs without NCCL. Only the calls the halo exchange uses, with nccl.h's prototypes.
#pragma once
#include <dlfcn.h>
#include <mpi.h>

#include <cstddef>
#include <cstdio>
#include <string>

namespace halo {

struct NcclId {
  char internal[128];
};

class Nccl {
 public:
  // Empty error() when every call was found.
  explicit Nccl(const std::string& path) {
    handle_ = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!handle_) {
      const char* e = dlerror();
      error_ = "cannot load " + path + ": " + (e ? e : "unknown error");
      return;
    }
    bind(get_id, "ncclGetUniqueId");
    bind(init_rank, "ncclCommInitRank");
    bind(destroy, "ncclCommDestroy");
    bind(group_start, "ncclGroupStart");
    bind(group_end, "ncclGroupEnd");
    bind(send, "ncclSend");
    bind(recv, "ncclRecv");
    bind(error_string, "ncclGetErrorString");
  }
  const std::string& error() const { return error_; }
  // Aborts the job on an NCCL error (a rank cannot go on alone).
  void ok(int rc, const char* call) const {
    if (rc == 0) return;
    std::fprintf(stderr, "halo: %s: %s\n", call, error_string(rc));
    MPI_Abort(MPI_COMM_WORLD, 4);
  }

  static constexpr int kFloat64 = 8;  // ncclFloat64
  int (*get_id)(NcclId*) = nullptr;
  int (*init_rank)(void** comm, int nranks, NcclId id, int rank) = nullptr;
  int (*destroy)(void* comm) = nullptr;
  int (*group_start)() = nullptr;
  int (*group_end)() = nullptr;
  int (*send)(const void*, size_t count, int type, int peer, void* comm, void* stream) = nullptr;
  int (*recv)(void*, size_t count, int type, int peer, void* comm, void* stream) = nullptr;
  const char* (*error_string)(int) = nullptr;

 private:
  template <class F>
  void bind(F& fn, const char* name) {
    fn = reinterpret_cast<F>(dlsym(handle_, name));
    if (!fn) error_ += std::string(error_.empty() ? "" : ", ") + "no " + name;
  }
  void* handle_ = nullptr;
  std::string error_;
};

}  // namespace halo
