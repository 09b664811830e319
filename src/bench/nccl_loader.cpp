#include "bench/nccl_loader.hpp"

#include <dlfcn.h>

#include "common/config.hpp"
#include "common/error.hpp"
#include "common/log.hpp"

namespace gpustripe {
namespace {

const StringSetting kNcclLibrary{"GPUSTRIPE_NCCL_LIBRARY", "libnccl.so.2",
                                 "NCCL library the benchmarks compare against (a name dlopen finds, or a path)"};
template <class F>
void bind(void* handle, F& fn, const char* name, std::string& missing) {
  fn = reinterpret_cast<F>(dlsym(handle, name));
  if (!fn) missing += std::string(missing.empty() ? "" : ", ") + name;
}

}  // namespace

NcclLibrary& NcclLibrary::get() {
  static NcclLibrary lib;
  return lib;
}

NcclLibrary::NcclLibrary() {
  std::string path = kNcclLibrary.get();
  handle_ = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!handle_) {
    const char* err = dlerror();
    why_not_ = format("cannot load %s (%s): set GPUSTRIPE_NCCL_LIBRARY", path.c_str(), err ? err : "unknown error");
    return;
  }
  std::string missing;
  bind(handle_, init_all_, "ncclCommInitAll", missing);
  bind(handle_, get_unique_id_, "ncclGetUniqueId", missing);
  bind(handle_, init_rank_, "ncclCommInitRank", missing);
  bind(handle_, destroy_, "ncclCommDestroy", missing);
  bind(handle_, group_start_, "ncclGroupStart", missing);
  bind(handle_, group_end_, "ncclGroupEnd", missing);
  bind(handle_, send_, "ncclSend", missing);
  bind(handle_, recv_, "ncclRecv", missing);
  bind(handle_, error_string_, "ncclGetErrorString", missing);
  bind(handle_, get_version_, "ncclGetVersion", missing);
  bind(handle_, all_gather_, "ncclAllGather", missing);
  bind(handle_, reduce_scatter_, "ncclReduceScatter", missing);
  bind(handle_, all_reduce_, "ncclAllReduce", missing);
  bind(handle_, broadcast_, "ncclBroadcast", missing);
  std::string newer;  // optional: their absence only disables what needs them
  bind(handle_, alltoall_, "ncclAlltoAll", newer);
  bind(handle_, mem_alloc_, "ncclMemAlloc", newer);
  bind(handle_, mem_free_, "ncclMemFree", newer);
  bind(handle_, win_register_, "ncclCommWindowRegister", newer);
  bind(handle_, win_deregister_, "ncclCommWindowDeregister", newer);
  if (!newer.empty()) GS_LOG_DEBUG(Subsys::Bench, "NCCL at %s lacks %s (older than 2.28)", path.c_str(), newer.c_str());
  if (!missing.empty()) {
    why_not_ = format("%s lacks %s (NCCL older than 2.7?)", path.c_str(), missing.c_str());
    dlclose(handle_);
    handle_ = nullptr;
  }
  GS_LOG_DEBUG(Subsys::Bench, "NCCL: %s", handle_ ? version().c_str() : why_not_.c_str());
}

std::string NcclLibrary::version() const {
  int v = 0;
  if (!get_version_ || get_version_(&v) != 0) return "unknown";
  // NCCL_VERSION(X,Y,Z): X*10000 + Y*100 + Z since 2.9, X*1000 + Y*100 + Z before.
  return v >= 10000 ? format("%d.%d.%d", v / 10000, v / 100 % 100, v % 100) : format("%d.%d.%d", v / 1000, v / 100 % 10, v % 100);
}

void NcclLibrary::check(int result, const char* call) const {
  GS_REQUIRE(handle_, GPUSTRIPE_ERR_NOT_SUPPORTED, "%s: %s", call, why_not_.c_str());
  if (result != 0) GS_THROW(GPUSTRIPE_ERR_INTERNAL, "%s failed: NCCL error %d (%s)", call, result, error_string_(result));
}

