/* gpustripe: the node's GPUs and links, detected or read from a topology file.
 *
 * A topology lists the GPUs (name, SMs, memory, copy engines, PCIe link, NUMA
 * node), the NVLinks between them (a point-to-point mesh or an NVSwitch fabric),
 * peer access per ordered pair, the CPU sockets and the links between them.
 * Bandwidths are nominal figures per direction in GB/s (1e9 bytes/s), from
 * datasheets or link training, never fitted to measured transfers. Topology files
 * are JSON, schema version 1 (docs/topology-schema.md); a few ship with gpustripe
 * ("h200x4", "h200x8", "beluga-v100x4", "narval-a100x4", "mist-ac922").
 *
 * A topology is immutable once created, so one handle may be read from several
 * threads at once. Every function returns a status; on failure the thread's
 * gpustripe_last_error() names the call and the cause, and outputs are unchanged. */
#ifndef GPUSTRIPE_TOPOLOGY_H
#define GPUSTRIPE_TOPOLOGY_H
#include <stddef.h>

#include <gpustripe/status.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct gpustripe_topology* gpustripe_topology_t;

/* The running node, through CUDA and NVML (loaded at run time; without it the NVLink
 * fields are inferred and a warning is logged). GPUSTRIPE_ERR_NOT_SUPPORTED when
 * built without CUDA or no GPU is visible; GPUSTRIPE_ERR_CUDA when a CUDA query fails. */
gpustripe_status_t gpustripe_topology_detect(gpustripe_topology_t* topo);

/* Reads a topology file: a shipped name ("h200x4", looked up in GPUSTRIPE_TOPOLOGY_DIR,
 * else next to libgpustripe) or a path to a .json file. GPUSTRIPE_ERR_IO when the file
 * does not exist or cannot be read; GPUSTRIPE_ERR_TOPOLOGY when it is malformed or
 * inconsistent, with a message "file:line: field.path: what is wrong". */
gpustripe_status_t gpustripe_topology_load(const char* name_or_path, gpustripe_topology_t* topo);

/* Frees a topology. NULL is accepted and does nothing. */
gpustripe_status_t gpustripe_topology_destroy(gpustripe_topology_t topo);

/* Number of GPUs of the node. */
gpustripe_status_t gpustripe_topology_gpu_count(gpustripe_topology_t topo, int* count);

/* Nominal one-way bandwidth of a direct peer copy from GPU src to GPU dst (GB/s):
 * the NVLink bundle between them on a mesh; min(egress of src, ingress of dst) on an
 * NVSwitch; the slower host link (and socket link) for PCIe peer-to-peer; 0 when the
 * pair has no peer access. GPUSTRIPE_ERR_INVALID_DEVICE for an index out of range,
 * GPUSTRIPE_ERR_INVALID_ARGUMENT when src == dst. */
gpustripe_status_t gpustripe_topology_direct_gbps(gpustripe_topology_t topo, int src, int dst, double* gbps);

/* The topology as schema-1 JSON text (a file gpustripe_topology_load reads back).
 * *needed receives the size including the terminating NUL. With buf NULL (and len 0)
 * only *needed is set. GPUSTRIPE_ERR_INVALID_SIZE when len < *needed: buf is left
 * untouched, call again with a larger buffer. */
gpustripe_status_t gpustripe_topology_to_json(gpustripe_topology_t topo, char* buf, size_t len, size_t* needed);

#ifdef __cplusplus
}
#endif
#endif
