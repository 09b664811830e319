// Probe (issue 14): does the host time of a pulled copy's driver call depend on what else the
// process has set up? UCX's cuda_ipc copy call took 1.5-2.4 us inside the CUDA-aware MPI's ranks,
// the same call about 1 us more inside ours, whose process also holds the engine's state: a
// context on every GPU, peer access both ways, staging areas, pinned host memory, streams and
// events, more mappings of the peer's memory. Here one importer process (GPU 1) pulls 8 KB out of
// a buffer of the exporter's (GPU 0, another process, forked before CUDA starts) through a mapping
// opened in its own context, as both MPIs do, and adds that state a piece at a time; at each step
// it times the calls of a pulled copy: cuMemcpyDtoDAsync (the mapping's copy within its context),
// cuEventRecord after it, and the copy's end to end time (call to cuEventSynchronize returning).
// The last step has the exporter copying on its own GPU at the same time (a two-way exchange:
// both processes in copy calls at once).
// The steps run in the order named on the command line (the measurements drift over a run, so a
// step's effect shows only as a change from the step before, in more than one order).
// Medians of 2000 after 200 warm-up rounds; one JSON line per step.
// Build: nvcc -O2 -arch=sm_90 -o copy_call_state copy_call_state.cu -lcuda
// Run: [CORE=N] ./copy_call_state [STEP ...]   (CORE: the importer runs on that CPU only)   (default: every step in the order below; "bare" measures
// without adding anything, so it may come again to show the drift)
#include <cuda.h>
#include <cuda_runtime.h>
#include <sched.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "probe_check.h"
#include "probe_time.h"
#include "probe_words.h"

