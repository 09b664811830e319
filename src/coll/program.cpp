#include "coll/program.hpp"

#include <algorithm>

#include "backend/backend.hpp"
#include "common/error.hpp"

namespace gpustripe::coll {

int Program::add(Op op) {
  GS_REQUIRE(op.rank >= 0 && op.rank < nranks_, GPUSTRIPE_ERR_INTERNAL, "schedule op on rank %d of %d", op.rank,
             nranks_);
  const int self = static_cast<int>(ops_.size());
  op.deps.erase(std::remove(op.deps.begin(), op.deps.end(), -1), op.deps.end());
  for (int d : op.deps)
    GS_REQUIRE(d >= 0 && d < self, GPUSTRIPE_ERR_INTERNAL, "schedule op %d depends on op %d, not an earlier one",
               self, d);
  std::sort(op.deps.begin(), op.deps.end());
  op.deps.erase(std::unique(op.deps.begin(), op.deps.end()), op.deps.end());
  ops_.push_back(std::move(op));
  return self;
}

int Program::copy(int rank, int lane, void* dst, int dst_dev, const void* src, int src_dev, size_t bytes,
                  std::vector<int> deps) {
  if (bytes == 0 || dst == src) return -1;
  Op op;
  op.kind = Op::Copy;
  op.rank = rank;
  op.lane = lane;
  op.dst = dst;
  op.src = src;
  op.dst_dev = dst_dev;
  op.src_dev = src_dev;
  op.bytes = bytes;
  op.deps = std::move(deps);
  return add(std::move(op));
}

int Program::kernel_copy(int rank, int lane, void* dst, int dst_dev, const void* src, int src_dev, size_t bytes,
                         std::vector<int> deps) {
  const int i = copy(rank, lane, dst, dst_dev, src, src_dev, bytes, std::move(deps));
  if (i >= 0) ops_[i].by_kernel = true;
  return i;
}

int Program::reduce(int rank, int lane, void* dst, std::vector<const void*> srcs, size_t count, DataType dt,
                    RedOp redop, std::vector<int> deps, std::vector<void*> more_dsts, int blocks_per_sm) {
  if (count == 0) return -1;
  Op op;
  op.kind = Op::Reduce;
  op.rank = rank;
  op.lane = lane;
  op.dst = dst;
  op.srcs = std::move(srcs);
  op.count = count;
  op.dtype = dt;
  op.redop = redop;
  op.more_dsts = std::move(more_dsts);
  op.blocks_per_sm = blocks_per_sm;
  op.deps = std::move(deps);
  return add(std::move(op));
}

int Program::signal(int rank, int lane, int to, int slot, std::vector<int> deps) {
  Op op;
  op.kind = Op::Signal;
  op.rank = rank;
  op.lane = lane;
  op.dst_dev = to;
  op.count = static_cast<size_t>(slot);
  op.deps = std::move(deps);
  return add(std::move(op));
}

int Program::wait(int rank, int lane, int slot) {
  Op op;
  op.kind = Op::Wait;
  op.rank = rank;
  op.lane = lane;
  op.count = static_cast<size_t>(slot);
  return add(std::move(op));
}

void Program::barrier() {
  if (ops_.empty() || ops_.back().kind == Op::Barrier) return;
  Op op;
  op.kind = Op::Barrier;
  add(std::move(op));
}

size_t Program::copy_bytes() const {
  size_t n = 0;
  for (const Op& op : ops_)
    if (op.kind == Op::Copy) n += op.bytes;
  return n;
}

size_t Program::reductions() const {
  return static_cast<size_t>(std::count_if(ops_.begin(), ops_.end(), [](const Op& o) { return o.kind == Op::Reduce; }));
}

std::string Program::summary() const {
  size_t copies = 0, host = 0, barriers = 0, kernel = 0;
  for (const Op& op : ops_) {
    if (op.kind == Op::Copy) {
      ++copies;
      if (op.src_dev == kHostDevice || op.dst_dev == kHostDevice) ++host;
      if (op.by_kernel) ++kernel;
    }
    if (op.kind == Op::Barrier) ++barriers;
  }
  return format("%zu copies (%zu via host, %zu by kernels, %zu bytes), %zu reductions, %zu barriers", copies, host,
                kernel, copy_bytes(), reductions(), barriers);
}

}  // namespace gpustripe::coll
