// NCCL send/recv across processes, one GPU per rank, in the OSU-style loop of the
// MPI benchmark (../osu_loop.hpp): method `nccl` of `gpustripe bench mpi`, measured
// like the MPI clients (same pairs, windows, acknowledgement) rather than in one
// process. A window's sends and receives go into one NCCL group on one stream (as
// nccl-tests' sendrecv does); MPI only launches the ranks and spreads the NCCL id.
// NCCL is loaded at run time (GPUSTRIPE_NCCL_LIBRARY, src/bench/nccl_loader.hpp).
#include <mpi.h>

#include <vector>

#include "../bench_buffers.hpp"
#include "../osu_loop.hpp"
#include "bench/nccl_loader.hpp"
#include "common/error.hpp"

namespace {

using gpustripe::NcclLibrary;

class NcclTransport {
 public:
  NcclTransport(const osu::Options& o, const NcclLibrary& nccl, gpustripe::NcclComm* comm)
      : o_(o), nccl_(nccl), comm_(comm) {
    CUDA_OK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
  }
  ~NcclTransport() { cudaStreamDestroy(stream_); }
  std::string method() const { return o_.method.empty() ? "nccl" : o_.method; }

  void prepare(int slots, size_t n) { bufs_.make(o_, slots, n, [](size_t b) { return bench::alloc(b, true); }); }
  void release() { bufs_.drop([](char* p) { bench::free_buf(p, true); }); }
  void isend(int slot, size_t n, int peer, int) { ops_.push_back({true, slot, n, peer}); }
  void irecv(int slot, size_t n, int peer, int) { ops_.push_back({false, slot, n, peer}); }
  void waitall() {
    nccl_.group_start();
    for (const Op& op : ops_) {
      if (op.send) nccl_.send(bufs_[op.slot], op.n, op.peer, comm_, stream_);
      else nccl_.recv(bufs_[op.slot], op.n, op.peer, comm_, stream_);
    }
    nccl_.group_end();
    CUDA_OK(cudaStreamSynchronize(stream_));
    ops_.clear();
  }

 private:
  struct Op {
    bool send;
    int slot;
    size_t n;
    int peer;
  };
  const osu::Options& o_;
  const NcclLibrary& nccl_;
  gpustripe::NcclComm* comm_;
  cudaStream_t stream_ = nullptr;
  osu::Slots bufs_;
  std::vector<Op> ops_;
};

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  osu::Options o = osu::parse_options(argc, argv);
  if (o.staged || !o.device) osu::usage("nccl_bench: device buffers only");
  bench::select_gpu(true, "nccl_bench");
  int rank = 0, size = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  const NcclLibrary& nccl = NcclLibrary::get();
  if (!nccl.available()) {
    if (rank == 0) std::fprintf(stderr, "nccl_bench: %s\n", nccl.why_not().c_str());
    MPI_Abort(MPI_COMM_WORLD, 6);
  }
  try {
    gpustripe::NcclUniqueId id{};
    if (rank == 0) id = nccl.unique_id();
    MPI_Bcast(&id, sizeof id, MPI_BYTE, 0, MPI_COMM_WORLD);
    gpustripe::NcclComm* comm = nullptr;
    nccl.comm_init_rank(&comm, size, id, rank);
    {
      NcclTransport t(o, nccl, comm);
      osu::run_sweeps(o, t);
    }
    MPI_Barrier(MPI_COMM_WORLD);
    nccl.comm_destroy(comm);
  } catch (const gpustripe::Error& e) {
    std::fprintf(stderr, "nccl_bench: %s: %s\n", gpustripe::status_name(e.status()), e.what());
    MPI_Abort(MPI_COMM_WORLD, 5);
  }
  MPI_Finalize();
  return 0;
}
