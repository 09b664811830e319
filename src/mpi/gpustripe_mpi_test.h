/* Test hooks of libgpustripe_mpi.so, for the MPI test programs (tests/mpi): they
 * allocate and fill "device" memory through the interposer's own backend, which
 * is emulated GPUs in CI and the real ones on a GPU machine, so one test program
 * covers both. Programs find them with dlsym(RTLD_DEFAULT, ...) so that they also
 * run (and say why they cannot test) without the interposer preloaded. */
#ifndef GPUSTRIPE_MPI_TEST_H
#define GPUSTRIPE_MPI_TEST_H
#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* 1 while the interposer's runtime is running (between MPI_Init and MPI_Finalize). */
int gpustripe_mpi_active(void);
/* The interposer's backend: "cuda" or "emulated". */
const char* gpustripe_mpi_test_backend(void);
/* Number of GPUs of the interposer's backend. */
int gpustripe_mpi_test_device_count(void);
/* Device memory of GPU `dev` (from the allocator GPUSTRIPE_TEST=alloc=KIND names: plain by
 * default, see gpustripe_mpi_test_alloc_as); NULL (message on stderr) on failure. */
void* gpustripe_mpi_test_alloc(int dev, size_t bytes);
void gpustripe_mpi_test_free(void* p);
/* Device memory of another allocator: "plain" (as above), "vmm" (cuMemCreate with POSIX-fd
 * handles), "pool" (a cudaMallocAsync pool with POSIX-fd handles), "async" (the device's
 * default pool: no IPC handle). Emulated: vmm and pool are memfd memory, async private memory.
 * Freed with gpustripe_mpi_test_free. NULL (message on stderr) on failure. */
void* gpustripe_mpi_test_alloc_as(int dev, size_t bytes, const char* how);
/* A counter of this rank's IPC layer: "map_hits", "map_misses", "map_stale" (their sum: the
 * peers' buffers mapped, one per pulled message), "fd_opens" (mappings opened with a file
 * descriptor), "fd_offered", "fd_taken", "fd_requested", "fd_served"; and of its p2p layer:
 * "eager_slots_taken" (small device messages this rank sent through eager slots), "progress_passes"
 * (its endpoint's progress passes); and of the interposer: "requests_made" (MPI requests it made
 * for its own operations), "type_queries" (datatypes asked of the MPI to lay a buffer out: a
 * predefined type once); -1 for an unknown name or no runtime. */
long long gpustripe_mpi_test_ipc_counter(const char* name);
/* A counter of this rank's device windows: "completion_waits" (flush, unlock, fence, complete
 * or free calls that had to wait for their puts and gets), "completion_ticked" (those of them
 * that lasted until the wait's liveness tick, every few milliseconds), "puts_from_origin" /
 * "puts_from_target" (puts into another rank's device memory run on a stream of the origin's
 * GPU, pushed through a mapping in its context, or of the target's), "origin_queries" (pointer
 * queries of puts' and gets' origin buffers: none for an origin in the rank's own window memory),
 * "completion_marks" (events recorded to see puts and gets complete: one per stream per completion
 * wait, not one per operation), "type_queries" (datatypes of puts, gets and accumulates asked of
 * the MPI: one per put or get whose origin and target name the same count and type),
 * "route_lookups" (how puts into a target's memory from a GPU go, found once per target memory and
 * origin GPU, not per put); -1 for an unknown name or no runtime. */
long long gpustripe_mpi_test_win_counter(const char* name);
/* Pointer queries the interposer has made to find where a buffer lives (one driver call each on
 * CUDA, on the latency path of the message); -1 without a runtime. */
long long gpustripe_mpi_test_pointer_queries(void);
/* Counters of the nonblocking collectives' waits: "progress_passes" (full passes over every
 * team's pending collective), "wait_polls" (polls of MPI_Wait on one request of the
 * interposer's); -1 for an unknown name. */
long long gpustripe_mpi_test_coll_counter(const char* name);
/* Copies between any two of host and device memory; 0 on success. */
int gpustripe_mpi_test_copy(void* dst, const void* src, size_t bytes);
/* The next collective team this process sets up (a communicator's first collective on
 * gpustripe) fails here as when out of memory: every rank's call must fail, none hang. */
void gpustripe_mpi_test_coll_fail_next_setup(void);
/* The schedules this process ran its timed-choice collectives in (a pair's broadcasts: "sm" or
 * "direct"), comma-separated, oldest first (the first 4 KiB), copied into out (at most n bytes, NUL-terminated);
 * returns the full length, or -1 without a runtime. */
long gpustripe_mpi_test_coll_forms(char* out, size_t n);

#ifdef __cplusplus
}
#endif
#endif
