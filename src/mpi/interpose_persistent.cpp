// Persistent point-to-point requests: MPI_Send_init, MPI_Ssend_init, MPI_Rsend_init,
// MPI_Bsend_init and MPI_Recv_init. Each MPI_Start posts what the call's nonblocking form posts
// (MPI_Isend, MPI_Issend, MPI_Ibsend, MPI_Irecv, as interposed: routed by peer as they are), so that a program's
// persistent exchange of device buffers moves by gpustripe between ranks of a node and staged
// elsewhere, as its MPI_Isend/MPI_Irecv would; the MPI's own persistent requests would hand
// device pointers to an MPI that may not be CUDA-aware. Between a completion and the next start
// the request is inactive (a wait on it returns at once, with an empty status).
#include <functional>

#include "mpi/interpose.hpp"

namespace gpustripe::mpi {
namespace {

class PersistentP2pOp : public Op {
 public:
  // `post` makes one nonblocking call and returns its request (the interposer's or the MPI's).
  PersistentP2pOp(MPI_Comm comm, MPI_Datatype type, std::function<int(MPI_Datatype, MPI_Request*)> post)
      : Op(comm), post_(std::move(post)) {
    // The program may free a derived type while its persistent requests remain (MPI lets it):
    // the request keeps a duplicate of its own.
    int ints = 0, addrs = 0, types = 0, combiner = 0;
    PMPI_Type_get_envelope(type, &ints, &addrs, &types, &combiner);
    own_type_ = combiner != MPI_COMBINER_NAMED;
    if (own_type_) PMPI_Type_dup(type, &type_);
    else type_ = type;
  }
  ~PersistentP2pOp() override {
    if (own_type_) PMPI_Type_free(&type_);
  }
  bool persistent() const override { return true; }
  bool active() const override { return inner_ != MPI_REQUEST_NULL; }
  int start() override {
    if (inner_ != MPI_REQUEST_NULL) return MPI_ERR_REQUEST;  // started again before it completed
    return post_(type_, &inner_);
  }
  bool ready() override { return ready_one(inner_); }
  bool test(MPI_Status* st, int* err) override { return test_one(&inner_, st, err); }
  void check_peers() override {
    if (Op* op = find_request(inner_)) op->check_peers();
  }
  void cancel() override {
    if (Op* op = find_request(inner_)) op->cancel();
    else if (inner_ != MPI_REQUEST_NULL) PMPI_Cancel(&inner_);
  }

 private:
  std::function<int(MPI_Datatype, MPI_Request*)> post_;
  MPI_Datatype type_ = MPI_DATATYPE_NULL;
  bool own_type_ = false;
  MPI_Request inner_ = MPI_REQUEST_NULL;
};

int make(MPI_Comm comm, MPI_Datatype type, MPI_Request* req, std::function<int(MPI_Datatype, MPI_Request*)> post) {
  std::lock_guard<std::recursive_mutex> l(lock());
  *req = add_request(std::make_unique<PersistentP2pOp>(comm, type, std::move(post)));
  return MPI_SUCCESS;
}

}  // namespace
}  // namespace gpustripe::mpi

using namespace gpustripe::mpi;

extern "C" {

int MPI_Send_init(const void* buf, int count, MPI_Datatype type, int dest, int tag, MPI_Comm comm, MPI_Request* req) {
  return make(comm, type, req, [=](MPI_Datatype t, MPI_Request* r) { return MPI_Isend(buf, count, t, dest, tag, comm, r); });
}

// A ready send may be a standard one (MPI: the receive is posted already).
int MPI_Rsend_init(const void* buf, int count, MPI_Datatype type, int dest, int tag, MPI_Comm comm, MPI_Request* req) {
  return MPI_Send_init(buf, count, type, dest, tag, comm, req);
}

int MPI_Ssend_init(const void* buf, int count, MPI_Datatype type, int dest, int tag, MPI_Comm comm, MPI_Request* req) {
  return make(comm, type, req, [=](MPI_Datatype t, MPI_Request* r) { return MPI_Issend(buf, count, t, dest, tag, comm, r); });
}

int MPI_Bsend_init(const void* buf, int count, MPI_Datatype type, int dest, int tag, MPI_Comm comm, MPI_Request* req) {
  return make(comm, type, req, [=](MPI_Datatype t, MPI_Request* r) { return MPI_Ibsend(buf, count, t, dest, tag, comm, r); });
}

int MPI_Recv_init(void* buf, int count, MPI_Datatype type, int source, int tag, MPI_Comm comm, MPI_Request* req) {
  return make(comm, type, req, [=](MPI_Datatype t, MPI_Request* r) { return MPI_Irecv(buf, count, t, source, tag, comm, r); });
}

}  // extern "C"
