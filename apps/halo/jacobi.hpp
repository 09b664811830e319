// The 2-D Jacobi step of the halo application, on the host and (jacobi.cu) on the GPU:
// the same arithmetic in the same order on both, so a run and its single-process
// reference agree to the last bit. A slab is `lr` owned rows between two ghost rows,
// `cols` wide, row-major; columns 0 and cols-1 are fixed boundary values, as are the
// ghost rows above global row 0 (1.0) and below the last (0.0).
#pragma once
#include <cstddef>

#ifdef __CUDACC__
#define HALO_HD __host__ __device__
#else
#define HALO_HD
#endif

namespace halo {

// Initial value of global row g (-1 and `rows` are the boundary ghosts), column j.
HALO_HD inline double initial(long g, long j, long rows) {
  if (g < 0) return 1.0;
  if (g >= rows) return 0.0;
  return static_cast<double>((g * 131 + j * 71) % 1009) / 1009.0;
}

// New value at (k, j) of slab `a` (k in 1..lr, j in 1..cols-2).
HALO_HD inline double stencil(const double* a, long k, long j, long cols) {
  const double* row = a + k * cols;
  return 0.25 * ((row[j - cols] + row[j + cols]) + (row[j - 1] + row[j + 1]));
}

// Host: fills slab rows 0..lr+1 (global rows r0-1 .. r0+lr) with initial values.
void init_host(double* a, long lr, long cols, long r0, long rows);
// Host: b = one Jacobi step of a on the owned rows (columns 0, cols-1 and ghosts untouched).
void step_host(const double* a, double* b, long lr, long cols);

#ifdef HALO_HAVE_CUDA
// The same on the GPU, enqueued on `stream` (a cudaStream_t).
void init_device(double* a, long lr, long cols, long r0, long rows, void* stream);
void step_device(const double* a, double* b, long lr, long cols, void* stream);
#endif

}  // namespace halo
