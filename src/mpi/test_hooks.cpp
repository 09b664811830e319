#include "mpi/gpustripe_mpi_test.h"

#include <algorithm>
#include <cstdio>
#include <cstring>

#include "common/config.hpp"
#include "mpi/coll_team.hpp"
#include "mpi/interpose.hpp"
#include "mpi/ops.hpp"
#include "mpi/runtime.hpp"
#include "mpi/win.hpp"

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
    return Runtime::get()->context().backend().alloc_device_as(dev, bytes, parse_device_alloc(test_hook("alloc", "plain")));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "gpustripe_mpi_test_alloc: %s\n", e.what());
    return nullptr;
  }
}

void* gpustripe_mpi_test_alloc_as(int dev, size_t bytes, const char* how) {
  if (!Runtime::get() || !how) return nullptr;
  try {
    return Runtime::get()->context().backend().alloc_device_as(dev, bytes, parse_device_alloc(how));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "gpustripe_mpi_test_alloc_as(%s): %s\n", how, e.what());
    return nullptr;
  }
}

long long gpustripe_mpi_test_ipc_counter(const char* name) {
  Runtime* rt = Runtime::get();
  if (!rt || !name) return -1;
  std::lock_guard<std::recursive_mutex> l(lock());
  ipc::HandleCache* cache = rt->endpoint().handle_cache();
  ipc::FdExchange* fds = rt->endpoint().fd_exchange();
  if (!cache || !fds) return -1;
  ipc::HandleCacheStats c = cache->stats();
  ipc::FdExchangeStats f = fds->stats();
  const std::pair<const char*, uint64_t> all[] = {
      {"map_hits", c.hits},        {"map_misses", c.misses},   {"map_stale", c.stale_evictions},
      {"fd_opens", c.fd_opens},    {"fd_offered", f.offered}, {"fd_taken", f.taken},
      {"multi_opens", c.multi_opens}, {"pieces_mapped", c.pieces_mapped}, {"leases_closed", c.leases_closed},
      {"fd_requested", f.requested}, {"fd_served", f.served},
      {"eager_slots_taken", rt->endpoint().eager_slots()->taken()},
      {"progress_passes", rt->endpoint().progress_passes()}, {"requests_made", requests_made()},
      {"type_queries", type_queries()}};
  for (const auto& kv : all)
    if (std::strcmp(kv.first, name) == 0) return static_cast<long long>(kv.second);
  return -1;
}

long long gpustripe_mpi_test_win_counter(const char* name) {
  if (!Runtime::get() || !name) return -1;
  std::lock_guard<std::recursive_mutex> l(lock());
  const WinWaitCounts c = win_wait_counts();
  if (std::strcmp(name, "completion_waits") == 0) return static_cast<long long>(c.waits);
  if (std::strcmp(name, "completion_ticked") == 0) return static_cast<long long>(c.ticked);
  const WinPutCounts p = win_put_counts();
  if (std::strcmp(name, "puts_from_origin") == 0) return static_cast<long long>(p.from_origin);
  if (std::strcmp(name, "puts_from_target") == 0) return static_cast<long long>(p.from_target);
  const WinHostCounts h = win_host_counts();
  if (std::strcmp(name, "origin_queries") == 0) return static_cast<long long>(h.origin_queries);
  if (std::strcmp(name, "completion_marks") == 0) return static_cast<long long>(h.completion_marks);
  if (std::strcmp(name, "type_queries") == 0) return static_cast<long long>(h.type_queries);
  if (std::strcmp(name, "route_lookups") == 0) return static_cast<long long>(h.route_lookups);
  return -1;
}

long long gpustripe_mpi_test_pointer_queries(void) {
  Runtime* rt = Runtime::get();
  return rt ? static_cast<long long>(rt->pointer_queries()) : -1;
}

long long gpustripe_mpi_test_coll_counter(const char* name) {
  if (std::strcmp(name, "progress_passes") == 0) return static_cast<long long>(collective_progress_passes());
  if (std::strcmp(name, "wait_polls") == 0) return static_cast<long long>(wait_polls());
  return -1;
}

// The next collective team set up in this process fails here (tests/mpi/mpi_coll_churn.c).
void gpustripe_mpi_test_coll_fail_next_setup(void) { test_fail_next_team_setup(); }

long gpustripe_mpi_test_coll_forms(char* out, size_t n) {
  if (!Runtime::get()) return -1;
  const std::string forms = test_measured_forms_run();
  if (out && n) {
    const size_t k = std::min(n - 1, forms.size());
    std::memcpy(out, forms.data(), k);
    out[k] = 0;
  }
  return static_cast<long>(forms.size());
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
