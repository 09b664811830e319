// Interposed completion calls: Wait/Waitall/Waitany/Waitsome/Test/Testall/Testany,
// Request_free, and Start/Startall (persistent requests). Arrays holding only the MPI's requests go to PMPI unchanged;
// arrays with the interposer's requests are polled (PMPI_Test for the MPI's),
// bounded by GPUSTRIPE_TIMEOUT and failing at once when a peer dies.
#include <atomic>
#include <optional>
#include <vector>

#include "common/error.hpp"
#include "ipc/wait.hpp"
#include "mpi/interpose.hpp"
#include "p2p/trace.hpp"

namespace gpustripe::mpi {
namespace {

// Which of an array's requests are the interposer's: any of them, and whether every one (nulls
// aside) only completes in an endpoint pass (Op::endpoint_only). One lookup per request.
struct Ours {
  bool any = false;
  bool endpoint_only = true;
};
Ours ours_in(int n, const MPI_Request* reqs) {
  std::lock_guard<std::recursive_mutex> l(lock());
  Ours o;
  for (int i = 0; i < n; ++i) {
    if (reqs[i] == MPI_REQUEST_NULL) continue;
    const Op* op = find_request(reqs[i]);
    o.any = o.any || op;
    o.endpoint_only = o.endpoint_only && op && op->endpoint_only();
  }
  return o;
}

bool any_ours(int n, const MPI_Request* reqs) { return ours_in(n, reqs).any; }

void check_ops(int n, const MPI_Request* reqs) {
  std::lock_guard<std::recursive_mutex> l(lock());
  for (int i = 0; i < n; ++i)
    if (Op* op = find_request(reqs[i])) op->check_peers();
}

ipc::Waiter waiter(const char* call, int n, const MPI_Request* reqs) {
  int rank = Runtime::get() ? Runtime::get()->world_rank() : -1;
  return ipc::Waiter(format("%s of %d request(s) on rank %d", call, n, rank), [n, reqs] { check_ops(n, reqs); });
}

MPI_Comm comm_of(int n, const MPI_Request* reqs) {
  std::lock_guard<std::recursive_mutex> l(lock());
  for (int i = 0; i < n; ++i)
    if (Op* op = find_request(reqs[i])) return op->comm();
  return MPI_COMM_WORLD;
}

// While the awaited request advances alone (Op::advance_alone), the wait's full pass over
// everything else pending comes at least every this many polls.
constexpr int kFullPassEvery = 64;

std::atomic<uint64_t> g_wait_polls{0};  // a test hook reads it

// One completion attempt of `op`, the interposer's request *req.
bool test_op(MPI_Request* req, Op* op, MPI_Status* st, int* err) {
  *err = MPI_SUCCESS;
  if (!op->take(st, err)) return false;
  if (!op->persistent()) {
    drop_request(*req);
    *req = MPI_REQUEST_NULL;
  }
  return true;
}

// Null, or a persistent request of ours not started (Waitany and Waitsome skip them).
bool inactive(MPI_Request req) {
  if (req == MPI_REQUEST_NULL) return true;
  Op* op = find_request(req);
  return op && !op->active();
}

}  // namespace

bool test_one(MPI_Request* req, MPI_Status* st, int* err) {
  *err = MPI_SUCCESS;
  if (*req == MPI_REQUEST_NULL) {
    set_empty_status(st);
    return true;
  }
  if (Op* op = find_request(*req)) return test_op(req, op, st, err);
  int flag = 0;
  *err = PMPI_Test(req, &flag, st);
  return flag || *err != MPI_SUCCESS;
}

bool ready_one(MPI_Request req) {
  if (req == MPI_REQUEST_NULL) return true;
  if (Op* op = find_request(req)) return op->ready();
  int flag = 0;
  PMPI_Request_get_status(req, &flag, MPI_STATUS_IGNORE);
  return flag != 0;
}

uint64_t wait_polls() { return g_wait_polls.load(); }

int wait_impl(MPI_Request* req, MPI_Status* st) {
  p2p::trace("m_wait", -1, 0, 0, 0);
  Op* op = nullptr;  // in the table until its test completes it: looked up once
  {
    std::lock_guard<std::recursive_mutex> l(lock());
    op = find_request(*req);
  }
  if (!op) return PMPI_Wait(req, st);
  // The Waiter (its message, its settings) is made only after ipc::kPollsBeforeWaiter polls found
  // the request incomplete: a request done by then (an eager send, a message that arrives as
  // the receive is posted) returns without that cost.
  std::optional<ipc::Waiter> w;
  for (int polls = 0;; ++polls) {
    {
      std::lock_guard<std::recursive_mutex> l(lock());
      g_wait_polls.fetch_add(1, std::memory_order_relaxed);
      // The first poll advances everything pending. Then a request alone in flight (a collective,
      // nothing else pending) advances only itself, as its blocking form's wait does -- its
      // second poll spinning as long as that wait spins -- and everything else at least every
      // kFullPassEvery polls.
      if (polls % kFullPassEvery == 0 || !op->advance_alone(polls == 1)) progress_detached();
      Progressed progressed;
      int err;
      if (test_op(req, op, st, &err)) {
        p2p::trace("m_ret", -1, 0, 0, 0);
        return err;
      }
    }
    if (polls < ipc::kPollsBeforeWaiter) continue;
    if (!w) w.emplace(waiter("MPI_Wait", 1, req));
    w->pause();
  }
}

int waitall_impl(int n, MPI_Request* reqs, MPI_Status* sts) {
  p2p::trace("m_wait", -1, 0, 0, static_cast<uint64_t>(n));
  const Ours ours = ours_in(n, reqs);
  if (!ours.any) return PMPI_Waitall(n, reqs, sts);
  std::vector<MPI_Status> local(sts == MPI_STATUSES_IGNORE ? n : 0);
  MPI_Status* out = sts == MPI_STATUSES_IGNORE ? local.data() : sts;
  std::vector<char> done(n, 0);
  std::vector<int> errs(n, MPI_SUCCESS);
  int left = n;
  // Requests that only an endpoint pass completes are tested again only after one ran: a quiet
  // poll (nothing arrived, nothing in flight: Endpoint::progress made no pass) costs no lookup
  // of each request (64 of them in a window).
  const bool endpoint_only = ours.endpoint_only;
  Runtime* rt = Runtime::get();
  uint64_t tested_after = ~uint64_t{0};  // the endpoint's pass count at the last tests
  std::optional<ipc::Waiter> w;  // made after ipc::kPollsBeforeWaiter polls, as in wait_impl
  for (int polls = 0; left > 0; ++polls) {
    bool moved = false;
    {
      std::lock_guard<std::recursive_mutex> l(lock());
      progress_detached();
      ProgressPass pass;
      const uint64_t passes = rt ? rt->endpoint().progress_passes() : 0;
      const bool unchanged = endpoint_only && passes == tested_after;
      tested_after = passes;
      for (int i = 0; i < n && !unchanged; ++i) {
        if (done[i]) continue;
        if (test_one(&reqs[i], &out[i], &errs[i])) {
          done[i] = 1;
          --left;
          moved = true;
        }
      }
    }
    if (left == 0) break;
    if (polls < ipc::kPollsBeforeWaiter) continue;
    if (!w) w.emplace(waiter("MPI_Waitall", n, reqs));
    if (moved) w->progressed();
    else w->pause();
  }
  p2p::trace("m_ret", -1, 0, 0, 0);
  bool failed = false;
  for (int i = 0; i < n; ++i)
    if (errs[i] != MPI_SUCCESS) failed = true;
  if (!failed) return MPI_SUCCESS;
  for (int i = 0; i < n; ++i) out[i].MPI_ERROR = errs[i];
  return MPI_ERR_IN_STATUS;
}

}  // namespace gpustripe::mpi

