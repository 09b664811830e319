// UCX ucp tag send/recv in the OSU-style loop of the MPI benchmark (../osu_loop.hpp):
// method `ucx` of `gpustripe bench mpi`, the way a CUDA-aware MPI over UCX moves device
// buffers between GPUs of a node (cuda_ipc for large messages). Written against UCX's
// own API only; MPI launches the ranks and exchanges the worker addresses. Device
// buffers are passed as UCS_MEMORY_TYPE_CUDA; the transports come from UCX_TLS
// (gpustripe bench mpi sets UCX_TLS=cuda_ipc,cuda_copy,sm,self; host-memory runs in CI
// use sm,self). Built when UCX's headers are found (.deps/ucx from scripts/stage-deps.sh).
//
// Run it with Open MPI's own UCX components off (--mca pml ob1 --mca osc ^ucx): the
// system MPI may be built against another UCX, and one process holds one libucp.
#include <mpi.h>
#include <ucp/api/ucp.h>

#include <vector>

#include "../bench_buffers.hpp"
#include "../osu_loop.hpp"

namespace {

[[noreturn]] void fail(const char* what, ucs_status_t s) {
  std::fprintf(stderr, "ucx_bench: %s: %s\n", what, ucs_status_string(s));
  MPI_Abort(MPI_COMM_WORLD, 7);
  std::exit(7);
}

void ucx_ok(ucs_status_t s, const char* what) {
  if (s != UCS_OK) fail(what, s);
}

// A UCP context + worker, and an endpoint to the one peer of this rank (r ^ 1).
class Ucx {
 public:
  explicit Ucx(int peer) {
    ucp_config_t* config = nullptr;
    ucx_ok(ucp_config_read(nullptr, nullptr, &config), "ucp_config_read");
    ucp_params_t params{};
    params.field_mask = UCP_PARAM_FIELD_FEATURES;
    params.features = UCP_FEATURE_TAG;
    ucx_ok(ucp_init(&params, config, &context_), "ucp_init");
    ucp_config_release(config);
    ucp_worker_params_t wp{};
    wp.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
    wp.thread_mode = UCS_THREAD_MODE_SINGLE;
    ucx_ok(ucp_worker_create(context_, &wp, &worker_), "ucp_worker_create");

    ucp_address_t* mine = nullptr;
    size_t len = 0;
    ucx_ok(ucp_worker_get_address(worker_, &mine, &len), "ucp_worker_get_address");
    unsigned long mylen = len, theirlen = 0;
    MPI_Sendrecv(&mylen, 1, MPI_UNSIGNED_LONG, peer, 0, &theirlen, 1, MPI_UNSIGNED_LONG, peer, 0, MPI_COMM_WORLD,
                 MPI_STATUS_IGNORE);
    std::vector<char> theirs(theirlen);
    MPI_Sendrecv(mine, static_cast<int>(mylen), MPI_BYTE, peer, 1, theirs.data(), static_cast<int>(theirlen), MPI_BYTE,
                 peer, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    ucp_worker_release_address(worker_, mine);

    ucp_ep_params_t ep{};
    ep.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS;
    ep.address = reinterpret_cast<const ucp_address_t*>(theirs.data());
    ucx_ok(ucp_ep_create(worker_, &ep, &ep_), "ucp_ep_create");
  }

  ~Ucx() {
    MPI_Barrier(MPI_COMM_WORLD);  // both sides done before either endpoint goes
    ucp_request_param_t p{};  // flush, then close (a forced close needs peer error handling)
    wait(ucp_ep_close_nbx(ep_, &p), "ucp_ep_close_nbx");
    ucp_worker_destroy(worker_);
    ucp_cleanup(context_);
  }

  ucp_worker_h worker() const { return worker_; }
  ucp_ep_h ep() const { return ep_; }

  // Progresses the worker until the request (or NULL: done at once) completes.
  void wait(ucs_status_ptr_t r, const char* what) {
    if (r == nullptr) return;
    if (UCS_PTR_IS_ERR(r)) fail(what, UCS_PTR_STATUS(r));
    ucs_status_t s;
    while ((s = ucp_request_check_status(r)) == UCS_INPROGRESS) ucp_worker_progress(worker_);
    ucp_request_free(r);
    if (s != UCS_OK) fail(what, s);
  }

 private:
  ucp_context_h context_ = nullptr;
  ucp_worker_h worker_ = nullptr;
  ucp_ep_h ep_ = nullptr;
};

class UcxTransport {
 public:
  UcxTransport(const osu::Options& o, Ucx& ucx) : o_(o), ucx_(ucx) {}
  std::string method() const { return o_.method.empty() ? "ucx" : o_.method; }

  void prepare(int slots, size_t n) { bufs_.make(o_, slots, n, [this](size_t b) { return bench::alloc(b, o_.device); }); }
  void release() { bufs_.drop([this](char* p) { bench::free_buf(p, o_.device); }); }

  void isend(int slot, size_t n, int peer, int tag) {
    ucp_request_param_t p = param();
    reqs_.push_back({ucp_tag_send_nbx(ucx_.ep(), bufs_[slot], n, static_cast<ucp_tag_t>(tag), &p), "ucp_tag_send_nbx"});
  }
  void irecv(int slot, size_t n, int peer, int tag) {
    ucp_request_param_t p = param();
    reqs_.push_back({ucp_tag_recv_nbx(ucx_.worker(), bufs_[slot], n, static_cast<ucp_tag_t>(tag), ~ucp_tag_t(0), &p),
                     "ucp_tag_recv_nbx"});
  }
  void waitall() {
    for (const Req& r : reqs_) ucx_.wait(r.req, r.what);
    reqs_.clear();
  }

 private:
  struct Req {
    ucs_status_ptr_t req;
    const char* what;
  };
  ucp_request_param_t param() const {
    ucp_request_param_t p{};
    p.op_attr_mask = UCP_OP_ATTR_FIELD_DATATYPE | UCP_OP_ATTR_FIELD_MEMORY_TYPE;
    p.datatype = ucp_dt_make_contig(1);
    p.memory_type = o_.device ? UCS_MEMORY_TYPE_CUDA : UCS_MEMORY_TYPE_HOST;
    return p;
  }

  const osu::Options& o_;
  Ucx& ucx_;
  osu::Slots bufs_;
  std::vector<Req> reqs_;
};

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  osu::Options o = osu::parse_options(argc, argv);
  if (o.staged) osu::usage("ucx_bench: --staged is a pattern of mpi_bench");
  int rank = 0, size = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  if (size % 2) osu::usage("an even number of ranks is needed (pairs r <-> r^1)");
  // The GPU is chosen before UCX starts: its CUDA transports use the current context.
  bench::select_gpu(o.device, "ucx_bench");
  {
    Ucx ucx(rank ^ 1);
    UcxTransport t(o, ucx);
    osu::run_sweeps(o, t);
  }
  MPI_Finalize();
  return 0;
}
