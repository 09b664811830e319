#include "ipc/bootstrap.hpp"

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

FunctionBootstrap::FunctionBootstrap(int rank, int size, Allgather allgather)
    : rank_(rank), size_(size), allgather_(std::move(allgather)) {
  GS_REQUIRE(size >= 1 && rank >= 0 && rank < size, GPUSTRIPE_ERR_INVALID_ARGUMENT, "bootstrap: rank %d of %d", rank,
             size);
  GS_REQUIRE(static_cast<bool>(allgather_), GPUSTRIPE_ERR_INVALID_ARGUMENT, "bootstrap: no allgather function");
}

}  // namespace gpustripe::ipc
