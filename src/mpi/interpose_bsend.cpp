// Buffered sends: MPI_Bsend, MPI_Ibsend, MPI_Bsend_init, and the buffer the program attaches
// (MPI_Buffer_attach, MPI_Buffer_detach).
//
// A buffered send is over once its data is out of the caller's buffer, whatever the receiver
// does: programs rely on it to send before they receive without deadlock. To a rank the
// interposer serves (one of this node, or a device buffer to another node through an MPI that
// is not CUDA-aware) the MPI's own buffered send would never reach the receiver, which listens
// on gpustripe's channel, or would read device memory it cannot. So the interposer copies the
// message into host memory of its own (packed, device data copied out), counts it against the
// buffer the program attached, as the MPI counts its own (MPI_ERR_BUFFER when it does not fit,
// MPI_BSEND_OVERHEAD per message), and sends the copy as a standard nonblocking send that runs
// detached; its copy and its share of the buffer are released when it completes.
// MPI_Buffer_detach first waits for those sends, as the MPI waits for its own. Every other
// buffered send (host data to another node, the interposer off) is the MPI's.
#include <cstdio>
#include <optional>
#include <set>
#include <vector>

#include "common/error.hpp"
#include "ipc/wait.hpp"
#include "mpi/interpose.hpp"

namespace gpustripe::mpi {
namespace {

// The program's attached buffer as the interposer's buffered sends count it (under lock()).
struct Attached {
  long long size = 0;
  long long used = 0;  // bytes of buffered sends in flight, MPI_BSEND_OVERHEAD each included
};
Attached& attached() {
  static Attached a;
  return a;
}

// A buffered send in flight: the standard send of the copy, detached once posted.
class BufferedSendOp : public Op {
 public:
  BufferedSendOp(MPI_Comm comm, std::vector<char> copy, long long charge)
      : Op(comm), copy_(std::move(copy)), charge_(charge) {
    live().insert(this);
  }
  // Dropped once its send completed (progress_detached), or when the send could not be posted.
  ~BufferedSendOp() override {
    attached().used -= charge_;
    live().erase(this);
  }
  const char* data() const { return copy_.data(); }
  MPI_Request* inner() { return &inner_; }
  bool ready() override { return ready_one(inner_); }
  bool test(MPI_Status* st, int* err) override { return test_one(&inner_, st, err); }
  void check_peers() override {
    if (Op* op = find_request(inner_)) op->check_peers();
  }
  // Every buffered send still in flight (MPI_Buffer_detach's wait checks their peers).
  static std::set<BufferedSendOp*>& live() {
    static std::set<BufferedSendOp*> s;
    return s;
  }

