// The interposer's requests. An MPI_Request the interposer hands out is the address
// of one of its Ops, kept in a table, so every request call can tell its own from
// the MPI's (which go to PMPI unchanged).
//   LocalOp     a gpustripe p2p send/recv to a rank of this node
//   StagedOp    an MPI send/recv of a device buffer through pinned host memory
//   AnySourceOp a receive from any rank of a communicator spanning nodes: resolved
//               to a LocalOp or StagedOp once a matching message shows up on either side
#pragma once
#include <mpi.h>

#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "common/error.hpp"
#include "mpi/datatype.hpp"
#include "mpi/runtime.hpp"
#include "p2p/request.hpp"

namespace gpustripe::mpi {

class Op {
 public:
  explicit Op(MPI_Comm comm) : comm_(comm) {}
  virtual ~Op() = default;
  // Advances; true once complete, with `st` (may be MPI_STATUS_IGNORE) and *err set.
  // The Op is finished then: the caller drops it.
  virtual bool test(MPI_Status* st, int* err) = 0;
  // Complete or not, without finishing it (MPI_Testall must not finish some only).
  virtual bool ready() = 0;
  // Complete as it stands, known without a progress pass (false when a pass might be needed):
  // a blocking call then finishes it at once, without a request of its own.
  virtual bool complete() const { return false; }
  // Throws when a peer the op waits for is gone.
  virtual void check_peers() {}
  // A wait on this request alone, while nothing else of the interposer is in flight (no other
  // pending collective, no detached request): advances only what the request itself needs, as
  // its blocking form's wait would -- `spin`: polling without yielding for as long as that wait
  // polls -- and returns true; false where the op has no such lean progress or something else
  // is pending (the caller then makes a full pass: progress_detached()).
  virtual bool advance_alone(bool spin) {
    (void)spin;
    return false;
  }
  // Completes only inside a progress pass of the node's endpoint (a send or receive of p2p): a
  // wait over such requests tests them again only after a pass ran.
  virtual bool endpoint_only() const { return false; }
  // Persistent requests (MPI_Start): a completed one stays in the table, inactive, until
  // MPI_Request_free; start() makes it active again.
  virtual bool persistent() const { return false; }
  virtual bool active() const { return true; }
  virtual int start() { return MPI_ERR_REQUEST; }
  // MPI_Cancel: a receive that no message has taken yet completes cancelled (its status says
  // so); anything else completes as it would have (MPI lets a cancel fail).
  virtual void cancel() {}
  MPI_Comm comm() const { return comm_; }
  // MPI_Request_get_status: test() and, once complete, its status and error kept, so that the
  // request stays and the wait or test that frees it gets the same.
  bool peek(MPI_Status* st, int* err);
  // What the waits and tests call: the kept completion if peek() saw one, else test().
  bool take(MPI_Status* st, int* err);

 protected:
  MPI_Comm comm_;

 private:
  bool kept_ = false;
  MPI_Status kept_status_{};
  int kept_err_ = MPI_SUCCESS;
};

// The user's buffer as the transports see it.
struct UserBuffer {
  void* buf;
  int count;
  MPI_Datatype type;
  Layout layout;
  p2p::MemLoc loc;
};
UserBuffer user_buffer(const void* buf, int count, MPI_Datatype type, p2p::MemLoc loc);

// `blocking`: MPI_Send/MPI_Ssend, waited for at once (p2p::Endpoint::isend: a small device message
// then goes eagerly, through an eager slot; a nonblocking one is pulled by the receiver).
std::unique_ptr<Op> local_send(const UserBuffer& b, int local_dst, int tag, std::shared_ptr<const CommInfo> ci,
                               MPI_Comm comm, bool synchronous, bool blocking);
std::unique_ptr<Op> local_recv(const UserBuffer& b, int local_src, int tag, std::shared_ptr<const CommInfo> ci,
                               MPI_Comm comm);
std::unique_ptr<Op> staged_send(const UserBuffer& b, int dst, int tag, MPI_Comm comm, bool synchronous);
std::unique_ptr<Op> staged_recv(const UserBuffer& b, int src, int tag, MPI_Comm comm);
std::unique_ptr<Op> any_source_recv(const UserBuffer& b, int tag, std::shared_ptr<const CommInfo> ci, MPI_Comm comm);

// The table of the interposer's requests; every interposed call holds lock().
std::recursive_mutex& lock();
MPI_Request add_request(std::unique_ptr<Op> op);
// Requests add_request made so far (tests count them).
uint64_t requests_made();
Op* find_request(MPI_Request r);
void drop_request(MPI_Request r);
// MPI_Request_free of an op still running: it completes in later calls, unseen.
void detach_request(MPI_Request r);
// Advances the detached ops, and the pending nonblocking collectives (progress_collectives).
void progress_detached();
// Whether a detached op is still running (progress_detached has work).
bool detached_pending();
// One completion attempt of any request, the interposer's or the MPI's (under lock()). True when
// it completed (or is null or inactive); it is then MPI_REQUEST_NULL (persistent ones stay).
bool test_one(MPI_Request* req, MPI_Status* st, int* err);
// Whether any request is complete, finishing nothing (under lock()).
bool ready_one(MPI_Request req);

// Inside its scope the requests' tests do not advance the pending collectives again: the caller
// has just done so (a full pass, or the request's own lean progress: Op::advance_alone).
class Progressed {
 public:
  Progressed();
  ~Progressed();
  Progressed(const Progressed&) = delete;
  Progressed& operator=(const Progressed&) = delete;
  static bool active();
};

// One progress pass of the node's endpoint for a whole array of requests (Waitall, Testall,
// Waitany, Waitsome): inside its scope the local ops read their state without progressing
// again. Each test progressing made n passes per look at n requests, each pass polling every
// copy in flight: a window of 64 was seen complete up to a millisecond late.
class ProgressPass {
 public:
  ProgressPass();
  ~ProgressPass();
  ProgressPass(const ProgressPass&) = delete;
  ProgressPass& operator=(const ProgressPass&) = delete;
  static bool active();
};

// Fills an MPI status the way PMPI_Get_count/Get_elements read it.
void set_status(MPI_Status* st, int source, int tag, int error, uint64_t bytes);
void set_empty_status(MPI_Status* st);
// The status of a receive cancelled before any message took it.
void set_cancelled_status(MPI_Status* st);

// The MPI error code of a gpustripe status no MPI error class names (made once per status:
// MPI_Error_string then names it).
int error_code_for(Status s);

// Reports a gpustripe failure on `comm` (its error handler decides: fatal by default)
// and returns the MPI error code.
int report(MPI_Comm comm, const char* call, const std::exception& e);

}  // namespace gpustripe::mpi
