// A 2-D Jacobi solver whose ranks exchange halo rows every iteration: the application of
// `gpustripe bench halo`. Plain MPI + CUDA, nothing of gpustripe in it, so one binary runs
//   --way unaware   the GPU-unaware pattern: halos copied to pinned host memory, MPI on
//                   the host copies, copied back (what a program for a non-CUDA-aware MPI does)
//   --way aware     device pointers straight to MPI: a CUDA-aware MPI (Open MPI's pml ucx),
//                   or any MPI with libgpustripe_mpi.so preloaded
//   --way nccl      ncclSend/ncclRecv of the halos, grouped, on the compute stream (NCCL
//                   loaded at run time from --nccl-lib)
// The global domain is `rows` x `cols` doubles split into row slabs, one per rank (rank
// r owns rows [r0, r0 + lr)); each iteration sends its first owned row up and its last
// down (the halo: one row, cols x 8 bytes) and then takes a Jacobi step. `--exchange`
// picks MPI_Sendrecv (up, then down) or Isend/Irecv of both with one Waitall; a comma
// list runs each, and `--shape RxC`, repeated, each domain, in one launch.
//
// Timed: `--iters` iterations (exchange + step) after `--warmup`, and the same count of
// exchanges alone; both the slowest rank's. `--min-ms M`: more iterations where `--iters` of
// them would take less than M ms at the pace of a few untimed ones (the ranks take the largest
// count), since a loop of a few hundred microseconds times the launch's first moments more than
// the iterations. The MPI ways' iterations are split too: the wait for the step before each
// exchange and the exchange after it (us_wait_step, us_exchange_in_iter), which tells an
// exchange slower behind a step from one slower alone. `--check` runs the same iterations on the
// whole domain in one process (the same kernel on this rank's GPU, or the host code) and
// compares every owned value: the max abs error, failing above --tol. Rank 0 prints one
// "ROW {json}" line per shape and variant, and "halo: check passed|FAILED".
//
// Without a GPU (CI): --compute host steps on the host, on --mem host (malloc) or --mem
// hook: "device" memory of the gpustripe interposer's backend (its test hook, found with
// dlsym and present only where libgpustripe_mpi.so is preloaded), which on the emulated
// backend is host memory, so the halos go through the interposer as device buffers.
#include <dlfcn.h>
#include <mpi.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "jacobi.hpp"
#include "nccl_dl.hpp"

#ifdef HALO_HAVE_CUDA
#include <cuda_runtime.h>
// As bench/mpi's clients check CUDA calls; restated, since the application stands alone.
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

struct Options {
  long rows = 1024, cols = 1024;  // the shape being run
  std::vector<std::pair<long, long>> shapes;
  std::vector<std::string> exchanges;
  int iters = 20, warmup = 3;
  double min_ms = 0;
  std::string way = "aware", exchange = "sendrecv", compute = "device", mem = "device";
  std::string nccl_lib, method;
  bool check = false;
  double tol = 1e-12;
};

