// Probe (issue 18, a native DDP bucket call costing the step more than it holds its caller): what a
// collective's kernel launched beside a training's own kernels costs them, by how it waits for its
// peer and by the SMs it may take. The team's copy and reduction kernels run blocks of 512
// threads, two per SM, on every SM, and a staged call's blocks wait at the GPUs' barrier for a
// peer behind them: while they wait nothing else fits on the GPU. NCCL's kernels run one block
// per channel on a few dozen SMs. One GPU:
//   compute  cuBLAS SGEMMs on stream A: the shapes of a GPT-2 layer's backward (768 wide,
//            `tokens` rows: 128 is GPT-2 DDP at batch 1 and sequence 128, launch-bound kernels
//            of few blocks; 4096 fills the GPU), 12 layers in turn
//   comm     on stream B, 12 calls shaped as the team's kernel (512 threads, two blocks per SM,
//            16-byte vectors, four in flight a thread) copying 32 MB within the GPU, each once
//            its "peer" has arrived: a host thread that sees B reach the call (an event), spins
//            `wait` us (a peer that far behind) and sets the call's flag in device memory by a
//            copy (a copy engine: a peer kernel on this GPU would find no SM free beside the
//            spinning comm kernel; the staged kernels' flags are in GPU memory, set by the peer
//            over NVLink). How B waits for the flag (`how`):
//              spin    every block of the comm kernel polls it (the staged kernel's barrier)
//              stream  cuStreamWaitValue32 before the kernel: the stream waits, no SM does
//              block   a one-block kernel polls it before the comm kernel
// Both streams start together; per (tokens, wait, how, cap on the comm kernel's SMs), the median
// of `reps` of: the compute's span alone and beside the comm, the comm's span alone and beside
// the compute, and the host's time to enqueue a comm call. `lost_us_per_call`: the compute's span
// beside the comm less alone, per comm call. Prints one JSON object per line.
// Build: nvcc -O2 -arch=sm_90 -o sm_footprint sm_footprint.cu -lcublas -lcuda
// Run: ./sm_footprint [reps=7] [tokens=128,4096] [wait us=0,100] [caps=0,32] [how=spin,stream,block]
#include <cublas_v2.h>
#include <cuda.h>
#include <cuda_runtime.h>

#include "probe_check.h"
#include "probe_time.h"

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

namespace {

void CB(cublasStatus_t s, const char* what) {
  if (s != CUBLAS_STATUS_SUCCESS) {
    fprintf(stderr, "cuBLAS %s: status %d\n", what, static_cast<int>(s));
    exit(1);
  }
}

std::vector<int> ints(const char* text) {
  std::vector<int> v;
  for (const char* p = text; *p;) {
    v.push_back(atoi(p));
    const char* c = strchr(p, ',');
    if (!c) break;
    p = c + 1;
  }
  return v;
}

constexpr long long kGiveUpNs = 2000000000;  // a flag not set within 2 s: the probe is broken

// Polls *flag until it reaches want (two seconds at most).
__device__ void await_flag(const volatile unsigned* flag, unsigned want) {
  long long t0 = 0, t = 0;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
  while (*flag < want) {
    __nanosleep(100);
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    if (t - t0 > kGiveUpNs) return;
  }
}

// Waits until *flag >= want (where flag is set: every block polls it), then copies n16 vectors
// from src to dst, four loads in flight a thread.
__global__ void __launch_bounds__(512, 2)
    comm_kernel(uint4* dst, const uint4* src, size_t n16, const volatile unsigned* flag, unsigned want) {
  if (flag) {
    if (threadIdx.x == 0) await_flag(flag, want);
    __syncthreads();
  }
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x;
  for (; i + 3 * stride < n16; i += 4 * stride) {
    uint4 a = src[i], b = src[i + stride], c = src[i + 2 * stride], d = src[i + 3 * stride];
    dst[i] = a;
    dst[i + stride] = b;
    dst[i + 2 * stride] = c;
    dst[i + 3 * stride] = d;
  }
  for (; i < n16; i += stride) dst[i] = src[i];
}

// One thread: polls *flag until it reaches want.
__global__ void wait_kernel(const volatile unsigned* flag, unsigned want) { await_flag(flag, want); }

struct Gemm {
  int m, n, k;  // C (m x n) = A (m x k) * B (k x n), column-major as cuBLAS takes it
};

// A GPT-2 layer's backward, `t` tokens of width 768: for each of the four weight matrices (qkv
// 768x2304, proj 768x768, fc 768x3072, fc-proj 3072x768) the input gradient and the weight
// gradient.
std::vector<Gemm> layer_backward(int t) {
  std::vector<Gemm> g;
  const int w[4][2] = {{768, 2304}, {768, 768}, {768, 3072}, {3072, 768}};
  for (auto& io : w) {
    g.push_back({t, io[0], io[1]});      // dX = dY * W^T
    g.push_back({io[0], io[1], t});      // dW = X^T * dY
  }
  return g;
}

struct Run {
  double compute_us = 0, comm_us = 0, enqueue_us = 0;
};

std::vector<std::string> words(const char* text) {
  std::vector<std::string> v;
  std::string cur;
  for (const char* p = text;; ++p) {
    if (*p == ',' || !*p) {
      if (!cur.empty()) v.push_back(cur);
      cur.clear();
      if (!*p) break;
    } else {
      cur += *p;
    }
  }
  return v;
}

}  // namespace