void NcclLibrary::comm_init_all(NcclComm** comms, int ndev, const int* devlist) const {
  check(handle_ ? init_all_(comms, ndev, devlist) : 0, "ncclCommInitAll");
}
NcclUniqueId NcclLibrary::unique_id() const {
  NcclUniqueId id{};
  check(handle_ ? get_unique_id_(&id) : 0, "ncclGetUniqueId");
  return id;
}
void NcclLibrary::comm_init_rank(NcclComm** comm, int nranks, const NcclUniqueId& id, int rank) const {
  check(handle_ ? init_rank_(comm, nranks, id, rank) : 0, "ncclCommInitRank");
}
void NcclLibrary::comm_destroy(NcclComm* comm) const { check(handle_ ? destroy_(comm) : 0, "ncclCommDestroy"); }
void NcclLibrary::group_start() const { check(handle_ ? group_start_() : 0, "ncclGroupStart"); }
void NcclLibrary::group_end() const { check(handle_ ? group_end_() : 0, "ncclGroupEnd"); }
void NcclLibrary::send(const void* buf, size_t bytes, int peer, NcclComm* comm, void* stream) const {
  check(handle_ ? send_(buf, bytes, kNcclInt8, peer, comm, stream) : 0, "ncclSend");
}
void NcclLibrary::recv(void* buf, size_t bytes, int peer, NcclComm* comm, void* stream) const {
  check(handle_ ? recv_(buf, bytes, kNcclInt8, peer, comm, stream) : 0, "ncclRecv");
}
void NcclLibrary::send_typed(const void* buf, size_t count, int type, int peer, NcclComm* comm, void* stream) const {
  check(handle_ ? send_(buf, count, type, peer, comm, stream) : 0, "ncclSend");
}
void NcclLibrary::recv_typed(void* buf, size_t count, int type, int peer, NcclComm* comm, void* stream) const {
  check(handle_ ? recv_(buf, count, type, peer, comm, stream) : 0, "ncclRecv");
}
void NcclLibrary::all_gather(const void* send, void* recv, size_t sendcount, int type, NcclComm* comm,
                             void* stream) const {
  check(handle_ ? all_gather_(send, recv, sendcount, type, comm, stream) : 0, "ncclAllGather");
}
void NcclLibrary::reduce_scatter(const void* send, void* recv, size_t recvcount, int type, int op, NcclComm* comm,
                                 void* stream) const {
  check(handle_ ? reduce_scatter_(send, recv, recvcount, type, op, comm, stream) : 0, "ncclReduceScatter");
}
void NcclLibrary::all_reduce(const void* send, void* recv, size_t count, int type, int op, NcclComm* comm,
                             void* stream) const {
  check(handle_ ? all_reduce_(send, recv, count, type, op, comm, stream) : 0, "ncclAllReduce");
}
void NcclLibrary::broadcast(const void* send, void* recv, size_t count, int type, int root, NcclComm* comm,
                            void* stream) const {
  check(handle_ ? broadcast_(send, recv, count, type, root, comm, stream) : 0, "ncclBroadcast");
}
void NcclLibrary::alltoall(const void* send, void* recv, size_t count, int type, NcclComm* comm, void* stream) const {
  GS_REQUIRE(!handle_ || alltoall_, GPUSTRIPE_ERR_NOT_SUPPORTED, "this NCCL (%s) has no ncclAlltoAll (2.28+)",
             version().c_str());
  check(handle_ ? alltoall_(send, recv, count, type, comm, stream) : 0, "ncclAlltoAll");
}
void* NcclLibrary::mem_alloc(size_t bytes) const {
  GS_REQUIRE(!handle_ || has_windows(), GPUSTRIPE_ERR_NOT_SUPPORTED,
             "this NCCL (%s) has no ncclMemAlloc/ncclCommWindowRegister (2.27+)", version().c_str());
  void* p = nullptr;
  check(handle_ ? mem_alloc_(&p, bytes) : 0, "ncclMemAlloc");
  return p;
}
void NcclLibrary::mem_free(void* p) const { check(handle_ ? mem_free_(p) : 0, "ncclMemFree"); }
NcclWindow* NcclLibrary::window_register(NcclComm* comm, void* buf, size_t bytes, int flags) const {
  GS_REQUIRE(!handle_ || has_windows(), GPUSTRIPE_ERR_NOT_SUPPORTED,
             "this NCCL (%s) has no ncclCommWindowRegister (2.27+)", version().c_str());
  NcclWindow* w = nullptr;
  check(handle_ ? win_register_(comm, buf, bytes, &w, flags) : 0, "ncclCommWindowRegister");
  return w;
}
void NcclLibrary::window_deregister(NcclComm* comm, NcclWindow* win) const {
  check(handle_ ? win_deregister_(comm, win) : 0, "ncclCommWindowDeregister");
}

}  // namespace gpustripe
