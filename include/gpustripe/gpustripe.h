/* gpustripe: multi-path GPU-to-GPU transfers within one node.
 *
 * Umbrella header. Each layer's API is in its own header:
 *   status.h    status codes, last-error message, version
 *   topology.h  the node's GPUs and links, from the machine or a topology file
 * Link with -lgpustripe. All functions are thread-safe unless their header says otherwise. */
#ifndef GPUSTRIPE_H
#define GPUSTRIPE_H
#include <gpustripe/status.h>
#include <gpustripe/topology.h>
#include <gpustripe/context.h>
#include <gpustripe/copy.h>
#include <gpustripe/model.h>
#include <gpustripe/coll.h>
#include <gpustripe/ipc.h>
#include <gpustripe/p2p.h>
#endif
