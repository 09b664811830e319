// The CUDA backend: the Backend interface on real GPUs through the CUDA runtime.
//   streams  cudaStreamNonBlocking, created on their device; any cudaStream_t works
//            as a handle (the caller's stream included; 0 is the legacy default stream)
//   events   cudaEventDisableTiming unless timing is asked for
//   copies   cudaMemcpyPeerAsync between two GPUs, cudaMemcpyAsync (UVA) otherwise;
//            pointers are checked against the device named first (one driver call
//            each; GPUSTRIPE_CUDA_CHECK_POINTERS=no skips it where the caller has
//            checked), so a wrong pointer is ERR_INVALID_POINTER and nothing is written
//   graphs   thread-local stream capture, instantiate, launch
//   ipc      cudaIpc handles of the allocation base (cudaMalloc memory); VMM memory with
//            POSIX-fd handles: the allocation's descriptor, imported and mapped for every
//            GPU that can reach it; pool memory: the pool's descriptor (imported once per
//            exporter and pool) and the pointer's export data (cuda_ipc.cpp). Open caches
//            nothing beyond imported pools (the ipc layer caches mappings).
// Each call makes the owning device current and restores the caller's afterwards.
#pragma once
#include <atomic>
#include <map>
#include <mutex>
#include <set>
#include <unordered_map>
#include <utility>
#include <vector>

#include "backend/backend.hpp"

namespace gpustripe {

class CudaBackend final : public Backend {
 public:
  CudaBackend();

  const char* name() const override { return "cuda"; }
  bool emulated() const override { return false; }
  int device_count() const override { return device_count_; }

  void* alloc_device(int dev, size_t bytes) override;
  void free_device(void* p) override;
  void* alloc_pinned(size_t bytes) override;
  void free_pinned(void* p) override;
  PointerInfo pointer_info(const void* p) override;

  bool can_access_peer(int dev, int peer) override;
  void enable_peer_access(int dev, int peer) override;

  StreamHandle create_stream(int dev) override;
  void destroy_stream(StreamHandle s) override;
  bool thread_stream(StreamHandle s) const override;
  EventHandle create_event(int dev, bool timing) override;
  void destroy_event(EventHandle e) override;
  void record_event(EventHandle e, StreamHandle s) override;
  void wait_event(StreamHandle s, EventHandle e) override;
  bool query_event(EventHandle e) override;
  bool query_stream(StreamHandle s) override;
  void synchronize_event(EventHandle e) override;
  void synchronize_stream(StreamHandle s) override;
  float elapsed_ms(EventHandle start, EventHandle end) override;

  void copy_async(void* dst, int dst_dev, const void* src, int src_dev, size_t bytes, StreamHandle s) override;
  void copy_async_prechecked(void* dst, int dst_dev, const void* src, int src_dev, size_t bytes,
                             StreamHandle s) override;
  void copy_batch_prechecked(const BatchCopy* copies, size_t n, StreamHandle s) override;
  void memset_async(void* dst, int dev, int value, size_t bytes, StreamHandle s) override;

  void* alloc_device_as(int dev, size_t bytes, DeviceAlloc how) override;
  IpcMemHandle ipc_export(const void* p) override;
  int ipc_export_fd(const IpcMemHandle& h) override;
  bool ipc_open_needs_fd(const IpcMemHandle& h) override;
  void* ipc_open(const IpcMemHandle& h, int fd = -1, int reader = -1) override;
  void* ipc_open_pieces(const IpcMemHandle& h, const std::vector<IpcPiece>& pieces,
                        const std::vector<int>& fds) override;
  void ipc_close(void* base) override;
  void remap_piece(void* p) override;
  uint32_t* register_host(void* p, size_t bytes) override;
  void unregister_host(void* p) override;
  void stream_write_flag(StreamHandle s, uint32_t* flag, uint32_t value) override;
  void stream_wait_flag(StreamHandle s, const uint32_t* flag, uint32_t value) override;
  void stream_flag_barrier(StreamHandle s, uint32_t* mine, const uint32_t* const* others, size_t n,
                           uint32_t value) override;

  bool supports_graphs() const override { return true; }
  void begin_capture(StreamHandle s) override;
  GraphExecHandle end_capture(StreamHandle s) override;
  void launch_graph(GraphExecHandle g, StreamHandle s) override;
  void destroy_graph(GraphExecHandle g) override;

 private:
  void check_device(const char* call, const char* what, int dev) const;
  void check_range(const char* call, const char* what, const void* p, int dev, size_t bytes);
  // The device a stream belongs to (the current device for the legacy default stream).
  int stream_device(StreamHandle s, const char* call) const;
  void enqueue_copy(void* dst, int dst_dev, const void* src, int src_dev, size_t bytes, StreamHandle s);
  // Set once cudaMemcpyBatchAsync refused a batch (a driver without it): batches then loop.
  std::atomic<bool> batch_refused_{false};
  // Set once cuStreamBatchMemOp refused a barrier's operations: barriers then make single calls.
  std::atomic<bool> memop_batch_refused_{false};

  // VMM memory mapped here: made by alloc_device_as (freed by free_device) or imported by
  // ipc_open (closed by ipc_close). `handle` is the CUmemGenericAllocationHandle.
  // A range holds one allocation, or several back to back (vmm_multi memory, VmmMulti imports).
  struct VmmPiece {
    size_t offset = 0;
    size_t size = 0;
    unsigned long long handle = 0;
  };
  struct VmmMapping {
    size_t size = 0;
    std::vector<VmmPiece> pieces;
    int device = -1;
    bool imported = false;
  };
  // Reserves `size` bytes and maps every piece at its offset, accessible from every GPU that
  // can reach `dev`; the mapping owns the handles then. On failure nothing stays mapped and the
  // caller still owns (and releases) the handles.
  void* vmm_map(int dev, size_t size, const std::vector<VmmPiece>& pieces, bool imported);
  void vmm_unmap(uintptr_t va, const VmmMapping& m);
  // Grants every GPU that can reach `owner` access to [va, va + size) (VMM mappings).
  void vmm_grant_access(uintptr_t va, size_t size, int owner);
  void* fd_pool(int dev);  // this device's pool with POSIX-fd handles (alloc_device_as PoolFd)
  bool pool_exportable(void* pool, int dev);  // whether a pool exports to POSIX fds (asked once)
  int pool_fd(void* pool, int dev);           // its descriptor, exported once and kept; -1 when it does not
  void enable_peer_access_to(int owner);      // every GPU that can reach `owner` (idempotent)

  const bool check_pointers_;  // GPUSTRIPE_CUDA_CHECK_POINTERS
  int device_count_ = 0;
  mutable std::mutex mu_;
  std::set<std::pair<int, int>> peers_enabled_;
  std::unordered_map<StreamHandle, int> own_streams_;  // streams create_stream made, and their device
  std::map<uintptr_t, VmmMapping> vmm_;                 // by mapped address
  std::map<std::pair<int32_t, uint64_t>, void*> imported_pools_;  // (exporter pid, its pool) -> cudaMemPool_t
  std::set<uintptr_t> pool_imports_;                    // pointers ipc_open imported from pools
  // Legacy handles ipc_open mapped: the GPU whose context holds each (cudaIpcCloseMemHandle
  // must run there) and how often it was opened (the driver hands the same pointer back).
  std::map<uintptr_t, std::pair<int, int>> legacy_opens_;
  std::map<int, void*> fd_pools_;                       // device -> its POSIX-fd pool
  std::map<void*, int> pool_fds_;                       // pool -> its exported descriptor (-1: none)
};

}  // namespace gpustripe
