// Interposed one-sided calls (MPI RMA). Windows of device memory on one node are
// served by DeviceWindow (win.hpp); every other window, and every call on one, is
// the MPI's.
//
// Which windows are ours:
//   MPI_Win_create          every member on this node, and some member exposes device memory
//                           (the members agree at creation; device memory on a window that spans
//                           nodes or mixes host memory in is refused with MPI_ERR_WIN)
//   MPI_Win_allocate        with the info key gpustripe_device = a GPU index, or "true" (the GPU
//                           of the rank's local rank modulo the GPU count): the memory is
//                           allocated on that GPU; without it the MPI allocates host memory
//   MPI_Win_create_dynamic  with the same info key (= "true"): MPI_Win_attach takes device memory
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "common/error.hpp"
#include "common/log.hpp"
#include "mpi/interpose.hpp"
#include "mpi/win.hpp"

using namespace gpustripe;
using namespace gpustripe::mpi;

namespace {

constexpr const char* kInfoKey = "gpustripe_device";

int win_report(MPI_Win win, const char* call, const std::exception& e) {
  int code = MPI_ERR_OTHER;
  if (auto* we = dynamic_cast<const WinError*>(&e)) code = we->code();
  else if (auto* ge = dynamic_cast<const Error*>(&e))
    code = ge->status() == GPUSTRIPE_ERR_INVALID_ARGUMENT ? MPI_ERR_ARG : error_code_for(ge->status());
  std::fprintf(stderr, "gpustripe_mpi: rank %d: %s: %s\n", Runtime::get() ? Runtime::get()->world_rank() : -1, call,
               e.what());
  std::fflush(stderr);
  PMPI_Win_call_errhandler(win, code);
  return code;
}

// Runs `f` on the window behind `win` when it is ours, else `mpi`.
template <class F, class M>
int on_window(MPI_Win win, const char* call, F f, M mpi) {
  std::unique_lock<std::recursive_mutex> l(lock());
  DeviceWindow* w = Runtime::get() ? find_window(win) : nullptr;
  if (!w) {
    l.unlock();
    return mpi();
  }
  try {
    f(*w);
    return MPI_SUCCESS;
  } catch (const std::exception& e) {
    return win_report(win, call, e);
  }
}

// The info key's value: -2 absent or "false", -1 "true", else a GPU index.
int info_device(MPI_Info info) {
  if (info == MPI_INFO_NULL) return -2;
  char value[64] = {};
  int flag = 0;
  if (PMPI_Info_get(info, kInfoKey, sizeof value - 1, value, &flag) != MPI_SUCCESS || !flag) return -2;
  if (!std::strcmp(value, "true") || !std::strcmp(value, "yes")) return -1;
  if (!std::strcmp(value, "false") || !std::strcmp(value, "no")) return -2;
  char* end = nullptr;
  long d = std::strtol(value, &end, 10);
  if (end == value || *end) GS_THROW(GPUSTRIPE_ERR_INVALID_ARGUMENT, "info %s=%s: a GPU index, true or false", kInfoKey,
                                     value);
  return static_cast<int>(d);
}

// The node-local communicator's info, or null when its windows are the MPI's.
std::shared_ptr<const CommInfo> local_comm(Runtime* rt, MPI_Comm comm) {
  if (!rt) return nullptr;
  std::shared_ptr<const CommInfo> ci = rt->comm(comm);
  return ci && !ci->has_remote ? ci : nullptr;
}

// A window creation's failure, raised on `comm`: WinError's own MPI error class (the MPI's
// window underneath could not be made: MPI_ERR_WIN), else the interposer's mapping.
int create_report(MPI_Comm comm, const char* call, const std::exception& e) {
  auto* we = dynamic_cast<const WinError*>(&e);
  if (!we) return report(comm, call, e);
  std::fprintf(stderr, "gpustripe_mpi: rank %d: %s: %s\n", Runtime::get() ? Runtime::get()->world_rank() : -1, call,
               e.what());
  std::fflush(stderr);
  PMPI_Comm_call_errhandler(comm, we->code());
  return we->code();
}

int make_window(MPI_Comm comm, const CommInfo& ci, DeviceWindow::Flavor flavor, void* base, MPI_Aint size,
                int disp_unit, bool owned, MPI_Info info, MPI_Win* win) {
  auto w = std::make_unique<DeviceWindow>(*Runtime::get(), comm, ci, flavor, base, static_cast<uint64_t>(size),
                                          disp_unit, owned, info);
  *win = w->handle();
  add_window(std::move(w));
  return MPI_SUCCESS;
}

}  // namespace

