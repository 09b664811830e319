/* gpustripe: the performance model and planner.
 *
 * A model handle holds a node's topology (a shipped name such as "h200x4", a topology
 * file, or the running node) and its parameters: a calibration profile when one matches
 * the node (GPUSTRIPE_PROFILE, or the cache `gpustripe calibrate` writes to), else the
 * topology's nominal figures. It plans transfers the way the library does under
 * GPUSTRIPE_PLAN=model: which paths (direct peer copy, staging through another GPU,
 * staging through pinned host memory), how many bytes each carries and in how many
 * pipeline chunks, and the predicted time (docs/model.md).
 *
 * A model handle may be used from several threads at once. Every function returns a
 * status; on failure gpustripe_last_error() names the call and the cause, and outputs
 * are unchanged. */
#ifndef GPUSTRIPE_MODEL_H
#define GPUSTRIPE_MODEL_H
#include <stdint.h>

#include <gpustripe/status.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct gpustripe_model* gpustripe_model_t;

typedef enum gpustripe_path_kind {
  GPUSTRIPE_PATH_DIRECT = 0,     /* peer copy src -> dst */
  GPUSTRIPE_PATH_GPU_STAGED = 1, /* src -> staging GPU `via` -> dst */
  GPUSTRIPE_PATH_HOST_STAGED = 2 /* src -> pinned host memory of socket `via` -> dst */
} gpustripe_path_kind_t;

/* One path of a plan: bytes [offset, offset + bytes) of the message, in `chunks` pipeline chunks. */
typedef struct gpustripe_path_plan {
  gpustripe_path_kind_t kind;
  int via;             /* staging GPU or host socket; -1 for the direct path */
  uint64_t offset;
  uint64_t bytes;
  int chunks;
  double predicted_us; /* finish time of this path in the plan's mix */
} gpustripe_path_plan_t;

/* Creates a model. `topology`: a shipped topology name or a .json path, or NULL for the
 * node this process runs on (GPUSTRIPE_TOPOLOGY, else detected, else the default emulated
 * node). `profile`: a calibration profile path, or NULL for the default order (GPUSTRIPE_PROFILE,
 * the cache, nominal figures). GPUSTRIPE_ERR_PROFILE when a named profile belongs to another
 * node; GPUSTRIPE_ERR_IO / GPUSTRIPE_ERR_TOPOLOGY for files that cannot be read. */
gpustripe_status_t gpustripe_model_create(const char* topology, const char* profile, gpustripe_model_t* model);

/* Frees a model; NULL is accepted. */
gpustripe_status_t gpustripe_model_destroy(gpustripe_model_t model);

/* Where the parameters come from ("profile <path>", "nominal figures of '<node>'"). The
 * string lives as long as the model. */
gpustripe_status_t gpustripe_model_source(gpustripe_model_t model, const char** source);

/* Plans one transfer src -> dst of `bytes` on an otherwise idle node into `paths`
 * (room for `max_paths`; a node of G GPUs and S sockets needs at most G - 1 + S).
 * *npaths receives the number of paths, *predicted_us the predicted finish time (either
 * may be NULL). GPUSTRIPE_ERR_INVALID_DEVICE for src == dst or a GPU out of range,
 * GPUSTRIPE_ERR_INVALID_SIZE for bytes == 0, GPUSTRIPE_ERR_INVALID_SIZE when max_paths is
 * too small (*npaths then holds the number needed and `paths` is untouched). */
gpustripe_status_t gpustripe_model_plan(gpustripe_model_t model, int src, int dst, uint64_t bytes,
                                        gpustripe_path_plan_t* paths, int max_paths, int* npaths,
                                        double* predicted_us);

/* Predicted finish time of a given split of src -> dst (paths must tile [0, bytes) in
 * offset order; their predicted_us fields are ignored). GPUSTRIPE_ERR_INVALID_ARGUMENT
 * for a path the node does not have or paths that do not tile the message. */
gpustripe_status_t gpustripe_model_predict(gpustripe_model_t model, int src, int dst, uint64_t bytes,
                                           const gpustripe_path_plan_t* paths, int npaths, double* predicted_us);

#ifdef __cplusplus
}
#endif
#endif
