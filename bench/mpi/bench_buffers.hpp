// Buffers and GPU selection of the MPI benchmark clients that use the CUDA runtime
// directly (mpi_bench, nccl_bench, ucx_bench): plain CUDA + MPI, nothing of gpustripe.
// Built without CUDA (BENCH_HAVE_CUDA unset) only host memory exists.
#pragma once
#include <mpi.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

#ifdef BENCH_HAVE_CUDA
#include <cuda_runtime.h>
#define CUDA_OK(call)                                                                              \
  do {                                                                                             \
    cudaError_t e_ = (call);                                                                       \
    if (e_ != cudaSuccess) {                                                                       \
      std::fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call, cudaGetErrorString(e_)); \
      MPI_Abort(MPI_COMM_WORLD, 4);                                                                \
    }                                                                                              \
  } while (0)
#endif

namespace bench {

// One GPU per rank of a node, as MPI programs do (GPU = local rank mod GPUs).
// Returns the GPU count (0 without CUDA or a driver); aborts when need_gpu and none.
inline int select_gpu(bool need_gpu, const char* prog) {
  int ndev = 0;
#ifdef BENCH_HAVE_CUDA
  if (cudaGetDeviceCount(&ndev) != cudaSuccess) ndev = 0;
#endif
  if (ndev == 0 && need_gpu) {
    std::fprintf(stderr, "%s: no CUDA device visible (or built without CUDA): device buffers need a GPU\n", prog);
    MPI_Abort(MPI_COMM_WORLD, 4);
  }
  MPI_Comm node;
  MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node);
  int local = 0;
  MPI_Comm_rank(node, &local);
  MPI_Comm_free(&node);
#ifdef BENCH_HAVE_CUDA
  if (ndev > 0) CUDA_OK(cudaSetDevice(local % ndev));
#endif
  return ndev;
}

// Device (or host) memory filled with a pattern, so nothing reads uninitialised bytes.
inline char* alloc(size_t n, bool device) {
#ifdef BENCH_HAVE_CUDA
  if (device) {
    char* p = nullptr;
    CUDA_OK(cudaMalloc(reinterpret_cast<void**>(&p), n));
    CUDA_OK(cudaMemset(p, 0x5a, n));
    return p;
  }
#endif
  char* p = static_cast<char*>(std::malloc(n));
  std::memset(p, 0x5a, n);
  return p;
}

inline void free_buf(char* p, bool device) {
#ifdef BENCH_HAVE_CUDA
  if (device) {
    cudaFree(p);
    return;
  }
#endif
  std::free(p);
}

inline char* alloc_pinned(size_t n) {
#ifdef BENCH_HAVE_CUDA
  char* p = nullptr;
  CUDA_OK(cudaMallocHost(reinterpret_cast<void**>(&p), n));
  return p;
#else
  return static_cast<char*>(std::malloc(n));
#endif
}

inline void free_pinned(char* p) {
#ifdef BENCH_HAVE_CUDA
  cudaFreeHost(p);
#else
  std::free(p);
#endif
}

}  // namespace bench
