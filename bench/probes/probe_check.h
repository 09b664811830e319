// What the standalone probes (nvcc -O2 -arch=sm_90 <probe>.cu, no library) share: a CUDA call
// that fails stops the probe, naming the call and where it was made.
#pragma once
#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>

#define CK(x)                                                                                      \
  do {                                                                                             \
    cudaError_t ck_e = (x);                                                                        \
    if (ck_e != cudaSuccess) {                                                                     \
      fprintf(stderr, "CUDA %s at %s:%d: %s\n", cudaGetErrorString(ck_e), __FILE__, __LINE__, #x); \
      exit(1);                                                                                     \
    }                                                                                              \
  } while (0)
