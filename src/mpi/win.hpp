// One-sided communication (MPI RMA) on device memory of one node's ranks.
//
// A window whose members all sit on this node and expose device memory is served
// here; every other window is the MPI's, untouched (host memory, members on other
// nodes). A real MPI window still exists underneath (a shared-memory window of a few
// unused bytes), so the handle, its group, name, error handler and attributes stay the
// MPI's; only the memory and the synchronization are ours.
//
// Memory: every member describes its memory (an IPC handle, its base, size and
// displacement unit) in the window's shared-memory segment, and each member maps
// every other member's memory once, at creation (MPI_Win_attach for dynamic
// windows: on first access to a region, through the p2p layer's mapping cache,
// whose buffer id check never serves a freed and reallocated buffer). An origin
// then moves data itself: a copy of the direct path alone (up to the model's direct-alone
// size) is one plain copy pushed by the copy engine of the GPU that holds the data (NVLink
// writes outrun reads at medium sizes): a get on a stream of the target's GPU, where the
// cache's mapping lives in this process, a put on a stream of the origin's GPU into a second
// mapping of the target's memory opened in that GPU's context (Backend::ipc_open with that
// GPU as the reader; legacy handles; other memory: on the target's GPU). Larger puts run the engine's plan from
// a stream of the target's GPU (Engine::copy_async_from_dst: multi-path where the plan says
// so), larger gets the mover's copies (the same, as p2p's pull).
// The target takes no part: passive target needs no progress on its side.
//
// Synchronization lives in the same segment, so it needs no target progress either
// and every wait is bounded (GPUSTRIPE_TIMEOUT) and ends at once with a clear error
// when a member died: a reader/writer lock word per target (MPI_Win_lock/unlock,
// lock_all), counters per (target, origin) for post/start/complete/wait, one
// sequence number per member for fence and free (a barrier). Completion: flush,
// unlock, complete and fence wait until the origin's copies have completed, i.e.
// the data is in the target's memory.
//
// Accumulates (accumulate, get_accumulate, fetch_and_op, compare_and_swap) are
// element-wise atomic for every predefined op and type: elements of up to 8 bytes by a
// kernel on the target's GPU, one compare-and-swap per element (no lock); larger or
// unaligned ones under the target's accumulate lock (in the segment) through pinned
// host memory, the MPI's MPI_Reduce_local applying the op (win_accumulate.cpp).
//
// Errors: a displacement out of the target's memory is MPI_ERR_RMA_RANGE with
// nothing moved; an operation outside an access epoch, or MPI_Win_free while one is
// open, MPI_ERR_RMA_SYNC; non-contiguous datatypes MPI_ERR_TYPE.
#pragma once
#include <mpi.h>

#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include "backend/backend.hpp"
#include "coll/atomic_acc.hpp"
#include "ipc/shm_segment.hpp"
#include "mpi/runtime.hpp"
#include "p2p/mover.hpp"

namespace gpustripe::mpi {

// An RMA error with the MPI error class the standard names for it.
class WinError : public std::runtime_error {
 public:
  WinError(int mpi_code, const std::string& what) : std::runtime_error(what), code_(mpi_code) {}
  int code() const { return code_; }

 private:
  int code_;
};

struct WinShared;  // the segment's layout (win_shared.hpp)

class DeviceWindow {
 public:
  enum class Flavor { Create, Allocate, Dynamic };
  // Collective over `comm`: every member calls it once the members agreed that the window is
  // ours (interpose_win.cpp). Throws on every member when one cannot share or map memory. `base`/`bytes`: this rank's memory (device memory of `dev`; none for
  // Dynamic). `owned`: the memory was allocated for the window (freed with it).
  DeviceWindow(Runtime& rt, MPI_Comm comm, const CommInfo& ci, Flavor flavor, void* base, uint64_t bytes,
               int disp_unit, bool owned, MPI_Info info);
  ~DeviceWindow();
  DeviceWindow(const DeviceWindow&) = delete;
  DeviceWindow& operator=(const DeviceWindow&) = delete;

