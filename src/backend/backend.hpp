// The one interface between the engine and the machine. Two implementations:
//   cuda/      streams, events, copy engines, kernels, CUDA graphs (real GPUs)
//   emulated/  N emulated GPUs in host memory; streams are worker threads with
//              in-order queues, events mark queue positions, copies are memcpy.
// Everything above this interface (engine, p2p, coll, the CLI) runs unchanged on
// both, so CI, which has no GPU, exercises the same pipeline and ordering logic.
//
// Semantics follow CUDA's: work on one stream runs in order; record_event marks the
// work enqueued so far on a stream; wait_event makes later work on a stream wait for
// the mark the event held at the time of the call; a stream belongs to a device.
// All calls throw gpustripe::Error (ERR_CUDA with the CUDA error and device named).
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace gpustripe {

struct Topology;

constexpr int kHostDevice = -1;  // "device" index of host memory

enum class MemoryKind { Unknown, Host, PinnedHost, Device };

struct PointerInfo {
  MemoryKind kind = MemoryKind::Unknown;
  int device = kHostDevice;  // owning GPU for Device memory
  uintptr_t base = 0;        // start of the allocation containing the pointer (0: unknown)
  size_t size = 0;           // size of that allocation (0: unknown)
  uint64_t buffer_id = 0;    // unique per allocation, also for a new allocation at a freed address (0: unknown)
  // Whether [p, p + bytes) lies within the allocation (true when its bounds are unknown).
  // Overflow-safe: a byte count near 2^64 never wraps into range.
  bool holds(const void* p, uint64_t bytes) const {
    const uintptr_t u = reinterpret_cast<uintptr_t>(p);
    return size == 0 || (u >= base && u - base <= size && bytes <= size - (u - base));
  }
};

// Whether [p, p + bytes) wraps past the end of the address space (a byte count that cannot
// be a buffer's: ERR_INVALID_SIZE at every entry, before anything is enqueued).
inline bool range_wraps(const void* p, uint64_t bytes) {
  return bytes > UINTPTR_MAX - reinterpret_cast<uintptr_t>(p);
}

using StreamHandle = void*;  // cudaStream_t on CUDA
using EventHandle = void*;   // cudaEvent_t on CUDA
using GraphExecHandle = void*;

class Backend {
 public:
  virtual ~Backend() = default;
  virtual const char* name() const = 0;  // "cuda" or "emulated"
  virtual bool emulated() const = 0;
  virtual int device_count() const = 0;

  // Memory. Device memory belongs to one GPU; pinned host memory is visible to all.
  virtual void* alloc_device(int dev, size_t bytes) = 0;
  virtual void free_device(void* p) = 0;
  virtual void* alloc_pinned(size_t bytes) = 0;
  virtual void free_pinned(void* p) = 0;
  // What a pointer is. Never throws for unknown pointers: returns kind Unknown (plain host memory).
  virtual PointerInfo pointer_info(const void* p) = 0;

  virtual bool can_access_peer(int dev, int peer) = 0;
  // Idempotent; the first call per pair maps peer memory.
  virtual void enable_peer_access(int dev, int peer) = 0;

  // Streams and events; the creator destroys them.
  virtual StreamHandle create_stream(int dev) = 0;
  virtual void destroy_stream(StreamHandle s) = 0;
  virtual EventHandle create_event(int dev, bool timing) = 0;
  virtual void destroy_event(EventHandle e) = 0;
  virtual void record_event(EventHandle e, StreamHandle s) = 0;
  virtual void wait_event(StreamHandle s, EventHandle e) = 0;
  virtual bool query_event(EventHandle e) = 0;  // true when complete
  // True when everything enqueued on `s` so far has completed.
  virtual bool query_stream(StreamHandle s) = 0;
  virtual void synchronize_event(EventHandle e) = 0;
  virtual void synchronize_stream(StreamHandle s) = 0;
  virtual float elapsed_ms(EventHandle start, EventHandle end) = 0;
  // Whether the handle names a stream of the calling thread's own (CUDA's per-thread default
  // stream): the same handle on two threads is two streams.
  virtual bool thread_stream(StreamHandle s) const { return false; }

  // Copies `bytes` from src (memory of src_dev, kHostDevice for host) to dst, ordered
  // on stream s. Peer, device-to-host, host-to-device and device-local copies alike.
  // Both backends check dst and src against the devices named before queuing anything
  // (ERR_INVALID_POINTER naming the address, device and allocation; ERR_INVALID_DEVICE);
  // bytes == 0 is a no-op. The emulated backend has no null (default) stream.
  virtual void copy_async(void* dst, int dst_dev, const void* src, int src_dev, size_t bytes, StreamHandle s) = 0;
  // copy_async for a caller that has checked both ranges against the devices named (the
  // engine: the user's pointers once per transfer, and its own staging memory): a backend
  // may skip its pointer queries (CUDA does: two driver calls per copy, which small copies
  // notice). The emulated backend checks anyway, so CI still catches a wrong range.
  virtual void copy_async_prechecked(void* dst, int dst_dev, const void* src, int src_dev, size_t bytes,
                                     StreamHandle s) {
    copy_async(dst, dst_dev, src, src_dev, bytes, s);
  }
  // Copies enqueued together by copy_batch_prechecked.
  struct BatchCopy {
    void* dst;
    int dst_dev;
    const void* src;
    int src_dev;
    size_t bytes;
  };
  // copy_async_prechecked for `n` copies on one stream, whose ranges the caller has checked and
  // which do not overlap: they complete before work enqueued on `s` after them, in no order among
  // themselves. Why one call: a window of small messages pays the per-copy host cost of the
  // driver (the device switch, the stream lookup, the copy call) once per batch where the
  // backend can (CUDA: one cudaMemcpyBatchAsync). The default enqueues them one by one.
  virtual void copy_batch_prechecked(const BatchCopy* copies, size_t n, StreamHandle s) {
    for (size_t i = 0; i < n; ++i)
      copy_async_prechecked(copies[i].dst, copies[i].dst_dev, copies[i].src, copies[i].src_dev, copies[i].bytes, s);
  }
  virtual void memset_async(void* dst, int dev, int value, size_t bytes, StreamHandle s) = 0;

  // Cross-process memory (the ipc layer builds on these). A handle names the whole
  // allocation containing `p`; open maps it in another process of the same node and
  // returns the allocation's base there. Kinds:
  //   Legacy   the bytes are enough: cudaIpc handles (cudaMalloc memory); emulated: the
  //            POSIX shared-memory segment's name.
  //   VmmFd    VMM memory (cuMemCreate with POSIX-fd handles; emulated: memfd memory):
  //            open needs a file descriptor of the allocation, made by ipc_export_fd in the
  //            exporter and passed over a Unix socket (ipc/fd_exchange.hpp).
  //   PoolFd   cudaMallocAsync memory of a pool made with POSIX-fd handles: the bytes carry
  //            the pointer's export data; open needs the pool's file descriptor the first
  //            time a process opens memory of that pool (ipc_open_needs_fd).
  //   VmmMulti a range spanning several VMM allocations mapped back to back in one
  //            reservation (PyTorch's expandable segments: 20 MiB pages): one descriptor per
  //            allocation ("piece"), all sent in one message with the layout (IpcPiece each);
  //            open maps every piece at its offset in one reserved range (ipc_open_pieces).
  //            share_id is a digest of the layout (offsets, sizes, buffer ids), so a piece freed
  //            and reallocated makes another handle (buffer ids are never reused).
  // Memory without any handle (the default pool, VMM memory without handle types) throws
  // ERR_NOT_SUPPORTED from ipc_export: its data takes the p2p stream path.
  static constexpr size_t kIpcHandleBytes = 128;
  enum class IpcKind : uint32_t { Legacy = 0, VmmFd = 1, PoolFd = 2, VmmMulti = 3 };
  // Most pieces one VmmMulti handle maps (the wire format's limit); a range over more streams
  // (said once at info level).
  static constexpr size_t kMaxIpcPieces = 64;
  struct IpcPiece {
    uint64_t offset = 0;     // from the handle's base
    uint64_t size = 0;
    uint64_t buffer_id = 0;  // the exporter's buffer id of that allocation
  };
  struct IpcMemHandle {
    unsigned char bytes[kIpcHandleBytes] = {};
    int device = kHostDevice;
    IpcKind kind = IpcKind::Legacy;
    uint64_t base = 0;       // the exporter's address of what the handle maps (offsets count from it)
    size_t size = 0;         // bytes the handle maps from `base`
    uint64_t buffer_id = 0;  // the exporter's buffer id: a freed and reused address gets a new one
    uint64_t share_id = 0;   // fd kinds: what the fd stands for (allocation / pool), unique in the exporter
  };
  virtual IpcMemHandle ipc_export(const void* p);
  // The handle of the memory holding [p, p + bytes): ipc_export(p) when it covers the range (or
  // is no VMM handle: the caller checks the range), else a VmmMulti handle of the VMM allocations
  // mapped back to back from the one at p (ERR_NOT_SUPPORTED past kMaxIpcPieces, or when the
  // range meets memory of another kind or device, or unmapped addresses). Built on ipc_export.
  IpcMemHandle ipc_export_range(const void* p, size_t bytes);
  // The pieces of a VmmMulti handle as they are now in this (the exporting) process; throws
  // ERR_INVALID_POINTER when they are not the ones exported (a piece freed or replaced).
  std::vector<IpcPiece> ipc_pieces(const IpcMemHandle& h);
  // The descriptors ipc_open / ipc_open_pieces need for `h`, in piece order (one for VmmFd and
  // PoolFd handles), with the layout for VmmMulti (`pieces`, else left empty); the caller sends
  // them on and closes them.
  std::vector<int> ipc_export_fds(const IpcMemHandle& h, std::vector<IpcPiece>* pieces);
  // Fd kinds: a new file descriptor for the allocation (VmmFd) or pool (PoolFd) of `h`, as
  // exported by this process; the caller sends it on and closes it. Throws ERR_INVALID_POINTER
  // when that memory is gone (freed since the export).
  virtual int ipc_export_fd(const IpcMemHandle& h);
  // Whether ipc_open needs the file descriptor for `h` (false for Legacy handles, and for
  // a PoolFd handle whose pool this process has imported already).
  virtual bool ipc_open_needs_fd(const IpcMemHandle& h) { return h.kind != IpcKind::Legacy; }
  // `fd`: the descriptor from the exporter's ipc_export_fd where ipc_open_needs_fd; the
  // caller keeps it (and closes it). Returns this process's address of h.base.
  // `reader`: the GPU whose kernels and streams will use the mapping (-1: the owner's, h.device).
  // Legacy CUDA handles map into one GPU's context, and only that GPU's kernels can read the
  // mapping; its copy engines reach it as peer memory. VMM and pool mappings are granted to
  // every GPU that can access the owner, whatever `reader` says.
  virtual void* ipc_open(const IpcMemHandle& h, int fd = -1, int reader = -1);
  // The device a copy issued by GPU `reader` names for another process's memory of GPU `owner`
  // that ipc_open mapped for that reader: `reader` on CUDA, where the copy is then one within the
  // reader's context through its mapping (named between two GPUs, the driver would look for the
  // mapping in the owner's context), the driver's cheapest copy call; `owner` where one mapping
  // serves every reader (the emulated backend checks a copy's range against the GPU that owns it).
  // Host memory (kHostDevice: pinned memory the processes share) always names itself: named as
  // the reader's, a copy within one GPU would take it for device memory.
  virtual int ipc_named_device(int owner, int reader) const {
    return reader >= 0 && owner != kHostDevice ? reader : owner;
  }
  // VmmMulti: maps every piece (fds[i] the exporter's descriptor of pieces[i], kept by the
  // caller) at its offset of one reserved range; returns this process's address of h.base.
  // `pieces` must be the layout h was made from (ipc_check_pieces).
  virtual void* ipc_open_pieces(const IpcMemHandle& h, const std::vector<IpcPiece>& pieces,
                                const std::vector<int>& fds);
  // Closes what ipc_open or ipc_open_pieces returned.
  virtual void ipc_close(void* base);

  // Device memory as programs bring it, other than alloc_device's plain allocations (tests
  // and benchmarks of the IPC kinds above). free_device releases all of them.
  enum class DeviceAlloc {
    Plain,        // alloc_device (cudaMalloc; emulated: a named shared-memory segment)
    VmmFd,        // cuMemCreate with POSIX-fd handles, mapped for every GPU (emulated: memfd)
    PoolFd,       // cudaMallocFromPoolAsync from a pool with POSIX-fd handles (emulated: memfd)
    NotShareable,  // the device's default pool (cudaMallocAsync; emulated: private memory)
    VmmMulti       // as PyTorch's expandable segments: one reservation mapped with several
                   // cuMemCreate POSIX-fd allocations (vmm_multi_piece bytes each; emulated: memfds)
  };
  virtual void* alloc_device_as(int dev, size_t bytes, DeviceAlloc how);
  // Tests: replaces the allocation mapped at `p` (a piece of VmmMulti memory made here) with a
  // new one at the same address, as an expandable segment that unmapped a page and mapped it
  // again; the new piece has a new buffer id, its bytes are undefined.
  virtual void remap_piece(void* p);

  // Flags that streams of different processes set and wait on, with no host in between
  // (the MPI collectives' dependencies between ranks): 32-bit words in host memory that the
  // processes share (a POSIX shared-memory segment), registered for every GPU here.
  // register_host returns the address streams use (nullptr where the backend cannot: the
  // caller then orders with the host). Values compare cyclically, as CUDA's GEQ does.
  virtual uint32_t* register_host(void* p, size_t bytes);
  virtual void unregister_host(void* p);
  // After the work enqueued on s so far: *flag = value (flag from register_host).
  virtual void stream_write_flag(StreamHandle s, uint32_t* flag, uint32_t value);
  // Later work on s waits until (int32_t)(*flag - value) >= 0.
  virtual void stream_wait_flag(StreamHandle s, const uint32_t* flag, uint32_t value);
  // A barrier of streams of several processes on their flags: stream_write_flag(s, mine, value),
  // then stream_wait_flag(s, f, value) for each of the n flags of `others`, in one driver call
  // where the backend can (it is paid on the host by every stream-ordered collective, twice).
  virtual void stream_flag_barrier(StreamHandle s, uint32_t* mine, const uint32_t* const* others, size_t n,
                                   uint32_t value);

  // CUDA graphs: capture the work enqueued on `s` (and streams it forks to) and replay it.
  virtual bool supports_graphs() const { return false; }
  virtual void begin_capture(StreamHandle s);
  virtual GraphExecHandle end_capture(StreamHandle s);
  virtual void launch_graph(GraphExecHandle g, StreamHandle s);
  virtual void destroy_graph(GraphExecHandle g);
};

// "plain", "vmm", "pool", "async" (the DeviceAlloc kinds; command-line options and tests).
const char* device_alloc_name(Backend::DeviceAlloc how);
Backend::DeviceAlloc parse_device_alloc(const std::string& word);  // ERR_INVALID_ARGUMENT for others
const char* ipc_kind_name(Backend::IpcKind kind);                   // "legacy", "vmm-fd", "pool-fd", "vmm-multi"
// The pieces of VmmMulti memory of `bytes` (alloc_device_as): 20 MiB (PyTorch's expandable
// segments map pages of that size for large blocks) for buffers past 20 MiB, else `granularity`;
// a multiple of `granularity` either way.
size_t vmm_multi_piece(size_t bytes, size_t granularity);
// The digest a VmmMulti handle carries as share_id; ipc_check_pieces throws ERR_INVALID_ARGUMENT
// unless `pieces` tile [0, h.size) in order, are at most kMaxIpcPieces and match h's digest.
uint64_t ipc_pieces_digest(const std::vector<Backend::IpcPiece>& pieces);
void ipc_check_pieces(const Backend::IpcMemHandle& h, const std::vector<Backend::IpcPiece>& pieces);

// GPUSTRIPE_BACKEND=auto|cuda|emulated. auto: CUDA when built with it and a GPU is
// visible, else emulated devices over `topo` (logged at info level, and the CLI says so).
std::unique_ptr<Backend> make_backend(const Topology& topo, const std::string& kind = "auto");
std::unique_ptr<Backend> make_emulated_backend(const Topology& topo);
// Throws ERR_NOT_SUPPORTED when built without CUDA or no GPU is visible.
std::unique_ptr<Backend> make_cuda_backend();
// Number of CUDA devices visible; 0 when built without CUDA or no driver.
int cuda_device_count() noexcept;
// What make_backend(topo, kind) makes: "cuda" or "emulated". kind "auto" (or empty)
// defers to GPUSTRIPE_BACKEND, whose "auto" means cuda when cuda_device_count() > 0.
// Throws ERR_INVALID_ARGUMENT / ERR_CONFIG for other words.
std::string resolve_backend_kind(const std::string& kind = "auto");

}  // namespace gpustripe
