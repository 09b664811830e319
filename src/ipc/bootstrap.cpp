#include "ipc/bootstrap.hpp"

#include <algorithm>
#include <cstring>
#include <vector>

#include "common/error.hpp"

namespace gpustripe::ipc {

void Bootstrap::barrier() {
  char mine = 1;
  std::vector<char> all(static_cast<size_t>(size()));
  allgather(&mine, 1, all.data());
}

void Bootstrap::bcast(void* buf, size_t bytes, int root) {
  GS_REQUIRE(root >= 0 && root < size(), GPUSTRIPE_ERR_INVALID_ARGUMENT, "bootstrap bcast: root %d of %d members", root,
             size());
  std::vector<char> all(bytes * static_cast<size_t>(size()));
  allgather(buf, bytes, all.data());
  std::memcpy(buf, all.data() + bytes * static_cast<size_t>(root), bytes);
}

void Bootstrap::allreduce_max(int* vals, size_t n) {
  std::vector<int> all(n * static_cast<size_t>(size()));
  allgather(vals, n * sizeof(int), all.data());
  for (int r = 0; r < size(); ++r)
    for (size_t i = 0; i < n; ++i) vals[i] = std::max(vals[i], all[static_cast<size_t>(r) * n + i]);
}

FunctionBootstrap::FunctionBootstrap(int rank, int size, Allgather allgather)
    : rank_(rank), size_(size), allgather_(std::move(allgather)) {
  GS_REQUIRE(size >= 1 && rank >= 0 && rank < size, GPUSTRIPE_ERR_INVALID_ARGUMENT, "bootstrap: rank %d of %d", rank,
             size);
  GS_REQUIRE(static_cast<bool>(allgather_), GPUSTRIPE_ERR_INVALID_ARGUMENT, "bootstrap: no allgather function");
}

}  // namespace gpustripe::ipc