  MPI_Win handle() const { return win_; }
  // Attributes MPI_Win_get_attr returns pointers to.
  void* base_attr() { return base_; }
  MPI_Aint* size_attr() { return &size_attr_; }
  int* disp_unit_attr() { return &disp_unit_; }
  int* flavor_attr() { return &flavor_attr_; }

  // MPI_Win_free: completes this rank's operations, waits for every member (no member
  // still reads or writes this rank's memory) and releases everything. Throws
  // WinError(MPI_ERR_RMA_SYNC), keeping the window, while an epoch is open.
  void free();

  // Dynamic windows.
  void attach(void* base, MPI_Aint bytes);
  void detach(const void* base);

  // Puts and gets: started here, complete at the next flush / unlock / complete / fence.
  // Returns the operation's id (for MPI_Rput / MPI_Rget requests: op_done).
  uint64_t put(const void* origin, int ocount, MPI_Datatype otype, int target, MPI_Aint disp, int tcount,
               MPI_Datatype ttype);
  uint64_t get(void* origin, int ocount, MPI_Datatype otype, int target, MPI_Aint disp, int tcount,
               MPI_Datatype ttype);
  // Whether operation `id` has completed (its data at the target, or in the origin buffer).
  bool op_done(uint64_t id);
  // Accumulates, complete (at the target) when they return. `result` null: no fetch.
  // `origin` is ignored for MPI_NO_OP.
  void accumulate(const void* origin, int ocount, MPI_Datatype otype, void* result, int rcount, MPI_Datatype rtype,
                  int target, MPI_Aint disp, int tcount, MPI_Datatype ttype, MPI_Op op);
  void compare_and_swap(const void* origin, const void* compare, void* result, MPI_Datatype type, int target,
                        MPI_Aint disp);

  // Synchronization (the MPI functions of the same names).
  void fence(int assert_);
  void lock(int type, int target, int assert_);
  void unlock(int target);
  void lock_all(int assert_);
  void unlock_all();
  void flush(int target);  // target -1: every target
  void post(MPI_Group group, int assert_);
  void start(MPI_Group group, int assert_);
  void complete();
  void wait();
  bool test();

