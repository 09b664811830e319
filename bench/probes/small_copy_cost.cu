// Probe (issue 14): what one small copy between a GPU and host memory costs the host, as an eager
// message's two copies (device -> eager slot on the sender, slot -> device on the receiver) pay
// it. Per memory kind (POSIX shared memory registered with cudaHostRegister as the eager slots
// are, and cudaMallocHost), size (8 B, 4 KB), direction and way of enqueueing the copy: the host
// time of the copy call, of the event record after it, and the time from the copy's enqueue to a
// cudaEventQuery spin seeing it complete (with the number of queries and one query's host time).
// Then the host time of the calls a copy's path may make around it (device and context queries,
// pointer attributes, a stream's device), and of an event record on a stream of a GPU that is
// not the current one. Medians of 2000 after 200 warm-up rounds; one line per row.
// Build: nvcc -O2 -arch=sm_90 -o small_copy_cost small_copy_cost.cu -lcuda
#include <cuda.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "probe_check.h"
#include "probe_shm.h"
#include "probe_time.h"

namespace {

constexpr int kRounds = 2000;
constexpr int kWarm = 200;

__global__ void copy_bytes(char* dst, const char* src, size_t n) {
  for (size_t i = threadIdx.x; i < n; i += blockDim.x) dst[i] = src[i];
}

// The copy and its completion mark in one launch: the kernel writes `seq` to a host word after
// its bytes are visible to the host, so no event (and no second driver call) marks it.
__global__ void copy_bytes_flag(char* dst, const char* src, size_t n, volatile uint32_t* flag, uint32_t seq) {
  for (size_t i = threadIdx.x; i < n; i += blockDim.x) dst[i] = src[i];
  __threadfence_system();
  __syncthreads();
  if (threadIdx.x == 0) *flag = seq;
}

enum class Way { MemcpyAsync, MemcpyAsyncKind, Batch1, CuMemcpy, Kernel, MemcpySync };
const char* name(Way w) {
  switch (w) {
    case Way::MemcpyAsync: return "cudaMemcpyAsync(Default)";
    case Way::MemcpyAsyncKind: return "cudaMemcpyAsync(DtoH/HtoD)";
    case Way::Batch1: return "cudaMemcpyBatchAsync(1)";
    case Way::CuMemcpy: return "cuMemcpyDtoH/HtoDAsync";
    case Way::Kernel: return "kernel(mapped host)";
    case Way::MemcpySync: return "cudaMemcpy(sync)";
  }
  return "?";
}

struct Host {
  const char* kind;
  char* p;       // host address
  char* mapped;  // as a kernel reads/writes it
};

// Enqueues one copy (to_host: device -> host) the given way; returns the call's host time.
double enqueue(Way w, bool to_host, char* dev, const Host& h, size_t n, cudaStream_t s) {
  const double t = now_us();
  switch (w) {
    case Way::MemcpyAsync:
      CK(to_host ? cudaMemcpyAsync(h.p, dev, n, cudaMemcpyDefault, s) : cudaMemcpyAsync(dev, h.p, n, cudaMemcpyDefault, s));
      break;
    case Way::MemcpyAsyncKind:
      CK(to_host ? cudaMemcpyAsync(h.p, dev, n, cudaMemcpyDeviceToHost, s)
                 : cudaMemcpyAsync(dev, h.p, n, cudaMemcpyHostToDevice, s));
      break;
    case Way::Batch1: {
      void* d[1] = {to_host ? static_cast<void*>(h.p) : static_cast<void*>(dev)};
      const void* sr[1] = {to_host ? static_cast<const void*>(dev) : static_cast<const void*>(h.p)};
      size_t sz[1] = {n};
      cudaMemcpyAttributes attr{};
      attr.srcAccessOrder = cudaMemcpySrcAccessOrderStream;
      size_t idx = 0;
      CK(cudaMemcpyBatchAsync(d, sr, sz, 1, &attr, &idx, 1, s));
      break;
    }
    case Way::CuMemcpy:
      if (to_host) CU(cuMemcpyDtoHAsync(h.p, reinterpret_cast<CUdeviceptr>(dev), n, s), "cuMemcpyDtoHAsync");
      else CU(cuMemcpyHtoDAsync(reinterpret_cast<CUdeviceptr>(dev), h.p, n, s), "cuMemcpyHtoDAsync");
      break;
    case Way::Kernel:
      if (to_host) copy_bytes<<<1, 256, 0, s>>>(h.mapped, dev, n);
      else copy_bytes<<<1, 256, 0, s>>>(dev, h.mapped, n);
      CK(cudaGetLastError());
      break;
    case Way::MemcpySync:
      CK(to_host ? cudaMemcpy(h.p, dev, n, cudaMemcpyDefault) : cudaMemcpy(dev, h.p, n, cudaMemcpyDefault));
      break;
  }
  return now_us() - t;
}

void copy_row(Way w, bool to_host, char* dev, const Host& h, size_t n, cudaStream_t s, cudaEvent_t e) {
  std::vector<double> call, rec, done, polls, poll1;
  for (int i = 0; i < kWarm + kRounds; ++i) {
    const double t0 = now_us();
    const double c = enqueue(w, to_host, dev, h, n, s);
    const double t1 = now_us();
    CK(cudaEventRecord(e, s));
    const double r = now_us() - t1;
    int k = 0;
    double q = 0;
    for (;;) {
      const double tq = now_us();
      cudaError_t err = cudaEventQuery(e);
      q += now_us() - tq;
      ++k;
      if (err == cudaSuccess) break;
      if (err != cudaErrorNotReady) CK(err);
    }
    const double d = now_us() - t0;
    if (i < kWarm) continue;
    call.push_back(c);
    rec.push_back(r);
    done.push_back(d);
    polls.push_back(k);
    poll1.push_back(q / k);
  }
  printf("%-6s %-5s %-4s %-28s %8.2f %8.2f %8.2f %6.0f %8.2f\n", h.kind, n < 1024 ? "8B" : "4KB", to_host ? "DtoH" : "HtoD",
         name(w), median(call), median(rec), median(done), median(polls), median(poll1));
}

// The kernel that marks its own completion in a host word: call = the launch, done = launch ->
// the word seen (one load per poll, no event).
void kernel_flag_row(bool to_host, char* dev, const Host& h, size_t n, cudaStream_t s, uint32_t* flag,
                     uint32_t* flag_mapped) {
  std::vector<double> call, done, polls;
  static uint32_t seq = 0;
  for (int i = 0; i < kWarm + kRounds; ++i) {
    ++seq;
    const double t0 = now_us();
    if (to_host) copy_bytes_flag<<<1, 256, 0, s>>>(h.mapped, dev, n, flag_mapped, seq);
    else copy_bytes_flag<<<1, 256, 0, s>>>(dev, h.mapped, n, flag_mapped, seq);
    const double c = now_us() - t0;
    int k = 0;
    while (__atomic_load_n(flag, __ATOMIC_ACQUIRE) != seq) ++k;
    const double d = now_us() - t0;
    if (i < kWarm) continue;
    call.push_back(c);
    done.push_back(d);
    polls.push_back(k);
  }
  CK(cudaGetLastError());
  printf("%-6s %-5s %-4s %-28s %8.2f %8s %8.2f %6.0f %8s\n", h.kind, n < 1024 ? "8B" : "4KB", to_host ? "DtoH" : "HtoD",
         "kernel+flag(no event)", median(call), "-", median(done), median(polls), "-");
}

void call_row(const char* what, const std::function<void()>& f) {
  std::vector<double> v;
  for (int i = 0; i < kWarm + kRounds; ++i) {
    const double t = now_us();
    f();
    if (i >= kWarm) v.push_back(now_us() - t);
  }
  printf("%-56s %8.3f\n", what, median(v));
}

}  // namespace

