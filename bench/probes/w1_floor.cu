// Probe (issue 14): the least time one window-1 iteration of osu_bw can take between two
// processes on two GPUs, per way of moving and completing the message, with nothing else in
// the loop. A rendezvous pull as UCX's cuda_ipc and the p2p layer do it: the sender (GPU 0)
// announces its buffer (a word in shared memory), the receiver (GPU 1) copies out of the
// mapping of it, sees the copy complete, and answers with two words (the completion the
// sender's request waits for, then the benchmark's acknowledgement). Per iteration both
// processes spin on shared-memory words; the sender times the iterations back to back.
// Ways (receiver side):
//   signal_only          no copy: the two host round trips of the protocol
//   peer_ctx_peerasync   mapping opened in GPU 0's context, cudaMemcpyPeerAsync on a stream
//                        of GPU 0, cudaEventRecord, cudaEventQuery spin (the p2p mover's way)
//   local_dtod_event     mapping in GPU 1's context, cuMemcpyDtoDAsync on a stream of GPU 1,
//                        cuEventRecord, cuEventQuery spin (UCX cuda_ipc's way)
//   local_dtod_write     the same copy, then cuStreamWriteValue32 of the sequence number into
//                        registered host memory: the receiver spins on that word, no query
//   local_dtod_stream    the same copy, cuStreamQuery spin
//   peer_ctx_dtod_event  mapping in GPU 0's context, cuMemcpyDtoDAsync on a stream of GPU 0
//   local_kernel_write   a kernel on GPU 1 loads the bytes from the mapping and writes the
//                        sequence number to registered host memory
//   peer_ctx_peerasync_stream  the p2p mover's copy, cuStreamQuery spin instead of an event
//   cross_ctx_dtod_stream      mapping in GPU 0's context, cuMemcpyDtoDAsync on a stream of
//                        GPU 1 (reached through peer access), cuStreamQuery spin
//   local_dtod_stream_turns    local_dtod_stream with the copies taking two streams in turn
//                        (as the p2p mover's copies do)
//   local_dtod_stream_paced    local_dtod_stream with 0.4 us of other host work between queries
//                        (a progress pass between two looks at the copy)
//   local_dtod_runtime_stream  local_dtod_stream asked with the runtime's cudaStreamQuery (the
//                        p2p mover's query)
//   local_dtod_stream_sync     the same copy, then cuStreamSynchronize (the driver waits)
//   local_dtod_event_sync      the same copy, cuEventRecord, then cuEventSynchronize
// local_dtod_event, local_dtod_stream and local_dtod_runtime_stream also time each question:
// the one that finds the copy ended (ready_query_us) against those that find it running
// (busy_query_us), medians. Why: in the p2p layer's traces the look that sees a pulled copy's end
// comes about 1.3 us later than the looks before it come after each other (docs/mpi.md).
// Sizes 8 B - 4 MB. Prints one JSON object per line: median and mean us per iteration, and the
// receiver's median host time of the enqueue (copy + completion mark).
// Build: nvcc -O2 -arch=sm_90 -o w1_floor w1_floor.cu -lcuda
#include <cuda.h>
#include <cuda_runtime.h>

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <vector>

#include "probe_check.h"
#include "probe_time.h"
#include "probe_words.h"

