#include "mpi/reduce_type.hpp"

#include <climits>
#include <mutex>
#include <set>
#include <vector>

#include "common/log.hpp"

namespace gpustripe::mpi {
namespace {

// Which ops the MPI accepts on a predefined type (Open MPI's table: its integer types
// include MPI_CHAR and MPI_BYTE for every integer op; C bool takes the logical ops only).
enum class Kind { Int, Float, Bool, Complex, Pair, NoKernel };

struct Base {
  Kind kind;
  coll::DataType dt;
  size_t per_elem;  // coll elements per element (complex: 2)
};

coll::DataType int_of(size_t bytes, bool is_signed) {
  switch (bytes) {
    case 1: return is_signed ? GPUSTRIPE_INT8 : GPUSTRIPE_UINT8;
    case 2: return is_signed ? GPUSTRIPE_INT16 : GPUSTRIPE_UINT16;
    case 4: return is_signed ? GPUSTRIPE_INT32 : GPUSTRIPE_UINT32;
    default: return is_signed ? GPUSTRIPE_INT64 : GPUSTRIPE_UINT64;
  }
}

struct Entry {
  MPI_Datatype t;
  Base base;
};

const std::vector<Entry>& predefined() {
  static const std::vector<Entry> table = [] {
    std::vector<Entry> v;
    auto sint = [&](MPI_Datatype t, size_t bytes) { v.push_back({t, {Kind::Int, int_of(bytes, true), 1}}); };
    auto uint = [&](MPI_Datatype t, size_t bytes) { v.push_back({t, {Kind::Int, int_of(bytes, false), 1}}); };
    if (CHAR_MIN < 0) sint(MPI_CHAR, 1);
    else uint(MPI_CHAR, 1);
    sint(MPI_SIGNED_CHAR, 1);
    sint(MPI_INT8_T, 1);
    uint(MPI_UNSIGNED_CHAR, 1);
    uint(MPI_UINT8_T, 1);
    uint(MPI_BYTE, 1);
    sint(MPI_SHORT, sizeof(short));
    sint(MPI_INT16_T, 2);
    uint(MPI_UNSIGNED_SHORT, sizeof(short));
    uint(MPI_UINT16_T, 2);
    sint(MPI_INT, sizeof(int));
    sint(MPI_INT32_T, 4);
    uint(MPI_UNSIGNED, sizeof(int));
    uint(MPI_UINT32_T, 4);
    sint(MPI_LONG, sizeof(long));
    sint(MPI_LONG_LONG_INT, sizeof(long long));
    sint(MPI_LONG_LONG, sizeof(long long));
    sint(MPI_INT64_T, 8);
    sint(MPI_AINT, sizeof(MPI_Aint));
    sint(MPI_OFFSET, sizeof(MPI_Offset));
    sint(MPI_COUNT, sizeof(MPI_Count));
    uint(MPI_UNSIGNED_LONG, sizeof(long));
    uint(MPI_UNSIGNED_LONG_LONG, sizeof(long long));
    uint(MPI_UINT64_T, 8);
    v.push_back({MPI_FLOAT, {Kind::Float, GPUSTRIPE_FLOAT32, 1}});
    v.push_back({MPI_DOUBLE, {Kind::Float, GPUSTRIPE_FLOAT64, 1}});
    v.push_back({MPI_C_BOOL, {Kind::Bool, GPUSTRIPE_UINT8, 1}});
    v.push_back({MPI_CXX_BOOL, {Kind::Bool, GPUSTRIPE_UINT8, 1}});
    for (MPI_Datatype t : {MPI_C_FLOAT_COMPLEX, MPI_C_COMPLEX, MPI_CXX_FLOAT_COMPLEX})
      v.push_back({t, {Kind::Complex, GPUSTRIPE_FLOAT32, 2}});
    for (MPI_Datatype t : {MPI_C_DOUBLE_COMPLEX, MPI_CXX_DOUBLE_COMPLEX})
      v.push_back({t, {Kind::Complex, GPUSTRIPE_FLOAT64, 2}});
    v.push_back({MPI_FLOAT_INT, {Kind::Pair, GPUSTRIPE_FLOAT_INT, 1}});
    v.push_back({MPI_DOUBLE_INT, {Kind::Pair, GPUSTRIPE_DOUBLE_INT, 1}});
    v.push_back({MPI_LONG_INT, {Kind::Pair, sizeof(long) == 8 ? GPUSTRIPE_INT64_INT : GPUSTRIPE_INT_INT, 1}});
    v.push_back({MPI_2INT, {Kind::Pair, GPUSTRIPE_INT_INT, 1}});
    v.push_back({MPI_SHORT_INT, {Kind::Pair, GPUSTRIPE_INT16_INT, 1}});
    return v;
  }();
  return table;
}

// The predefined type t is made of, and how many of it: named types, and contiguous and
// duplicated types of them (any depth). False for every other constructor.
bool resolve(MPI_Datatype t, MPI_Datatype* base, size_t* count) {
  int ni = 0, na = 0, nd = 0, combiner = 0;
  if (PMPI_Type_get_envelope(t, &ni, &na, &nd, &combiner) != MPI_SUCCESS) return false;
  if (combiner == MPI_COMBINER_NAMED) {
    *base = t;
    *count = 1;
    return true;
  }
  if ((combiner != MPI_COMBINER_CONTIGUOUS && combiner != MPI_COMBINER_DUP) || nd != 1 || ni > 1 || na != 0)
    return false;
  int ints[1] = {1};
  MPI_Aint addrs[1];
  MPI_Datatype old;
  if (PMPI_Type_get_contents(t, ni, na, nd, ints, addrs, &old) != MPI_SUCCESS) return false;
  size_t inner = 0;
  const bool ok = resolve(old, base, &inner) && ints[0] >= 0;
  // The handle get_contents returned is a new reference unless old is predefined.
  int oni, ona, ond, ocomb;
  PMPI_Type_get_envelope(old, &oni, &ona, &ond, &ocomb);
  if (ocomb != MPI_COMBINER_NAMED) PMPI_Type_free(&old);
  *count = inner * static_cast<size_t>(combiner == MPI_COMBINER_CONTIGUOUS ? ints[0] : 1);
  return ok;
}

bool op_of(MPI_Op o, coll::RedOp* op) {
  static const std::pair<MPI_Op, coll::RedOp> ops[] = {
      {MPI_SUM, GPUSTRIPE_SUM},   {MPI_PROD, GPUSTRIPE_PROD},     {MPI_MAX, GPUSTRIPE_MAX},
      {MPI_MIN, GPUSTRIPE_MIN},   {MPI_LAND, GPUSTRIPE_LAND},     {MPI_LOR, GPUSTRIPE_LOR},
      {MPI_LXOR, GPUSTRIPE_LXOR}, {MPI_BAND, GPUSTRIPE_BAND},     {MPI_BOR, GPUSTRIPE_BOR},
      {MPI_BXOR, GPUSTRIPE_BXOR}, {MPI_MINLOC, GPUSTRIPE_MINLOC}, {MPI_MAXLOC, GPUSTRIPE_MAXLOC}};
  for (const auto& [mo, co] : ops)
    if (o == mo) {
      *op = co;
      return true;
    }
  return false;
}

// Whether the MPI accepts op on a type of this kind.
bool accepted(Kind k, coll::RedOp op) {
  switch (k) {
    case Kind::Int: return op != GPUSTRIPE_MINLOC && op != GPUSTRIPE_MAXLOC;
    case Kind::Float: return op <= GPUSTRIPE_MIN;
    case Kind::Bool: return op == GPUSTRIPE_LAND || op == GPUSTRIPE_LOR || op == GPUSTRIPE_LXOR;
    case Kind::Complex: return op == GPUSTRIPE_SUM || op == GPUSTRIPE_PROD;
    case Kind::Pair: return op == GPUSTRIPE_MINLOC || op == GPUSTRIPE_MAXLOC;
    default: return true;
  }
}

std::string type_name(MPI_Datatype t) {
  char name[MPI_MAX_OBJECT_NAME] = {0};
  int len = 0;
  PMPI_Type_get_name(t, name, &len);
  return len > 0 ? std::string(name, len) : std::string("a derived type");
}

}  // namespace

namespace {

// The table's entry for the predefined type t is a run of (count of them in *count), or
// null with *why set.
const Base* base_of(MPI_Datatype t, size_t* count, std::string* why) {
  MPI_Datatype base = MPI_DATATYPE_NULL;
  if (!resolve(t, &base, count)) {
    *why = "datatype " + type_name(t) + " is not a contiguous run of one predefined type";
    return nullptr;
  }
  for (const Entry& e : predefined())
    if (e.t == base) return &e.base;
  *why = "no GPU kernel for datatype " + type_name(base);
  return nullptr;
}

// Whether t is count elements of b laid end to end (pairs: padding included).
bool end_to_end(MPI_Datatype t, const Base& b, size_t count, std::string* why) {
  MPI_Aint lb = 0, extent = 0, tlb = 0, textent = 0;
  PMPI_Type_get_extent(t, &lb, &extent);
  PMPI_Type_get_true_extent(t, &tlb, &textent);
  if (lb == 0 && tlb == 0 && static_cast<size_t>(extent) == count * b.per_elem * coll::dtype_size(b.dt)) return true;
  *why = "datatype " + type_name(t) + " has holes or a moved lower bound";
  return false;
}

}  // namespace

bool reduce_type(MPI_Datatype t, MPI_Op o, ReduceType* out, std::string* why) {
  why->clear();
  coll::RedOp op;
  if (!op_of(o, &op)) {
    *why = "a user-defined op (MPI_Op_create): the MPI applies it on host memory";
    return false;
  }
  size_t count = 0;
  const Base* b = base_of(t, &count, why);
  if (!b) return false;
  if (!accepted(b->kind, op)) return false;  // the MPI's error
  if (b->kind == Kind::Complex && op != GPUSTRIPE_SUM) {
    *why = "no GPU kernel for complex products (" + type_name(t) + ")";
    return false;
  }
  if (!end_to_end(t, *b, count, why)) return false;
  out->dt = b->dt;
  out->op = op;
  out->per_elem = count * b->per_elem;
  out->per_base = b->per_elem;
  return true;
}

bool element_type(MPI_Datatype t, ReduceType* out) {
  std::string why;
  size_t count = 0;
  const Base* b = base_of(t, &count, &why);
  if (!b || !end_to_end(t, *b, count, &why)) return false;
  out->dt = b->dt;
  out->per_elem = count * b->per_elem;
  out->per_base = b->per_elem;
  return true;
}

void note_host_path(const char* call, const std::string& why) {
  static std::mutex mu;
  static std::set<std::string> said;
  std::lock_guard<std::mutex> l(mu);
  if (!said.insert(std::string(call) + '\n' + why).second) return;
  GS_LOG_INFO(Subsys::Mpi, "%s on device buffers runs through host memory, slowly: %s", call, why.c_str());
}

}  // namespace gpustripe::mpi
