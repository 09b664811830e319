// Probe (issue 14): what one pulled message costs the receiving process, per way of pulling.
// Two processes (forked before CUDA starts): the exporter allocates a buffer on GPU 0 and sends
// its IPC handle; the importer (GPU 1) maps it and copies out of it into its own buffer, the
// rendezvous pull of the p2p layer. Ways:
//   peer_ctx        handle opened in the importer's context on the exporter's GPU, copy by
//                   cudaMemcpyPeerAsync on a stream of that GPU (the p2p layer's mover)
//   peer_ctx_uva    the same mapping, cudaMemcpyAsync (UVA) on that stream
//   local_ctx       handle opened in the importer's own GPU's context, cudaMemcpyAsync on a
//                   stream of its own GPU (UCX cuda_ipc's pull): one context per process
// Per way and size: the latency of one copy (enqueue, event record, polled to completion),
// the host time of the enqueue alone, and the time per message of a window of 64 copies
// (two streams in turn, one event each, polled in order). Also the host cost of the driver
// calls a message makes (pointer query, event query, device switch, capture query) and of a
// small synchronous copy to and from pinned memory (the eager path's bounce copies).
// Prints one JSON object per line. Build: nvcc -O2 -arch=sm_90 -o ipc_pull_cost ipc_pull_cost.cu
#include <cuda_runtime.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <vector>

#include "probe_check.h"

