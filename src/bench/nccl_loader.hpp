// NCCL, loaded at run time (dlopen), so gpustripe neither needs NCCL to build nor to run:
// the benchmark's NCCL method is absent, and says why, when the library is not there.
// Only the few calls the send/recv benchmark uses, with the prototypes of nccl.h.
#pragma once
#include <cstddef>
#include <string>

namespace gpustripe {

struct NcclComm;  // ncclComm_t points to one
struct NcclUniqueId {  // ncclUniqueId: passed by value, as nccl.h does
  char internal[128];
};

class NcclLibrary {
 public:
  // Loads GPUSTRIPE_NCCL_LIBRARY (default libnccl.so.2). Never throws: check available().
  static NcclLibrary& get();
  bool available() const { return handle_ != nullptr; }
  const std::string& why_not() const { return why_not_; }  // when not available
  std::string version() const;

  // Each throws ERR_NOT_SUPPORTED / ERR_INTERNAL naming the NCCL error.
  void comm_init_all(NcclComm** comms, int ndev, const int* devlist) const;
  // Across processes (bench/mpi/native/nccl_bench.cpp): rank 0 makes the id, MPI spreads it.
  NcclUniqueId unique_id() const;
  void comm_init_rank(NcclComm** comm, int nranks, const NcclUniqueId& id, int rank) const;
  void comm_destroy(NcclComm* comm) const;
  void group_start() const;
  void group_end() const;
  void send(const void* buf, size_t bytes, int peer, NcclComm* comm, void* stream) const;
  void recv(void* buf, size_t bytes, int peer, NcclComm* comm, void* stream) const;

 private:
  NcclLibrary();
  void check(int result, const char* call) const;

  void* handle_ = nullptr;
  std::string why_not_;
  int (*init_all_)(NcclComm**, int, const int*) = nullptr;
  int (*get_unique_id_)(NcclUniqueId*) = nullptr;
  int (*init_rank_)(NcclComm**, int, NcclUniqueId, int) = nullptr;
  int (*destroy_)(NcclComm*) = nullptr;
  int (*group_start_)() = nullptr;
  int (*group_end_)() = nullptr;
  int (*send_)(const void*, size_t, int, int, NcclComm*, void*) = nullptr;
  int (*recv_)(void*, size_t, int, int, NcclComm*, void*) = nullptr;
  const char* (*error_string_)(int) = nullptr;
  int (*get_version_)(int*) = nullptr;
};

}  // namespace gpustripe
