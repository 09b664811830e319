#include "mpi/datatype.hpp"

#include <algorithm>

#include "common/error.hpp"

namespace gpustripe::mpi {

Layout layout_of(int count, MPI_Datatype type) {
  GS_REQUIRE(count >= 0, GPUSTRIPE_ERR_INVALID_ARGUMENT, "count %d is negative", count);
  // Checked before asking the MPI about it: MPI_DATATYPE_NULL is a send's or receive's
  // MPI_ERR_TYPE (as the MPI itself returns), not a 0-byte message.
  GS_REQUIRE(type != MPI_DATATYPE_NULL, GPUSTRIPE_ERR_INVALID_TYPE, "MPI_DATATYPE_NULL is not a datatype");
  int size = 0;
  MPI_Aint lb = 0, extent = 0, tlb = 0, textent = 0;
  GS_REQUIRE(PMPI_Type_size(type, &size) == MPI_SUCCESS && size != MPI_UNDEFINED &&
                 PMPI_Type_get_extent(type, &lb, &extent) == MPI_SUCCESS &&
                 PMPI_Type_get_true_extent(type, &tlb, &textent) == MPI_SUCCESS,
             GPUSTRIPE_ERR_INVALID_TYPE, "the datatype is not valid (the MPI could not size it)");
  Layout l;
  l.bytes = static_cast<uint64_t>(size) * static_cast<uint64_t>(count);
  l.span_lb = tlb;
  l.span_bytes = count == 0 ? 0 : static_cast<uint64_t>((count - 1) * extent + textent);
  // One run of bytes starting at buf: no holes inside an element, none between elements.
  l.contiguous = count == 0 || (tlb == 0 && lb == 0 && textent == size && extent == size);
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
