// How (count, datatype) lays out in memory, and the pack path for layouts that are
// not one contiguous run of bytes. Contiguous predefined and derived types go to
// the transports as (pointer, bytes); others are packed with PMPI_Pack into a host
// buffer (device memory: the whole span is brought to the host first, since the
// MPI may not read device memory) and unpacked the same way on arrival.
#pragma once
#include <mpi.h>

#include <cstddef>
#include <cstdint>
#include <vector>

#include "p2p/mover.hpp"

namespace gpustripe::mpi {

struct Layout {
  bool contiguous = true;
  uint64_t bytes = 0;      // type size x count: the bytes on the wire
  MPI_Aint span_lb = 0;    // first byte touched, relative to buf (true lb)
  uint64_t span_bytes = 0; // from the first to past the last byte touched
};

Layout layout_of(int count, MPI_Datatype type);
// The datatype queries layout_of has asked of the MPI (tests count them: a predefined type is
// asked once).
uint64_t type_queries();

// Packs (buf, count, type) living at `loc` into `out` (host); returns its length (out may be longer:
// MPI_Pack_size's bound). A contiguous layout is copied as it lies.
uint64_t pack(const void* buf, int count, MPI_Datatype type, const Layout& l, p2p::MemLoc loc, p2p::Mover& mover,
              std::vector<char>& out);
// Unpacks `bytes` of packed data into (buf, count, type) living at `loc`; a short
// message fills whole elements only.
void unpack(const char* packed, uint64_t bytes, void* buf, int count, MPI_Datatype type,
            const Layout& l, p2p::MemLoc loc, p2p::Mover& mover);

}  // namespace gpustripe::mpi
