// The one error type inside gpustripe. C++ code throws gpustripe::Error; the C API
// edge (capi_guard.hpp) turns it into a status and a per-thread message, and the
// Python bindings into gpustripe.Error.
#pragma once
#include <gpustripe/status.h>

#include <cstdio>
#include <stdexcept>
#include <string>
#include <utility>

namespace gpustripe {

using Status = gpustripe_status_t;

class Error : public std::runtime_error {
 public:
  Error(Status status, std::string message) : std::runtime_error(std::move(message)), status_(status) {}
  Status status() const noexcept { return status_; }

 private:
  Status status_;
};

const char* status_name(Status status) noexcept;

// printf-style message builder used by the throw macros and the logger.
std::string format(const char* fmt, ...) __attribute__((format(printf, 1, 2)));

[[noreturn]] void throw_error(Status status, const std::string& message);

// Thread-local last-error message behind gpustripe_last_error().
void set_last_error(const std::string& message);
const char* last_error() noexcept;
void clear_last_error() noexcept;

}  // namespace gpustripe

#define GS_THROW(status, ...) ::gpustripe::throw_error((status), ::gpustripe::format(__VA_ARGS__))

#define GS_REQUIRE(cond, status, ...)             \
  do {                                            \
    if (!(cond)) GS_THROW((status), __VA_ARGS__); \
  } while (0)
