// The emulated backend: N GPUs of a Topology emulated in host memory, so that
// everything above the backend interface runs (and is tested) without a GPU.
//   memory   each device allocation is its own POSIX shared-memory segment
//            (shm_segment.hpp), recorded in a pointer table with its device and
//            buffer id; IPC handles name the segment. alloc_device_as VmmFd memory is a
//            memfd per allocation (VmmFd handles), PoolFd memory a range of the device's
//            pool memfd (PoolFd handles: the pool's descriptor once per importer, then
//            offsets), NotShareable memory private (no handle): the kinds the CUDA backend
//            meets in programs.
//   streams  worker threads with in-order queues; events mark queue positions
//            (emu_stream.hpp); copies are memmove on the stream's worker.
//   checks   every pointer handed to a copy is checked against the table and the
//            device named, before anything is queued: a bad one throws
//            ERR_INVALID_POINTER naming the address, the device and the allocation.
// Any thread may enqueue on any stream. Streams have no default (null) stream.
#pragma once
#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <unordered_map>
#include <utility>
#include <vector>

#include "backend/backend.hpp"
#include "backend/emulated/emu_stream.hpp"
#include "backend/emulated/injected_delay.hpp"
#include "backend/emulated/pointer_table.hpp"

namespace gpustripe::emu {

class EmulatedBackend final : public Backend {
 public:
  explicit EmulatedBackend(const Topology& topo);
  ~EmulatedBackend() override;

  const char* name() const override { return "emulated"; }
  bool emulated() const override { return true; }
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
  void memset_async(void* dst, int dev, int value, size_t bytes, StreamHandle s) override;

  void* alloc_device_as(int dev, size_t bytes, DeviceAlloc how) override;
  IpcMemHandle ipc_export(const void* p) override;
  int ipc_export_fd(const IpcMemHandle& h) override;
  bool ipc_open_needs_fd(const IpcMemHandle& h) override;
  void* ipc_open(const IpcMemHandle& h, int fd = -1, int reader = -1) override;
  // One mapping serves every reader here: copies name the GPU that owns it.
  int ipc_named_device(int owner, int) const override { return owner; }
  void* ipc_open_pieces(const IpcMemHandle& h, const std::vector<IpcPiece>& pieces,
                        const std::vector<int>& fds) override;
  void ipc_close(void* base) override;
  void remap_piece(void* p) override;
  uint32_t* register_host(void* p, size_t bytes) override;
  void stream_write_flag(StreamHandle s, uint32_t* flag, uint32_t value) override;
  void stream_wait_flag(StreamHandle s, const uint32_t* flag, uint32_t value) override;

  const InjectedDelay& delay() const { return delay_; }
  // Runs fn on the stream's worker, in order with the stream's other work (the
  // emulated cudaLaunchHostFunc). Tests gate streams with it; an exception thrown by
  // fn is reported at the next synchronize call, as any error inside a worker.
  void enqueue_host_call(StreamHandle s, std::function<void()> fn);

 private:
  void check_device(const char* call, const char* what, int dev) const;
  // Throws ERR_INVALID_POINTER unless [p, p+bytes) lies in memory of `dev` (host: not device memory).
  void check_range(const char* call, const char* what, const void* p, int dev, size_t bytes) const;
  EmuStream& stream(StreamHandle s, const char* call);
  EmuEvent& event(EventHandle e, const char* call);
  // Waits for all work queued so far on every stream (cudaFree synchronizes the same way),
  // so memory is never unmapped under a queued copy.
  void drain_all_streams();
  // Unmaps / unlinks / frees one allocation's storage (already out of the table).
  static void release(const Allocation& a) noexcept;
  // VmmMulti: a reserved range tiled with memfd pieces, one table entry each.
  void* alloc_vmm_multi(int dev, size_t bytes);
  void charge_memory(int dev, size_t bytes);
  void free_vmm_multi(const Allocation& first);

  // As the CUDA driver's calls that change a GPU's mappings (cudaIpcOpenMemHandle, cuMemMap,
  // cudaMalloc, cudaFree) wait for the GPU's streams: a mapping made here waits while a stream
  // of this process is stalled on a flag (stream_wait_flag not yet satisfied). Code that makes a
  // stream wait for a flag only the mapping thread would write later hangs on the GPUs: here
  // too, up to the flag waits' cap, so that the emulated node shows it.
  void wait_for_stalled_streams(const char* call) const;
  std::atomic<int> stalled_on_flags_{0};

  const int device_count_;
  std::vector<std::vector<uint8_t>> peer_access_;
  std::vector<uint64_t> memory_limit_;  // per device; 0: no limit
  const InjectedDelay delay_;
  AsyncErrors errors_;
  PointerTable table_;

  std::mutex mu_;  // guards everything below
  std::unordered_map<void*, std::shared_ptr<EmuStream>> streams_;
  std::unordered_map<void*, std::unique_ptr<EmuEvent>> events_;
  std::vector<uint64_t> memory_used_;
  std::set<std::pair<int, int>> peers_enabled_;
  std::unordered_map<std::string, void*> imported_;  // segment name -> local base
  // Emulated cudaMallocAsync pools with POSIX-fd handles: one growing memfd per device, freed
  // ranges reused for the same size (as a pool hands an address back).
  struct Pool {
    int fd = -1;
    uint64_t length = 0;
    std::multimap<size_t, uint64_t> free;  // size -> offset
  };
  std::map<int, Pool> pools_;                                     // by device
  std::map<std::pair<int32_t, uint64_t>, int> imported_pools_;   // (exporter pid, pool) -> its memfd
};

}  // namespace gpustripe::emu