namespace {

constexpr size_t kBuf = 64ull << 20;
constexpr int kWindow = 64;

double now_us() {
  return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

struct Way {
  const char* name;
  int stream_dev;
  bool peer_call;
};

void copy(const Way& w, void* dst, const void* src, size_t n, cudaStream_t s) {
  if (w.peer_call) CK(cudaMemcpyPeerAsync(dst, 1, src, 0, n, s));
  else CK(cudaMemcpyAsync(dst, src, n, cudaMemcpyDefault, s));
}

void measure(const Way& w, void* local, const void* mapped) {
  CK(cudaSetDevice(w.stream_dev));
  cudaStream_t s[2];
  std::vector<cudaEvent_t> ev(kWindow);
  for (auto& x : s) CK(cudaStreamCreateWithFlags(&x, cudaStreamNonBlocking));
  for (auto& e : ev) CK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
  for (size_t n : {size_t(8), size_t(8) << 10, size_t(64) << 10, size_t(1) << 20, size_t(4) << 20}) {
    std::vector<double> lat, enq;
    for (int i = 0; i < 220; ++i) {
      double t0 = now_us();
      copy(w, local, mapped, n, s[0]);
      CK(cudaEventRecord(ev[0], s[0]));
      double t1 = now_us();
      while (cudaEventQuery(ev[0]) == cudaErrorNotReady) {
      }
      double t2 = now_us();
      if (i >= 20) {
        lat.push_back(t2 - t0);
        enq.push_back(t1 - t0);
      }
    }
    std::vector<double> win;
    for (int rep = 0; rep < 12; ++rep) {
      double t0 = now_us();
      for (int k = 0; k < kWindow; ++k) {
        size_t off = (static_cast<size_t>(k) * n) % (kBuf - n + 1);
        copy(w, static_cast<char*>(local) + off, static_cast<const char*>(mapped) + off, n, s[k % 2]);
        CK(cudaEventRecord(ev[k], s[k % 2]));
      }
      for (int k = 0; k < kWindow; ++k)
        while (cudaEventQuery(ev[k]) == cudaErrorNotReady) {
        }
      if (rep >= 2) win.push_back((now_us() - t0) / kWindow);
    }
    printf("{\"probe\": \"pull\", \"way\": \"%s\", \"bytes\": %zu, \"latency_us\": %.2f, \"enqueue_us\": %.2f, "
           "\"window64_us_per_msg\": %.2f}\n",
           w.name, n, median(lat), median(enq), median(win));
    fflush(stdout);
  }
  for (auto& e : ev) CK(cudaEventDestroy(e));
  for (auto& x : s) CK(cudaStreamDestroy(x));
}

template <class F>
void cost(const char* what, F f) {
  for (int i = 0; i < 100; ++i) f();
  double t0 = now_us();
  for (int i = 0; i < 2000; ++i) f();
  printf("{\"probe\": \"call\", \"what\": \"%s\", \"us\": %.3f}\n", what, (now_us() - t0) / 2000);
  fflush(stdout);
}

void primitives(void* local, const void* mapped) {
  CK(cudaSetDevice(1));
  cudaStream_t s;
  CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  cudaEvent_t e;
  CK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
  CK(cudaEventRecord(e, s));
  CK(cudaStreamSynchronize(s));
  cudaPointerAttributes a;
  cost("cudaPointerGetAttributes(local)", [&] { CK(cudaPointerGetAttributes(&a, local)); });
  cost("cudaPointerGetAttributes(mapped)", [&] { CK(cudaPointerGetAttributes(&a, mapped)); });
  printf("{\"probe\": \"attr\", \"mapped_device\": %d, \"mapped_type\": %d}\n", a.device, static_cast<int>(a.type));
  cost("cudaEventQuery(done)", [&] { (void)cudaEventQuery(e); });
  cost("cudaGetDevice+cudaSetDevice(other)+back", [&] {
    int d;
    CK(cudaGetDevice(&d));
    CK(cudaSetDevice(0));
    CK(cudaSetDevice(1));
  });
  cost("cudaStreamIsCapturing", [&] {
    cudaStreamCaptureStatus c;
    CK(cudaStreamIsCapturing(s, &c));
  });
  cost("cudaEventRecord", [&] { CK(cudaEventRecord(e, s)); });
  void* pinned;
  CK(cudaMallocHost(&pinned, 1 << 20));
  for (size_t n : {size_t(8), size_t(4096)}) {
    char name[64];
    snprintf(name, sizeof name, "D2H %zu B + sync", n);
    cost(name, [&] {
      CK(cudaMemcpyAsync(pinned, local, n, cudaMemcpyDeviceToHost, s));
      CK(cudaStreamSynchronize(s));
    });
    snprintf(name, sizeof name, "H2D %zu B + sync", n);
    cost(name, [&] {
      CK(cudaMemcpyAsync(local, pinned, n, cudaMemcpyHostToDevice, s));
      CK(cudaStreamSynchronize(s));
    });
    snprintf(name, sizeof name, "D2H %zu B + event poll", n);
    cost(name, [&] {
      CK(cudaMemcpyAsync(pinned, local, n, cudaMemcpyDeviceToHost, s));
      CK(cudaEventRecord(e, s));
      while (cudaEventQuery(e) == cudaErrorNotReady) {
      }
    });
  }
  CK(cudaFreeHost(pinned));
  CK(cudaEventDestroy(e));
  CK(cudaStreamDestroy(s));
}

void enable_peer(int a, int b) {
  CK(cudaSetDevice(a));
  cudaError_t err = cudaDeviceEnablePeerAccess(b, 0);
  if (err == cudaErrorPeerAccessAlreadyEnabled) (void)cudaGetLastError();
  else CK(err);
}

}  // namespace

int main() {
  int to_importer[2], to_exporter[2];
  if (pipe(to_importer) || pipe(to_exporter)) return 1;
  pid_t pid = fork();
  if (pid == 0) {  // exporter: GPU 0
    CK(cudaSetDevice(0));
    void* buf;
    CK(cudaMalloc(&buf, kBuf));
    CK(cudaMemset(buf, 7, kBuf));
    cudaIpcMemHandle_t h;
    CK(cudaIpcGetMemHandle(&h, buf));
    if (write(to_importer[1], &h, sizeof h) != sizeof h) return 1;
    char done;
    if (read(to_exporter[0], &done, 1) != 1) return 1;
    CK(cudaFree(buf));
    return 0;
  }
  cudaIpcMemHandle_t h;
  if (read(to_importer[0], &h, sizeof h) != sizeof h) return 1;
  CK(cudaSetDevice(1));
  void* local;
  CK(cudaMalloc(&local, kBuf));
  enable_peer(0, 1);
  enable_peer(1, 0);
  void* mapped = nullptr;
  {  // the p2p layer's way: opened in the context of the exporter's GPU
    CK(cudaSetDevice(0));
    CK(cudaIpcOpenMemHandle(&mapped, h, cudaIpcMemLazyEnablePeerAccess));
    measure(Way{"peer_ctx", 0, true}, local, mapped);
    measure(Way{"peer_ctx_uva", 0, false}, local, mapped);
    CK(cudaSetDevice(0));
    CK(cudaIpcCloseMemHandle(mapped));
  }
  {  // UCX's way: opened in the importer's own context
    CK(cudaSetDevice(1));
    CK(cudaIpcOpenMemHandle(&mapped, h, cudaIpcMemLazyEnablePeerAccess));
    measure(Way{"local_ctx", 1, false}, local, mapped);
    primitives(local, mapped);
    CK(cudaSetDevice(1));
    CK(cudaIpcCloseMemHandle(mapped));
  }
  if (write(to_exporter[1], "x", 1) != 1) return 1;
  int status = 0;
  waitpid(pid, &status, 0);
  return WIFEXITED(status) && WEXITSTATUS(status) == 0 ? 0 : 2;
}
