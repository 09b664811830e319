// Probe (issue 16): the least time a blocking collective can take on a pair of GPUs, one process
// per GPU, against the same GPU work run back to back. A blocking MPI call must meet the other
// rank before its GPU part reads the other's buffer (the buffer is ready only once that rank has
// entered the call), launch that part, and see every rank's part end before it returns (the
// other rank may rewrite its buffer as soon as it returns). The interposer's blocking path on a
// pair is that and its own bookkeeping: the entry exchange, one kernel per rank that writes its
// done word into host memory, the done words polled (docs/mpi-coll.md, "Per-call path"). This
// probe runs gpustripe's own copy kernel (coll::launch_copy_kernel) as an all-gather of S bytes
// over the pair (each rank copies its own send buffer into its half of the result and pulls the
// other's through an IPC mapping: one launch of two segments, its end announced into registered
// host memory) with nothing else per call:
//   back_to_back  the launches one after another on the stream, the host waiting only at the end:
//                 the pace of calls that need no host between them (native gpustripe, NCCL)
//   blocking      per call: meet in shared memory, launch, spin until both ranks' done words
//                 hold the call's number: an MPI library's blocking call at its floor
//   blocking_store  the same with the storing form the interposer's pair runs (`sm`: each rank
//                 stores its block into both results, one segment of two destinations)
//   launch        the launch call alone (host time), within each way
// Compare `blocking` with the interposer's MPI_Allgather and the native methods of
// `gpustripe bench mpi_coll` run on the same machine (bytes: the whole gathered buffer).
// Build (from the repository root, after a build into build/gpu):
//   nvcc -O2 -arch=sm_90 -DGPUSTRIPE_HAVE_CUDA=1 -Isrc -Iinclude -Ibench/probes -o /tmp/blocking_coll_floor \
//     bench/probes/blocking_coll_floor.cu -Lbuild/gpu -lgpustripe -lcuda -Xlinker -rpath=$PWD/build/gpu
// Run:   /tmp/blocking_coll_floor [BYTES ...]   (default 1M to 64M, powers of two)
#include <cuda.h>
#include <cuda_runtime.h>

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "coll/reduce.hpp"
#include "probe_check.h"
#include "probe_time.h"
#include "probe_words.h"