[[noreturn]] void fail(const std::string& why) {
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  if (rank == 0)
    std::fprintf(stderr,
                 "halo: %s\nusage: halo --shape RxC [--shape ...] [--iters N] [--warmup W] [--min-ms M] [--way aware|unaware|nccl] "
                 "[--exchange sendrecv,isend] [--compute device|host] [--mem device|host|hook] [--check] [--tol T] "
                 "[--nccl-lib PATH] [--method LABEL]\n",
                 why.c_str());
  MPI_Finalize();
  std::exit(2);
}

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) fail(a + " needs a value");
      return argv[++i];
    };
    if (a == "--shape") {
      std::string v = next();
      size_t x = v.find('x');
      if (x == std::string::npos) fail("--shape " + v + ": ROWSxCOLS, e.g. 8x4194304");
      o.shapes.emplace_back(std::atol(v.substr(0, x).c_str()), std::atol(v.substr(x + 1).c_str()));
    }
    else if (a == "--iters") o.iters = std::atoi(next().c_str());
    else if (a == "--warmup") o.warmup = std::atoi(next().c_str());
    else if (a == "--min-ms") o.min_ms = std::atof(next().c_str());
    else if (a == "--way") o.way = next();
    else if (a == "--exchange") o.exchange = next();
    else if (a == "--compute") o.compute = next();
    else if (a == "--mem") o.mem = next();
    else if (a == "--nccl-lib") o.nccl_lib = next();
    else if (a == "--method") o.method = next();
    else if (a == "--tol") o.tol = std::atof(next().c_str());
    else if (a == "--check") o.check = true;
    else fail("unknown argument " + a);
  }
  if (o.shapes.empty()) fail("--shape ROWSxCOLS is needed");
  for (auto [r, c] : o.shapes)
    if (r < 1 || c < 3) fail("--shape: at least 1 row and 3 columns");
  for (size_t at = 0; at <= o.exchange.size();) {
    size_t comma = std::min(o.exchange.find(',', at), o.exchange.size());
    o.exchanges.push_back(o.exchange.substr(at, comma - at));
    at = comma + 1;
  }
  for (const std::string& e : o.exchanges)
    if (e != "sendrecv" && e != "isend") fail("--exchange: sendrecv or isend, or both: sendrecv,isend");
  if (o.iters < 1 || o.warmup < 0 || !(o.min_ms >= 0)) fail("--iters must be at least 1, --warmup and --min-ms at least 0");
  if (o.way != "aware" && o.way != "unaware" && o.way != "nccl") fail("--way: aware, unaware or nccl");
  if (o.compute != "device" && o.compute != "host") fail("--compute: device or host");
  if (o.mem != "device" && o.mem != "host" && o.mem != "hook") fail("--mem: device, host or hook");
  if (o.compute == "host" && o.mem == "device") fail("--compute host needs --mem host or hook (memory the host can step on)");
  if (o.compute == "device" && o.mem != "device") fail("--compute device needs --mem device");
  if (o.way == "nccl" && (o.compute != "device" || o.nccl_lib.empty())) fail("--way nccl needs --compute device and --nccl-lib");
#ifndef HALO_HAVE_CUDA
  if (o.compute == "device") fail("built without CUDA: --compute host");
#endif
  if (o.method.empty()) o.method = o.way;
  return o;
}