 private:
  struct Lane;
  // How this rank's puts into a region from one GPU of its own go, found at the first of them:
  // every later put from that GPU reads it instead of asking again (a put of a few bytes is
  // the host's work around one copy call, and each of these lookups is on that path).
  struct PutRoute {
    int from = kHostDevice;    // the origin's GPU it was found for (none yet: kHostDevice)
    uint64_t direct_limit = 0; // p2p::direct_limit from that GPU to the region's
    bool mapped = false;       // `pushed` asked for (at the first put small enough to push)
    char* pushed = nullptr;    // the region's memory mapped in that GPU's context (pushed_mapping), or null
    Lane* lane = nullptr;      // the window's stream of that GPU
    bool peer_allowed = false; // allow_peer(region's GPU, that GPU) done (puts run from the target's GPU)
  };
  struct Region {  // a member's memory as this process reaches it
    char* local = nullptr;  // mapped (or this rank's own) address of `base`
    uint64_t base = 0, bytes = 0;
    int dev = kHostDevice;
    int disp_unit = 1;
    uint64_t buffer_id = 0;
    Backend::IpcMemHandle handle;
    bool leased = false;
    uint32_t seen_version = 0;  // dynamic windows: the target's table version it was found in
    // The same memory mapped in other GPUs' contexts (ipc_open with them as the reader; this
    // window's own opens, not the cache's, so that no eviction closes one under a put), for puts
    // their copy engines push: GPU -> address of `base` there, null where it cannot be opened.
    std::map<int, char*> pushed;
    PutRoute put_route;  // cleared with `pushed`
  };
  struct Pending {
    int target;
    uint64_t id;
    uint64_t ticket = 0;        // a copy of the mover (larger gets, copies to or from host memory)
    int lane = kHostDevice;     // else: a copy on the window's stream of this GPU (lanes_),
    uint64_t seq = 0;           // the lane's seq-th
  };
  // The window's stream of one GPU and its copies, numbered in issue order. A stream's copies
  // complete in that order, so one event recorded after the last covers all of them: events are
  // recorded when a completion is asked (flush, unlock, complete, fence, a request's test), not
  // per operation. An event record is a driver call on the host's path of every operation, and a
  // window of puts closed by one flush needs one.
  struct Lane {
    StreamHandle stream = nullptr;
    int dev = kHostDevice;
    uint64_t issued = 0;    // copies put on the stream
    uint64_t recorded = 0;  // copies up to this one have an event after them
    uint64_t done = 0;      // copies up to this one have completed
    uint64_t busy_pass = 0; // the poll pass in which its oldest event was seen running
    std::deque<std::pair<uint64_t, EventHandle>> events;  // (last copy it covers, event), oldest first
  };
  bool finished(Pending& p);  // true once complete
  // The window's stream of GPU `dev`, where its copies and accumulates on that GPU run.
  StreamHandle copy_stream(int dev);
  Lane& lane(int dev);
  // p2p::direct_limit of (source GPU, destination GPU), asked once per pair.
  uint64_t direct_limit_of(int src, int dst);
  void allow_peer(int dev, int peer);  // dev's context may reach peer's memory (once per pair)
  void issued_on(Pending& p, Lane& l);  // p is the copy just put on lane l
  // One plain copy on the window's stream of GPU `on` (or on lane `l`), `p` completing with it.
  void copy_plain(void* dst, int dst_dev, const void* src, int src_dev, uint64_t bytes, int on, Pending& p);
  void copy_plain(void* dst, int dst_dev, const void* src, int src_dev, uint64_t bytes, Lane& l, Pending& p);
  // `r`'s PutRoute for puts from GPU `from`, found on the first.
  PutRoute& put_route(Region& r, int from);
  // Where this rank's own window memory (static or attached) holds [p, p + bytes), as the mover
  // would locate it, or false. Such an origin needs no pointer query: the standard forbids freeing
  // window memory before MPI_Win_free (or MPI_Win_detach), so what creation or attach found holds.
  bool own_memory(const char* p, uint64_t bytes, p2p::MemLoc* loc) const;
  WinShared& shm() const;
  void publish_region(int slot, void* base, uint64_t bytes);
  Region map_region(int target, int slot);
  void release_leases();  // pool memory's imports (HandleCache::leased), closed
  // Where (target, disp) .. + bytes lies in this process, and the region holding it; throws
  // MPI_ERR_RMA_RANGE.
  char* resolve(int target, MPI_Aint disp, uint64_t bytes, int* dev, const char* call, Region** region = nullptr);
  // `r`'s memory as GPU `dev`'s streams write into it at link speed (opened on first use), or
  // null: then only its own GPU's streams do.
  char* pushed_mapping(Region& r, int dev);
  void close_pushed(Region& r);  // its copies have completed
  void close_all_pushed();
  void require_epoch(int target, const char* call) const;
  void require_target(int target, const char* call) const;
  // (count, type)'s bytes and first byte; throws MPI_ERR_TYPE unless contiguous.
  uint64_t contiguous_bytes(int count, MPI_Datatype type, MPI_Aint* lb, const char* call) const;
  uint64_t transfer(void* origin, int ocount, MPI_Datatype otype, int target, MPI_Aint disp, int tcount,
                    MPI_Datatype ttype, bool put, const char* call);
  void complete_ops(int target);  // -1: all
  void barrier(const char* what);
  void check_members() const;
  void idle();  // what a wait does every few milliseconds: members alive, p2p progress
  std::vector<int> group_ranks(MPI_Group g) const;
  static constexpr int kNoCheck = 0x100;  // locked_: taken with MPI_MODE_NOCHECK (nothing to release)
  void release_lock(int target, int how);
  // An accumulate's element-wise atomic updates `a` (target and type set) by a kernel on the
  // target's GPU, with origin `o`, compare `cmp` and result `res` (each null where unused),
  // complete when it returns.
  void accumulate_atomic(coll::AtomicAccArgs a, int tdev, const char* o, int odev, const char* cmp, int cdev,
                         char* res, int rdev, uint64_t bytes);
  void acc_lock(int target);
  void acc_unlock(int target);

