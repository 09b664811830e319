// The MPI's own collective on buffers it may not read: device buffers (the MPI is not
// CUDA-aware) are staged through pinned host memory: the span the datatype touches is
// copied to the host before the call when the MPI reads it and back after the call
// when it writes it. Host buffers, MPI_IN_PLACE and empty buffers go to the MPI as
// they are. This is the correct (slower) way for every case the gpustripe path does
// not take: other nodes, non-contiguous or derived types, user ops, unsupported types.
#pragma once
#include <mpi.h>

#include <functional>
#include <vector>

#include "mpi/runtime.hpp"

namespace gpustripe::mpi {

class StagedBuffers {
 public:
  explicit StagedBuffers(Runtime& rt) : rt_(rt) {}
  ~StagedBuffers();
  StagedBuffers(const StagedBuffers&) = delete;
  StagedBuffers& operator=(const StagedBuffers&) = delete;

  // What to give the MPI for (buf, count, type). `in`: the MPI reads it; `out`: writes it.
  void* add(const void* buf, int count, MPI_Datatype type, bool in, bool out);
  // Copies what the MPI wrote back to the device buffers.
  void finish();

 private:
  struct Staged {
    void* user;       // the span's first byte in device memory
    int dev;
    Runtime::Pinned host;
    size_t bytes;
    bool out;
  };
  Runtime& rt_;
  std::vector<Staged> staged_;
};

// Runs the MPI's collective `mpi` over staged buffers (StagedBuffers, copied back when it
// succeeds), or over the user's buffers outside the interposer's runtime; errors are
// reported on `comm` as the interposed call `name`.
int staged_collective(MPI_Comm comm, const char* name, const std::function<int(StagedBuffers*)>& mpi);

// `buf` staged through host memory when `sb` is given (the MPI is not CUDA-aware), else as is.
inline void* stage(StagedBuffers* sb, const void* buf, int count, MPI_Datatype type, bool in, bool out) {
  return sb ? sb->add(buf, count, type, in, out) : const_cast<void*>(buf);
}

// Elements a "v" buffer spans: the largest displacement + count (what lies between the
// blocks is staged too, and comes back as it was).
inline int span_of(const int* counts, const int* displs, int n) {
  int most = 0;
  for (int i = 0; i < n; ++i)
    if (counts[i] > 0 && displs[i] + counts[i] > most) most = displs[i] + counts[i];
  return most;
}

inline int comm_size(MPI_Comm comm) {
  int n = 0;
  PMPI_Comm_size(comm, &n);
  return n;
}

inline int comm_rank(MPI_Comm comm) {
  int r = 0;
  PMPI_Comm_rank(comm, &r);
  return r;
}

}  // namespace gpustripe::mpi
