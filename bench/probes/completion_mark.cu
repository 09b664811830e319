// Probe (issue 14): how the p2p mover should see a copy complete. One peer copy (GPU 1 -> GPU 0
// memory, on a stream of GPU 1, as the receiver pulls) followed by a completion mark, then the
// host polls until it sees the mark. Marks: an event (cudaEventRecord, polled by cudaEventQuery:
// the mover's events), and a stream flag (cuStreamWriteValue32 into registered host memory, polled
// by one load: the mover's completion words). Per mark and size: host time of the mark's enqueue,
// host time of one poll while the copy runs, and the time from the copy's enqueue to the mark seen
// (the latency a receive adds). Also a window: 64 copies with one mark, polled to the end.
// Prints one JSON object per line.
// Build: nvcc -O2 -arch=sm_90 -o completion_mark completion_mark.cu -lcuda
#include <cuda.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "probe_check.h"

namespace {

double now_us() {
  return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

enum class Mark { Event, Flag };
const char* name(Mark m) { return m == Mark::Event ? "event" : "flag"; }

struct Ctx {
  cudaStream_t s;
  cudaEvent_t e;
  uint32_t* word;      // host address
  CUdeviceptr word_d;  // as the stream writes it
  uint32_t seq = 0;
};

double enqueue_mark(Mark m, Ctx& c) {
  const double t = now_us();
  if (m == Mark::Event) {
    CK(cudaEventRecord(c.e, c.s));
  } else {
    ++c.seq;
    if (cuStreamWriteValue32(c.s, c.word_d, c.seq, CU_STREAM_WRITE_VALUE_DEFAULT) != CUDA_SUCCESS) {
      fprintf(stderr, "cuStreamWriteValue32 failed\n");
      exit(1);
    }
  }
  return now_us() - t;
}

// Polls until the mark is seen; returns the number of polls, adds their host time to *poll_us.
int poll(Mark m, Ctx& c, double* poll_us) {
  int polls = 0;
  for (;;) {
    const double t = now_us();
    bool seen;
    if (m == Mark::Event) {
      cudaError_t err = cudaEventQuery(c.e);
      if (err != cudaSuccess && err != cudaErrorNotReady) CK(err);
      seen = err == cudaSuccess;
    } else {
      seen = static_cast<int32_t>(__atomic_load_n(c.word, __ATOMIC_ACQUIRE) - c.seq) >= 0;
    }
    *poll_us += now_us() - t;
    ++polls;
    if (seen) return polls;
  }
}

}  // namespace

int main() {
  int n = 0;
  CK(cudaGetDeviceCount(&n));
  if (n < 2) {
    printf("{\"probe\": \"completion_mark\", \"skipped\": \"needs 2 GPUs\"}\n");
    return 0;
  }
  constexpr size_t kMax = 4u << 20;
  constexpr int kWindow = 64;
  char *src = nullptr, *dst = nullptr;
  CK(cudaSetDevice(0));
  CK(cudaDeviceEnablePeerAccess(1, 0));
  CK(cudaMalloc(&dst, kMax * kWindow));
  CK(cudaSetDevice(1));
  CK(cudaDeviceEnablePeerAccess(0, 0));
  CK(cudaMalloc(&src, kMax * kWindow));
  Ctx c;
  CK(cudaStreamCreateWithFlags(&c.s, cudaStreamNonBlocking));
  CK(cudaEventCreateWithFlags(&c.e, cudaEventDisableTiming));
  c.word = static_cast<uint32_t*>(aligned_alloc(4096, 4096));
  *c.word = 0;
  CK(cudaHostRegister(c.word, 4096, cudaHostRegisterPortable | cudaHostRegisterMapped));
  void* wd = nullptr;
  CK(cudaHostGetDevicePointer(&wd, c.word, 0));
  c.word_d = reinterpret_cast<CUdeviceptr>(wd);
  for (size_t bytes : {size_t{8} << 10, size_t{64} << 10, size_t{256} << 10, size_t{1} << 20, size_t{4} << 20}) {
    for (Mark m : {Mark::Event, Mark::Flag}) {
      std::vector<double> enq, lat, per_poll;
      for (int it = 0; it < 300; ++it) {
        const double t0 = now_us();
        CK(cudaMemcpyPeerAsync(dst, 0, src, 1, bytes, c.s));
        enq.push_back(enqueue_mark(m, c));
        double pu = 0;
        const int polls = poll(m, c, &pu);
        lat.push_back(now_us() - t0);
        per_poll.push_back(pu / polls);
      }
      printf("{\"probe\": \"completion_mark\", \"mark\": \"%s\", \"copies\": 1, \"bytes\": %zu, \"mark_enqueue_us\": %.3f, "
             "\"poll_us\": %.3f, \"seen_after_us\": %.3f}\n",
             name(m), bytes, median(enq), median(per_poll), median(lat));
      std::vector<double> win;
      for (int it = 0; it < 30; ++it) {
        const double t0 = now_us();
        for (int k = 0; k < kWindow; ++k) CK(cudaMemcpyPeerAsync(dst + k * bytes, 0, src + k * bytes, 1, bytes, c.s));
        enqueue_mark(m, c);
        double pu = 0;
        poll(m, c, &pu);
        win.push_back((now_us() - t0) / kWindow);
      }
      printf("{\"probe\": \"completion_mark\", \"mark\": \"%s\", \"copies\": %d, \"bytes\": %zu, \"us_per_copy\": %.3f}\n",
             name(m), kWindow, bytes, median(win));
    }
  }
  CK(cudaHostUnregister(c.word));
  free(c.word);
  return 0;
}
