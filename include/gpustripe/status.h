/* gpustripe: status codes, error messages and version.
 *
 * Every exported function returns a gpustripe_status_t. On failure the calling
 * thread's last-error message (gpustripe_last_error) names the call, the device
 * and the underlying CUDA/NVML/MPI error where there is one. The message stays
 * until the next failing call on the same thread. */
#ifndef GPUSTRIPE_STATUS_H
#define GPUSTRIPE_STATUS_H

#ifdef __cplusplus
extern "C" {
#endif

#define GPUSTRIPE_VERSION_MAJOR 0
#define GPUSTRIPE_VERSION_MINOR 1
#define GPUSTRIPE_VERSION_PATCH 0

typedef enum gpustripe_status {
  GPUSTRIPE_SUCCESS = 0,
  GPUSTRIPE_PENDING = 1,              /* operation posted, not complete yet (test/query calls) */
  GPUSTRIPE_ERR_INVALID_ARGUMENT = 2, /* a null handle or an argument out of its range */
  GPUSTRIPE_ERR_INVALID_DEVICE = 3,   /* a device index that the context does not have */
  GPUSTRIPE_ERR_INVALID_POINTER = 4,  /* a pointer that is not where the call says it is */
  GPUSTRIPE_ERR_INVALID_SIZE = 5,     /* a byte count that is zero where not allowed, or overflows a buffer */
  GPUSTRIPE_ERR_INVALID_TYPE = 6,     /* an unknown data type or reduction operator */
  GPUSTRIPE_ERR_NOT_SUPPORTED = 7,    /* valid request this build or node cannot serve */
  GPUSTRIPE_ERR_NO_MEMORY = 8,        /* host or device allocation failed */
  GPUSTRIPE_ERR_CUDA = 9,             /* a CUDA runtime/driver call failed */
  GPUSTRIPE_ERR_NVML = 10,            /* an NVML call failed */
  GPUSTRIPE_ERR_TOPOLOGY = 11,        /* a topology file is malformed or inconsistent */
  GPUSTRIPE_ERR_PROFILE = 12,         /* a calibration profile is malformed or belongs to another node */
  GPUSTRIPE_ERR_CONFIG = 13,          /* a GPUSTRIPE_* variable has a value that does not parse */
  GPUSTRIPE_ERR_IO = 14,              /* a file could not be read or written */
  GPUSTRIPE_ERR_TIMEOUT = 15,         /* a wait exceeded GPUSTRIPE_TIMEOUT */
  GPUSTRIPE_ERR_PEER_FAILED = 16,     /* a peer process died or stopped answering */
  GPUSTRIPE_ERR_TRUNCATE = 17,        /* a message is longer than the receive buffer */
  GPUSTRIPE_ERR_MPI = 18,             /* an MPI call failed */
  GPUSTRIPE_ERR_INTERNAL = 19,        /* a bug in gpustripe: please report the message */
  GPUSTRIPE_STATUS_COUNT = 20
} gpustripe_status_t;

/* Static name of a status ("GPUSTRIPE_ERR_CUDA"), "unknown status" for other values. */
const char* gpustripe_status_string(gpustripe_status_t status);

/* The calling thread's last error message, "" if none. Valid until the thread's next failing call. */
const char* gpustripe_last_error(void);

/* Clears the calling thread's last error message. */
void gpustripe_clear_last_error(void);

/* Library version; any argument may be NULL. */
gpustripe_status_t gpustripe_version(int* major, int* minor, int* patch);

#ifdef __cplusplus
}
#endif
#endif