// Where the slabs live and how a step runs there.
class Memory {
 public:
  Memory(const Options& o, int local_rank) : o_(o) {
    if (o.mem == "hook") {
      alloc_ = reinterpret_cast<void* (*)(int, size_t)>(dlsym(RTLD_DEFAULT, "gpustripe_mpi_test_alloc"));
      free_ = reinterpret_cast<void (*)(void*)>(dlsym(RTLD_DEFAULT, "gpustripe_mpi_test_free"));
      auto count = reinterpret_cast<int (*)()>(dlsym(RTLD_DEFAULT, "gpustripe_mpi_test_device_count"));
      auto backend = reinterpret_cast<const char* (*)()>(dlsym(RTLD_DEFAULT, "gpustripe_mpi_test_backend"));
      if (!alloc_ || !free_ || !count || !backend)
        fail("--mem hook needs the gpustripe interposer preloaded (mpirun -x LD_PRELOAD=.../libgpustripe_mpi.so)");
      if (std::strcmp(backend(), "emulated") != 0) fail("--mem hook: the host can step only on emulated devices");
      dev_ = local_rank % std::max(1, count());
    }
#ifdef HALO_HAVE_CUDA
    if (o.compute == "device") {
      int n = 0;
      CUDA_OK(cudaGetDeviceCount(&n));
      dev_ = local_rank % n;
      CUDA_OK(cudaSetDevice(dev_));
      CUDA_OK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    }
#endif
  }
  ~Memory() {
#ifdef HALO_HAVE_CUDA
    if (stream_) cudaStreamDestroy(stream_);
#endif
  }
  double* alloc(size_t n) {
    size_t bytes = n * sizeof(double);
    void* p = nullptr;
    if (o_.mem == "hook") p = alloc_(dev_, bytes);
    else if (o_.mem == "host") p = std::malloc(bytes);
#ifdef HALO_HAVE_CUDA
    else CUDA_OK(cudaMalloc(&p, bytes));
#endif
    if (!p) fail("cannot allocate " + std::to_string(bytes) + " bytes");
    return static_cast<double*>(p);
  }
  void free(double* p) {
    if (o_.mem == "hook") free_(p);
    else if (o_.mem == "host") std::free(p);
#ifdef HALO_HAVE_CUDA
    else cudaFree(p);
#endif
  }
  void init(double* a, long lr, long r0) {
#ifdef HALO_HAVE_CUDA
    if (o_.compute == "device") return halo::init_device(a, lr, o_.cols, r0, o_.rows, stream_);
#endif
    halo::init_host(a, lr, o_.cols, r0, o_.rows);
  }
  void step(const double* a, double* b, long lr) {
#ifdef HALO_HAVE_CUDA
    if (o_.compute == "device") return halo::step_device(a, b, lr, o_.cols, stream_);
#endif
    halo::step_host(a, b, lr, o_.cols);
  }
  // Waits for the steps enqueued so far (before MPI reads their rows).
  void sync() {
#ifdef HALO_HAVE_CUDA
    if (o_.compute == "device") CUDA_OK(cudaStreamSynchronize(stream_));
#endif
  }
  // Copies one row between this memory and the host (the GPU-unaware pattern; a memcpy
  // where the host steps).
  void to_host(double* host, const double* row, size_t n) {
#ifdef HALO_HAVE_CUDA
    if (o_.compute == "device") {
      CUDA_OK(cudaMemcpyAsync(host, row, n * sizeof(double), cudaMemcpyDeviceToHost, stream_));
      return;
    }
#endif
    std::memcpy(host, row, n * sizeof(double));
  }
  void from_host(double* row, const double* host, size_t n) {
#ifdef HALO_HAVE_CUDA
    if (o_.compute == "device") {
      CUDA_OK(cudaMemcpyAsync(row, host, n * sizeof(double), cudaMemcpyHostToDevice, stream_));
      return;
    }
#endif
    std::memcpy(row, host, n * sizeof(double));
  }
  double* alloc_pinned(size_t n) {
#ifdef HALO_HAVE_CUDA
    if (o_.compute == "device") {
      void* p = nullptr;
      CUDA_OK(cudaMallocHost(&p, n * sizeof(double)));
      return static_cast<double*>(p);
    }
#endif
    return static_cast<double*>(std::malloc(n * sizeof(double)));
  }
  void free_pinned(double* p) {
#ifdef HALO_HAVE_CUDA
    if (o_.compute == "device") return (void)cudaFreeHost(p);
#endif
    std::free(p);
  }
  void* stream() const {
#ifdef HALO_HAVE_CUDA
    return stream_;
#else
    return nullptr;
#endif
  }

 private:
  const Options& o_;
  int dev_ = 0;
  void* (*alloc_)(int, size_t) = nullptr;
  void (*free_)(void*) = nullptr;
#ifdef HALO_HAVE_CUDA
  cudaStream_t stream_ = nullptr;
#endif
};

// NCCL's communicator of all ranks (--way nccl), made once for every shape.
struct NcclComm {
  NcclComm(const std::string& lib, int rank, int size) : nccl(lib) {
    if (!nccl.error().empty()) fail("NCCL: " + nccl.error());
    halo::NcclId id{};
    if (rank == 0) nccl.ok(nccl.get_id(&id), "ncclGetUniqueId");
    MPI_Bcast(&id, sizeof id, MPI_BYTE, 0, MPI_COMM_WORLD);
    nccl.ok(nccl.init_rank(&comm, size, id, rank), "ncclCommInitRank");
  }
  ~NcclComm() {
    if (comm) nccl.destroy(comm);
  }
  halo::Nccl nccl;
  void* comm = nullptr;
};

