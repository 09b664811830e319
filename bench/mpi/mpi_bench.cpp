// OSU-style point-to-point benchmark written against plain MPI (and the CUDA
// runtime for device buffers): nothing of gpustripe in it, so the same binary
// measures the MPI alone, the MPI with libgpustripe_mpi.so preloaded (method
// mpi_gpustripe), and the GPU-unaware pattern: copy to host, MPI, copy back
// (--staged, method mpi_host_staged), and a CUDA-aware MPI (Open MPI's pml ucx over
// the libucx-cu13 wheel's UCX: method mpi_cuda_aware). The loop and options: osu_loop.hpp.
//
//   mpirun -np 2 [-x LD_PRELOAD=.../libgpustripe_mpi.so] mpi_bench --test bw --window 64
#include <mpi.h>

#include <vector>

#include "bench_buffers.hpp"
#include "osu_loop.hpp"

namespace {

class MpiTransport {
 public:
  explicit MpiTransport(const osu::Options& o) : o_(o) {}

  std::string method() const {
    if (!o_.method.empty()) return o_.method;
    return o_.staged ? "mpi_host_staged" : "mpi";
  }

  void prepare(int slots, size_t n) {
    n_ = n;
    if (o_.staged) {
      mpi_.make(o_, slots, n, bench::alloc_pinned);
      dev_.make(o_, slots, n, [this](size_t b) { return bench::alloc(b, true, o_.alloc); });
    } else {
      mpi_.make(o_, slots, n, [this](size_t b) { return bench::alloc(b, o_.device, o_.alloc); });
    }
  }

  void release() {
    if (o_.staged) {
      mpi_.drop(bench::free_pinned);
      dev_.drop([](char* p) { bench::free_buf(p, true); });
    } else {
      mpi_.drop([this](char* p) { bench::free_buf(p, o_.device); });
    }
  }

  void isend(int slot, size_t n, int peer, int tag) {
#ifdef BENCH_HAVE_CUDA
    if (o_.staged) CUDA_OK(cudaMemcpy(mpi_[slot], dev_[slot], n, cudaMemcpyDeviceToHost));
#endif
    reqs_.emplace_back();
    MPI_Isend(mpi_[slot], static_cast<int>(n), MPI_BYTE, peer, tag, MPI_COMM_WORLD, &reqs_.back());
    recv_slot_.push_back(-1);
  }

  void irecv(int slot, size_t n, int peer, int tag) {
    reqs_.emplace_back();
    MPI_Irecv(mpi_[slot], static_cast<int>(n), MPI_BYTE, peer, tag, MPI_COMM_WORLD, &reqs_.back());
    recv_slot_.push_back(slot);
  }

  // Blocking calls, as osu_latency uses them (MPI_Send may take another path than MPI_Isend).
  void send(int slot, size_t n, int peer, int tag) {
#ifdef BENCH_HAVE_CUDA
    if (o_.staged) CUDA_OK(cudaMemcpy(mpi_[slot], dev_[slot], n, cudaMemcpyDeviceToHost));
#endif
    MPI_Send(mpi_[slot], static_cast<int>(n), MPI_BYTE, peer, tag, MPI_COMM_WORLD);
  }

  void recv(int slot, size_t n, int peer, int tag) {
    MPI_Recv(mpi_[slot], static_cast<int>(n), MPI_BYTE, peer, tag, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
#ifdef BENCH_HAVE_CUDA
    if (o_.staged) CUDA_OK(cudaMemcpy(dev_[slot], mpi_[slot], n, cudaMemcpyHostToDevice));
#endif
  }

  void waitall() {
    MPI_Waitall(static_cast<int>(reqs_.size()), reqs_.data(), MPI_STATUSES_IGNORE);
#ifdef BENCH_HAVE_CUDA
    if (o_.staged)
      for (int slot : recv_slot_)
        if (slot >= 0) CUDA_OK(cudaMemcpy(dev_[slot], mpi_[slot], n_, cudaMemcpyHostToDevice));
#endif
    reqs_.clear();
    recv_slot_.clear();
  }

 private:
  const osu::Options& o_;
  size_t n_ = 0;
  osu::Slots mpi_;  // what MPI sees
  osu::Slots dev_;  // staged: the device buffers
  std::vector<MPI_Request> reqs_;
  std::vector<int> recv_slot_;
};

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  osu::Options o = osu::parse_options(argc, argv);
  // Host-memory runs need no GPU (CI builds with nvcc but has no driver).
  bench::select_gpu(o.device || o.staged, "mpi_bench");
  MpiTransport t(o);
  osu::run_sweeps(o, t);
  MPI_Finalize();
  return 0;
}
