#include "mpi/ops.hpp"

#include <cstdio>
#include <cstring>
#include <unordered_map>

#include "common/error.hpp"
#include "common/log.hpp"
#include "mpi/interpose.hpp"

namespace gpustripe::mpi {
namespace {

Runtime& rt() { return *Runtime::get(); }

int translate_source(const CommInfo& ci, int local_src) {
  auto it = ci.rank_of.find(rt().world_of_local(local_src));
  return it == ci.rank_of.end() ? MPI_UNDEFINED : it->second;
}

// ------------------------------------------------------------------ local (gpustripe p2p)

class LocalOp : public Op {
 public:
  LocalOp(MPI_Comm comm, std::shared_ptr<const CommInfo> ci, UserBuffer b, bool recv)
      : Op(comm), ci_(std::move(ci)), b_(b), recv_(recv) {}

  void start_send(int dst, int tag, bool sync, bool blocking) {
    const void* data = b_.buf;
    uint64_t bytes = b_.layout.bytes;
    if (!b_.layout.contiguous) {
      bytes = pack(b_.buf, b_.count, b_.type, b_.layout, b_.loc, rt().mover(), packed_);
      data = packed_.data();
    }
    p2p::MemLoc host;  // packed data is host memory
    r_ = rt().endpoint().isend(data, bytes, dst, tag, ci_->ctx, sync, b_.layout.contiguous ? &b_.loc : &host, blocking);
  }
  void start_recv(int src, int tag) {
    void* data = b_.buf;
    uint64_t cap = b_.layout.bytes;
    if (!b_.layout.contiguous) {
      int size = 0;
      PMPI_Pack_size(b_.count, b_.type, MPI_COMM_WORLD, &size);
      packed_.resize(size);
      data = packed_.data();
      cap = b_.layout.bytes;  // packed data of count elements is this long (homogeneous node)
    }
    p2p::MemLoc host;
    r_ = rt().endpoint().irecv(data, cap, src, tag, ci_->ctx, b_.layout.contiguous ? &b_.loc : &host);
  }

  bool ready() override {
    return ProgressPass::active() ? rt().endpoint().done_now(r_) : rt().endpoint().test(r_);
  }
  bool complete() const override { return r_->done(); }
  bool endpoint_only() const override { return true; }
  bool test(MPI_Status* st, int* err) override {
    if (!ready()) return false;
    const p2p::P2pStatus& s = r_->status();
    if (s.cancelled) {
      *err = MPI_SUCCESS;
      set_cancelled_status(st);
      return true;
    }
    if (recv_ && !b_.layout.contiguous)
      unpack(packed_.data(), s.bytes, b_.buf, b_.count, b_.type, b_.layout, b_.loc, rt().mover());
    *err = MPI_SUCCESS;
    if (s.error == GPUSTRIPE_ERR_TRUNCATE) *err = MPI_ERR_TRUNCATE;
    else if (s.error != GPUSTRIPE_SUCCESS) *err = MPI_ERR_OTHER;
    if (recv_) set_status(st, translate_source(*ci_, s.source), s.tag, *err, s.bytes);
    else set_status(st, MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_SUCCESS, 0);
    if (*err != MPI_SUCCESS) {
      std::fprintf(stderr, "gpustripe_mpi: rank %d: %s\n", rt().world_rank(), s.message.c_str());
      PMPI_Comm_call_errhandler(comm_, *err);
    }
    return true;
  }
  void check_peers() override { rt().endpoint().check_peers_for(*r_); }
  void cancel() override {
    if (recv_) rt().endpoint().cancel(r_);
  }

 private:
  std::shared_ptr<const CommInfo> ci_;
  UserBuffer b_;
  bool recv_;
  std::vector<char> packed_;
  p2p::RequestPtr r_;
};

// ------------------------------------------------------------------ staged through pinned host memory

class StagedOp : public Op {
 public:
  StagedOp(MPI_Comm comm, UserBuffer b, bool recv) : Op(comm), b_(b), recv_(recv) {}
  ~StagedOp() override { rt().staging_free(pinned_); }