namespace {

constexpr int kIters = 300;
constexpr int kWarm = 30;

struct Shared {
  Word enter[2], phase[2];
  alignas(64) uint32_t done[2][16];  // each rank's done word, in its own cache line
  cudaIpcMemHandle_t handle[2], out_handle[2];
  std::atomic<int> handles[2];
};

enum Way { BackToBack, Blocking, BlockingStore, kWays };
const char* kNames[] = {"back_to_back", "blocking", "blocking_store"};

void rank_main(Shared* sh, int r, size_t bytes) {
  using namespace gpustripe::coll;
  const int peer = 1 - r;
  const size_t half = bytes / 2;
  CK(cudaSetDevice(r));
  cudaStream_t s;
  CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  // send: this rank's half (what the peer pulls); out: the gathered buffer.
  char *send = nullptr, *out = nullptr;
  CK(cudaMalloc(&send, half));
  CK(cudaMalloc(&out, bytes));
  CK(cudaMemset(send, r + 1, half));
  CK(cudaIpcGetMemHandle(&sh->handle[r], send));
  CK(cudaIpcGetMemHandle(&sh->out_handle[r], out));
  CK(cudaDeviceSynchronize());
  sh->handles[r].fetch_add(1, std::memory_order_release);
  while (sh->handles[peer].load(std::memory_order_acquire) == 0) {
  }
  char *peer_send = nullptr, *peer_out = nullptr;
  CK(cudaIpcOpenMemHandle(reinterpret_cast<void**>(&peer_send), sh->handle[peer], cudaIpcMemLazyEnablePeerAccess));
  CK(cudaIpcOpenMemHandle(reinterpret_cast<void**>(&peer_out), sh->out_handle[peer], cudaIpcMemLazyEnablePeerAccess));
  // The done words: registered for this GPU in each process (the area is shared by the fork).
  CK(cudaHostRegister(static_cast<void*>(sh->done), sizeof(sh->done), cudaHostRegisterPortable | cudaHostRegisterMapped));
  uint32_t* done_dev = nullptr;
  CK(cudaHostGetDevicePointer(reinterpret_cast<void**>(&done_dev), static_cast<void*>(sh->done), 0));
  unsigned* blocks_done = alloc_block_counter(r, s);
  CopyArgs ca;
  CopySegment own, theirs;
  own.src = send;
  own.dsts = {out + r * half};
  own.bytes = half;
  own.src_dev = r;
  theirs.src = peer_send;
  theirs.dsts = {out + peer * half};
  theirs.bytes = half;
  theirs.src_dev = peer;
  ca.segs = {own, theirs};
  // The storing form (the interposer's `sm` all-gather on a pair): this rank's block into both
  // results, one segment of two destinations, nothing loaded from the peer.
  CopyArgs store = ca;
  CopySegment both = own;
  both.dsts = {out + r * half, peer_out + r * half};
  store.segs = {both};
  ca.done_word = store.done_word = done_dev + r * 16;
  volatile uint32_t* done_host[2] = {&sh->done[0][0], &sh->done[1][0]};
  uint32_t seq = 0;
  auto meet = [&] {
    const uint64_t phase = sh->phase[r].v.load() + 1;
    sh->phase[r].v.store(phase, std::memory_order_release);
    spin_until(sh->phase[peer], phase);
  };
  for (int w = 0; w < kWays; ++w) {
    CK(cudaStreamSynchronize(s));
    meet();
    std::vector<double> per, launch;
    double t_start = 0;
    for (int i = 0; i < kWarm + kIters; ++i) {
      if (i == kWarm) {
        CK(cudaStreamSynchronize(s));
        meet();
        t_start = now_us();
      }
      const double t0 = now_us();
      ca.done_value = store.done_value = ++seq;
      if (w != BackToBack) {
        sh->enter[r].v.store(seq, std::memory_order_release);
        spin_until(sh->enter[peer], seq);
      }
      const double t1 = now_us();
      launch_copy_kernel(w == BlockingStore ? store : ca, r, s, blocks_done);
      const double t2 = now_us();
      if (w != BackToBack) {
        while (*done_host[r] < seq || *done_host[peer] < seq) {
        }
      }
      if (i >= kWarm) {
        per.push_back(now_us() - t0);
        launch.push_back(t2 - t1);
      }
    }
    CK(cudaStreamSynchronize(s));
    const double mean = (now_us() - t_start) / kIters;
    meet();
    if (r == 0) {
      printf("{\"probe\": \"blocking_coll_floor\", \"op\": \"allgather\", \"bytes\": %zu, \"way\": \"%s\", "
             "\"median_us\": %.2f, \"mean_us\": %.2f, \"launch_us\": %.2f}\n",
             bytes, kNames[w], w == BackToBack ? mean : median(per), mean, median(launch));
      fflush(stdout);
    }
  }
  CK(cudaGetLastError());
  CK(cudaIpcCloseMemHandle(peer_send));
  CK(cudaIpcCloseMemHandle(peer_out));
  meet();  // neither frees its buffer before the other has closed its mapping of it
  free_block_counter(r, blocks_done);
  CK(cudaHostUnregister(static_cast<void*>(sh->done)));
  CK(cudaFree(send));
  CK(cudaFree(out));
  CK(cudaStreamDestroy(s));
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<size_t> sizes;
  for (int i = 1; i < argc; ++i) sizes.push_back(strtoull(argv[i], nullptr, 0));
  if (sizes.empty())
    for (size_t b = size_t(1) << 20; b <= size_t(64) << 20; b *= 2) sizes.push_back(b);
  for (size_t bytes : sizes) {
    if (bytes < 32 || bytes % 32 != 0) {
      fprintf(stderr, "blocking_coll_floor: %zu bytes is not a multiple of 32\n", bytes);
      return 1;
    }
    // A fresh pair of processes per size.
    if (!run_pair<Shared>([&](Shared* sh, int r) { rank_main(sh, r, bytes); })) return 2;
  }
  return 0;
}