extern "C" {

int MPI_Win_create(void* base, MPI_Aint size, int disp_unit, MPI_Info info, MPI_Comm comm, MPI_Win* win) {
  std::unique_lock<std::recursive_mutex> l(lock());
  Runtime* rt = Runtime::get();
  if (!rt || !rt->comm(comm)) {
    l.unlock();
    return PMPI_Win_create(base, size, disp_unit, info, comm, win);
  }
  try {
    // Every member says what it exposes: 0 nothing, 1 host memory, 2 device memory.
    int mine = 0;
    if (size > 0) mine = rt->locate(base).device ? 2 : 1;
    int any_device = 0, any_host = 0;
    int host = mine == 1, dev = mine == 2;
    check_mpi(PMPI_Allreduce(&dev, &any_device, 1, MPI_INT, MPI_MAX, comm), "MPI_Allreduce (window memory)");
    if (!any_device) {
      GS_LOG_DEBUG(Subsys::Mpi, "MPI_Win_create: no rank exposes device memory: the MPI's window");
      l.unlock();
      return PMPI_Win_create(base, size, disp_unit, info, comm, win);
    }
    check_mpi(PMPI_Allreduce(&host, &any_host, 1, MPI_INT, MPI_MAX, comm), "MPI_Allreduce (window memory)");
    std::shared_ptr<const CommInfo> ci = local_comm(rt, comm);
    if (!ci || any_host) {
      std::fprintf(stderr, "gpustripe_mpi: rank %d: MPI_Win_create: a window over device memory %s is not supported\n",
                   rt->world_rank(), ci ? "that also holds host memory" : "whose ranks span nodes");
      std::fflush(stderr);
      PMPI_Comm_call_errhandler(comm, MPI_ERR_WIN);
      return MPI_ERR_WIN;
    }
    return make_window(comm, *ci, DeviceWindow::Flavor::Create, base, size, disp_unit, false, info, win);
  } catch (const std::exception& e) {
    return create_report(comm, "MPI_Win_create", e);
  }
}

int MPI_Win_allocate(MPI_Aint size, int disp_unit, MPI_Info info, MPI_Comm comm, void* baseptr, MPI_Win* win) {
  std::unique_lock<std::recursive_mutex> l(lock());
  Runtime* rt = Runtime::get();
  try {
    const int want = rt ? info_device(info) : -2;
    std::shared_ptr<const CommInfo> ci = local_comm(rt, comm);
    if (want == -2 || !ci) {
      if (want != -2)
        GS_THROW(GPUSTRIPE_ERR_NOT_SUPPORTED, "info %s: windows of device memory %s", kInfoKey,
                 rt->comm(comm) ? "across nodes" : "on a communicator the interposer did not see made");
      l.unlock();
      return PMPI_Win_allocate(size, disp_unit, info, comm, baseptr, win);
    }
    Backend& be = rt->context().backend();
    const int ndev = be.device_count();
    const int dev = want >= 0 ? want : (ndev ? rt->local_of(rt->world_rank()) % ndev : 0);
    GS_REQUIRE(dev >= 0 && dev < ndev, GPUSTRIPE_ERR_INVALID_DEVICE, "info %s: GPU %d of %d", kInfoKey, dev, ndev);
    GS_REQUIRE(size >= 0, GPUSTRIPE_ERR_INVALID_SIZE, "MPI_Win_allocate of %lld bytes", static_cast<long long>(size));
    void* p = size > 0 ? be.alloc_device(dev, static_cast<size_t>(size)) : nullptr;
    try {
      make_window(comm, *ci, DeviceWindow::Flavor::Allocate, p, size, disp_unit, p != nullptr, info, win);
    } catch (...) {
      if (p) be.free_device(p);
      throw;
    }
    *static_cast<void**>(baseptr) = p;
    return MPI_SUCCESS;
  } catch (const std::exception& e) {
    return create_report(comm, "MPI_Win_allocate", e);
  }
}

int MPI_Win_create_dynamic(MPI_Info info, MPI_Comm comm, MPI_Win* win) {
  std::unique_lock<std::recursive_mutex> l(lock());
  Runtime* rt = Runtime::get();
  try {
    if (!rt || info_device(info) == -2) {
      l.unlock();
      return PMPI_Win_create_dynamic(info, comm, win);
    }
    std::shared_ptr<const CommInfo> ci = local_comm(rt, comm);
    if (!ci)
      GS_THROW(GPUSTRIPE_ERR_NOT_SUPPORTED, "info %s: windows of device memory %s", kInfoKey,
               rt->comm(comm) ? "across nodes" : "on a communicator the interposer did not see made");
    return make_window(comm, *ci, DeviceWindow::Flavor::Dynamic, nullptr, 0, 1, false, info, win);
  } catch (const std::exception& e) {
    return create_report(comm, "MPI_Win_create_dynamic", e);
  }
}

int MPI_Win_attach(MPI_Win win, void* base, MPI_Aint size) {
  return on_window(win, "MPI_Win_attach", [&](DeviceWindow& w) { w.attach(base, size); },
                   [&] { return PMPI_Win_attach(win, base, size); });
}

int MPI_Win_detach(MPI_Win win, const void* base) {
  return on_window(win, "MPI_Win_detach", [&](DeviceWindow& w) { w.detach(base); },
                   [&] { return PMPI_Win_detach(win, base); });
}

int MPI_Win_free(MPI_Win* win) {
  const MPI_Win h = *win;
  int rc = on_window(h, "MPI_Win_free", [&](DeviceWindow& w) { w.free(); }, [&] { return PMPI_Win_free(win); });
  if (rc != MPI_SUCCESS) return rc;
  std::lock_guard<std::recursive_mutex> l(lock());
  if (Runtime::get() && find_window(h)) {
    drop_window(h);  // frees the MPI's window underneath too
    *win = MPI_WIN_NULL;
  }
  return rc;
}

int MPI_Win_get_attr(MPI_Win win, int keyval, void* value, int* flag) {
  return on_window(
      win, "MPI_Win_get_attr",
      [&](DeviceWindow& w) {
        *flag = 1;
        if (keyval == MPI_WIN_BASE) *static_cast<void**>(value) = w.base_attr();
        else if (keyval == MPI_WIN_SIZE) *static_cast<MPI_Aint**>(value) = w.size_attr();
        else if (keyval == MPI_WIN_DISP_UNIT) *static_cast<int**>(value) = w.disp_unit_attr();
        else if (keyval == MPI_WIN_CREATE_FLAVOR) *static_cast<int**>(value) = w.flavor_attr();
        else check_mpi(PMPI_Win_get_attr(win, keyval, value, flag), "MPI_Win_get_attr");
      },
      [&] { return PMPI_Win_get_attr(win, keyval, value, flag); });
}

// A device window's memory is not the host's: nothing to load or store through.
int MPI_Win_shared_query(MPI_Win win, int rank, MPI_Aint* size, int* disp_unit, void* baseptr) {
  return on_window(
      win, "MPI_Win_shared_query",
      [&](DeviceWindow&) {
        throw WinError(MPI_ERR_RMA_FLAVOR, "a window of device memory has no memory the ranks share by load and store");
      },
      [&] { return PMPI_Win_shared_query(win, rank, size, disp_unit, baseptr); });
}

int MPI_Put(const void* oaddr, int ocount, MPI_Datatype otype, int target, MPI_Aint disp, int tcount,
            MPI_Datatype ttype, MPI_Win win) {
  return on_window(win, "MPI_Put", [&](DeviceWindow& w) { w.put(oaddr, ocount, otype, target, disp, tcount, ttype); },
                   [&] { return PMPI_Put(oaddr, ocount, otype, target, disp, tcount, ttype, win); });
}

int MPI_Get(void* oaddr, int ocount, MPI_Datatype otype, int target, MPI_Aint disp, int tcount, MPI_Datatype ttype,
            MPI_Win win) {
  return on_window(win, "MPI_Get", [&](DeviceWindow& w) { w.get(oaddr, ocount, otype, target, disp, tcount, ttype); },
                   [&] { return PMPI_Get(oaddr, ocount, otype, target, disp, tcount, ttype, win); });
}

}  // extern "C"

