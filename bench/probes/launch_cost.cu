// Probe (issue 16): what launching a collective's reduction kernel costs the host. The phase
// trace of an interposed blocking collective on a GPU pair (bench/mpi/coll_trace.sh, its
// `launch` column: the part's one kernel launch and the runner's steps after it) shows 5-8 us
// a call, where a kernel launch is usually quoted at 2-3 us. This times, on one GPU, the host
// time of: an empty kernel <<<1,1>>>; the same with the reduction's grid (4 blocks of 512 per
// SM); the same with a ~400-byte argument block, and with blocks of 256 B, 1.2 KB (the
// reduction's) and 3.4 KB (the copy kernel's largest); and gpustripe's own
// coll::launch_reduce_kernel (2 sources of 1 MB float32, SUM, announcing its end into a word of
// registered host memory, as the interposer's part does) and launch_copy_kernel (1 MB, one
// destination, announcing its end alike). Each way twice: launched into an idle
// stream (the host waits for every launch before the next, as a blocking call does) and back to
// back. Medians of 2000 after 200 warm-up rounds; one line per row, plus a JSON line.
// Build (from the repository root, after a build into build/gpu):
//   nvcc -O2 -arch=sm_90 -DGPUSTRIPE_HAVE_CUDA=1 -Isrc -Iinclude -Ibench/probes -o /tmp/launch_cost \
//     bench/probes/launch_cost.cu -Lbuild/gpu -lgpustripe -lcuda -Xlinker -rpath=$PWD/build/gpu
#include <cuda.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "coll/reduce.hpp"
#include "probe_time.h"

namespace {

constexpr int kRounds = 2000;
constexpr int kWarm = 200;

void RT(cudaError_t e, const char* what) {
  if (e != cudaSuccess) {
    fprintf(stderr, "%s: %s\n", what, cudaGetErrorString(e));
    exit(1);
  }
}

__global__ void empty_kernel() {}

struct Wide {
  const void* p[48];  // ~400 bytes, as the reduction's pointers, barrier and done word
  int n;
};
__global__ void wide_kernel(Wide w) {
  if (w.n < 0 && threadIdx.x == 0) *(volatile int*)w.p[0] = 0;
}

// An argument block of N bytes: the copy kernel's largest is ~3.4 KB (16 segments of 16
// destinations and the fused barrier's copies), the reduction's ~1.2 KB.
template <int N>
struct Block {
  long long w[N / 8];
};
template <int N>
__global__ void block_kernel(Block<N> b) {
  if (b.w[0] < 0 && threadIdx.x == 0) *(volatile long long*)b.w[1] = 0;
}

struct Row {
  std::string way;
  bool idle;
  double call_us;
};

Row time_way(const std::string& way, bool idle, cudaStream_t s, const std::function<void()>& launch) {
  std::vector<double> t;
  t.reserve(kRounds);
  for (int i = 0; i < kWarm + kRounds; ++i) {
    const double t0 = now_us();
    launch();
    const double t1 = now_us();
    if (i >= kWarm) t.push_back(t1 - t0);
    if (idle || i % 64 == 63) RT(cudaStreamSynchronize(s), "cudaStreamSynchronize");
  }
  RT(cudaStreamSynchronize(s), "cudaStreamSynchronize");
  RT(cudaGetLastError(), way.c_str());
  return Row{way, idle, median(t)};
}

}  // namespace

int main() {
  using namespace gpustripe::coll;
  RT(cudaSetDevice(0), "cudaSetDevice");
  cudaStream_t s;
  RT(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreateWithFlags");
  int sms = 0;
  RT(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0), "SM count");
  const size_t count = (1 << 20) / sizeof(float);
  void *a = nullptr, *b = nullptr, *c = nullptr;
  RT(cudaMalloc(&a, count * 4), "cudaMalloc");
  RT(cudaMalloc(&b, count * 4), "cudaMalloc");
  RT(cudaMalloc(&c, count * 4), "cudaMalloc");
  uint32_t* word = nullptr;
  RT(cudaHostAlloc(reinterpret_cast<void**>(&word), 64, cudaHostAllocMapped), "cudaHostAlloc");
  unsigned* blocks_done = alloc_block_counter(0, s);
  Wide w{};
  for (int i = 0; i < 48; ++i) w.p[i] = a;
  w.n = 48;
  uint32_t value = 0;
  ReduceArgs ra;
  ra.dst = c;
  ra.srcs = {a, b};
  ra.count = count;
  ra.dtype = GPUSTRIPE_FLOAT32;
  ra.op = GPUSTRIPE_SUM;
  ra.done_word = word;
  CopyArgs ca;
  CopySegment seg;
  seg.src = a;
  seg.dsts = {c};
  seg.bytes = count * 4;
  seg.src_dev = 0;
  ca.segs = {seg};
  ca.done_word = word;

  std::vector<Row> rows;
  for (bool idle : {true, false}) {
    rows.push_back(time_way("empty_1x1", idle, s, [&] { empty_kernel<<<1, 1, 0, s>>>(); }));
    rows.push_back(time_way("empty_reduction_grid", idle, s, [&] { empty_kernel<<<sms * 4, 512, 0, s>>>(); }));
    rows.push_back(time_way("wide_args_reduction_grid", idle, s, [&] { wide_kernel<<<sms * 4, 512, 0, s>>>(w); }));
    Block<256> b256{};
    Block<1232> b1232{};
    Block<3456> b3456{};
    rows.push_back(time_way("args_256B_reduction_grid", idle, s, [&] { block_kernel<256><<<sms * 4, 512, 0, s>>>(b256); }));
    rows.push_back(time_way("args_1232B_reduction_grid", idle, s, [&] { block_kernel<1232><<<sms * 4, 512, 0, s>>>(b1232); }));
    rows.push_back(time_way("args_3456B_reduction_grid", idle, s, [&] { block_kernel<3456><<<sms * 4, 512, 0, s>>>(b3456); }));
    rows.push_back(time_way("launch_reduce_kernel_1MB", idle, s, [&] {
      ra.done_value = ++value;
      launch_reduce_kernel(ra, 0, s, blocks_done);
    }));
    rows.push_back(time_way("launch_copy_kernel_1MB", idle, s, [&] {
      ca.done_value = ++value;
      launch_copy_kernel(ca, 0, s, blocks_done);
    }));
  }
  printf("%-28s %-6s %10s\n", "way", "stream", "call_us");
  for (const Row& r : rows) printf("%-28s %-6s %10.2f\n", r.way.c_str(), r.idle ? "idle" : "busy", r.call_us);
  printf("JSON {\"probe\": \"launch_cost\", \"sms\": %d, \"rows\": [", sms);
  for (size_t i = 0; i < rows.size(); ++i)
    printf("%s{\"way\": \"%s\", \"stream\": \"%s\", \"call_us\": %.3f}", i ? ", " : "", rows[i].way.c_str(),
           rows[i].idle ? "idle" : "busy", rows[i].call_us);
  printf("]}\n");
  free_block_counter(0, blocks_done);
  return 0;
}
