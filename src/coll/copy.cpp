// Kernel copies (Op::by_kernel): their segments, and the CPU loop that stands in for the
// copy kernel (copy_cuda.cu) on the emulated backend.
#include <cstring>

#include "coll/reduce.hpp"
#include "common/error.hpp"

namespace gpustripe::coll {

std::vector<CopySegment> copy_segments(const std::vector<const Op*>& copies) {
  std::vector<CopySegment> segs;
  for (const Op* op : copies) {
    CopySegment* seg = nullptr;
    for (CopySegment& s : segs)
      if (s.src == op->src && s.bytes == op->bytes) seg = &s;
    if (!seg) {
      segs.emplace_back();
      seg = &segs.back();
      seg->src = op->src;
      seg->bytes = op->bytes;
      seg->src_dev = op->src_dev;
    }
    seg->dsts.push_back(op->dst);
  }
  return segs;
}

void copy_host(const CopyArgs& args) {
  for (const CopySegment& s : args.segs) {
    if (s.bytes == 0) continue;
    GS_REQUIRE(s.src != nullptr, GPUSTRIPE_ERR_INVALID_POINTER, "kernel copy source is NULL");
    for (void* d : s.dsts) {
      GS_REQUIRE(d != nullptr, GPUSTRIPE_ERR_INVALID_POINTER, "kernel copy destination is NULL");
      std::memcpy(d, s.src, s.bytes);
    }
  }
}

}  // namespace gpustripe::coll
