// NCCL, loaded at run time (dlopen), so gpustripe neither needs NCCL to build nor to run:
// the benchmark's NCCL method is absent, and says why, when the library is not there.
// Only the few calls the benchmarks use, with the prototypes of nccl.h; calls newer than
// NCCL 2.7 are optional (has_*() says whether this library has them).
#pragma once
#include <cstddef>
#include <string>

namespace gpustripe {

struct NcclComm;    // ncclComm_t points to one
struct NcclWindow;  // ncclWindow_t points to one
struct NcclUniqueId {  // ncclUniqueId: passed by value, as nccl.h does
  char internal[128];
};

// ncclDataType_t and ncclRedOp_t values of nccl.h.
enum NcclType : int { kNcclInt8 = 0, kNcclUint8 = 1, kNcclInt32 = 2, kNcclUint32 = 3, kNcclInt64 = 4, kNcclUint64 = 5,
                      kNcclFloat16 = 6, kNcclFloat32 = 7, kNcclFloat64 = 8, kNcclBfloat16 = 9 };
enum NcclRedOp : int { kNcclSum = 0, kNcclProd = 1, kNcclMax = 2, kNcclMin = 3 };
constexpr int kNcclWinCollSymmetric = 0x01;  // NCCL_WIN_COLL_SYMMETRIC

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

  // Collectives (counts in elements of `type`, as nccl.h has them).
  void all_gather(const void* send, void* recv, size_t sendcount, int type, NcclComm* comm, void* stream) const;
  void reduce_scatter(const void* send, void* recv, size_t recvcount, int type, int op, NcclComm* comm,
                      void* stream) const;
  void all_reduce(const void* send, void* recv, size_t count, int type, int op, NcclComm* comm, void* stream) const;
  void broadcast(const void* send, void* recv, size_t count, int type, int root, NcclComm* comm, void* stream) const;
  void send_typed(const void* buf, size_t count, int type, int peer, NcclComm* comm, void* stream) const;
  void recv_typed(void* buf, size_t count, int type, int peer, NcclComm* comm, void* stream) const;
  // ncclAlltoAll (NCCL 2.28): count elements per peer.
  bool has_alltoall() const { return alltoall_ != nullptr; }
  void alltoall(const void* send, void* recv, size_t count, int type, NcclComm* comm, void* stream) const;
  // Symmetric memory (NCCL 2.27): ncclMemAlloc on the current device, window registration.
  bool has_windows() const { return mem_alloc_ && mem_free_ && win_register_ && win_deregister_; }
  void* mem_alloc(size_t bytes) const;
  void mem_free(void* p) const;
  NcclWindow* window_register(NcclComm* comm, void* buf, size_t bytes, int flags) const;
  void window_deregister(NcclComm* comm, NcclWindow* win) const;

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
  int (*all_gather_)(const void*, void*, size_t, int, NcclComm*, void*) = nullptr;
  int (*reduce_scatter_)(const void*, void*, size_t, int, int, NcclComm*, void*) = nullptr;
  int (*all_reduce_)(const void*, void*, size_t, int, int, NcclComm*, void*) = nullptr;
  int (*broadcast_)(const void*, void*, size_t, int, int, NcclComm*, void*) = nullptr;
  int (*alltoall_)(const void*, void*, size_t, int, NcclComm*, void*) = nullptr;
  int (*mem_alloc_)(void**, size_t) = nullptr;
  int (*mem_free_)(void*) = nullptr;
  int (*win_register_)(NcclComm*, void*, size_t, NcclWindow**, int) = nullptr;
  int (*win_deregister_)(NcclComm*, NcclWindow*) = nullptr;
  const char* (*error_string_)(int) = nullptr;
  int (*get_version_)(int*) = nullptr;
};

}  // namespace gpustripe
