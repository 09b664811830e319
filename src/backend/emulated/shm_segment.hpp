// POSIX shared-memory segments: the storage of emulated device memory. Each
// allocation is its own named segment so that another process can map it by name
// (the emulated IPC handles carry the name), like cudaIpc handles name a cudaMalloc.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

namespace gpustripe::emu {

// A unique segment name for this process: "/gpustripe.<pid>.<n>".
std::string new_segment_name();

// Creates, sizes (space reserved up front, so a full /dev/shm fails here with
// ERR_NO_MEMORY instead of SIGBUS on first touch) and maps a segment read-write.
void* create_segment(const std::string& name, size_t bytes, int device);
// Maps an existing segment; throws ERR_INVALID_ARGUMENT when it does not exist
// (its owner freed it) or is smaller than `bytes`.
void* open_segment(const std::string& name, size_t bytes);
void unmap_segment(void* base, size_t bytes) noexcept;

// Memory without a name, shared by file descriptor: the emulated VMM (cuMemCreate with
// POSIX-fd handles). Creates a memfd of `bytes` (reserved up front, as segments are),
// maps it and returns the mapping; *fd keeps the descriptor (the exporter's, for ipc_export_fd).
// `at`: map it there, replacing what was mapped (a piece of a reserved range).
void* create_memfd(size_t bytes, int device, int* fd, void* at = nullptr);
// Addresses without memory (PROT_NONE), for pieces mapped over them: the emulated cuMemAddressReserve.
void* reserve_range(size_t bytes, int device);
// Maps `bytes` of a memfd another process created (ERR_INVALID_ARGUMENT when it is smaller).
void* map_memfd(int fd, size_t bytes);
// Maps `bytes` at `offset` (page aligned) of a memfd: the emulated pools' allocations; at
// `at` when given (a piece of a reserved range).
void* map_memfd_range(int fd, uint64_t offset, size_t bytes, void* at = nullptr);
// Memory no other process can map: the emulated default pool (cudaMallocAsync without handles).
void* create_private(size_t bytes, int device);
void unlink_segment(const std::string& name) noexcept;

}  // namespace gpustripe::emu