int main() {
  int ndev = 0;
  CK(cudaGetDeviceCount(&ndev));
  CK(cudaSetDevice(0));
  CK(cudaFree(nullptr));
  const size_t kBytes = 1 << 16;
  char* dev = nullptr;
  CK(cudaMalloc(&dev, kBytes));
  CK(cudaMemset(dev, 1, kBytes));

  // Shared memory as the eager slots map and register it.
  char* shm_mapped = nullptr;
  char* shm = registered_shm("small-copy-cost", kBytes, &shm_mapped);
  char* pinned = nullptr;
  CK(cudaMallocHost(&pinned, kBytes));
  char* pinned_mapped = nullptr;
  CK(cudaHostGetDevicePointer(reinterpret_cast<void**>(&pinned_mapped), pinned, 0));

  cudaStream_t s;
  CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  cudaEvent_t e;
  CK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));

  printf("# small_copy_cost: GPUs %d; medians of %d (us); call = the copy call's host time, record = "
         "cudaEventRecord's, done = copy enqueued -> cudaEventQuery saw it complete, polls = queries, "
         "query = one query's host time\n", ndev, kRounds);
  printf("%-6s %-5s %-4s %-28s %8s %8s %8s %6s %8s\n", "mem", "size", "dir", "way", "call", "record", "done", "polls",
         "query");
  const Host hosts[] = {{"shmreg", shm, shm_mapped}, {"pinned", pinned, pinned_mapped}};
  const Way ways[] = {Way::MemcpyAsync, Way::MemcpyAsyncKind, Way::Batch1, Way::CuMemcpy, Way::Kernel, Way::MemcpySync};
  for (const Host& h : hosts)
    for (size_t n : {size_t{8}, size_t{4096}})
      for (bool to_host : {true, false})
        for (Way w : ways) copy_row(w, to_host, dev, h, n, s, e);
  uint32_t* flag = reinterpret_cast<uint32_t*>(pinned + kBytes - 64);
  uint32_t* flag_mapped = reinterpret_cast<uint32_t*>(pinned_mapped + kBytes - 64);
  for (const Host& h : hosts)
    for (size_t n : {size_t{8}, size_t{4096}})
      for (bool to_host : {true, false}) kernel_flag_row(to_host, dev, h, n, s, flag, flag_mapped);

  printf("\n# host time of one call (us), device 0 current\n");
  int d = 0;
  call_row("cudaGetDevice", [&] { CK(cudaGetDevice(&d)); });
  call_row("cudaSetDevice(current)", [&] { CK(cudaSetDevice(0)); });
  CUcontext ctx;
  call_row("cuCtxGetCurrent", [&] { CU(cuCtxGetCurrent(&ctx), "cuCtxGetCurrent"); });
  call_row("cudaStreamGetDevice", [&] { CK(cudaStreamGetDevice(s, &d)); });
  cudaStreamCaptureStatus cap;
  call_row("cudaStreamIsCapturing", [&] { CK(cudaStreamIsCapturing(s, &cap)); });
  cudaPointerAttributes attr;
  call_row("cudaPointerGetAttributes(device)", [&] { CK(cudaPointerGetAttributes(&attr, dev)); });
  call_row("cudaPointerGetAttributes(shm registered)", [&] { CK(cudaPointerGetAttributes(&attr, shm)); });
  call_row("cudaEventRecord (idle stream)", [&] { CK(cudaEventRecord(e, s)); });
  call_row("cudaEventQuery (complete)", [&] { CK(cudaEventQuery(e)); });
  call_row("cudaGetLastError", [&] { cudaGetLastError(); });
  if (ndev > 1) {
    CK(cudaSetDevice(1));
    cudaStream_t s1;
    CK(cudaStreamCreateWithFlags(&s1, cudaStreamNonBlocking));
    cudaEvent_t e1;
    CK(cudaEventCreateWithFlags(&e1, cudaEventDisableTiming));
    call_row("cudaSetDevice(1) + cudaSetDevice(0)", [&] {
      CK(cudaSetDevice(1));
      CK(cudaSetDevice(0));
    });
    CK(cudaSetDevice(0));
    call_row("cudaEventRecord, stream of GPU 1, GPU 0 current", [&] { CK(cudaEventRecord(e1, s1)); });
    call_row("the same with cudaSetDevice(1) around it", [&] {
      CK(cudaSetDevice(1));
      CK(cudaEventRecord(e1, s1));
      CK(cudaSetDevice(0));
    });
    CK(cudaStreamSynchronize(s1));
  }
  return 0;
}