using namespace gpustripe;
using namespace gpustripe::mpi;

extern "C" {

int MPI_Wait(MPI_Request* req, MPI_Status* st) {
  try {
    return wait_impl(req, st);
  } catch (const std::exception& e) {
    return report(comm_of(1, req), "MPI_Wait", e);
  }
}

int MPI_Waitall(int n, MPI_Request reqs[], MPI_Status sts[]) {
  try {
    return waitall_impl(n, reqs, sts);
  } catch (const std::exception& e) {
    return report(comm_of(n, reqs), "MPI_Waitall", e);
  }
}

// One pass of Testany, which Waitany repeats: true when done (a request completed, or
// none is active), with *err its result.
static bool any_once(int n, MPI_Request reqs[], int* index, MPI_Status* st, int* err) {
  std::lock_guard<std::recursive_mutex> l(lock());
  progress_detached();
  ProgressPass pass;
  bool active = false;
  for (int i = 0; i < n; ++i) {
    if (inactive(reqs[i])) continue;
    active = true;
    if (test_one(&reqs[i], st, err)) {
      *index = i;
      return true;
    }
  }
  *index = MPI_UNDEFINED;
  *err = MPI_SUCCESS;
  if (!active) set_empty_status(st);
  return !active;
}

int MPI_Waitany(int n, MPI_Request reqs[], int* index, MPI_Status* st) {
  try {
    if (!any_ours(n, reqs)) return PMPI_Waitany(n, reqs, index, st);
    ipc::Waiter w = waiter("MPI_Waitany", n, reqs);
    int err = MPI_SUCCESS;
    while (!any_once(n, reqs, index, st, &err)) w.pause();
    return err;
  } catch (const std::exception& e) {
    return report(comm_of(n, reqs), "MPI_Waitany", e);
  }
}

static int some_impl(int n, MPI_Request reqs[], int* outcount, int indices[], MPI_Status sts[], bool wait) {
  ipc::Waiter w = waiter(wait ? "MPI_Waitsome" : "MPI_Testsome", n, reqs);
  for (;;) {
    {
      std::lock_guard<std::recursive_mutex> l(lock());
      progress_detached();
      ProgressPass pass;
      bool active = false, failed = false;
      int k = 0;
      for (int i = 0; i < n; ++i) {
        if (inactive(reqs[i])) continue;
        active = true;
        MPI_Status s;
        int err;
        if (test_one(&reqs[i], &s, &err)) {
          if (sts != MPI_STATUSES_IGNORE) {
            sts[k] = s;
            sts[k].MPI_ERROR = err;
          }
          if (err != MPI_SUCCESS) failed = true;
          indices[k++] = i;
        }
      }
      if (!active) {
        *outcount = MPI_UNDEFINED;
        return MPI_SUCCESS;
      }
      if (k > 0 || !wait) {
        *outcount = k;
        return failed ? MPI_ERR_IN_STATUS : MPI_SUCCESS;
      }
    }
    w.pause();
  }
}

int MPI_Waitsome(int n, MPI_Request reqs[], int* outcount, int indices[], MPI_Status sts[]) {
  try {
    if (!any_ours(n, reqs)) return PMPI_Waitsome(n, reqs, outcount, indices, sts);
    return some_impl(n, reqs, outcount, indices, sts, true);
  } catch (const std::exception& e) {
    return report(comm_of(n, reqs), "MPI_Waitsome", e);
  }
}

int MPI_Testsome(int n, MPI_Request reqs[], int* outcount, int indices[], MPI_Status sts[]) {
  try {
    if (!any_ours(n, reqs)) return PMPI_Testsome(n, reqs, outcount, indices, sts);
    return some_impl(n, reqs, outcount, indices, sts, false);
  } catch (const std::exception& e) {
    return report(comm_of(n, reqs), "MPI_Testsome", e);
  }
}

int MPI_Test(MPI_Request* req, int* flag, MPI_Status* st) {
  try {
    if (!any_ours(1, req)) return PMPI_Test(req, flag, st);
    std::lock_guard<std::recursive_mutex> l(lock());
    progress_detached();
    Progressed progressed;
    int err;
    *flag = test_one(req, st, &err);
    return err;
  } catch (const std::exception& e) {
    return report(comm_of(1, req), "MPI_Test", e);
  }
}

int MPI_Testall(int n, MPI_Request reqs[], int* flag, MPI_Status sts[]) {
  try {
    if (!any_ours(n, reqs)) return PMPI_Testall(n, reqs, flag, sts);
    {
      std::lock_guard<std::recursive_mutex> l(lock());
      progress_detached();
      ProgressPass pass;
      for (int i = 0; i < n; ++i)
        if (!ready_one(reqs[i])) {
          *flag = 0;
          return MPI_SUCCESS;
        }
    }
    *flag = 1;
    return waitall_impl(n, reqs, sts);  // all complete: finishes them without waiting
  } catch (const std::exception& e) {
    return report(comm_of(n, reqs), "MPI_Testall", e);
  }
}

int MPI_Testany(int n, MPI_Request reqs[], int* index, int* flag, MPI_Status* st) {
  try {
    if (!any_ours(n, reqs)) return PMPI_Testany(n, reqs, index, flag, st);
    int err = MPI_SUCCESS;
    *flag = any_once(n, reqs, index, st, &err) ? 1 : 0;
    return err;
  } catch (const std::exception& e) {
    return report(comm_of(n, reqs), "MPI_Testany", e);
  }
}

int MPI_Request_get_status(MPI_Request req, int* flag, MPI_Status* st) {
  Op* op = nullptr;
  try {
    std::lock_guard<std::recursive_mutex> l(lock());
    op = find_request(req);
    if (!op) return PMPI_Request_get_status(req, flag, st);
    progress_detached();
    Progressed progressed;
    int err = MPI_SUCCESS;
    *flag = op->peek(st, &err) ? 1 : 0;
    return err;
  } catch (const std::exception& e) {
    return report(op ? op->comm() : MPI_COMM_WORLD, "MPI_Request_get_status", e);
  }
}

int MPI_Cancel(MPI_Request* req) {
  {
    std::lock_guard<std::recursive_mutex> l(lock());
    if (Op* op = find_request(*req)) {
      try {
        op->cancel();
      } catch (const std::exception& e) {
        return report(op->comm(), "MPI_Cancel", e);
      }
      return MPI_SUCCESS;
    }
  }
  return PMPI_Cancel(req);
}

int MPI_Request_free(MPI_Request* req) {
  {
    std::lock_guard<std::recursive_mutex> l(lock());
    if (Op* op = find_request(*req)) {
      if (op->persistent() && !op->active()) drop_request(*req);
      else detach_request(*req);
      *req = MPI_REQUEST_NULL;
      return MPI_SUCCESS;
    }
  }
  return PMPI_Request_free(req);
}

static int start_one(MPI_Request* req) {
  Op* op = nullptr;
  {
    std::lock_guard<std::recursive_mutex> l(lock());
    op = find_request(*req);
  }
  // Unlocked: a start may run the MPI's collective, which the lock must not be held across.
  return op ? op->start() : PMPI_Start(req);
}

int MPI_Start(MPI_Request* req) { return start_one(req); }

int MPI_Startall(int n, MPI_Request reqs[]) {
  for (int i = 0; i < n; ++i) {
    const int rc = start_one(&reqs[i]);
    if (rc != MPI_SUCCESS) return rc;
  }
  return MPI_SUCCESS;
}

}  // extern "C"
