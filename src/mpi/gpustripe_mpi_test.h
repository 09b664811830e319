/* Test hooks of libgpustripe_mpi.so, for the MPI test programs (tests/mpi): they
 * allocate and fill "device" memory through the interposer's own backend, which
 * is emulated GPUs in CI and the real ones on a GPU machine, so one test program
 * covers both. Programs find them with dlsym(RTLD_DEFAULT, ...) so that they also
 * run (and say why they cannot test) without the interposer preloaded. */
#ifndef GPUSTRIPE_MPI_TEST_H
#define GPUSTRIPE_MPI_TEST_H
#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* 1 while the interposer's runtime is running (between MPI_Init and MPI_Finalize). */
int gpustripe_mpi_active(void);
/* The interposer's backend: "cuda" or "emulated". */
const char* gpustripe_mpi_test_backend(void);
/* Number of GPUs of the interposer's backend. */
int gpustripe_mpi_test_device_count(void);
/* Device memory of GPU `dev`; NULL (message on stderr) on failure. */
void* gpustripe_mpi_test_alloc(int dev, size_t bytes);
void gpustripe_mpi_test_free(void* p);
/* Copies between any two of host and device memory; 0 on success. */
int gpustripe_mpi_test_copy(void* dst, const void* src, size_t bytes);

#ifdef __cplusplus
}
#endif
#endif