// The halo exchange of one slab: rows 1 and lr go to the ranks above and below, rows 0
// and lr+1 come from them.
class Exchange {
 public:
  Exchange(const Options& o, Memory& m, NcclComm* nccl, int rank, int size, long lr)
      : o_(o), m_(m), nccl_(nccl), up_(rank > 0 ? rank - 1 : MPI_PROC_NULL),
        down_(rank + 1 < size ? rank + 1 : MPI_PROC_NULL), lr_(lr), n_(static_cast<size_t>(o.cols)) {
    if (o.way == "unaware")
      for (double*& p : host_) p = m_.alloc_pinned(n_);
  }
  ~Exchange() {
    for (double* p : host_)
      if (p) m_.free_pinned(p);
  }
  Exchange(const Exchange&) = delete;
  Exchange& operator=(const Exchange&) = delete;
  // The MPI ways' time since reset(): waiting for the step before each exchange, and the
  // exchange after it (where an iteration's time goes: the step, or the exchange behind it).
  void reset() { waited_s_ = exchanged_s_ = 0; }
  double waited_s() const { return waited_s_; }
  double exchanged_s() const { return exchanged_s_; }
  int neighbours() const { return (up_ != MPI_PROC_NULL) + (down_ != MPI_PROC_NULL); }

  // Fills the ghost rows of `a` from the neighbours. MPI ways return with the rows in
  // place; NCCL's are enqueued on the compute stream, ahead of the next step.
  void run(double* a) {
    double* send_up = a + n_;
    double* send_down = a + lr_ * n_;
    double* recv_up = a;
    double* recv_down = a + (lr_ + 1) * n_;
    if (nccl_) {
      const halo::Nccl& n = nccl_->nccl;
      void* c = nccl_->comm;
      n.ok(n.group_start(), "ncclGroupStart");
      if (up_ != MPI_PROC_NULL) {
        n.ok(n.send(send_up, n_, halo::Nccl::kFloat64, up_, c, m_.stream()), "ncclSend");
        n.ok(n.recv(recv_up, n_, halo::Nccl::kFloat64, up_, c, m_.stream()), "ncclRecv");
      }
      if (down_ != MPI_PROC_NULL) {
        n.ok(n.send(send_down, n_, halo::Nccl::kFloat64, down_, c, m_.stream()), "ncclSend");
        n.ok(n.recv(recv_down, n_, halo::Nccl::kFloat64, down_, c, m_.stream()), "ncclRecv");
      }
      n.ok(n.group_end(), "ncclGroupEnd");
      return;
    }
    const double t0 = MPI_Wtime();
    m_.sync();  // the step that wrote rows 1 and lr has finished
    const double t1 = MPI_Wtime();
    if (o_.way == "unaware") {
      if (up_ != MPI_PROC_NULL) m_.to_host(host_[0], send_up, n_);
      if (down_ != MPI_PROC_NULL) m_.to_host(host_[1], send_down, n_);
      m_.sync();
      mpi(host_[0], host_[1], host_[2], host_[3]);
      // the next step is enqueued behind these copies on the same stream
      if (up_ != MPI_PROC_NULL) m_.from_host(recv_up, host_[2], n_);
      if (down_ != MPI_PROC_NULL) m_.from_host(recv_down, host_[3], n_);
    } else {
      mpi(send_up, send_down, recv_up, recv_down);
    }
    waited_s_ += t1 - t0;
    exchanged_s_ += MPI_Wtime() - t1;
  }