  void start_send(int dst, int tag, bool sync) {
    std::vector<char> packed;
    uint64_t bytes = b_.layout.bytes;
    if (!b_.layout.contiguous) bytes = pack(b_.buf, b_.count, b_.type, b_.layout, b_.loc, rt().mover(), packed);
    pinned_ = rt().staging_alloc(bytes);
    if (b_.layout.contiguous) rt().mover().copy_now(pinned_.p, kHostDevice, b_.buf, b_.loc.dev, bytes);
    else std::memcpy(pinned_.p, packed.data(), bytes);
    int rc = sync ? PMPI_Issend(pinned_.p, static_cast<int>(bytes), MPI_BYTE, dst, tag, comm_, &req_)
                  : PMPI_Isend(pinned_.p, static_cast<int>(bytes), MPI_BYTE, dst, tag, comm_, &req_);
    GS_REQUIRE(rc == MPI_SUCCESS, GPUSTRIPE_ERR_MPI, "staged MPI_Isend of %llu bytes to rank %d failed (%d)",
               static_cast<unsigned long long>(bytes), dst, rc);
  }
  void start_recv(int src, int tag) {
    uint64_t cap = b_.layout.bytes;
    pinned_ = rt().staging_alloc(cap);
    int rc = PMPI_Irecv(pinned_.p, static_cast<int>(cap), MPI_BYTE, src, tag, comm_, &req_);
    GS_REQUIRE(rc == MPI_SUCCESS, GPUSTRIPE_ERR_MPI, "staged MPI_Irecv from rank %d failed (%d)", src, rc);
  }

  bool ready() override {
    int flag = 0;
    PMPI_Request_get_status(req_, &flag, MPI_STATUS_IGNORE);
    return flag != 0;
  }
  bool test(MPI_Status* st, int* err) override {
    int flag = 0;
    MPI_Status s;
    *err = PMPI_Test(&req_, &flag, &s);
    if (!flag && *err == MPI_SUCCESS) return false;
    int was_cancelled = 0;
    if (*err == MPI_SUCCESS) PMPI_Test_cancelled(&s, &was_cancelled);
    if (was_cancelled) {
      set_cancelled_status(st);
      return true;
    }
    if (recv_) {
      int bytes = 0;
      PMPI_Get_count(&s, MPI_BYTE, &bytes);
      // A truncated message reports its full size; only the buffer's worth arrived.
      if (bytes > static_cast<int>(b_.layout.bytes)) bytes = static_cast<int>(b_.layout.bytes);
      if (bytes > 0) {
        if (b_.layout.contiguous) rt().mover().copy_now(b_.buf, b_.loc.dev, pinned_.p, kHostDevice, bytes);
        else unpack(pinned_.p, bytes, b_.buf, b_.count, b_.type, b_.layout, b_.loc, rt().mover());
      }
      if (*err == MPI_SUCCESS) *err = s.MPI_ERROR == MPI_ERR_TRUNCATE ? MPI_ERR_TRUNCATE : MPI_SUCCESS;
      set_status(st, s.MPI_SOURCE, s.MPI_TAG, *err, static_cast<uint64_t>(bytes));
    } else {
      set_status(st, MPI_ANY_SOURCE, MPI_ANY_TAG, *err, 0);
    }
    return true;
  }
  void cancel() override { PMPI_Cancel(&req_); }

 private:
  UserBuffer b_;
  bool recv_;
  Runtime::Pinned pinned_;
  MPI_Request req_ = MPI_REQUEST_NULL;
};

// ------------------------------------------------------------------ any source across nodes

class AnySourceOp : public Op {
 public:
  AnySourceOp(MPI_Comm comm, std::shared_ptr<const CommInfo> ci, UserBuffer b, int tag)
      : Op(comm), ci_(std::move(ci)), b_(b), tag_(tag) {}

  bool ready() override { return cancelled_ || (resolve() && inner_->ready()); }
  bool test(MPI_Status* st, int* err) override {
    if (cancelled_) {
      *err = MPI_SUCCESS;
      set_cancelled_status(st);
      return true;
    }
    return resolve() && inner_->test(st, err);
  }
  void check_peers() override {
    if (inner_) inner_->check_peers();
  }
  // Not resolved yet, nothing is posted for it anywhere: cancelled here.
  void cancel() override {
    if (inner_ || resolve()) inner_->cancel();
    else cancelled_ = true;
  }

