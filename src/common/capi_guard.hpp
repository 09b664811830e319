// The C API edge: every exported function runs its body through capi_guard, so no
// C++ exception crosses into C, and every failure leaves a status plus a message
// naming the call in the thread's last-error slot.
#pragma once
#include <new>
#include <string>

#include "common/error.hpp"
#include "common/log.hpp"

namespace gpustripe {

template <class F>
Status capi_guard(const char* function, F&& body) noexcept {
  try {
    body();
    return GPUSTRIPE_SUCCESS;
  } catch (const Error& e) {
    set_last_error(std::string(function) + ": " + e.what());
    GS_LOG_DEBUG(Subsys::Api, "%s -> %s: %s", function, status_name(e.status()), e.what());
    return e.status();
  } catch (const std::bad_alloc&) {
    set_last_error(std::string(function) + ": out of host memory");
    return GPUSTRIPE_ERR_NO_MEMORY;
  } catch (const std::exception& e) {
    set_last_error(std::string(function) + ": internal error: " + e.what());
    return GPUSTRIPE_ERR_INTERNAL;
  } catch (...) {
    set_last_error(std::string(function) + ": internal error: unknown exception");
    return GPUSTRIPE_ERR_INTERNAL;
  }
}

}  // namespace gpustripe

#define GS_REQUIRE_ARG(ptr) GS_REQUIRE((ptr) != nullptr, GPUSTRIPE_ERR_INVALID_ARGUMENT, "argument '%s' is NULL", #ptr)