 private:
  std::vector<char> copy_;
  long long charge_;
  MPI_Request inner_ = MPI_REQUEST_NULL;
};

// The request MPI_Ibsend returns: complete at once, as the data is copied out by then.
class CopiedOp : public Op {
 public:
  explicit CopiedOp(MPI_Comm comm) : Op(comm) {}
  bool ready() override { return true; }
  bool complete() const override { return true; }
  bool test(MPI_Status* st, int* err) override {
    *err = MPI_SUCCESS;
    set_status(st, MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_SUCCESS, 0);
    return true;
  }
};

int buffer_error(MPI_Comm comm, const char* call, long long need) {
  const Attached& a = attached();
  std::fprintf(stderr,
               "gpustripe_mpi: rank %d: %s: a buffered send of %lld bytes (MPI_BSEND_OVERHEAD included) does not fit "
               "the attached buffer (%lld bytes, %lld in use by buffered sends in flight)\n",
               Runtime::get() ? Runtime::get()->world_rank() : -1, call, need, a.size, a.used);
  std::fflush(stderr);
  PMPI_Comm_call_errhandler(comm == MPI_COMM_NULL ? MPI_COMM_WORLD : comm, MPI_ERR_BUFFER);
  return MPI_ERR_BUFFER;
}

// The buffered send of the interposer's routes; *taken false: the MPI's own (nothing done).
int buffered_send(const void* buf, int count, MPI_Datatype type, int dest, int tag, MPI_Comm comm, const char* call,
                  bool* taken) {
  std::lock_guard<std::recursive_mutex> l(lock());
  Runtime* rt = Runtime::get();
  const p2p::MemLoc loc = locate_for(rt, buf, dest);
  *taken = route(comm, dest, loc.device).route != Route::Mpi && tag >= 0;  // a bad tag: the MPI reports it
  if (!*taken) return MPI_SUCCESS;
  const UserBuffer b = user_buffer(buf, count, type, loc);
  const long long need = static_cast<long long>(b.layout.bytes) + MPI_BSEND_OVERHEAD;
  Attached& a = attached();
  if (a.used + need > a.size) return buffer_error(comm, call, need);
  std::vector<char> copy;
  copy.resize(pack(b.buf, b.count, b.type, b.layout, b.loc, rt->mover(), copy));
  const int bytes = static_cast<int>(copy.size());
  auto op = std::make_unique<BufferedSendOp>(comm, std::move(copy), need);
  a.used += need;
  const p2p::MemLoc host;
  const int rc = isend_impl(op->data(), bytes, MPI_BYTE, dest, tag, comm, false, op->inner(), false, &host);
  if (rc != MPI_SUCCESS) return rc;  // the op, dropped here, gives its share back
  detach_request(add_request(std::move(op)));
  return MPI_SUCCESS;
}

}  // namespace

void wait_buffered_sends(const char* call) {
  std::optional<ipc::Waiter> w;
  for (int polls = 0;; ++polls) {
    {
      std::lock_guard<std::recursive_mutex> l(lock());
      if (BufferedSendOp::live().empty()) return;
      progress_detached();
      if (BufferedSendOp::live().empty()) return;
    }
    if (polls < ipc::kPollsBeforeWaiter) continue;
    if (!w) {
      const int rank = Runtime::get() ? Runtime::get()->world_rank() : -1;
      w.emplace(format("%s's wait for the buffered sends in flight on rank %d", call, rank), [] {
        std::lock_guard<std::recursive_mutex> l(lock());
        for (BufferedSendOp* op : BufferedSendOp::live()) op->check_peers();
      });
    }
    w->pause();
  }
}

}  // namespace gpustripe::mpi

using namespace gpustripe::mpi;

extern "C" {

int MPI_Buffer_attach(void* buffer, int size) {
  const int rc = PMPI_Buffer_attach(buffer, size);  // the MPI's own buffered sends use it too
  if (rc == MPI_SUCCESS) {
    std::lock_guard<std::recursive_mutex> l(lock());
    attached().size = size;
  }
  return rc;
}

int MPI_Buffer_detach(void* buffer_addr, int* size) {
  try {
    wait_buffered_sends("MPI_Buffer_detach");
  } catch (const std::exception& e) {
    return report(MPI_COMM_WORLD, "MPI_Buffer_detach", e);
  }
  {
    std::lock_guard<std::recursive_mutex> l(lock());
    attached().size = 0;
  }
  return PMPI_Buffer_detach(buffer_addr, size);
}

int MPI_Bsend(const void* buf, int count, MPI_Datatype type, int dest, int tag, MPI_Comm comm) {
  try {
    bool taken = false;
    const int rc = buffered_send(buf, count, type, dest, tag, comm, "MPI_Bsend", &taken);
    return taken ? rc : PMPI_Bsend(buf, count, type, dest, tag, comm);
  } catch (const std::exception& e) {
    return report(comm, "MPI_Bsend", e);
  }
}

int MPI_Ibsend(const void* buf, int count, MPI_Datatype type, int dest, int tag, MPI_Comm comm, MPI_Request* req) {
  try {
    bool taken = false;
    const int rc = buffered_send(buf, count, type, dest, tag, comm, "MPI_Ibsend", &taken);
    if (!taken) return PMPI_Ibsend(buf, count, type, dest, tag, comm, req);
    if (rc != MPI_SUCCESS) return rc;
    std::lock_guard<std::recursive_mutex> l(lock());
    *req = add_request(std::make_unique<CopiedOp>(comm));
    return MPI_SUCCESS;
  } catch (const std::exception& e) {
    return report(comm, "MPI_Ibsend", e);
  }
}

}  // extern "C"