 private:
  void mpi(double* send_up, double* send_down, double* recv_up, double* recv_down) {
    const int n = static_cast<int>(n_);
    if (o_.exchange == "sendrecv") {
      MPI_Sendrecv(send_up, n, MPI_DOUBLE, up_, 0, recv_down, n, MPI_DOUBLE, down_, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
      MPI_Sendrecv(send_down, n, MPI_DOUBLE, down_, 1, recv_up, n, MPI_DOUBLE, up_, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
      return;
    }
    MPI_Request r[4];
    MPI_Irecv(recv_up, n, MPI_DOUBLE, up_, 1, MPI_COMM_WORLD, &r[0]);
    MPI_Irecv(recv_down, n, MPI_DOUBLE, down_, 0, MPI_COMM_WORLD, &r[1]);
    MPI_Isend(send_up, n, MPI_DOUBLE, up_, 0, MPI_COMM_WORLD, &r[2]);
    MPI_Isend(send_down, n, MPI_DOUBLE, down_, 1, MPI_COMM_WORLD, &r[3]);
    MPI_Waitall(4, r, MPI_STATUSES_IGNORE);
  }

  const Options& o_;
  Memory& m_;
  NcclComm* nccl_;
  int up_, down_;
  long lr_;
  size_t n_;
  double* host_[4] = {nullptr, nullptr, nullptr, nullptr};  // unaware: send up, send down, recv up, recv down
  double waited_s_ = 0, exchanged_s_ = 0;
};

// Max abs difference between the owned rows of `a` and rows [r0, r0 + lr) of the
// single-process reference after `steps` steps.
double check(const Options& o, Memory& m, const double* a, long lr, long r0, int steps) {
  const size_t n = static_cast<size_t>(o.cols);
  double* ref[2] = {m.alloc((o.rows + 2) * n), m.alloc((o.rows + 2) * n)};
  m.init(ref[0], o.rows, 0);
  m.init(ref[1], o.rows, 0);
  for (int s = 0; s < steps; ++s) {
    m.step(ref[0], ref[1], o.rows);
    std::swap(ref[0], ref[1]);
  }
  m.sync();
  std::vector<double> mine(n), want(n);
  double err = 0;
  for (long k = 1; k <= lr; ++k) {
    m.to_host(mine.data(), a + k * n, n);
    m.to_host(want.data(), ref[0] + (r0 + k) * n, n);
    m.sync();
    for (size_t j = 0; j < n; ++j) err = std::max(err, std::fabs(mine[j] - want[j]));
  }
  m.free(ref[0]);
  m.free(ref[1]);
  return err;
}

// How many iterations to time: --iters, or more where those would last less than --min-ms at
// the pace of a few untimed ones (the ranks' largest count, so that every rank runs as many).
template <class Iterate>
int timed_iterations(const Options& o, Memory& m, Iterate&& iterate) {
  if (o.min_ms <= 0) return o.iters;
  constexpr int kPaced = 5;
  MPI_Barrier(MPI_COMM_WORLD);
  const double t0 = MPI_Wtime();
  for (int i = 0; i < kPaced; ++i) iterate();
  m.sync();
  const double per_s = (MPI_Wtime() - t0) / kPaced;
  const double want = std::ceil(o.min_ms * 1e-3 / std::max(per_s, 1e-9));
  int mine = static_cast<int>(std::min(want, 1e6)), most = 0;
  mine = std::max(mine, o.iters);
  MPI_Allreduce(&mine, &most, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  return most;
}

// One shape and exchange variant: times it, checks it when asked, rank 0 prints its row.
// False when the check failed.
bool run_one(const Options& o, Memory& m, NcclComm* nccl, int rank, int size) {
  const long lr = o.rows / size + (rank < o.rows % size ? 1 : 0);
  const long r0 = rank * (o.rows / size) + std::min<long>(rank, o.rows % size);
  const size_t cells = static_cast<size_t>(lr + 2) * static_cast<size_t>(o.cols);
  double* a = m.alloc(cells);
  double* b = m.alloc(cells);
  m.init(a, lr, r0);
  m.init(b, lr, r0);
  Exchange ex(o, m, nccl, rank, size, lr);
  int steps = 0;  // the reference's count (--check)
  auto iterate = [&] {
    ex.run(a);
    m.step(a, b, lr);
    std::swap(a, b);
    ++steps;
  };
  for (int i = 0; i < o.warmup; ++i) iterate();
  m.sync();
  const int iters = timed_iterations(o, m, iterate);
  MPI_Barrier(MPI_COMM_WORLD);
  ex.reset();
  double t0 = MPI_Wtime();
  for (int i = 0; i < iters; ++i) iterate();
  m.sync();
  double iter_s = (MPI_Wtime() - t0) / iters;
  const double waited_s = ex.waited_s() / iters, exchanged_s = ex.exchanged_s() / iters;
  // The exchange alone (the ghost rows it rewrites hold the values they already have).
  MPI_Barrier(MPI_COMM_WORLD);
  t0 = MPI_Wtime();
  for (int i = 0; i < iters; ++i) ex.run(a);
  m.sync();
  double exchange_s = (MPI_Wtime() - t0) / iters;
  double local_t[4] = {iter_s, exchange_s, waited_s, exchanged_s}, t[4];
  MPI_Allreduce(local_t, t, 4, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  int sent = ex.neighbours(), most = 0;
  MPI_Allreduce(&sent, &most, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);

  double err = -1;
  if (o.check) {
    double mine = check(o, m, a, lr, r0, steps);
    MPI_Allreduce(&mine, &err, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  }
  if (rank == 0) {
    const double halo_bytes = static_cast<double>(o.cols) * sizeof(double);
    char errs[32], parts[96] = "";
    std::snprintf(errs, sizeof errs, err < 0 ? "null" : "%.3g", err);
    if (o.way != "nccl")  // NCCL's exchange is enqueued behind the step: no host wait to split off
      std::snprintf(parts, sizeof parts, ", \"us_wait_step\": %.3f, \"us_exchange_in_iter\": %.3f", t[2] * 1e6,
                    t[3] * 1e6);
    std::printf(
        "ROW {\"op\": \"halo\", \"method\": \"%s\", \"variant\": \"%s\", \"way\": \"%s\", \"rows\": %ld, "
        "\"cols\": %ld, \"shape\": \"%ldx%ld\", \"ranks\": %d, \"bytes\": %.0f, \"us\": %.3f, "
        "\"us_exchange\": %.3f, \"gbps\": %.6g, \"iters\": %d, \"compute\": \"%s\", \"max_abs_err\": %s%s}\n",
        o.method.c_str(), o.exchange.c_str(), o.way.c_str(), o.rows, o.cols, o.rows, o.cols, size, halo_bytes,
        t[0] * 1e6, t[1] * 1e6, most * halo_bytes / (t[1] * 1e9), iters, o.compute.c_str(), errs, parts);
    if (o.check)
      std::printf("halo: check %s (%ldx%ld %s: max abs error %.3g, tolerance %.3g, %d iterations)\n",
                  err <= o.tol ? "passed" : "FAILED", o.rows, o.cols, o.exchange.c_str(), err, o.tol, steps);
    std::fflush(stdout);
  }
  m.free(a);
  m.free(b);
  return !(o.check && err > o.tol);
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  Options o = parse(argc, argv);
  for (auto [rows, cols] : o.shapes)
    if (rows < size) fail("--shape " + std::to_string(rows) + "x" + std::to_string(cols) + ": fewer rows than ranks");
  MPI_Comm node;
  MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node);
  int local = 0;
  MPI_Comm_rank(node, &local);
  MPI_Comm_free(&node);

#ifdef HALO_HAVE_CUDA
  // The interposer's test memory on real GPUs is CUDA memory the host cannot step: the same
  // check then runs as a user's program would, on device memory stepped by the kernels.
  if (o.mem == "hook") {
    auto backend = reinterpret_cast<const char* (*)()>(dlsym(RTLD_DEFAULT, "gpustripe_mpi_test_backend"));
    if (backend && std::strcmp(backend(), "emulated") != 0) {
      o.mem = "device";
      o.compute = "device";
      if (rank == 0) std::printf("halo: --mem hook on %s devices: device memory, stepped on the GPU\n", backend());
    }
  }
#endif
  Memory m(o, local);
  std::unique_ptr<NcclComm> nccl(o.way == "nccl" ? new NcclComm(o.nccl_lib, rank, size) : nullptr);
  bool failed = false;
  for (auto [rows, cols] : o.shapes) {
    o.rows = rows;
    o.cols = cols;
    for (const std::string& variant : o.exchanges) {
      o.exchange = variant;
      failed |= !run_one(o, m, nccl.get(), rank, size);
    }
  }
  nccl.reset();
  MPI_Finalize();
  return failed ? 1 : 0;
}
