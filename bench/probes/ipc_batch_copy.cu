// Probe (issue 14): N peer copies out of an IPC-mapped buffer, enqueued one call each against one
// cudaMemcpyBatchAsync call: what a window of pulled messages costs the receiver's host, per way,
// and whether the batch call accepts IPC-mapped sources at all (it checks every byte it copied).
// Two processes (forked before CUDA starts): the exporter allocates on GPU 0 and sends its IPC
// handle; the importer (GPU 1) maps it in the context of GPU 0 (the p2p layer's mapping cache)
// and copies N pieces into its own buffer on a stream of GPU 0, then records one event and polls
// it. Ways: peer (cudaMemcpyPeerAsync per copy: the p2p mover), uva (cudaMemcpyAsync per copy),
// batch (one cudaMemcpyBatchAsync). Per way, N and size: host time of the enqueue (all N copies
// and the event record) per copy, and the time from the first enqueue to the event seen complete
// per copy. Prints one JSON object per line.
// Build: nvcc -O2 -arch=sm_90 -o ipc_batch_copy ipc_batch_copy.cu
#include <cuda_runtime.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <vector>

#include "probe_check.h"

namespace {

constexpr size_t kBuf = 64ull << 20;

double now_us() {
  return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

enum class Way { Peer, Uva, Batch };
const char* name(Way w) { return w == Way::Peer ? "peer" : w == Way::Uva ? "uva" : "batch"; }

// Enqueues n copies of `bytes` (piece k at k * bytes on both sides); false when the batch call refused.
bool enqueue(Way w, char* local, const char* mapped, size_t bytes, int n, cudaStream_t s) {
  if (w == Way::Batch) {
    std::vector<void*> dsts(n);
    std::vector<const void*> srcs(n);
    std::vector<size_t> sizes(n, bytes);
    for (int k = 0; k < n; ++k) {
      dsts[k] = local + k * bytes;
      srcs[k] = mapped + k * bytes;
    }
    cudaMemcpyAttributes attr{};
    attr.srcAccessOrder = cudaMemcpySrcAccessOrderStream;
    size_t idx = 0;
    cudaError_t err = cudaMemcpyBatchAsync(dsts.data(), srcs.data(), sizes.data(), n, &attr, &idx, 1, s);
    if (err != cudaSuccess) {
      printf("{\"probe\": \"batch_refused\", \"error\": \"%s\", \"n\": %d, \"bytes\": %zu}\n", cudaGetErrorString(err), n,
             bytes);
      (void)cudaGetLastError();
      return false;
    }
    return true;
  }
  for (int k = 0; k < n; ++k) {
    if (w == Way::Peer) CK(cudaMemcpyPeerAsync(local + k * bytes, 1, mapped + k * bytes, 0, bytes, s));
    else CK(cudaMemcpyAsync(local + k * bytes, mapped + k * bytes, bytes, cudaMemcpyDefault, s));
  }
  return true;
}

// Every byte of the n pieces equals the exporter's pattern (byte i of the buffer: i * 7 + 1).
bool check(const char* local, size_t bytes, int n) {
  std::vector<unsigned char> host(bytes * n);
  CK(cudaMemcpy(host.data(), local, host.size(), cudaMemcpyDeviceToHost));
  for (size_t i = 0; i < host.size(); ++i)
    if (host[i] != static_cast<unsigned char>(i * 7 + 1)) return false;
  return true;
}

void measure(char* local, const char* mapped) {
  CK(cudaSetDevice(0));  // the stream on the source's GPU, as the mover's
  cudaStream_t s;
  CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  cudaEvent_t ev;
  CK(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
  for (Way w : {Way::Peer, Way::Uva, Way::Batch})
    for (int n : {1, 8, 64})
      for (size_t bytes : {size_t(8) << 10, size_t(64) << 10, size_t(256) << 10, size_t(1) << 20}) {
        if (bytes * n > kBuf) continue;
        CK(cudaMemset(local, 0, bytes * n));
        CK(cudaDeviceSynchronize());
        if (!enqueue(w, local, mapped, bytes, n, s)) continue;
        CK(cudaStreamSynchronize(s));
        const bool intact = check(local, bytes, n);
        std::vector<double> enq, total;
        for (int rep = 0; rep < 60; ++rep) {
          double t0 = now_us();
          enqueue(w, local, mapped, bytes, n, s);
          CK(cudaEventRecord(ev, s));
          double t1 = now_us();
          while (cudaEventQuery(ev) == cudaErrorNotReady) {
          }
          double t2 = now_us();
          if (rep >= 10) {
            enq.push_back((t1 - t0) / n);
            total.push_back((t2 - t0) / n);
          }
        }
        printf("{\"probe\": \"ipc_batch\", \"way\": \"%s\", \"n\": %d, \"bytes\": %zu, \"enqueue_us_per_copy\": %.3f, "
               "\"total_us_per_copy\": %.3f, \"intact\": %s}\n",
               name(w), n, bytes, median(enq), median(total), intact ? "true" : "false");
        fflush(stdout);
      }
  CK(cudaEventDestroy(ev));
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
    std::vector<unsigned char> pattern(kBuf);
    for (size_t i = 0; i < kBuf; ++i) pattern[i] = static_cast<unsigned char>(i * 7 + 1);
    CK(cudaMemcpy(buf, pattern.data(), kBuf, cudaMemcpyHostToDevice));
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
  CK(cudaSetDevice(0));
  CK(cudaIpcOpenMemHandle(&mapped, h, cudaIpcMemLazyEnablePeerAccess));
  measure(static_cast<char*>(local), static_cast<const char*>(mapped));
  CK(cudaSetDevice(0));
  CK(cudaIpcCloseMemHandle(mapped));
  if (write(to_exporter[1], "x", 1) != 1) return 1;
  int status = 0;
  waitpid(pid, &status, 0);
  return WIFEXITED(status) && WEXITSTATUS(status) == 0 ? 0 : 2;
}
