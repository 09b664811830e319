#include "mpi/gpustripe_mpi_test.h"

#include <cstdio>

#include "mpi/ops.hpp"
#include "mpi/runtime.hpp"

using namespace gpustripe;
using namespace gpustripe::mpi;

extern "C" {

int gpustripe_mpi_active(void) { return Runtime::get() != nullptr; }

const char* gpustripe_mpi_test_backend(void) {
  return Runtime::get() ? Runtime::get()->context().backend_name() : "none";
}

int gpustripe_mpi_test_device_count(void) {
  return Runtime::get() ? Runtime::get()->context().device_count() : 0;
}

void* gpustripe_mpi_test_alloc(int dev, size_t bytes) {
  if (!Runtime::get()) return nullptr;
  try {
    return Runtime::get()->context().backend().alloc_device(dev, bytes);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "gpustripe_mpi_test_alloc: %s\n", e.what());
    return nullptr;
  }
}

void gpustripe_mpi_test_free(void* p) {
  if (!Runtime::get() || !p) return;
  try {
    Runtime::get()->context().backend().free_device(p);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "gpustripe_mpi_test_free: %s\n", e.what());
  }
}

int gpustripe_mpi_test_copy(void* dst, const void* src, size_t bytes) {
  Runtime* rt = Runtime::get();
  if (!rt) return 1;
  try {
    std::lock_guard<std::recursive_mutex> l(lock());
    p2p::MemLoc d = rt->locate(dst), s = rt->locate(src);
    rt->mover().copy_now(dst, d.device ? d.dev : kHostDevice, src, s.device ? s.dev : kHostDevice, bytes);
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "gpustripe_mpi_test_copy: %s\n", e.what());
    return 1;
  }
}

}  // extern "C"
