#include <gpustripe/status.h>

#include "common/error.hpp"

extern "C" {

const char* gpustripe_status_string(gpustripe_status_t status) { return gpustripe::status_name(status); }

const char* gpustripe_last_error(void) { return gpustripe::last_error(); }

void gpustripe_clear_last_error(void) { gpustripe::clear_last_error(); }

gpustripe_status_t gpustripe_version(int* major, int* minor, int* patch) {
  if (major) *major = GPUSTRIPE_VERSION_MAJOR;
  if (minor) *minor = GPUSTRIPE_VERSION_MINOR;
  if (patch) *patch = GPUSTRIPE_VERSION_PATCH;
  return GPUSTRIPE_SUCCESS;
}

}  // extern "C"