namespace {

constexpr size_t kCopy = 8 << 10;
constexpr size_t kBuf = 64ull << 20;
constexpr int kMaps = 9;  // the pulled buffer and eight more of the exporter's, mapped at one step
constexpr int kIters = 2000, kWarm = 200;

struct Shared {
  cudaIpcMemHandle_t handles[kMaps];
  Word ready, busy, stop;
};

void exporter(Shared* sh) {
  CK(cudaSetDevice(0));
  void* bufs[kMaps];
  for (int i = 0; i < kMaps; ++i) {
    CK(cudaMalloc(&bufs[i], kBuf));
    CK(cudaIpcGetMemHandle(&sh->handles[i], bufs[i]));
  }
  void* local = nullptr;
  CK(cudaMalloc(&local, kCopy));
  cudaStream_t s;
  CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  sh->ready.v.store(1, std::memory_order_release);
  // Copies of its own while the importer's exporter_copying step runs, until told to stop
  // (which may come without that step).
  while (sh->busy.v.load(std::memory_order_acquire) == 0 && sh->stop.v.load(std::memory_order_acquire) == 0) {
  }
  while (sh->stop.v.load(std::memory_order_acquire) == 0) {
    CU(cuMemcpyDtoDAsync(reinterpret_cast<CUdeviceptr>(local), reinterpret_cast<CUdeviceptr>(bufs[1]), kCopy, s),
       "cuMemcpyDtoDAsync");
    CK(cudaStreamSynchronize(s));
  }
  CK(cudaDeviceSynchronize());
}

struct Timed {
  double copy_us, record_us, total_us;
};

Timed time_copies(CUdeviceptr dst, CUdeviceptr src, CUstream s, CUevent e) {
  std::vector<double> copy, record, total;
  for (int i = 0; i < kIters + kWarm; ++i) {
    const double t0 = now_us();
    CU(cuMemcpyDtoDAsync(dst, src, kCopy, s), "cuMemcpyDtoDAsync");
    const double t1 = now_us();
    CU(cuEventRecord(e, s), "cuEventRecord");
    const double t2 = now_us();
    CU(cuEventSynchronize(e), "cuEventSynchronize");
    const double t3 = now_us();
    if (i < kWarm) continue;
    copy.push_back(t1 - t0);
    record.push_back(t2 - t1);
    total.push_back(t3 - t0);
  }
  return {median(copy), median(record), median(total)};
}

const char* const kSteps[] = {"bare",   "ctx_gpu0",       "peer_1to0", "peer_both",       "alloc_32x64M_each",
                              "pinned_256M", "registered_64M", "streams_events", "mapped_9", "exporter_copying"};
constexpr int kNumSteps = sizeof kSteps / sizeof kSteps[0];

void importer(Shared* sh, const std::vector<int>& order) {
  if (const char* core = std::getenv("CORE")) {
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(std::atoi(core), &set);
    if (sched_setaffinity(0, sizeof set, &set) != 0) {
      perror("sched_setaffinity");
      exit(1);
    }
  }
  spin_until(sh->ready, 1);
  CK(cudaSetDevice(1));
  void* maps[kMaps] = {};
  CK(cudaIpcOpenMemHandle(&maps[0], sh->handles[0], cudaIpcMemLazyEnablePeerAccess));
  void* dst = nullptr;
  CK(cudaMalloc(&dst, kCopy));
  CUstream s;
  CU(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING), "cuStreamCreate");
  CUevent e;
  CU(cuEventCreate(&e, CU_EVENT_DISABLE_TIMING), "cuEventCreate");
  std::vector<void*> keep;
  std::vector<cudaStream_t> streams;
  std::vector<cudaEvent_t> events;
  for (int step : order) {
    switch (step) {
      case 1:  // a context on the other GPU, as the engine's streams there make one
        CK(cudaSetDevice(0));
        CK(cudaFree(nullptr));
        CK(cudaSetDevice(1));
        break;
      case 2:
        CK(cudaDeviceEnablePeerAccess(0, 0));
        break;
      case 3:
        CK(cudaSetDevice(0));
        CK(cudaDeviceEnablePeerAccess(1, 0));
        CK(cudaSetDevice(1));
        break;
      case 4:  // staging areas and scratch
        for (int d = 0; d < 2; ++d) {
          CK(cudaSetDevice(d));
          for (int i = 0; i < 32; ++i) {
            void* p = nullptr;
            CK(cudaMalloc(&p, 64ull << 20));
            keep.push_back(p);
          }
        }
        CK(cudaSetDevice(1));
        break;
      case 5: {  // the host path's pinned staging
        void* p = nullptr;
        CK(cudaHostAlloc(&p, 256ull << 20, cudaHostAllocPortable));
        break;
      }
      case 6: {  // host memory registered as the eager slots' is
        void* p = nullptr;
        CK(cudaMallocHost(&p, 1));  // the runtime initialised on this thread's device
        static std::vector<char> area(64ull << 20);
        CK(cudaHostRegister(area.data(), area.size(), cudaHostRegisterPortable | cudaHostRegisterMapped));
        break;
      }
      case 7:  // the mover's lanes and the engine's streams and events
        for (int d = 0; d < 2; ++d) {
          CK(cudaSetDevice(d));
          for (int i = 0; i < 16; ++i) {
            cudaStream_t x;
            CK(cudaStreamCreateWithFlags(&x, cudaStreamNonBlocking));
            streams.push_back(x);
          }
          for (int i = 0; i < 64; ++i) {
            cudaEvent_t x;
            CK(cudaEventCreateWithFlags(&x, cudaEventDisableTiming));
            events.push_back(x);
          }
        }
        CK(cudaSetDevice(1));
        break;
      case 8:  // more of the peer's buffers mapped, as a job's many messages leave them
        for (int i = 1; i < kMaps; ++i)
          CK(cudaIpcOpenMemHandle(&maps[i], sh->handles[i], cudaIpcMemLazyEnablePeerAccess));
        break;
      case 9:
        sh->busy.v.store(1, std::memory_order_release);
        break;
    }
    Timed t = time_copies(reinterpret_cast<CUdeviceptr>(dst), reinterpret_cast<CUdeviceptr>(maps[0]), s, e);
    printf("{\"step\": \"%s\", \"bytes\": %zu, \"copy_call_us\": %.3f, \"record_us\": %.3f, \"end_to_end_us\": %.3f}\n",
           kSteps[step], kCopy, t.copy_us, t.record_us, t.total_us);
    fflush(stdout);
  }
  sh->stop.v.store(1, std::memory_order_release);
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<int> order;
  for (int i = 1; i < argc; ++i) {
    int k = 0;
    while (k < kNumSteps && std::strcmp(argv[i], kSteps[k]) != 0) ++k;
    if (k == kNumSteps) {
      fprintf(stderr, "copy_call_state: unknown step %s\n", argv[i]);
      return 2;
    }
    order.push_back(k);
  }
  if (order.empty())
    for (int k = 0; k < kNumSteps; ++k) order.push_back(k);
  return run_pair<Shared>([&](Shared* sh, int r) {
           if (r == 0) importer(sh, order);
           else exporter(sh);
         })
             ? 0
             : 1;
}
