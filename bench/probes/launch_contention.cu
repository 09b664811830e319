// Probe (issue 18): whether another thread's driver calls slow a thread's kernel launches. In a
// DDP step on the torch backend the team's worker enqueues each large gradient allreduce (its
// `enqueue` phase: 83-175 us of driver calls a call, bench/results/*-review-hidden-bbd2319-*)
// while the autograd thread launches the backward's kernels, and that thread's backward issues
// ~3 ms longer than with NCCL, whose calls enqueue one kernel each. Driver calls into one context
// from two threads may wait for each other. This times the host time of thread A's launches (an
// empty kernel, back to back on its stream, synchronized every 64: the autograd thread's launches
// of small kernels) alone, and while thread B loops over bursts like the worker's enqueue of one
// call: `--burst` async device-to-device copies of 1 MB, each followed by an event recorded and
// waited for on a second stream (the runner's pattern), then a pause of `--gap-us`. Medians and
// the 90th percentile of A's launches over 20000 after 2000 warm-up; B's driver calls per second
// beside them. One GPU is enough: the driver's locks are the process's.
// Build (from the repository root):
//   nvcc -O2 -arch=sm_90 -std=c++17 -Ibench/probes -o /tmp/launch_contention bench/probes/launch_contention.cu
// Run: /tmp/launch_contention [--burst 40] [--gap-us 100]
#include <cuda_runtime.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

#include "probe_check.h"
#include "probe_time.h"

namespace {

constexpr int kRounds = 20000;
constexpr int kWarm = 2000;

__global__ void empty_kernel() {}

double percentile(std::vector<double> v, double q) {
  std::sort(v.begin(), v.end());
  return v[static_cast<size_t>(q * (v.size() - 1))];
}

struct Row {
  const char* way;
  double median_us, p90_us, other_calls_per_s;
};

// Thread A's launches, timed one by one; `other_calls`: thread B's count of driver calls, when it runs.
Row time_launches(const char* way, cudaStream_t s, const std::atomic<long>* other_calls) {
  std::vector<double> t;
  t.reserve(kRounds);
  const long calls0 = other_calls ? other_calls->load() : 0;
  const double start = now_us();
  for (int i = 0; i < kWarm + kRounds; ++i) {
    const double t0 = now_us();
    empty_kernel<<<1, 1, 0, s>>>();
    const double t1 = now_us();
    if (i >= kWarm) t.push_back(t1 - t0);
    if (i % 64 == 63) CK(cudaStreamSynchronize(s));
  }
  CK(cudaStreamSynchronize(s));
  CK(cudaGetLastError());
  const double secs = (now_us() - start) / 1e6;
  const double rate = other_calls ? (other_calls->load() - calls0) / secs : 0.0;
  return Row{way, median(t), percentile(t, 0.9), rate};
}

}  // namespace

int main(int argc, char** argv) {
  int burst = 40;
  double gap_us = 100.0;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!strcmp(argv[i], "--burst")) burst = atoi(argv[i + 1]);
    else if (!strcmp(argv[i], "--gap-us")) gap_us = atof(argv[i + 1]);
    else {
      fprintf(stderr, "usage: %s [--burst N] [--gap-us US]\n", argv[0]);
      return 2;
    }
  }
  CK(cudaSetDevice(0));
  cudaStream_t a, b1, b2;
  CK(cudaStreamCreateWithFlags(&a, cudaStreamNonBlocking));
  CK(cudaStreamCreateWithFlags(&b1, cudaStreamNonBlocking));
  CK(cudaStreamCreateWithFlags(&b2, cudaStreamNonBlocking));
  const size_t bytes = 1 << 20;
  void *src = nullptr, *dst = nullptr;
  CK(cudaMalloc(&src, bytes));
  CK(cudaMalloc(&dst, bytes));
  std::vector<cudaEvent_t> events(burst);
  for (auto& e : events) CK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));

  std::vector<Row> rows;
  rows.push_back(time_launches("alone", a, nullptr));

  std::atomic<bool> stop{false};
  std::atomic<long> calls{0};
  std::thread worker([&] {
    CK(cudaSetDevice(0));
    while (!stop.load(std::memory_order_relaxed)) {
      for (int i = 0; i < burst; ++i) {
        CK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, b1));
        CK(cudaEventRecord(events[i], b1));
        CK(cudaStreamWaitEvent(b2, events[i], 0));
      }
      calls.fetch_add(3L * burst, std::memory_order_relaxed);
      // the worker's stream must not run away from the host: the runner's calls wait for their ends
      CK(cudaStreamSynchronize(b2));
      const double until = now_us() + gap_us;
      while (now_us() < until) {
      }
    }
  });
  rows.push_back(time_launches("beside_worker_bursts", a, &calls));
  stop.store(true);
  worker.join();
  rows.push_back(time_launches("alone_again", a, nullptr));

  printf("burst %d copies (3 driver calls each), gap %.0f us\n", burst, gap_us);
  printf("%-22s %10s %10s %16s\n", "way", "median_us", "p90_us", "other_calls_per_s");
  for (const Row& r : rows)
    printf("%-22s %10.2f %10.2f %16.0f\n", r.way, r.median_us, r.p90_us, r.other_calls_per_s);
  printf("JSON {\"probe\": \"launch_contention\", \"burst\": %d, \"gap_us\": %.1f, \"rows\": [", burst, gap_us);
  for (size_t i = 0; i < rows.size(); ++i)
    printf("%s{\"way\": \"%s\", \"median_us\": %.3f, \"p90_us\": %.3f, \"other_calls_per_s\": %.0f}", i ? ", " : "",
           rows[i].way, rows[i].median_us, rows[i].p90_us, rows[i].other_calls_per_s);
  printf("]}\n");
  for (auto& e : events) cudaEventDestroy(e);
  cudaFree(src);
  cudaFree(dst);
  return 0;
}
