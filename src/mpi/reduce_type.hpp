// What an MPI reduction's (datatype, op) is for the coll layer's kernels: every predefined
// type and op the MPI accepts together, and contiguous derived types of one such type
// (MPI_Type_contiguous / MPI_Type_dup, resolved through the type's envelope), run on the
// GPU; the rest (user ops, types without a kernel, non-contiguous types) is the MPI's, on
// host memory, and says why.
#pragma once
#include <mpi.h>

#include <cstddef>
#include <string>

#include "coll/types.hpp"

namespace gpustripe::mpi {

struct ReduceType {
  coll::DataType dt = GPUSTRIPE_FLOAT32;
  coll::RedOp op = GPUSTRIPE_SUM;
  size_t per_elem = 1;  // coll elements per element of the MPI type (derived types, complex numbers)
  size_t per_base = 1;  // coll elements per element of the predefined type it is made of (complex: 2)
};

// The kernels' (type, op, elements per MPI element) for (t, o); false with *why set when the
// GPU kernels do not take them: an op the MPI rejects for t ("" then: the MPI reports its
// error, nothing is slow), or a correct but slow case the caller reports.
bool reduce_type(MPI_Datatype t, MPI_Op o, ReduceType* out, std::string* why);

// The coll type t is laid out as, whatever the op (the accumulates MPI_REPLACE and MPI_NO_OP,
// compare-and-swap): dt, per_elem and per_base as reduce_type sets them; op untouched. False
// for types reduce_type has no kernel type for (or with holes).
bool element_type(MPI_Datatype t, ReduceType* out);

// Logs once per process and (call, why), at info level, that `call` runs through host memory
// and why (a user op, a type without a GPU kernel, a non-contiguous type).
void note_host_path(const char* call, const std::string& why);

}  // namespace gpustripe::mpi
