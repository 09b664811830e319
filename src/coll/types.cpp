#include "coll/types.hpp"

#include <string>

#include "common/error.hpp"

namespace gpustripe::coll {
namespace {
constexpr const char* kDtypeNames[] = {"float32", "float64",   "float16",   "bfloat16", "int32",   "int64",
                                       "int8",    "uint8",     "int16",     "uint16",   "uint32",  "uint64",
                                       "float_int", "double_int", "int64_int", "int_int", "int16_int"};
// Pair types: the C struct {value; int}, trailing padding included (its sizeof).
constexpr size_t kDtypeSizes[] = {4, 8, 2, 2, 4, 8, 1, 1, 2, 2, 4, 8, 8, 16, 16, 8, 8};
constexpr const char* kRedopNames[] = {"sum", "prod", "max", "min", "land", "lor",
                                       "lxor", "band", "bor", "bxor", "minloc", "maxloc"};
static_assert(sizeof kDtypeNames / sizeof *kDtypeNames == GPUSTRIPE_DTYPE_COUNT);
static_assert(sizeof kDtypeSizes / sizeof *kDtypeSizes == GPUSTRIPE_DTYPE_COUNT);
static_assert(sizeof kRedopNames / sizeof *kRedopNames == GPUSTRIPE_REDOP_COUNT);

std::string names(const char* const* v, int n) {
  std::string s;
  for (int i = 0; i < n; ++i) s += (i ? ", " : "") + std::string(v[i]);
  return s;
}
}  // namespace

void check_dtype(DataType dt) {
  GS_REQUIRE(static_cast<int>(dt) >= 0 && dt < GPUSTRIPE_DTYPE_COUNT, GPUSTRIPE_ERR_INVALID_TYPE,
             "unknown data type %d (%s are 0..%d)", static_cast<int>(dt), names(kDtypeNames, GPUSTRIPE_DTYPE_COUNT).c_str(),
             GPUSTRIPE_DTYPE_COUNT - 1);
}

void check_redop(RedOp op) {
  GS_REQUIRE(static_cast<int>(op) >= 0 && op < GPUSTRIPE_REDOP_COUNT, GPUSTRIPE_ERR_INVALID_TYPE,
             "unknown reduction operator %d (%s are 0..%d)", static_cast<int>(op),
             names(kRedopNames, GPUSTRIPE_REDOP_COUNT).c_str(), GPUSTRIPE_REDOP_COUNT - 1);
}

bool redop_applies(DataType dt, RedOp op) {
  if (static_cast<int>(dt) < 0 || dt >= GPUSTRIPE_DTYPE_COUNT || static_cast<int>(op) < 0 || op >= GPUSTRIPE_REDOP_COUNT)
    return false;
  const bool pair = dt >= GPUSTRIPE_FLOAT_INT;
  const bool integer = !pair && dt != GPUSTRIPE_FLOAT32 && dt != GPUSTRIPE_FLOAT64 && dt != GPUSTRIPE_FLOAT16 &&
                       dt != GPUSTRIPE_BFLOAT16;
  if (op == GPUSTRIPE_MINLOC || op == GPUSTRIPE_MAXLOC) return pair;
  if (op >= GPUSTRIPE_LAND) return integer;
  return !pair;
}

void check_reduction(DataType dt, RedOp op) {
  check_dtype(dt);
  check_redop(op);
  GS_REQUIRE(redop_applies(dt, op), GPUSTRIPE_ERR_INVALID_TYPE,
             "reduction operator %s does not apply to %s (logical and bitwise operators take integer types, "
             "minloc/maxloc the pair types only)",
             kRedopNames[op], kDtypeNames[dt]);
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
  GS_THROW(GPUSTRIPE_ERR_INVALID_TYPE, "unknown data type '%s' (%s)", name.c_str(),
           names(kDtypeNames, GPUSTRIPE_DTYPE_COUNT).c_str());
}

RedOp parse_redop(const std::string& name) {
  for (int i = 0; i < GPUSTRIPE_REDOP_COUNT; ++i)
    if (name == kRedopNames[i]) return static_cast<RedOp>(i);
  GS_THROW(GPUSTRIPE_ERR_INVALID_TYPE, "unknown reduction operator '%s' (%s)", name.c_str(),
           names(kRedopNames, GPUSTRIPE_REDOP_COUNT).c_str());
}

}  // namespace gpustripe::coll