  Runtime& rt_;
  Backend& backend_;
  static constexpr int kUnderneathBytes = 64;  // per rank, in the MPI's window underneath (its memory)
  MPI_Win win_ = MPI_WIN_NULL;
  MPI_Comm comm_ = MPI_COMM_NULL;
  Flavor flavor_;
  int rank_ = 0, n_ = 0;
  std::vector<int> channel_rank_;
  ipc::ShmSegment seg_;
  void* base_ = nullptr;
  MPI_Aint size_attr_ = 0;
  int disp_unit_ = 1;
  int flavor_attr_ = MPI_WIN_FLAVOR_CREATE;
  int my_dev_ = kHostDevice;
  bool owned_ = false;
  std::vector<Region> static_;                        // Create/Allocate: every member's memory
  std::map<std::pair<int, uint64_t>, Region> dynamic_;  // Dynamic: (target, base) -> mapped region
  std::vector<Pending> pending_;
  uint64_t next_id_ = 1;
  std::map<int, Lane> lanes_;  // per GPU: the copies it runs
  uint64_t pass_ = 1;          // poll passes of completion waits (Lane::busy_pass)
  std::map<std::pair<int, int>, uint64_t> direct_limits_;
  std::set<std::pair<int, int>> peer_enabled_;  // (GPU, peer GPU) pairs asked already
  struct Scratch {
    char* p = nullptr;
    uint64_t bytes = 0;
  };
  std::map<int, Scratch> scratch_;  // accumulates on a target's GPU, per GPU
  std::map<int, std::vector<EventHandle>> free_events_;  // per GPU
  // Epochs this rank has open.
  bool fence_epoch_ = false;
  std::map<int, int> locked_;  // target -> MPI_LOCK_SHARED / EXCLUSIVE
  bool lock_all_ = false;
  std::set<int> access_, exposure_;  // PSCW groups (ranks of the window)
  std::vector<uint64_t> started_, waited_;
  uint64_t barrier_seq_ = 0;
};

// This process's waits for its puts and gets to complete (flush, unlock, fence, complete,
// free): how many had to wait at all, and how many of those lasted until the wait's liveness
// tick (idle(), every few milliseconds). A copy of a few bytes completes in microseconds, so
// nearly none should: tests check that completion is seen by polling the copies, not by the
// tick.
struct WinWaitCounts {
  uint64_t waits = 0, ticked = 0;
};
WinWaitCounts win_wait_counts();

// This process's puts into other ranks' device memory, by the GPU whose streams ran them: the
// origin's (pushed through a mapping in its context) or the target's.
struct WinPutCounts {
  uint64_t from_origin = 0, from_target = 0;
};
WinPutCounts win_put_counts();

// This process's host work per put and get that tests check stays off the operation's path:
// pointer queries of origin buffers (none for an origin in the rank's own window memory), the
// events recorded to see copies complete (one per stream per completion wait, not per operation),
// the datatypes asked of the MPI (one per operation whose origin and target name the same count
// and type) and the routes of puts found (once per target memory and origin GPU, not per put).
struct WinHostCounts {
  uint64_t origin_queries = 0, completion_marks = 0, type_queries = 0, route_lookups = 0;
};
WinHostCounts win_host_counts();

// The window behind an MPI handle, or null (the MPI's own window).
DeviceWindow* find_window(MPI_Win w);
void add_window(std::unique_ptr<DeviceWindow> w);
void drop_window(MPI_Win w);

}  // namespace gpustripe::mpi