 private:
  // The first message to show up on either side decides; the receive is then posted
  // for its source, which MPI ordering makes the same message.
  bool resolve() {
    if (inner_) return true;
    p2p::P2pStatus ps;
    if (rt().endpoint().iprobe(p2p::kAnySource, tag_ == MPI_ANY_TAG ? p2p::kAnyTag : tag_, ci_->ctx, &ps)) {
      inner_ = local_recv(b_, ps.source, tag_, ci_, comm_);
      return true;
    }
    int flag = 0;
    MPI_Status s;
    PMPI_Iprobe(MPI_ANY_SOURCE, tag_, comm_, &flag, &s);
    if (flag) {
      inner_ = staged_recv(b_, s.MPI_SOURCE, tag_, comm_);
      return true;
    }
    return false;
  }

  std::shared_ptr<const CommInfo> ci_;
  UserBuffer b_;
  int tag_;
  std::unique_ptr<Op> inner_;
  bool cancelled_ = false;
};

std::unordered_map<MPI_Request, std::unique_ptr<Op>>& table() {
  static auto* t = new std::unordered_map<MPI_Request, std::unique_ptr<Op>>();
  return *t;
}
std::vector<std::unique_ptr<Op>>& detached() {
  static auto* d = new std::vector<std::unique_ptr<Op>>();
  return *d;
}

}  // namespace

UserBuffer user_buffer(const void* buf, int count, MPI_Datatype type, p2p::MemLoc loc) {
  return UserBuffer{const_cast<void*>(buf), count, type, layout_of(count, type), loc};
}

std::unique_ptr<Op> local_send(const UserBuffer& b, int local_dst, int tag, std::shared_ptr<const CommInfo> ci,
                               MPI_Comm comm, bool synchronous, bool blocking) {
  auto op = std::make_unique<LocalOp>(comm, std::move(ci), b, false);
  op->start_send(local_dst, tag, synchronous, blocking);
  return op;
}

std::unique_ptr<Op> local_recv(const UserBuffer& b, int local_src, int tag, std::shared_ptr<const CommInfo> ci,
                               MPI_Comm comm) {
  auto op = std::make_unique<LocalOp>(comm, std::move(ci), b, true);
  op->start_recv(local_src, tag == MPI_ANY_TAG ? p2p::kAnyTag : tag);
  return op;
}

std::unique_ptr<Op> staged_send(const UserBuffer& b, int dst, int tag, MPI_Comm comm, bool synchronous) {
  auto op = std::make_unique<StagedOp>(comm, b, false);
  op->start_send(dst, tag, synchronous);
  return op;
}

std::unique_ptr<Op> staged_recv(const UserBuffer& b, int src, int tag, MPI_Comm comm) {
  auto op = std::make_unique<StagedOp>(comm, b, true);
  op->start_recv(src, tag);
  return op;
}

std::unique_ptr<Op> any_source_recv(const UserBuffer& b, int tag, std::shared_ptr<const CommInfo> ci, MPI_Comm comm) {
  return std::make_unique<AnySourceOp>(comm, std::move(ci), b, tag);
}

std::recursive_mutex& lock() {
  static std::recursive_mutex mu;
  return mu;
}

namespace {
uint64_t g_requests_made = 0;  // under lock()
}  // namespace

uint64_t requests_made() { return g_requests_made; }

MPI_Request add_request(std::unique_ptr<Op> op) {
  ++g_requests_made;
  // The Op's address is the handle: distinct from every live MPI request object.
  auto r = reinterpret_cast<MPI_Request>(op.get());
  table()[r] = std::move(op);
  return r;
}

Op* find_request(MPI_Request r) {
  if (r == MPI_REQUEST_NULL) return nullptr;
  auto it = table().find(r);
  return it == table().end() ? nullptr : it->second.get();
}

void drop_request(MPI_Request r) { table().erase(r); }

void detach_request(MPI_Request r) {
  auto it = table().find(r);
  if (it == table().end()) return;
  detached().push_back(std::move(it->second));
  table().erase(it);
}

void progress_detached() {
  progress_collectives();
  auto& d = detached();
  for (auto it = d.begin(); it != d.end();) {
    int err = MPI_SUCCESS;
    if ((*it)->take(MPI_STATUS_IGNORE, &err)) it = d.erase(it);
    else ++it;
  }
}

bool detached_pending() { return !detached().empty(); }

namespace {
int g_pass_depth = 0;        // under lock(), as every interposed call
int g_progressed_depth = 0;  // the same
}  // namespace

Progressed::Progressed() { ++g_progressed_depth; }
Progressed::~Progressed() { --g_progressed_depth; }
bool Progressed::active() { return g_progressed_depth > 0; }

ProgressPass::ProgressPass() {
  if (Runtime* r = Runtime::get()) r->endpoint().progress();
  ++g_pass_depth;
}

ProgressPass::~ProgressPass() { --g_pass_depth; }

bool ProgressPass::active() { return g_pass_depth > 0; }

void set_status(MPI_Status* st, int source, int tag, int error, uint64_t bytes) {
  if (st == MPI_STATUS_IGNORE) return;
  st->MPI_SOURCE = source;
  st->MPI_TAG = tag;
  st->MPI_ERROR = error;
  PMPI_Status_set_elements_x(st, MPI_BYTE, static_cast<MPI_Count>(bytes));
  PMPI_Status_set_cancelled(st, 0);
}

void set_empty_status(MPI_Status* st) { set_status(st, MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_SUCCESS, 0); }

bool Op::peek(MPI_Status* st, int* err) {
  if (!kept_) {
    if (!test(&kept_status_, &kept_err_)) return false;
    kept_ = true;
  }
  if (st != MPI_STATUS_IGNORE) *st = kept_status_;
  *err = kept_err_;
  return true;
}

bool Op::take(MPI_Status* st, int* err) {
  if (!kept_) return test(st, err);
  kept_ = false;
  if (st != MPI_STATUS_IGNORE) *st = kept_status_;
  *err = kept_err_;
  return true;
}

void set_cancelled_status(MPI_Status* st) {
  if (st == MPI_STATUS_IGNORE) return;
  set_empty_status(st);
  PMPI_Status_set_cancelled(st, 1);
}

// A gpustripe failure that no MPI error class names (a dead peer, a timeout) gets an
// error code of its own, made once (MPI_Add_error_* are local calls), so that
// MPI_Error_string tells the program what happened instead of "MPI_ERR_OTHER".
int error_code_for(Status s) {
  static std::unordered_map<int, int> codes;  // under lock(), as every interposed call
  auto it = codes.find(static_cast<int>(s));
  if (it != codes.end()) return it->second;
  int cls = 0, code = MPI_ERR_OTHER;
  if (PMPI_Add_error_class(&cls) != MPI_SUCCESS || PMPI_Add_error_code(cls, &code) != MPI_SUCCESS)
    return MPI_ERR_OTHER;
  std::string text = format("%s (gpustripe_mpi; the details are on stderr)", status_name(s));
  PMPI_Add_error_string(code, text.c_str());
  codes[static_cast<int>(s)] = code;
  return code;
}

int report(MPI_Comm comm, const char* call, const std::exception& e) {
  int code = MPI_ERR_OTHER;
  if (auto* ge = dynamic_cast<const Error*>(&e)) {
    if (ge->status() == GPUSTRIPE_ERR_TRUNCATE) code = MPI_ERR_TRUNCATE;
    else if (ge->status() == GPUSTRIPE_ERR_INVALID_ARGUMENT) code = MPI_ERR_ARG;
    else if (ge->status() == GPUSTRIPE_ERR_INVALID_TYPE) code = MPI_ERR_TYPE;
    else code = error_code_for(ge->status());
    std::fprintf(stderr, "gpustripe_mpi: rank %d: %s: %s: %s\n", Runtime::get() ? Runtime::get()->world_rank() : -1,
                 call, status_name(ge->status()), e.what());
  } else {
    std::fprintf(stderr, "gpustripe_mpi: rank %d: %s: %s\n", Runtime::get() ? Runtime::get()->world_rank() : -1, call,
                 e.what());
  }
  std::fflush(stderr);
  PMPI_Comm_call_errhandler(comm == MPI_COMM_NULL ? MPI_COMM_WORLD : comm, code);
  return code;
}

}  // namespace gpustripe::mpi