int main(int argc, char** argv) {
  const int reps = argc > 1 ? atoi(argv[1]) : 7;
  const std::vector<int> token_list = ints(argc > 2 ? argv[2] : "128,4096");
  const std::vector<int> waits = ints(argc > 3 ? argv[3] : "0,100");
  const std::vector<int> caps = ints(argc > 4 ? argv[4] : "0,32");
  const std::vector<std::string> hows = words(argc > 5 ? argv[5] : "spin,stream,block");
  const int layers = 12, calls = 12;
  const int per_sm = 2;  // the team's copy kernel: two blocks of 512 threads per SM (copy_cuda.cu)
  const size_t mb = 32;
  CK(cudaSetDevice(0));
  int sms = 0;
  CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  cudaFuncAttributes fa{};
  CK(cudaFuncGetAttributes(&fa, comm_kernel));
  const size_t bytes = mb << 20, n16 = bytes / 16;
  uint4 *src = nullptr, *dst = nullptr;
  CK(cudaMalloc(&src, bytes));
  CK(cudaMalloc(&dst, bytes));
  CK(cudaMemset(src, 1, bytes));
  const int most_tokens = *std::max_element(token_list.begin(), token_list.end());
  const size_t fl = static_cast<size_t>(std::max(most_tokens, 3072)) * 3072;
  float *a = nullptr, *b = nullptr, *c = nullptr;
  CK(cudaMalloc(&a, fl * 4));
  CK(cudaMalloc(&b, fl * 4));
  CK(cudaMalloc(&c, fl * 4));
  CK(cudaMemset(a, 0, fl * 4));
  CK(cudaMemset(b, 0, fl * 4));
  setvbuf(stdout, nullptr, _IOLBF, 0);
  cudaStream_t sa, sb;
  CK(cudaStreamCreateWithFlags(&sa, cudaStreamNonBlocking));
  CK(cudaStreamCreateWithFlags(&sb, cudaStreamNonBlocking));
  // The calls' flag in device memory, counting up over the whole run; the peer copies each
  // call's value in from pinned memory on its own stream.
  unsigned* flag = nullptr;
  CK(cudaMalloc(&flag, sizeof(unsigned)));
  CK(cudaMemset(flag, 0, sizeof(unsigned)));
  constexpr int kValues = 1 << 16;
  unsigned* values = nullptr;  // values[v] = v
  CK(cudaHostAlloc(reinterpret_cast<void**>(&values), kValues * sizeof(unsigned), cudaHostAllocDefault));
  for (int v = 0; v < kValues; ++v) values[v] = static_cast<unsigned>(v);
  cudaStream_t sp;
  CK(cudaStreamCreateWithFlags(&sp, cudaStreamNonBlocking));
  unsigned next = 0;  // the flag's value of the latest call
  std::vector<cudaEvent_t> reached(calls);
  for (cudaEvent_t& e : reached) CK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
  cublasHandle_t h;
  CB(cublasCreate(&h), "create");
  CB(cublasSetStream(h, sa), "set stream");
  cudaEvent_t go, a0, a1, b0, b1;
  for (cudaEvent_t* e : {&go, &a0, &a1, &b0, &b1}) CK(cudaEventCreate(e));
  printf("{\"probe\": \"sm_footprint\", \"sms\": %d, \"comm_registers\": %d, \"comm_blocks_per_sm\": %d, "
         "\"layers\": %d, \"calls\": %d, \"mb\": %zu}\n",
         sms, fa.numRegs, per_sm, layers, calls, mb);

  for (int tokens : token_list) {
    const std::vector<Gemm> layer = layer_backward(tokens);
    auto compute = [&] {
      const float one = 1, zero = 0;
      for (int l = 0; l < layers; ++l)
        for (const Gemm& g : layer)
          CB(cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, g.m, g.n, g.k, &one, a, g.m, b, g.k, &zero, c, g.m), "sgemm");
    };
    for (int wait : waits)
      for (const std::string& how : hows)
        for (int cap : caps) {
          const int use = cap > 0 && cap < sms ? cap : sms;
          const unsigned grid = static_cast<unsigned>(use * per_sm);
          // The peer: sets call i's flag `wait` us after stream B has reached it.
          std::atomic<int> recorded{0};  // events of this round's calls recorded so far
          auto peer = [&](unsigned first) {
            for (int i = 0; i < calls; ++i) {
              const double t0 = now_us();
              while (recorded.load(std::memory_order_acquire) <= i || cudaEventQuery(reached[i]) == cudaErrorNotReady)
                if (now_us() - t0 > 2e6) return;  // the comm's stream stuck: the kernels give up too
              const double seen = now_us();
              while (now_us() - seen < wait) {
              }
              CK(cudaMemcpyAsync(flag, values + (first + i) % kValues, sizeof(unsigned), cudaMemcpyHostToDevice, sp));
            }
          };
          // Enqueues the calls (and starts their peer); returns the host's us per call for
          // stream B's part.
          std::thread peer_thread;
          auto comm = [&] {
            double host = 0;
            const unsigned first = next + 1;
            for (int i = 0; i < calls; ++i) {
              const unsigned want = ++next;
              CK(cudaEventRecord(reached[i], sb));
              recorded.store(i + 1, std::memory_order_release);
              if (i == 0) peer_thread = std::thread(peer, first);
              const double t0 = now_us();
              if (how == "spin") {
                comm_kernel<<<grid, 512, 0, sb>>>(dst, src, n16, flag, want);
              } else {
                if (how == "stream")
                  CU(cuStreamWaitValue32(sb, reinterpret_cast<CUdeviceptr>(flag), want, CU_STREAM_WAIT_VALUE_GEQ),
                     "cuStreamWaitValue32");
                else
                  wait_kernel<<<1, 1, 0, sb>>>(flag, want);
                comm_kernel<<<grid, 512, 0, sb>>>(dst, src, n16, nullptr, 0);
              }
              host += now_us() - t0;
            }
            CK(cudaGetLastError());
            return host / calls;
          };
          // mode 0: compute alone, 1: comm alone, 2: both at once
          auto once = [&](int mode) {
            Run r;
            CK(cudaEventRecord(go, sa));
            CK(cudaStreamWaitEvent(sb, go, 0));
            CK(cudaEventRecord(a0, sa));
            CK(cudaEventRecord(b0, sb));
            if (mode != 1) compute();
            if (mode != 0) r.enqueue_us = comm();
            CK(cudaEventRecord(a1, sa));
            CK(cudaEventRecord(b1, sb));
            CK(cudaDeviceSynchronize());
            if (peer_thread.joinable()) peer_thread.join();
            float ms = 0;
            CK(cudaEventElapsedTime(&ms, a0, a1));
            r.compute_us = 1e3 * ms;
            CK(cudaEventElapsedTime(&ms, b0, b1));
            r.comm_us = 1e3 * ms;
            return r;
          };
          for (int m = 0; m < 3; ++m) once(m);  // warm-up (cuBLAS picks its kernels)
          std::vector<double> ca, cb, ma, mb2, eq;
          for (int i = 0; i < reps; ++i) {
            ca.push_back(once(0).compute_us);
            const Run alone = once(1);
            mb2.push_back(alone.comm_us);
            eq.push_back(alone.enqueue_us);
            Run both = once(2);
            cb.push_back(both.compute_us);
            ma.push_back(both.comm_us);
          }
          const double before = median(ca), beside = median(cb);
          printf("{\"tokens\": %d, \"wait_us\": %d, \"how\": \"%s\", \"cap_sms\": %d, \"grid\": %u, "
                 "\"compute_alone_us\": %.1f, \"compute_beside_us\": %.1f, \"comm_alone_us\": %.1f, "
                 "\"comm_beside_us\": %.1f, \"enqueue_us_per_call\": %.2f, \"lost_us_per_call\": %.1f}\n",
                 tokens, wait, how.c_str(), use, grid, before, beside, median(mb2), median(ma), median(eq),
                 (beside - before) / calls);
          fflush(stdout);
        }
  }
  cublasDestroy(h);
  return 0;
}