namespace {

constexpr size_t kBuf = 4 << 20;
constexpr int kIters = 2000;
constexpr int kWarm = 200;

struct Shared {
  Word rts, done, ack, enq_ns, ready_ns, busy_ns, phase;
  cudaIpcMemHandle_t handle;
  std::atomic<int> handle_ready;
};

enum Way {
  SignalOnly,
  PeerCtxPeerAsync,
  LocalDtodEvent,
  LocalDtodWrite,
  LocalDtodStream,
  PeerCtxDtodEvent,
  LocalKernelWrite,
  PeerCtxPeerAsyncStream,
  CrossCtxDtodStream,
  LocalDtodStreamTurns,
  LocalDtodStreamPaced,
  LocalDtodRuntimeStream,
  LocalDtodStreamSync,
  LocalDtodEventSync,
  kWays
};
const char* kNames[] = {"signal_only",       "peer_ctx_peerasync", "local_dtod_event",   "local_dtod_write",
                        "local_dtod_stream", "peer_ctx_dtod_event", "local_kernel_write", "peer_ctx_peerasync_stream",
                        "cross_ctx_dtod_stream", "local_dtod_stream_turns", "local_dtod_stream_paced",
                        "local_dtod_runtime_stream", "local_dtod_stream_sync", "local_dtod_event_sync"};
const size_t kSizes[] = {8, 4096, 65536, 1 << 20, 2 << 20, 4 << 20};

__global__ void pull_kernel(char* dst, const char* src, size_t n, volatile uint32_t* flag, uint32_t seq) {
  for (size_t i = threadIdx.x + size_t(blockIdx.x) * blockDim.x; i < n; i += size_t(blockDim.x) * gridDim.x)
    dst[i] = src[i];
  __syncthreads();
  if (threadIdx.x == 0) {
    __threadfence_system();
    atomicAdd(const_cast<uint32_t*>(flag), 1);  // one per block
  }
  (void)seq;
}

void sender(Shared* sh) {
  CK(cudaSetDevice(0));
  void* buf;
  CK(cudaMalloc(&buf, kBuf));
  CK(cudaMemset(buf, 7, kBuf));
  CK(cudaDeviceSynchronize());
  CK(cudaIpcGetMemHandle(&sh->handle, buf));
  sh->handle_ready.store(1, std::memory_order_release);
  uint64_t seq = 0, phase = 0;
  for (int w = 0; w < kWays; ++w)
    for (size_t n : kSizes) {
      std::vector<double> per;
      double t_start = 0;
      for (int i = 0; i < kWarm + kIters; ++i) {
        if (i == kWarm) t_start = now_us();
        double t0 = now_us();
        ++seq;
        sh->rts.v.store(seq, std::memory_order_release);
        spin_until(sh->done, seq);
        spin_until(sh->ack, seq);
        if (i >= kWarm) per.push_back(now_us() - t0);
      }
      double mean = (now_us() - t_start) / kIters;
      ++phase;
      spin_until(sh->phase, phase);  // the receiver's enqueue time of this row is in
      double enq = sh->enq_ns.v.load() / 1000.0;
      printf("{\"probe\": \"w1_floor\", \"way\": \"%s\", \"bytes\": %zu, \"median_us\": %.2f, \"mean_us\": %.2f, "
             "\"recv_enqueue_us\": %.2f, \"ready_query_us\": %.2f, \"busy_query_us\": %.2f}\n",
             kNames[w], n, median(per), mean, enq, sh->ready_ns.v.load() / 1000.0, sh->busy_ns.v.load() / 1000.0);
      fflush(stdout);
    }
  CK(cudaFree(buf));
}

void receiver(Shared* sh) {
  while (!sh->handle_ready.load(std::memory_order_acquire)) {
  }
  CK(cudaSetDevice(1));
  CU(cuInit(0), "cuInit");
  void* local;
  CK(cudaMalloc(&local, kBuf));
  CK(cudaSetDevice(0));
  cudaError_t e = cudaDeviceEnablePeerAccess(1, 0);
  if (e == cudaErrorPeerAccessAlreadyEnabled) (void)cudaGetLastError();
  else CK(e);
  void* mapped0;  // in GPU 0's context
  CK(cudaIpcOpenMemHandle(&mapped0, sh->handle, cudaIpcMemLazyEnablePeerAccess));
  cudaStream_t s0;
  CK(cudaStreamCreateWithFlags(&s0, cudaStreamNonBlocking));
  cudaEvent_t ev0;
  CK(cudaEventCreateWithFlags(&ev0, cudaEventDisableTiming));
  CK(cudaSetDevice(1));
  e = cudaDeviceEnablePeerAccess(0, 0);
  if (e == cudaErrorPeerAccessAlreadyEnabled) (void)cudaGetLastError();
  else CK(e);
  void* mapped1;  // in GPU 1's context
  CK(cudaIpcOpenMemHandle(&mapped1, sh->handle, cudaIpcMemLazyEnablePeerAccess));
  cudaStream_t s1;
  CK(cudaStreamCreateWithFlags(&s1, cudaStreamNonBlocking));
  cudaStream_t s1b;  // the second stream of local_dtod_stream_turns
  CK(cudaStreamCreateWithFlags(&s1b, cudaStreamNonBlocking));
  cudaEvent_t ev1;
  CK(cudaEventCreateWithFlags(&ev1, cudaEventDisableTiming));
  uint32_t* word;  // registered host memory the GPU writes
  CK(cudaHostAlloc(reinterpret_cast<void**>(&word), 64, cudaHostAllocPortable | cudaHostAllocMapped));
  uint32_t* word_dev;
  CK(cudaHostGetDevicePointer(reinterpret_cast<void**>(&word_dev), word, 0));
  volatile uint32_t* vword = word;
  *vword = 0;
  uint32_t gpu_seq = 0;
  uint64_t seq = 0, phase = 0;
  for (int w = 0; w < kWays; ++w)
    for (size_t n : kSizes) {
      std::vector<double> enq, ready, busy;
      // The pull in GPU 1's own context (its mapping, its stream): the copy of the local_* ways.
      auto local_copy = [&](CUstream st) {
        CU(cuMemcpyDtoDAsync(reinterpret_cast<CUdeviceptr>(local), reinterpret_cast<CUdeviceptr>(mapped1), n, st),
           "cuMemcpyDtoDAsync");
      };
      // Asks `ended` (true: the copy ended) until it says so, timing each question.
      auto ask = [&](auto ended) {
        for (;;) {
          const double q0 = now_us();
          const bool yes = ended();
          const double took = now_us() - q0;
          if (yes) {
            ready.push_back(took);
            return;
          }
          busy.push_back(took);
        }
      };
      for (int i = 0; i < kWarm + kIters; ++i) {
        ++seq;
        spin_until(sh->rts, seq);
        double t0 = now_us();
        switch (w) {
          case SignalOnly: break;
          case PeerCtxPeerAsync:
            CK(cudaSetDevice(0));
            CK(cudaMemcpyPeerAsync(local, 1, mapped0, 0, n, s0));
            CK(cudaEventRecord(ev0, s0));
            enq.push_back(now_us() - t0);
            while (cudaEventQuery(ev0) == cudaErrorNotReady) {
            }
            CK(cudaSetDevice(1));
            break;
          case LocalDtodEvent:
            local_copy(reinterpret_cast<CUstream>(s1));
            CU(cuEventRecord(reinterpret_cast<CUevent>(ev1), reinterpret_cast<CUstream>(s1)), "cuEventRecord");
            enq.push_back(now_us() - t0);
            ask([&] { return cuEventQuery(reinterpret_cast<CUevent>(ev1)) != CUDA_ERROR_NOT_READY; });
            break;
          case LocalDtodWrite:
            local_copy(reinterpret_cast<CUstream>(s1));
            ++gpu_seq;
            CU(cuStreamWriteValue32(reinterpret_cast<CUstream>(s1), reinterpret_cast<CUdeviceptr>(word_dev), gpu_seq,
                                    CU_STREAM_WRITE_VALUE_DEFAULT),
               "cuStreamWriteValue32");
            enq.push_back(now_us() - t0);
            while (*vword != gpu_seq) {
            }
            break;
          case LocalDtodStream:
            local_copy(reinterpret_cast<CUstream>(s1));
            enq.push_back(now_us() - t0);
            ask([&] { return cuStreamQuery(reinterpret_cast<CUstream>(s1)) != CUDA_ERROR_NOT_READY; });
            break;
          case LocalDtodRuntimeStream:
            local_copy(reinterpret_cast<CUstream>(s1));
            enq.push_back(now_us() - t0);
            ask([&] {
              const cudaError_t r = cudaStreamQuery(s1);
              if (r == cudaErrorNotReady) return false;
              CK(r);
              return true;
            });
            break;
          case LocalDtodStreamSync:
            local_copy(reinterpret_cast<CUstream>(s1));
            enq.push_back(now_us() - t0);
            CU(cuStreamSynchronize(reinterpret_cast<CUstream>(s1)), "cuStreamSynchronize");
            break;
          case LocalDtodEventSync:
            local_copy(reinterpret_cast<CUstream>(s1));
            CU(cuEventRecord(reinterpret_cast<CUevent>(ev1), reinterpret_cast<CUstream>(s1)), "cuEventRecord");
            enq.push_back(now_us() - t0);
            CU(cuEventSynchronize(reinterpret_cast<CUevent>(ev1)), "cuEventSynchronize");
            break;
          case PeerCtxDtodEvent:
            CK(cudaSetDevice(0));
            CU(cuMemcpyDtoDAsync(reinterpret_cast<CUdeviceptr>(local), reinterpret_cast<CUdeviceptr>(mapped0), n,
                                 reinterpret_cast<CUstream>(s0)),
               "cuMemcpyDtoDAsync");
            CU(cuEventRecord(reinterpret_cast<CUevent>(ev0), reinterpret_cast<CUstream>(s0)), "cuEventRecord");
            enq.push_back(now_us() - t0);
            while (cuEventQuery(reinterpret_cast<CUevent>(ev0)) == CUDA_ERROR_NOT_READY) {
            }
            CK(cudaSetDevice(1));
            break;
          case PeerCtxPeerAsyncStream:
            CK(cudaSetDevice(0));
            CK(cudaMemcpyPeerAsync(local, 1, mapped0, 0, n, s0));
            enq.push_back(now_us() - t0);
            while (cuStreamQuery(reinterpret_cast<CUstream>(s0)) == CUDA_ERROR_NOT_READY) {
            }
            CK(cudaSetDevice(1));
            break;
          case CrossCtxDtodStream:
            CU(cuMemcpyDtoDAsync(reinterpret_cast<CUdeviceptr>(local), reinterpret_cast<CUdeviceptr>(mapped0), n,
                                 reinterpret_cast<CUstream>(s1)),
               "cuMemcpyDtoDAsync (GPU 0's mapping on GPU 1's stream)");
            enq.push_back(now_us() - t0);
            for (CUresult r; (r = cuStreamQuery(reinterpret_cast<CUstream>(s1))) != CUDA_SUCCESS;)
              CU(r == CUDA_ERROR_NOT_READY ? CUDA_SUCCESS : r, "cuStreamQuery after the cross-context copy");
            break;
          case LocalDtodStreamTurns: {
            CUstream st = reinterpret_cast<CUstream>(i % 2 ? s1b : s1);
            local_copy(st);
            enq.push_back(now_us() - t0);
            while (cuStreamQuery(st) == CUDA_ERROR_NOT_READY) {
            }
            break;
          }
          case LocalDtodStreamPaced:
            local_copy(reinterpret_cast<CUstream>(s1));
            enq.push_back(now_us() - t0);
            while (cuStreamQuery(reinterpret_cast<CUstream>(s1)) == CUDA_ERROR_NOT_READY) {
              const double until = now_us() + 0.4;
              while (now_us() < until) {
              }
            }
            break;
          case LocalKernelWrite: {
            int blocks = n <= 65536 ? 1 : 32;
            uint32_t before = *vword;
            pull_kernel<<<blocks, 512, 0, s1>>>(static_cast<char*>(local), static_cast<const char*>(mapped1), n,
                                                word_dev, 0);
            enq.push_back(now_us() - t0);
            while (*vword != before + static_cast<uint32_t>(blocks)) {
            }
            gpu_seq = *vword;
            break;
          }
        }
        sh->done.v.store(seq, std::memory_order_release);
        sh->ack.v.store(seq, std::memory_order_release);
      }
      CK(cudaGetLastError());
      sh->enq_ns.v.store(enq.empty() ? 0 : static_cast<uint64_t>(median(enq) * 1000));
      sh->ready_ns.v.store(ready.empty() ? 0 : static_cast<uint64_t>(median(ready) * 1000));
      sh->busy_ns.v.store(busy.empty() ? 0 : static_cast<uint64_t>(median(busy) * 1000));
      sh->phase.v.store(++phase, std::memory_order_release);
    }
}

}  // namespace

int main() {
  return run_pair<Shared>([](Shared* sh, int r) {
           if (r == 0) sender(sh);
           else receiver(sh);
         })
             ? 0
             : 2;
}