namespace {

// The request of MPI_Rput / MPI_Rget (and of the request-based accumulates, complete
// when made: id 0): complete once its operation is, or once its window is gone (MPI_Win_free
// completes every operation first).
class RmaOp : public Op {
 public:
  RmaOp(MPI_Win win, uint64_t id) : Op(MPI_COMM_WORLD), win_(win), id_(id) {}
  bool test(MPI_Status* st, int* err) override {
    if (!ready()) return false;
    set_empty_status(st);
    *err = MPI_SUCCESS;
    return true;
  }
  bool ready() override {
    DeviceWindow* w = id_ ? find_window(win_) : nullptr;
    return !w || w->op_done(id_);
  }

 private:
  MPI_Win win_;
  uint64_t id_;
};

}  // namespace

extern "C" {

int MPI_Rput(const void* oaddr, int ocount, MPI_Datatype otype, int target, MPI_Aint disp, int tcount,
             MPI_Datatype ttype, MPI_Win win, MPI_Request* req) {
  return on_window(
      win, "MPI_Rput",
      [&](DeviceWindow& w) {
        *req = add_request(std::make_unique<RmaOp>(win, w.put(oaddr, ocount, otype, target, disp, tcount, ttype)));
      },
      [&] { return PMPI_Rput(oaddr, ocount, otype, target, disp, tcount, ttype, win, req); });
}

int MPI_Rget(void* oaddr, int ocount, MPI_Datatype otype, int target, MPI_Aint disp, int tcount, MPI_Datatype ttype,
             MPI_Win win, MPI_Request* req) {
  return on_window(
      win, "MPI_Rget",
      [&](DeviceWindow& w) {
        *req = add_request(std::make_unique<RmaOp>(win, w.get(oaddr, ocount, otype, target, disp, tcount, ttype)));
      },
      [&] { return PMPI_Rget(oaddr, ocount, otype, target, disp, tcount, ttype, win, req); });
}

int MPI_Accumulate(const void* oaddr, int ocount, MPI_Datatype otype, int target, MPI_Aint disp, int tcount,
                   MPI_Datatype ttype, MPI_Op op, MPI_Win win) {
  return on_window(
      win, "MPI_Accumulate",
      [&](DeviceWindow& w) {
        w.accumulate(oaddr, ocount, otype, nullptr, 0, MPI_BYTE, target, disp, tcount, ttype, op);
      },
      [&] { return PMPI_Accumulate(oaddr, ocount, otype, target, disp, tcount, ttype, op, win); });
}

int MPI_Raccumulate(const void* oaddr, int ocount, MPI_Datatype otype, int target, MPI_Aint disp, int tcount,
                    MPI_Datatype ttype, MPI_Op op, MPI_Win win, MPI_Request* req) {
  return on_window(
      win, "MPI_Raccumulate",
      [&](DeviceWindow& w) {
        w.accumulate(oaddr, ocount, otype, nullptr, 0, MPI_BYTE, target, disp, tcount, ttype, op);
        *req = add_request(std::make_unique<RmaOp>(win, 0));
      },
      [&] { return PMPI_Raccumulate(oaddr, ocount, otype, target, disp, tcount, ttype, op, win, req); });
}

int MPI_Get_accumulate(const void* oaddr, int ocount, MPI_Datatype otype, void* raddr, int rcount,
                       MPI_Datatype rtype, int target, MPI_Aint disp, int tcount, MPI_Datatype ttype, MPI_Op op,
                       MPI_Win win) {
  return on_window(
      win, "MPI_Get_accumulate",
      [&](DeviceWindow& w) { w.accumulate(oaddr, ocount, otype, raddr, rcount, rtype, target, disp, tcount, ttype, op); },
      [&] {
        return PMPI_Get_accumulate(oaddr, ocount, otype, raddr, rcount, rtype, target, disp, tcount, ttype, op, win);
      });
}

int MPI_Rget_accumulate(const void* oaddr, int ocount, MPI_Datatype otype, void* raddr, int rcount,
                        MPI_Datatype rtype, int target, MPI_Aint disp, int tcount, MPI_Datatype ttype, MPI_Op op,
                        MPI_Win win, MPI_Request* req) {
  return on_window(
      win, "MPI_Rget_accumulate",
      [&](DeviceWindow& w) {
        w.accumulate(oaddr, ocount, otype, raddr, rcount, rtype, target, disp, tcount, ttype, op);
        *req = add_request(std::make_unique<RmaOp>(win, 0));
      },
      [&] {
        return PMPI_Rget_accumulate(oaddr, ocount, otype, raddr, rcount, rtype, target, disp, tcount, ttype, op, win,
                                    req);
      });
}

int MPI_Fetch_and_op(const void* oaddr, void* raddr, MPI_Datatype type, int target, MPI_Aint disp, MPI_Op op,
                     MPI_Win win) {
  return on_window(
      win, "MPI_Fetch_and_op",
      [&](DeviceWindow& w) { w.accumulate(oaddr, 1, type, raddr, 1, type, target, disp, 1, type, op); },
      [&] { return PMPI_Fetch_and_op(oaddr, raddr, type, target, disp, op, win); });
}

int MPI_Compare_and_swap(const void* oaddr, const void* caddr, void* raddr, MPI_Datatype type, int target,
                         MPI_Aint disp, MPI_Win win) {
  return on_window(
      win, "MPI_Compare_and_swap", [&](DeviceWindow& w) { w.compare_and_swap(oaddr, caddr, raddr, type, target, disp); },
      [&] { return PMPI_Compare_and_swap(oaddr, caddr, raddr, type, target, disp, win); });
}

int MPI_Win_fence(int assert_, MPI_Win win) {
  return on_window(win, "MPI_Win_fence", [&](DeviceWindow& w) { w.fence(assert_); },
                   [&] { return PMPI_Win_fence(assert_, win); });
}

int MPI_Win_lock(int type, int rank, int assert_, MPI_Win win) {
  return on_window(win, "MPI_Win_lock", [&](DeviceWindow& w) { w.lock(type, rank, assert_); },
                   [&] { return PMPI_Win_lock(type, rank, assert_, win); });
}

int MPI_Win_unlock(int rank, MPI_Win win) {
  return on_window(win, "MPI_Win_unlock", [&](DeviceWindow& w) { w.unlock(rank); },
                   [&] { return PMPI_Win_unlock(rank, win); });
}

int MPI_Win_lock_all(int assert_, MPI_Win win) {
  return on_window(win, "MPI_Win_lock_all", [&](DeviceWindow& w) { w.lock_all(assert_); },
                   [&] { return PMPI_Win_lock_all(assert_, win); });
}

int MPI_Win_unlock_all(MPI_Win win) {
  return on_window(win, "MPI_Win_unlock_all", [&](DeviceWindow& w) { w.unlock_all(); },
                   [&] { return PMPI_Win_unlock_all(win); });
}

// The local flushes complete the same copies: a copy here is complete at the origin and
// at the target at once.
int MPI_Win_flush(int rank, MPI_Win win) {
  return on_window(win, "MPI_Win_flush", [&](DeviceWindow& w) { w.flush(rank); },
                   [&] { return PMPI_Win_flush(rank, win); });
}

int MPI_Win_flush_all(MPI_Win win) {
  return on_window(win, "MPI_Win_flush_all", [&](DeviceWindow& w) { w.flush(-1); },
                   [&] { return PMPI_Win_flush_all(win); });
}

int MPI_Win_flush_local(int rank, MPI_Win win) {
  return on_window(win, "MPI_Win_flush_local", [&](DeviceWindow& w) { w.flush(rank); },
                   [&] { return PMPI_Win_flush_local(rank, win); });
}

int MPI_Win_flush_local_all(MPI_Win win) {
  return on_window(win, "MPI_Win_flush_local_all", [&](DeviceWindow& w) { w.flush(-1); },
                   [&] { return PMPI_Win_flush_local_all(win); });
}

int MPI_Win_post(MPI_Group group, int assert_, MPI_Win win) {
  return on_window(win, "MPI_Win_post", [&](DeviceWindow& w) { w.post(group, assert_); },
                   [&] { return PMPI_Win_post(group, assert_, win); });
}

int MPI_Win_start(MPI_Group group, int assert_, MPI_Win win) {
  return on_window(win, "MPI_Win_start", [&](DeviceWindow& w) { w.start(group, assert_); },
                   [&] { return PMPI_Win_start(group, assert_, win); });
}

int MPI_Win_complete(MPI_Win win) {
  return on_window(win, "MPI_Win_complete", [&](DeviceWindow& w) { w.complete(); },
                   [&] { return PMPI_Win_complete(win); });
}

int MPI_Win_wait(MPI_Win win) {
  return on_window(win, "MPI_Win_wait", [&](DeviceWindow& w) { w.wait(); }, [&] { return PMPI_Win_wait(win); });
}

int MPI_Win_test(MPI_Win win, int* flag) {
  return on_window(win, "MPI_Win_test", [&](DeviceWindow& w) { *flag = w.test() ? 1 : 0; },
                   [&] { return PMPI_Win_test(win, flag); });
}

// The copies of a device window complete into the target's memory before the synchronization
// calls return: nothing is left for MPI_Win_sync to order.
int MPI_Win_sync(MPI_Win win) {
  return on_window(win, "MPI_Win_sync", [&](DeviceWindow&) {}, [&] { return PMPI_Win_sync(win); });
}

}  // extern "C"
