// Probe (issue 14): ways a small device message could cross host memory in fewer or shorter DMA
// completions than an eager slot's two asynchronous copies (small_copy_cost.cu measures those).
//   pageable    cudaMemcpyAsync from and to plain malloc'd memory: whether the driver's staging
//               of a small pageable copy completes sooner than a DMA from registered memory
//   early       synchronous cudaMemcpy host -> device: when the call returns, and when an event
//               recorded after it on the legacy stream completes (a pageable copy may return
//               before its DMA has landed: what a receive completing on its return would race)
//   inline      the bytes carried in the stream's commands (cuStreamBatchMemOp of 8-byte
//               writes into device memory): no copy engine reads host memory
//   window      64 copies of one size, slots -> 64 device buffers and back: one call each, one
//               cudaMemcpyBatchAsync, one kernel gathering them through mapped host memory
// Per row: host time of the enqueue (us), enqueue -> the event after it seen complete (us).
// Medians of 2000 after 200 warm-up rounds (the window rows: of 500).
// Build: nvcc -O2 -arch=sm_90 -o small_copy_paths small_copy_paths.cu -lcuda
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

constexpr int kWarm = 200;

void spin(cudaEvent_t e) {
  for (;;) {
    cudaError_t err = cudaEventQuery(e);
    if (err == cudaSuccess) return;
    if (err != cudaErrorNotReady) CK(err);
  }
}

// One row: `enqueue` (timed), then an event on `s` (not timed), spun to completion.
void row(const char* what, int rounds, cudaStream_t s, cudaEvent_t e, const std::function<void()>& enqueue) {
  std::vector<double> call, done;
  for (int i = 0; i < kWarm + rounds; ++i) {
    const double t0 = now_us();
    enqueue();
    const double t1 = now_us();
    CK(cudaEventRecord(e, s));
    spin(e);
    const double t2 = now_us();
    if (i < kWarm) continue;
    call.push_back(t1 - t0);
    done.push_back(t2 - t0);
  }
  CK(cudaGetLastError());
  printf("%-58s %8.2f %8.2f\n", what, median(call), median(done));
}

// Each block copies one of `n` buffers of `bytes` (the window's gather, one launch).
struct Gather {
  char* dst[64];
  const char* src[64];
};
__global__ void gather(Gather g, size_t bytes) {
  const char* s = g.src[blockIdx.x];
  char* d = g.dst[blockIdx.x];
  for (size_t i = threadIdx.x * 8; i < bytes; i += blockDim.x * 8) {
    if (i + 8 <= bytes && (reinterpret_cast<uintptr_t>(s + i) % 8 == 0) && (reinterpret_cast<uintptr_t>(d + i) % 8 == 0)) {
      *reinterpret_cast<uint64_t*>(d + i) = *reinterpret_cast<const uint64_t*>(s + i);
    } else {
      for (size_t j = i; j < bytes && j < i + 8; ++j) d[j] = s[j];
    }
  }
}

}  // namespace

