// OSU-style point-to-point benchmark written against plain MPI (and the CUDA
// runtime for device buffers): nothing of gpustripe in it, so the same binary
// measures the MPI alone, the MPI with libgpustripe_mpi.so preloaded (method
// mpi_gpustripe), and the GPU-unaware pattern: copy to host, MPI, copy back
// (--staged, method mpi_host_staged). The loop and options: osu_loop.hpp.
//
//   mpirun -np 2 [-x LD_PRELOAD=.../libgpustripe_mpi.so] mpi_bench --test bw --window 64
#include <mpi.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "osu_loop.hpp"

#ifdef BENCH_HAVE_CUDA
#include <cuda_runtime.h>
#define CUDA_OK(call)                                                                              \
  do {                                                                                             \
    cudaError_t e_ = (call);                                                                       \
    if (e_ != cudaSuccess) {                                                                       \
      std::fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call, cudaGetErrorString(e_)); \
      MPI_Abort(MPI_COMM_WORLD, 4);                                                                \
    }                                                                                              \
  } while (0)
#endif

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
    // Windows of large messages share one buffer per direction (as osu_bw does), so
    // 64 x 1 GB fits in GPU memory; small ones get a buffer each.
    bool share = n * slots > (size_t(2) << 30);
    int window = o_.test == "bibw" ? slots / 2 : slots;
    slots_.assign(slots, Slot{});
    for (int i = 0; i < slots; ++i) {
      int owner = share ? (i < window ? 0 : window) : i;
      if (owner != i) {
        slots_[i] = slots_[owner];
        slots_[i].owned = false;
        continue;
      }
      Slot& s = slots_[i];
      s.owned = true;
      if (o_.staged) {
        s.mpi = alloc_pinned(n);
        s.dev = alloc(n, true);
      } else {
        s.mpi = alloc(n, o_.device);
      }
    }
  }

  void release() {
    for (Slot& s : slots_) {
      if (!s.owned) continue;
      if (o_.staged) {
        free_pinned(s.mpi);
        free_buf(s.dev, true);
      } else {
        free_buf(s.mpi, o_.device);
      }
    }
    slots_.clear();
  }

  void isend(int slot, size_t n, int peer, int tag) {
    Slot& s = slots_[slot];
#ifdef BENCH_HAVE_CUDA
    if (o_.staged) CUDA_OK(cudaMemcpy(s.mpi, s.dev, n, cudaMemcpyDeviceToHost));
#endif
    reqs_.emplace_back();
    MPI_Isend(s.mpi, static_cast<int>(n), MPI_BYTE, peer, tag, MPI_COMM_WORLD, &reqs_.back());
    recv_slot_.push_back(-1);
  }

  void irecv(int slot, size_t n, int peer, int tag) {
    reqs_.emplace_back();
    MPI_Irecv(slots_[slot].mpi, static_cast<int>(n), MPI_BYTE, peer, tag, MPI_COMM_WORLD, &reqs_.back());
    recv_slot_.push_back(slot);
  }

  void waitall() {
    MPI_Waitall(static_cast<int>(reqs_.size()), reqs_.data(), MPI_STATUSES_IGNORE);
#ifdef BENCH_HAVE_CUDA
    if (o_.staged)
      for (int slot : recv_slot_)
        if (slot >= 0) CUDA_OK(cudaMemcpy(slots_[slot].dev, slots_[slot].mpi, n_, cudaMemcpyHostToDevice));
#endif
    reqs_.clear();
    recv_slot_.clear();
  }

 private:
  struct Slot {
    char* mpi = nullptr;  // what MPI sees
    char* dev = nullptr;  // staged: the device buffer
    bool owned = false;
  };

  static char* alloc(size_t n, bool device) {
#ifdef BENCH_HAVE_CUDA
    if (device) {
      char* p = nullptr;
      CUDA_OK(cudaMalloc(reinterpret_cast<void**>(&p), n));
      CUDA_OK(cudaMemset(p, 0x5a, n));
      return p;
    }
#endif
    char* p = static_cast<char*>(std::malloc(n));
    std::memset(p, 0x5a, n);
    return p;
  }
  static void free_buf(char* p, bool device) {
#ifdef BENCH_HAVE_CUDA
    if (device) {
      cudaFree(p);
      return;
    }
#endif
    std::free(p);
  }
  static char* alloc_pinned(size_t n) {
#ifdef BENCH_HAVE_CUDA
    char* p = nullptr;
    CUDA_OK(cudaMallocHost(reinterpret_cast<void**>(&p), n));
    return p;
#else
    return static_cast<char*>(std::malloc(n));
#endif
  }
  static void free_pinned(char* p) {
#ifdef BENCH_HAVE_CUDA
    cudaFreeHost(p);
#else
    std::free(p);
#endif
  }

  const osu::Options& o_;
  size_t n_ = 0;
  std::vector<Slot> slots_;
  std::vector<MPI_Request> reqs_;
  std::vector<int> recv_slot_;
};

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  osu::Options o = osu::parse_options(argc, argv);
#ifdef BENCH_HAVE_CUDA
  // One GPU per rank of a node, as MPI programs do.
  // Host-memory runs need no GPU (CI builds with nvcc but has no driver).
  int ndev = 0;
  if (cudaGetDeviceCount(&ndev) != cudaSuccess) ndev = 0;
  if (ndev == 0 && (o.device || o.staged)) {
    std::fprintf(stderr, "mpi_bench: no CUDA device visible: --mem device and --staged need a GPU\n");
    MPI_Abort(MPI_COMM_WORLD, 4);
  }
  MPI_Comm node;
  MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node);
  int local = 0;
  MPI_Comm_rank(node, &local);
  MPI_Comm_free(&node);
  if (ndev > 0) CUDA_OK(cudaSetDevice(local % ndev));
#else
  if (o.device || o.staged) osu::usage("built without CUDA: --mem host only");
#endif
  MpiTransport t(o);
  osu::run_sweep(o, t);
  MPI_Finalize();
  return 0;
}
