// Collectives staged through slots a team mapped once (schedules.hpp's Staged): no rank needs
// another rank's buffers of the call, so the hosts need not meet to make it.
#include "common/error.hpp"
#include "coll/schedules.hpp"

namespace gpustripe::coll {
namespace {

// The sources of a reduction over every rank's staged input at byte offset `at`, in rank order on
// every rank (the same additions in the same order: every rank's result is the same bits). This
// rank's own input is read where it lies when the kernels may read it there.
std::vector<const void*> staged_sources(const Staged& s, const char* own, size_t at) {
  std::vector<const void*> srcs;
  for (int r = 0; r < s.n; ++r) srcs.push_back(r == s.me && s.direct ? own + at : s.slots[r] + at);
  return srcs;
}

// A copy of this rank's: by its SMs where its buffers are memory its kernels reach (a copy
// engine moves local device memory at a fraction of what a kernel does), else by a copy engine.
int staged_copy(Program& p, const Staged& s, int lane, void* dst, int dst_dev, const void* src, int src_dev,
                size_t bytes, std::vector<int> deps = {}) {
  if (s.direct)
    return p.kernel_copy(s.me, lane, dst, dst_dev, src, src_dev, bytes, std::move(deps));
  return p.copy(s.me, lane, dst, dst_dev, src, src_dev, bytes, std::move(deps));
}

void check_staged(const Program& p, const Staged& s, size_t bytes) {
  GS_REQUIRE(p.nranks() == s.n && s.me >= 0 && s.me < s.n && static_cast<int>(s.slots.size()) == s.n &&
                 static_cast<int>(s.slot_dev.size()) == s.n,
             GPUSTRIPE_ERR_INTERNAL, "a staged collective's program and slots do not fit its team");
  GS_REQUIRE(bytes <= s.slot_bytes, GPUSTRIPE_ERR_INTERNAL, "a staged collective of %zu bytes for slots of %zu",
             bytes, s.slot_bytes);
  GS_REQUIRE(s.direct ? s.send_dev == s.dev && s.recv_dev == s.dev : s.temp != nullptr, GPUSTRIPE_ERR_INTERNAL,
             "a staged collective's buffers are not where it reads them");
}

}  // namespace

void build_staged_allreduce(Program& p, const Staged& s, const char* send, char* recv, size_t count, DataType dt,
                            RedOp op) {
  const size_t bytes = count * dtype_size(dt);
  check_staged(p, s, bytes);
  staged_copy(p, s, kLaneLocal, s.slots[s.me], s.dev, send, s.send_dev, bytes);
  p.barrier();
  // In place, the kernel reads each element of its own input before it writes it; the peers
  // read the slot, never the input.
  char* out = s.direct ? recv : s.temp;
  const int red = p.reduce(s.me, kLaneLocal, out, staged_sources(s, send, 0), count, dt, op);
  if (!s.direct) staged_copy(p, s, kLaneLocal, recv, s.recv_dev, out, s.dev, bytes, {red});
}

void build_staged_reduce_scatter(Program& p, const Staged& s, const char* send, char* recv, size_t count, DataType dt,
                                 RedOp op) {
  const size_t block = count * dtype_size(dt);
  check_staged(p, s, block * s.n);
  staged_copy(p, s, kLaneLocal, s.slots[s.me], s.dev, send, s.send_dev, block * s.n);
  p.barrier();
  char* out = s.direct ? recv : s.temp;
  const int red = p.reduce(s.me, kLaneLocal, out, staged_sources(s, send, s.me * block), count, dt, op);
  if (!s.direct) staged_copy(p, s, kLaneLocal, recv, s.recv_dev, out, s.dev, block, {red});
}

void build_staged_allgather(Program& p, const Staged& s, const char* send, char* recv, size_t block) {
  check_staged(p, s, block);
  char* own = recv + s.me * block;
  // The slot's copy and its own block's (in place: there already): one kernel where both are.
  staged_copy(p, s, kLaneLocal, s.slots[s.me], s.dev, send, s.send_dev, block);
  if (own != send) staged_copy(p, s, kLaneLocal, own, s.recv_dev, send, s.send_dev, block);
  p.barrier();
  // Each peer's block pulled from its slot: by one kernel's loads, or a copy engine per peer.
  for (int d = 1; d < s.n; ++d) {
    const int r = (s.me + d) % s.n;
    staged_copy(p, s, s.direct ? kLaneLocal : kLanePeer0 + d - 1, recv + r * block, s.recv_dev,
                s.slots[r], s.slot_dev[r], block);
  }
}

}  // namespace gpustripe::coll
