// Data types, reduction operators and collective kinds of the coll layer. The
// enums are the C API's (gpustripe/coll.h), so no translation happens at the edge.
#pragma once
#include <gpustripe/coll.h>

#include <cstddef>
#include <string>

namespace gpustripe::coll {

using DataType = gpustripe_dtype_t;
using RedOp = gpustripe_redop_t;

enum class CollOp { AllToAll, AllGather, ReduceScatter, AllReduce, Bcast, Reduce };

// Bytes per element; throws ERR_INVALID_TYPE for values outside the enum.
size_t dtype_size(DataType dt);
const char* dtype_name(DataType dt);    // "float32", "bfloat16", ...
const char* redop_name(RedOp op);       // "sum", "prod", "max", "min", "land", ..., "maxloc"
const char* coll_op_name(CollOp op);    // "alltoall", "reduce_scatter", ... (the results format's op names)
// Parse the names above; throw ERR_INVALID_TYPE naming the accepted words.
DataType parse_dtype(const std::string& name);
RedOp parse_redop(const std::string& name);
// Throw ERR_INVALID_TYPE when dt / op is not a known value.
void check_dtype(DataType dt);
void check_redop(RedOp op);
// Whether op applies to dt (gpustripe/coll.h): arithmetic ops on every non-pair type, logical
// and bitwise ops on integer types, MINLOC/MAXLOC on pair types only.
bool redop_applies(DataType dt, RedOp op);
// Throws ERR_INVALID_TYPE naming both when op does not apply to dt (or either is unknown).
void check_reduction(DataType dt, RedOp op);

}  // namespace gpustripe::coll