int main() {
  CK(cudaSetDevice(0));
  CK(cudaFree(nullptr));
  constexpr size_t kSlot = 4096, kWindow = 64, kBytes = kSlot * kWindow;
  char* dev = nullptr;
  CK(cudaMalloc(&dev, kBytes));
  CK(cudaMemset(dev, 1, kBytes));
  // Shared memory as the eager slots map and register it.
  char* shm_mapped = nullptr;
  char* shm = registered_shm("small-copy-paths", kBytes, &shm_mapped);
  std::vector<char> pageable(kBytes, 0);
  char* page = pageable.data();

  cudaStream_t s;
  CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  cudaEvent_t e;
  CK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
  constexpr int kRounds = 2000;

  printf("# small_copy_paths: medians (us); call = the enqueue's host time, done = enqueue -> the event after "
         "it seen complete\n");
  printf("%-58s %8s %8s\n", "row", "call", "done");
  for (size_t n : {size_t{8}, size_t{4096}}) {
    const char* sz = n == 8 ? "8B" : "4KB";
    char what[128];
    snprintf(what, sizeof what, "pageable %s HtoD cudaMemcpyAsync", sz);
    row(what, kRounds, s, e, [&] { CK(cudaMemcpyAsync(dev, page, n, cudaMemcpyHostToDevice, s)); });
    snprintf(what, sizeof what, "shmreg   %s HtoD cudaMemcpyAsync", sz);
    row(what, kRounds, s, e, [&] { CK(cudaMemcpyAsync(dev, shm, n, cudaMemcpyHostToDevice, s)); });
    snprintf(what, sizeof what, "pageable %s DtoH cudaMemcpyAsync", sz);
    row(what, kRounds, s, e, [&] { CK(cudaMemcpyAsync(page, dev, n, cudaMemcpyDeviceToHost, s)); });
    snprintf(what, sizeof what, "shmreg   %s DtoH cudaMemcpyAsync", sz);
    row(what, kRounds, s, e, [&] { CK(cudaMemcpyAsync(shm, dev, n, cudaMemcpyDeviceToHost, s)); });
    // Early return: `call` is when cudaMemcpy returned, `done` when the legacy stream's event
    // after it completed (the DMA landed).
    snprintf(what, sizeof what, "early pageable %s HtoD cudaMemcpy (sync), legacy event", sz);
    row(what, kRounds, cudaStreamLegacy, e, [&] { CK(cudaMemcpy(dev, page, n, cudaMemcpyHostToDevice)); });
    snprintf(what, sizeof what, "early shmreg   %s HtoD cudaMemcpy (sync), legacy event", sz);
    row(what, kRounds, cudaStreamLegacy, e, [&] { CK(cudaMemcpy(dev, shm, n, cudaMemcpyHostToDevice)); });
  }

  // Inline: 8-byte writes carried in the stream's commands (1: 8 B; 8: 64 B).
  for (unsigned k : {1u, 8u}) {
    std::vector<CUstreamBatchMemOpParams> ops(k);
    for (unsigned i = 0; i < k; ++i) {
      memset(&ops[i], 0, sizeof ops[i]);
      ops[i].writeValue.operation = CU_STREAM_MEM_OP_WRITE_VALUE_64;
      ops[i].writeValue.address = reinterpret_cast<CUdeviceptr>(dev + 8 * i);
      ops[i].writeValue.value64 = 0x0102030405060708ull + i;
      ops[i].writeValue.flags = CU_STREAM_WRITE_VALUE_NO_MEMORY_BARRIER;
    }
    char what[128];
    snprintf(what, sizeof what, "inline %u B HtoD cuStreamBatchMemOp(%u x WRITE_VALUE_64)", 8 * k, k);
    row(what, kRounds, s, e, [&] { CU(cuStreamBatchMemOp(s, k, ops.data(), 0), "cuStreamBatchMemOp"); });
  }

  // Windows of 64: slots (shm) <-> 64 device buffers kSlot apart.
  constexpr int kWinRounds = 500;
  for (size_t n : {size_t{8}, size_t{4096}}) {
    const char* sz = n == 8 ? "8B" : "4KB";
    for (bool to_dev : {true, false}) {
      std::vector<void*> dsts(kWindow);
      std::vector<const void*> srcs(kWindow);
      std::vector<size_t> sizes(kWindow, n);
      Gather g;
      for (size_t i = 0; i < kWindow; ++i) {
        dsts[i] = to_dev ? static_cast<void*>(dev + i * kSlot) : static_cast<void*>(shm + i * kSlot);
        srcs[i] = to_dev ? static_cast<const void*>(shm + i * kSlot) : static_cast<const void*>(dev + i * kSlot);
        g.dst[i] = to_dev ? dev + i * kSlot : shm_mapped + i * kSlot;
        g.src[i] = to_dev ? shm_mapped + i * kSlot : dev + i * kSlot;
      }
      const cudaMemcpyKind kind = to_dev ? cudaMemcpyHostToDevice : cudaMemcpyDeviceToHost;
      const char* dir = to_dev ? "HtoD" : "DtoH";
      char what[128];
      snprintf(what, sizeof what, "window 64 x %s %s: 64 cudaMemcpyAsync", sz, dir);
      row(what, kWinRounds, s, e, [&] {
        for (size_t i = 0; i < kWindow; ++i) CK(cudaMemcpyAsync(dsts[i], srcs[i], n, kind, s));
      });
      snprintf(what, sizeof what, "window 64 x %s %s: cudaMemcpyBatchAsync(64)", sz, dir);
      row(what, kWinRounds, s, e, [&] {
        cudaMemcpyAttributes attr{};
        attr.srcAccessOrder = cudaMemcpySrcAccessOrderStream;
        size_t idx = 0;
        CK(cudaMemcpyBatchAsync(dsts.data(), srcs.data(), sizes.data(), kWindow, &attr, &idx, 1, s));
      });
      snprintf(what, sizeof what, "window 64 x %s %s: one gather kernel (mapped host)", sz, dir);
      row(what, kWinRounds, s, e, [&] { gather<<<kWindow, 128, 0, s>>>(g, n); });
    }
  }
  CK(cudaHostUnregister(shm));
  return 0;
}
