#include "coll/types.hpp"

#include "common/error.hpp"

namespace gpustripe::coll {
namespace {
constexpr const char* kDtypeNames[] = {"float32", "float64", "float16", "bfloat16", "int32", "int64"};
constexpr size_t kDtypeSizes[] = {4, 8, 2, 2, 4, 8};
constexpr const char* kRedopNames[] = {"sum", "prod", "max", "min"};
}  // namespace

void check_dtype(DataType dt) {
  GS_REQUIRE(static_cast<int>(dt) >= 0 && dt < GPUSTRIPE_DTYPE_COUNT, GPUSTRIPE_ERR_INVALID_TYPE,
             "unknown data type %d (float32, float64, float16, bfloat16, int32, int64 are 0..5)", static_cast<int>(dt));
}

void check_redop(RedOp op) {
  GS_REQUIRE(static_cast<int>(op) >= 0 && op < GPUSTRIPE_REDOP_COUNT, GPUSTRIPE_ERR_INVALID_TYPE,
             "unknown reduction operator %d (sum, prod, max, min are 0..3)", static_cast<int>(op));
}

size_t dtype_size(DataType dt) {
  check_dtype(dt);
  return kDtypeSizes[dt];
}

const char* dtype_name(DataType dt) {
  check_dtype(dt);
  return kDtypeNames[dt];
}

const char* redop_name(RedOp op) {
  check_redop(op);
  return kRedopNames[op];
}

const char* coll_op_name(CollOp op) {
  switch (op) {
    case CollOp::AllToAll: return "alltoall";
    case CollOp::AllGather: return "allgather";
    case CollOp::ReduceScatter: return "reduce_scatter";
    case CollOp::AllReduce: return "allreduce";
    case CollOp::Bcast: return "bcast";
    case CollOp::Reduce: return "reduce";
  }
  return "unknown";
}

DataType parse_dtype(const std::string& name) {
  for (int i = 0; i < GPUSTRIPE_DTYPE_COUNT; ++i)
    if (name == kDtypeNames[i]) return static_cast<DataType>(i);
  GS_THROW(GPUSTRIPE_ERR_INVALID_TYPE, "unknown data type '%s' (float32, float64, float16, bfloat16, int32, int64)",
           name.c_str());
}

RedOp parse_redop(const std::string& name) {
  for (int i = 0; i < GPUSTRIPE_REDOP_COUNT; ++i)
    if (name == kRedopNames[i]) return static_cast<RedOp>(i);
  GS_THROW(GPUSTRIPE_ERR_INVALID_TYPE, "unknown reduction operator '%s' (sum, prod, max, min)", name.c_str());
}

}  // namespace gpustripe::coll
