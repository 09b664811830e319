#include "mpi/datatype.hpp"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <vector>

#include "common/error.hpp"

namespace gpustripe::mpi {

namespace {
// One element of a datatype as the MPI describes it.
struct Element {
  int size = 0;
  MPI_Aint lb = 0, extent = 0, true_lb = 0, true_extent = 0;
};

std::atomic<uint64_t> g_type_queries{0};

bool ask(MPI_Datatype type, Element* e) {
  g_type_queries.fetch_add(1, std::memory_order_relaxed);
  return PMPI_Type_size(type, &e->size) == MPI_SUCCESS && e->size != MPI_UNDEFINED &&
         PMPI_Type_get_extent(type, &e->lb, &e->extent) == MPI_SUCCESS &&
         PMPI_Type_get_true_extent(type, &e->true_lb, &e->true_extent) == MPI_SUCCESS;
}

// The predefined types programs send most are asked of the MPI once, together: they cannot be
// freed and their handles are the MPI's constants, so their answers never change, and the three
// calls were on the path of every send and receive (a one-byte acknowledgement's included).
// Derived types are asked every time: a freed one's handle may come back for another type.
Element element_of(MPI_Datatype type) {
  struct Known {
    MPI_Datatype type;
    Element e;
  };
  static const std::vector<Known> named = [] {
    std::vector<Known> v;
    for (MPI_Datatype t : {MPI_BYTE, MPI_CHAR, MPI_UNSIGNED_CHAR, MPI_SIGNED_CHAR, MPI_INT, MPI_UNSIGNED, MPI_LONG,
                           MPI_UNSIGNED_LONG, MPI_LONG_LONG, MPI_FLOAT, MPI_DOUBLE, MPI_SHORT, MPI_INT8_T, MPI_UINT8_T,
                           MPI_INT32_T, MPI_UINT32_T, MPI_INT64_T, MPI_UINT64_T}) {
      Element e;
      if (t != MPI_DATATYPE_NULL && ask(t, &e)) v.push_back(Known{t, e});  // one this MPI lacks is asked per call
    }
    return v;
  }();
  for (const Known& k : named)
    if (k.type == type) return k.e;
  Element e;
  GS_REQUIRE(ask(type, &e), GPUSTRIPE_ERR_INVALID_TYPE, "the datatype is not valid (the MPI could not size it)");
  return e;
}
}  // namespace

uint64_t type_queries() { return g_type_queries.load(std::memory_order_relaxed); }

Layout layout_of(int count, MPI_Datatype type) {
  GS_REQUIRE(count >= 0, GPUSTRIPE_ERR_INVALID_ARGUMENT, "count %d is negative", count);
  // Checked before asking the MPI about it: MPI_DATATYPE_NULL is a send's or receive's
  // MPI_ERR_TYPE (as the MPI itself returns), not a 0-byte message.
  GS_REQUIRE(type != MPI_DATATYPE_NULL, GPUSTRIPE_ERR_INVALID_TYPE, "MPI_DATATYPE_NULL is not a datatype");
  const Element e = element_of(type);
  Layout l;
  l.bytes = static_cast<uint64_t>(e.size) * static_cast<uint64_t>(count);
  l.span_lb = e.true_lb;
  l.span_bytes = count == 0 ? 0 : static_cast<uint64_t>((count - 1) * e.extent + e.true_extent);
  // One run of bytes starting at buf: no holes inside an element, none between elements.
  l.contiguous = count == 0 || (e.true_lb == 0 && e.lb == 0 && e.true_extent == e.size && e.extent == e.size);
  return l;
}

namespace {
// Host image of the span: where PMPI_Pack/Unpack see the user's buffer.
struct HostImage {
  std::vector<char> bytes;
  char* base(const Layout& l) { return bytes.data() - l.span_lb; }
};
}  // namespace

uint64_t pack(const void* buf, int count, MPI_Datatype type, const Layout& l, p2p::MemLoc loc, p2p::Mover& mover,
              std::vector<char>& out) {
  if (l.contiguous) {  // the bytes as they lie: one copy, no MPI_Pack
    out.resize(l.bytes);
    if (l.bytes && loc.device) mover.copy_now(out.data(), kHostDevice, buf, loc.dev, l.bytes);
    else if (l.bytes) std::memcpy(out.data(), buf, l.bytes);
    return l.bytes;
  }
  int capacity = 0;
  PMPI_Pack_size(count, type, MPI_COMM_WORLD, &capacity);
  out.resize(static_cast<size_t>(capacity));
  const void* src = buf;
  HostImage img;
  if (loc.device && l.span_bytes) {
    img.bytes.resize(l.span_bytes);
    mover.copy_now(img.bytes.data(), kHostDevice, static_cast<const char*>(buf) + l.span_lb, loc.dev, l.span_bytes);
    src = img.base(l);
  }
  int pos = 0;
  int rc = PMPI_Pack(src, count, type, out.data(), capacity, &pos, MPI_COMM_WORLD);
  GS_REQUIRE(rc == MPI_SUCCESS, GPUSTRIPE_ERR_MPI, "MPI_Pack of %d elements failed (%d)", count, rc);
  return static_cast<uint64_t>(pos);
}

void unpack(const char* packed, uint64_t bytes, void* buf, int count, MPI_Datatype type,
            const Layout& l, p2p::MemLoc loc, p2p::Mover& mover) {
  int size = 0;
  PMPI_Type_size(type, &size);
  int elements = size ? static_cast<int>(std::min<uint64_t>(bytes / size, static_cast<uint64_t>(count))) : 0;
  if (elements == 0) return;
  Layout part = layout_of(elements, type);
  void* dst = buf;
  HostImage img;
  if (loc.device) {
    // Bring the span over first: the holes between elements must keep their bytes.
    img.bytes.resize(part.span_bytes);
    mover.copy_now(img.bytes.data(), kHostDevice, static_cast<char*>(buf) + part.span_lb, loc.dev, part.span_bytes);
    dst = img.base(part);
  }
  int pos = 0;
  int rc = PMPI_Unpack(packed, static_cast<int>(bytes), &pos, dst, elements, type, MPI_COMM_WORLD);
  GS_REQUIRE(rc == MPI_SUCCESS, GPUSTRIPE_ERR_MPI, "MPI_Unpack of %d elements failed (%d)", elements, rc);
  if (loc.device)
    mover.copy_now(static_cast<char*>(buf) + part.span_lb, loc.dev, img.bytes.data(), kHostDevice, part.span_bytes);
}

}  // namespace gpustripe::mpi
