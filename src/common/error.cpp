#include "common/error.hpp"

#include <cstdarg>
#include <vector>

namespace gpustripe {

const char* status_name(Status status) noexcept {
  switch (status) {
    case GPUSTRIPE_SUCCESS: return "GPUSTRIPE_SUCCESS";
    case GPUSTRIPE_PENDING: return "GPUSTRIPE_PENDING";
    case GPUSTRIPE_ERR_INVALID_ARGUMENT: return "GPUSTRIPE_ERR_INVALID_ARGUMENT";
    case GPUSTRIPE_ERR_INVALID_DEVICE: return "GPUSTRIPE_ERR_INVALID_DEVICE";
    case GPUSTRIPE_ERR_INVALID_POINTER: return "GPUSTRIPE_ERR_INVALID_POINTER";
    case GPUSTRIPE_ERR_INVALID_SIZE: return "GPUSTRIPE_ERR_INVALID_SIZE";
    case GPUSTRIPE_ERR_INVALID_TYPE: return "GPUSTRIPE_ERR_INVALID_TYPE";
    case GPUSTRIPE_ERR_NOT_SUPPORTED: return "GPUSTRIPE_ERR_NOT_SUPPORTED";
    case GPUSTRIPE_ERR_NO_MEMORY: return "GPUSTRIPE_ERR_NO_MEMORY";
    case GPUSTRIPE_ERR_CUDA: return "GPUSTRIPE_ERR_CUDA";
    case GPUSTRIPE_ERR_NVML: return "GPUSTRIPE_ERR_NVML";
    case GPUSTRIPE_ERR_TOPOLOGY: return "GPUSTRIPE_ERR_TOPOLOGY";
    case GPUSTRIPE_ERR_PROFILE: return "GPUSTRIPE_ERR_PROFILE";
    case GPUSTRIPE_ERR_CONFIG: return "GPUSTRIPE_ERR_CONFIG";
    case GPUSTRIPE_ERR_IO: return "GPUSTRIPE_ERR_IO";
    case GPUSTRIPE_ERR_TIMEOUT: return "GPUSTRIPE_ERR_TIMEOUT";
    case GPUSTRIPE_ERR_PEER_FAILED: return "GPUSTRIPE_ERR_PEER_FAILED";
    case GPUSTRIPE_ERR_TRUNCATE: return "GPUSTRIPE_ERR_TRUNCATE";
    case GPUSTRIPE_ERR_MPI: return "GPUSTRIPE_ERR_MPI";
    case GPUSTRIPE_ERR_INTERNAL: return "GPUSTRIPE_ERR_INTERNAL";
    case GPUSTRIPE_STATUS_COUNT: break;
  }
  return "unknown status";
}

std::string format(const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  va_list ap2;
  va_copy(ap2, ap);
  int n = std::vsnprintf(nullptr, 0, fmt, ap);
  va_end(ap);
  std::string out;
  if (n > 0) {
    std::vector<char> buf(static_cast<size_t>(n) + 1);
    std::vsnprintf(buf.data(), buf.size(), fmt, ap2);
    out.assign(buf.data(), static_cast<size_t>(n));
  }
  va_end(ap2);
  return out;
}

void throw_error(Status status, const std::string& message) { throw Error(status, message); }

namespace {
thread_local std::string t_last_error;
}

void set_last_error(const std::string& message) { t_last_error = message; }
const char* last_error() noexcept { return t_last_error.c_str(); }
void clear_last_error() noexcept { t_last_error.clear(); }

}  // namespace gpustripe
