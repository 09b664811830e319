// A device window's memory: the shared segment, publishing and mapping the members'
// memory, puts and gets, creation and free. Synchronization: win_sync.cpp;
// accumulates: win_accumulate.cpp.
#include "mpi/win.hpp"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <optional>

#include "common/error.hpp"
#include "common/log.hpp"
#include "ipc/fd_exchange.hpp"
#include "ipc/handle_cache.hpp"
#include "ipc/wait.hpp"
#include "mpi/datatype.hpp"
#include "mpi/win_shared.hpp"
#include "p2p/mover.hpp"

namespace gpustripe::mpi {
namespace {

// Never destroyed: a window the program did not free must not call the MPI after MPI_Finalize.
std::map<MPI_Win, std::unique_ptr<DeviceWindow>>& windows() {
  static auto* w = new std::map<MPI_Win, std::unique_ptr<DeviceWindow>>();
  return *w;
}

WinWaitCounts wait_counts;
WinPutCounts put_counts;
WinHostCounts host_counts;

}  // namespace

WinWaitCounts win_wait_counts() { return wait_counts; }
WinPutCounts win_put_counts() { return put_counts; }
WinHostCounts win_host_counts() { return host_counts; }

DeviceWindow* find_window(MPI_Win w) {
  auto it = windows().find(w);
  return it == windows().end() ? nullptr : it->second.get();
}

void add_window(std::unique_ptr<DeviceWindow> w) {
  MPI_Win h = w->handle();
  windows()[h] = std::move(w);
}

void drop_window(MPI_Win w) { windows().erase(w); }

WinShared& DeviceWindow::shm() const { return *static_cast<WinShared*>(seg_.data()); }

DeviceWindow::DeviceWindow(Runtime& rt, MPI_Comm comm, const CommInfo& ci, Flavor flavor, void* base, uint64_t bytes,
                           int disp_unit, bool owned, MPI_Info info)
    : rt_(rt), backend_(rt.context().backend()), flavor_(flavor), base_(base), disp_unit_(disp_unit), owned_(owned) {
  check_mpi(PMPI_Comm_dup(comm, &comm_), "MPI_Comm_dup (window)");
  // A failing call on the window's own communicator returns here, to be reported with its
  // reason and raised on the caller's communicator, instead of aborting inside the MPI
  // (a duplicate inherits the caller's handler: fatal by default).
  PMPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN);
  PMPI_Comm_rank(comm_, &rank_);
  PMPI_Comm_size(comm_, &n_);
  for (int r = 0; r < n_; ++r) channel_rank_.push_back(rt.local_of(ci.world_of[r]));
  started_.assign(n_, 0);
  waited_.assign(n_, 0);
  size_attr_ = static_cast<MPI_Aint>(bytes);
  flavor_attr_ = flavor == Flavor::Create     ? MPI_WIN_FLAVOR_CREATE
                 : flavor == Flavor::Allocate ? MPI_WIN_FLAVOR_ALLOCATE
                                              : MPI_WIN_FLAVOR_DYNAMIC;
  if (flavor == Flavor::Dynamic) base_ = MPI_BOTTOM;

  // The segment: rank 0 makes it, the others open it by name, the name goes once all have.
  char name[128] = {};
  if (rank_ == 0) {
    std::string nm = ipc::unique_shm_name("win");
    seg_ = ipc::ShmSegment::create(nm, WinShared::bytes_for(n_));
    std::strncpy(name, nm.c_str(), sizeof name - 1);
  }
  check_mpi(PMPI_Bcast(name, sizeof name, MPI_CHAR, 0, comm_), "MPI_Bcast (window segment)");
  if (rank_ != 0) seg_ = ipc::ShmSegment::open(name);
  // A member that cannot share its memory (no IPC handle: the default pool) or map another's
  // fails the creation on every member (agreed), instead of leaving them in a collective.
  std::string failure;
  auto agree = [&](const char* step) {
    int ok = failure.empty() ? 1 : 0, all = 0;
    check_mpi(PMPI_Allreduce(&ok, &all, 1, MPI_INT, MPI_MIN, comm_), step);
    if (all) return;
    if (rank_ == 0) seg_.unlink();  // every member has it open (they reached the reduction)
    PMPI_Comm_free(&comm_);
    GS_THROW(GPUSTRIPE_ERR_NOT_SUPPORTED, "a window over device memory: %s",
             failure.empty() ? "another rank's memory cannot be shared (its message is on its stderr)" : failure.c_str());
  };
  try {
    if (flavor != Flavor::Dynamic && bytes > 0) {
      PointerInfo pi = backend_.pointer_info(base);
      my_dev_ = pi.device;
      publish_region(0, base, bytes);
    }
  } catch (const std::exception& e) {
    failure = e.what();
  }
  agree("MPI_Allreduce (window memory published)");
  if (rank_ == 0) seg_.unlink();

  // Every member's memory, mapped once.
  try {
    if (flavor != Flavor::Dynamic) {
      static_.resize(n_);
      for (int r = 0; r < n_; ++r) static_[r] = map_region(r, 0);
    }
  } catch (const std::exception& e) {
    failure = e.what();
  }
  agree("MPI_Allreduce (window memory mapped)");
  // The MPI's window: handle, group, attributes and error handler, over a few bytes of host
  // memory nobody touches (not none: zero-size regions have failed to register in UCX). Made
  // by MPI_Win_allocate_shared: every member is on this node, and shared memory is the one
  // kind of window an MPI makes there without a one-sided transport (Open MPI's osc sm),
  // where MPI_Win_create needs one (osc rdma over a single-copy mechanism, osc ucx or
  // osc pt2pt) that a node may lack: Debian's Open MPI turns off pt2pt and ucx, and osc rdma
  // fails without CMA (ptrace restrictions, containers).
  void* underneath = nullptr;
  const int rc = PMPI_Win_allocate_shared(kUnderneathBytes, 1, info, comm_, &underneath, &win_);
  if (rc != MPI_SUCCESS) {
    char msg[MPI_MAX_ERROR_STRING] = {};
    int len = 0;
    PMPI_Error_string(rc, msg, &len);
    release_leases();
    PMPI_Comm_free(&comm_);
    throw WinError(MPI_ERR_WIN, format("the MPI could not make the window underneath (MPI_Win_allocate_shared of %d "
                                       "bytes on this node's %d ranks): %s",
                                       kUnderneathBytes, n_, msg));
  }
  GS_LOG_DEBUG(Subsys::Mpi, "device window of %d ranks: rank %d exposes %llu bytes of GPU %d", n_, rank_,
               static_cast<unsigned long long>(bytes), my_dev_);
}

DeviceWindow::~DeviceWindow() {
  release_leases();
  try {
    for (auto& kv : lanes_) {
      backend_.synchronize_stream(kv.second.stream);
      for (auto& e : kv.second.events) free_events_[kv.first].push_back(e.second);
    }
    close_all_pushed();
    for (auto& kv : free_events_)
      for (EventHandle e : kv.second) backend_.destroy_event(e);
    for (auto& kv : lanes_) backend_.destroy_stream(kv.second.stream);
    for (auto& kv : scratch_)
      if (kv.second.p) backend_.free_device(kv.second.p);
  } catch (const Error& e) {
    GS_LOG_WARN(Subsys::Mpi, "releasing a window's streams: %s", e.what());
  }
  if (win_ != MPI_WIN_NULL) PMPI_Win_free(&win_);
  if (comm_ != MPI_COMM_NULL) PMPI_Comm_free(&comm_);
  if (owned_ && base_) {
    try {
      backend_.free_device(base_);
    } catch (const Error& e) {
      GS_LOG_WARN(Subsys::Mpi, "freeing a window's memory: %s", e.what());
    }
  }
}

void DeviceWindow::release_leases() {
  ipc::HandleCache* cache = rt_.endpoint().handle_cache();
  auto release = [&](int r, Region& reg) {
    if (reg.leased && cache) cache->release(channel_rank_[r], reg.handle.base, reg.handle.buffer_id);
    reg.leased = false;
  };
  for (int r = 0; r < static_cast<int>(static_.size()); ++r) release(r, static_[r]);
  for (auto& kv : dynamic_) release(kv.first.first, kv.second);
}

void DeviceWindow::publish_region(int slot, void* base, uint64_t bytes) {
  WinRegionDesc d;
  d.handle = backend_.ipc_export_range(base, bytes);
  GS_REQUIRE(!ipc::HandleCache::leased(d.handle) || flavor_ != Flavor::Dynamic, GPUSTRIPE_ERR_NOT_SUPPORTED,
             "%p is memory of a cudaMallocAsync pool: it cannot be attached to a dynamic window (its imports must be "
             "closed before it is freed, and a detach does not wait for the other ranks)", base);
  const uintptr_t at = reinterpret_cast<uintptr_t>(base);
  GS_REQUIRE(at >= d.handle.base && at - d.handle.base + bytes <= d.handle.size, GPUSTRIPE_ERR_NOT_SUPPORTED,
             "window memory at %p (%llu bytes) spans memory of several kinds: no one IPC handle covers it", base,
             static_cast<unsigned long long>(bytes));
  d.base = at;
  d.bytes = bytes;
  d.disp_unit = disp_unit_;
  d.dev = d.handle.device;
  d.present = 1;
  // Fd kinds (VMM, pools): every member gets the descriptor before it can see the region.
  if (d.handle.kind != Backend::IpcKind::Legacy) {
    ipc::FdExchange* fds = rt_.endpoint().fd_exchange();
    GS_REQUIRE(fds, GPUSTRIPE_ERR_NOT_SUPPORTED, "no descriptor exchange for a %s buffer",
               ipc_kind_name(d.handle.kind));
    for (int r = 0; r < n_; ++r)
      if (r != rank_) fds->offer(channel_rank_[r], d.handle);  // refused: the member asks when it maps
  }
  WinRankSlot& s = shm().slot(rank_);
  s.version.fetch_add(1, std::memory_order_acq_rel);  // odd: being written
  s.regions[slot] = d;
  s.version.fetch_add(1, std::memory_order_release);
}

DeviceWindow::Region DeviceWindow::map_region(int target, int slot) {
  WinRegionDesc d = shm().read_region(target, slot);
  Region reg;
  if (!d.present || d.bytes == 0) return reg;
  reg.base = d.base;
  reg.bytes = d.bytes;
  reg.dev = d.dev;
  reg.disp_unit = d.disp_unit;
  reg.buffer_id = d.handle.buffer_id;
  reg.handle = d.handle;
  if (target == rank_) {
    reg.local = reinterpret_cast<char*>(d.base);
    return reg;
  }
  ipc::HandleCache* cache = rt_.endpoint().handle_cache();
  GS_REQUIRE(cache, GPUSTRIPE_ERR_NOT_SUPPORTED, "device windows need the IPC mapping cache of the p2p layer");
  reg.local = static_cast<char*>(cache->map(channel_rank_[target], d.handle.base, d.handle)) + (d.base - d.handle.base);
  reg.leased = ipc::HandleCache::leased(d.handle);
  // Copies between two GPUs go straight over their link where this process may.
  if (my_dev_ >= 0 && reg.dev >= 0 && reg.dev != my_dev_ && backend_.can_access_peer(my_dev_, reg.dev))
    backend_.enable_peer_access(my_dev_, reg.dev);
  return reg;
}

void DeviceWindow::attach(void* base, MPI_Aint bytes) {
  GS_REQUIRE(flavor_ == Flavor::Dynamic, GPUSTRIPE_ERR_INVALID_ARGUMENT, "MPI_Win_attach on a window not made by "
             "MPI_Win_create_dynamic");
  if (bytes == 0) return;
  GS_REQUIRE(bytes > 0, GPUSTRIPE_ERR_INVALID_SIZE, "MPI_Win_attach of %lld bytes", static_cast<long long>(bytes));
  PointerInfo pi = backend_.pointer_info(base);
  if (pi.kind != MemoryKind::Device)
    throw WinError(MPI_ERR_ARG, format("MPI_Win_attach: %p is not device memory; a window made with the info key "
                                       "gpustripe_device holds device memory only", base));
  if (my_dev_ == kHostDevice) my_dev_ = pi.device;
  WinRankSlot& s = shm().slot(rank_);
  int free_slot = -1;
  for (int i = 0; i < kWinMaxRegions; ++i) {
    const WinRegionDesc& d = s.regions[i];
    if (!d.present) {
      if (free_slot < 0) free_slot = i;
      continue;
    }
    const uintptr_t at = reinterpret_cast<uintptr_t>(base);
    if (at < d.base + d.bytes && d.base < at + static_cast<uint64_t>(bytes))
      throw WinError(MPI_ERR_ARG, format("MPI_Win_attach: [%p, +%lld) overlaps a region attached already", base,
                                         static_cast<long long>(bytes)));
  }
  if (free_slot < 0)
    throw WinError(MPI_ERR_NO_MEM, format("MPI_Win_attach: %d regions attached already (the most a rank may have)",
                                          kWinMaxRegions));
  publish_region(free_slot, base, static_cast<uint64_t>(bytes));
}

void DeviceWindow::detach(const void* base) {
  WinRankSlot& s = shm().slot(rank_);
  for (int i = 0; i < kWinMaxRegions; ++i) {
    if (!s.regions[i].present || s.regions[i].base != reinterpret_cast<uintptr_t>(base)) continue;
    // Operations of this rank into it land first; other ranks' are theirs to synchronize.
    complete_ops(rank_);
    s.version.fetch_add(1, std::memory_order_acq_rel);
    s.regions[i].present = 0;
    s.version.fetch_add(1, std::memory_order_release);
    return;
  }
  throw WinError(MPI_ERR_ARG, format("MPI_Win_detach: nothing is attached at %p", base));
}

void DeviceWindow::require_target(int target, const char* call) const {
  if (target == MPI_PROC_NULL) return;
  if (target < 0 || target >= n_)
    throw WinError(MPI_ERR_RANK, format("%s: target rank %d of a window of %d ranks", call, target, n_));
}

char* DeviceWindow::resolve(int target, MPI_Aint disp, uint64_t bytes, int* dev, const char* call, Region** region) {
  if (flavor_ != Flavor::Dynamic) {
    Region& r = static_[target];
    const __int128 off = static_cast<__int128>(disp) * r.disp_unit;
    if (disp < 0 || off + bytes > r.bytes)
      throw WinError(MPI_ERR_RMA_RANGE,
                     format("%s: displacement %lld (unit %d) and %llu bytes lie outside rank %d's %llu bytes of window",
                            call, static_cast<long long>(disp), r.disp_unit, static_cast<unsigned long long>(bytes),
                            target, static_cast<unsigned long long>(r.bytes)));
    *dev = r.dev;
    if (region) *region = &r;
    return r.local + static_cast<uint64_t>(off);
  }
  // Dynamic windows: the displacement is the target's address. The regions seen last are
  // reused while the target's table has not changed (its version).
  const uint64_t at = static_cast<uint64_t>(disp);
  const uint32_t version = shm().slot(target).version.load(std::memory_order_acquire);
  for (auto it = dynamic_.lower_bound({target, 0}); it != dynamic_.end() && it->first.first == target; ++it) {
    Region& r = it->second;
    if (at >= r.base && at - r.base + bytes <= r.bytes && r.seen_version == version) {
      *dev = r.dev;
      if (region) *region = &r;
      return r.local + (at - r.base);
    }
  }
  for (int i = 0; i < kWinMaxRegions; ++i) {
    WinRegionDesc d = shm().read_region(target, i);
    if (!d.present || at < d.base || at - d.base + bytes > d.bytes) continue;
    auto key = std::make_pair(target, d.base);
    auto old = dynamic_.find(key);
    if (old != dynamic_.end() && old->second.buffer_id == d.handle.buffer_id) {
      old->second.seen_version = version;
    } else {
      if (old != dynamic_.end()) {
        if (!old->second.pushed.empty()) {
          complete_ops(target);  // puts still in flight into its mappings land first
          close_pushed(old->second);
        }
        dynamic_.erase(old);
      }
      Region r = map_region(target, i);
      r.seen_version = version;
      old = dynamic_.emplace(key, r).first;
    }
    *dev = old->second.dev;
    if (region) *region = &old->second;
    return old->second.local + (at - d.base);
  }
  throw WinError(MPI_ERR_RMA_RANGE, format("%s: rank %d has nothing attached at %#llx (+%llu bytes)", call, target,
                                           static_cast<unsigned long long>(at), static_cast<unsigned long long>(bytes)));
}

uint64_t DeviceWindow::contiguous_bytes(int count, MPI_Datatype type, MPI_Aint* lb, const char* call) const {
  if (count < 0) throw WinError(MPI_ERR_COUNT, format("%s: count %d", call, count));
  ++host_counts.type_queries;
  Layout l = layout_of(count, type);
  if (!l.contiguous)
    throw WinError(MPI_ERR_TYPE, format("%s: a non-contiguous datatype on a device window is not supported", call));
  *lb = l.span_lb;
  return l.bytes;
}

uint64_t DeviceWindow::transfer(void* origin, int ocount, MPI_Datatype otype, int target, MPI_Aint disp, int tcount,
                                MPI_Datatype ttype, bool put, const char* call) {
  require_target(target, call);
  if (target == MPI_PROC_NULL) return 0;
  require_epoch(target, call);
  MPI_Aint olb = 0, tlb = 0;
  const uint64_t ob = contiguous_bytes(ocount, otype, &olb, call);
  // The same count and type at both ends (the common call) is asked of the MPI once.
  const uint64_t tb = tcount == ocount && ttype == otype ? (tlb = olb, ob) : contiguous_bytes(tcount, ttype, &tlb, call);
  if (ob != tb)
    throw WinError(MPI_ERR_TYPE, format("%s: %llu origin bytes for %llu target bytes", call,
                                        static_cast<unsigned long long>(ob), static_cast<unsigned long long>(tb)));
  int tdev = kHostDevice;
  Region* region = nullptr;
  char* t = resolve(target, disp, tb + tlb, &tdev, call, &region) + tlb;
  if (tb == 0) return 0;
  char* o = static_cast<char*>(origin) + olb;
  p2p::MemLoc loc;
  if (!own_memory(o, ob, &loc)) {
    loc = rt_.locate(o);
    ++host_counts.origin_queries;
    p2p::Mover::check_within(loc, o, ob, "origin buffer");
  }
  const int odev = loc.device ? loc.dev : kHostDevice;
  Pending p{target, next_id_++};
  // Both ranges are checked: the origin by check_within, the target by resolve.
  Engine& engine = rt_.context().engine();
  const bool two_gpus = target != rank_ && odev != kHostDevice && tdev != kHostDevice && odev != tdev;
  // The model's plan between the two GPUs is the direct path alone: one plain copy, pushed by the
  // copy engine of the GPU holding the data (docs/mpi.md).
  // A put's route between two GPUs is found once per (target memory, origin GPU): put_route.
  PutRoute* route = put && two_gpus ? &put_route(*region, odev) : nullptr;
  const bool direct = two_gpus && (!engine.planner() ||
                                   tb <= (route ? route->direct_limit : direct_limit_of(tdev, odev)));
  if (put && target != rank_ && tdev != kHostDevice) {
    // Into another rank's memory: by the origin's GPU, into the target's memory mapped in its
    // context, where the kind of memory has such a mapping.
    if (direct && !route->mapped) {  // opened at the first put that pushes (larger ones need none)
      route->pushed = pushed_mapping(*region, odev);
      route->mapped = true;
    }
    char* pushed = direct ? route->pushed : nullptr;
    if (pushed) {
      // Named as a copy within the origin GPU's context, whose mapping it writes through
      // (Backend::ipc_named_device).
      const int named = backend_.ipc_named_device(tdev, odev);
      copy_plain(pushed + (t - region->local), named, o, odev, tb, *route->lane, p);
      ++put_counts.from_origin;
    } else {
      // Else on a stream of the target's GPU, where the cache's mapping lives in this process
      // (copies into a mapping issued from another GPU's context take a slow path near PCIe
      // speed, docs/mpi-coll.md); the origin's GPU lets that GPU read its memory. Larger than the
      // direct-alone size: the engine's plan (direct + host staging where it pays), with the
      // direct path and the relays into the mapping issued from its GPU.
      if (two_gpus && !route->peer_allowed) {
        allow_peer(tdev, odev);
        route->peer_allowed = true;
      }
      if (two_gpus && !direct) {
        Lane& l = lane(tdev);
        engine.copy_async_from_dst(t, tdev, o, odev, tb, l.stream);
        issued_on(p, l);
      } else {
        copy_plain(t, tdev, o, odev, tb, tdev, p);
      }
      ++put_counts.from_target;
    }
  } else if (!put && direct) {
    // A get between two GPUs: by the target's GPU, whose context holds the mapping in this
    // process, into the origin's memory. Named between the two GPUs: peer access does not cover
    // memory of a stream-ordered pool (cudaMallocAsync) that has not granted the target's GPU
    // access, and the runtime's peer copy reaches it anyway (mpi_rma_np2_pool).
    allow_peer(tdev, odev);
    copy_plain(o, odev, t, tdev, tb, tdev, p);
  } else {
    // Larger gets (multi-path where the plan says so, as p2p's pull), and copies to or from host
    // memory or within one GPU: the mover's copies, on a stream of the mapping's GPU.
    p.ticket = put ? rt_.mover().start(t, tdev, o, odev, tb) : rt_.mover().start(o, odev, t, tdev, tb);
  }
  pending_.push_back(p);
  return p.id;
}

char* DeviceWindow::pushed_mapping(Region& r, int dev) {
  auto it = r.pushed.find(dev);
  if (it != r.pushed.end()) return it->second;
  char* at = nullptr;
  // Legacy handles alone map per context (Backend::ipc_open's reader); VMM and pool memory is
  // mapped once for every GPU and stays on its own GPU's streams here.
  if (r.handle.kind == Backend::IpcKind::Legacy && dev != r.handle.device) {
    try {
      at = static_cast<char*>(backend_.ipc_open(r.handle, -1, dev)) + (r.base - r.handle.base);
    } catch (const Error& e) {
      // A driver that refuses: puts into it run on its own GPU's streams.
      GS_LOG_DEBUG(Subsys::Mpi, "window memory of GPU %d not mapped for GPU %d's puts: %s", r.dev, dev, e.what());
    }
  }
  r.pushed.emplace(dev, at);
  return at;
}

void DeviceWindow::close_pushed(Region& r) {
  for (auto& kv : r.pushed) {
    if (!kv.second) continue;
    try {
      backend_.ipc_close(kv.second - (r.base - r.handle.base));
    } catch (const Error& e) {
      GS_LOG_WARN(Subsys::Mpi, "closing a window's mapping for GPU %d: %s", kv.first, e.what());
    }
  }
  r.pushed.clear();
  r.put_route = PutRoute{};
}

void DeviceWindow::close_all_pushed() {
  for (Region& r : static_) close_pushed(r);
  for (auto& kv : dynamic_) close_pushed(kv.second);
}

uint64_t DeviceWindow::direct_limit_of(int src, int dst) {
  auto it = direct_limits_.find({src, dst});
  if (it == direct_limits_.end())
    it = direct_limits_.emplace(std::make_pair(src, dst), p2p::direct_limit(rt_.context().engine(), src, dst)).first;
  return it->second;
}

DeviceWindow::Lane& DeviceWindow::lane(int dev) {
  auto it = lanes_.find(dev);
  if (it == lanes_.end()) {
    Lane l;
    l.stream = backend_.create_stream(dev);
    l.dev = dev;
    it = lanes_.emplace(dev, std::move(l)).first;
  }
  return it->second;
}

StreamHandle DeviceWindow::copy_stream(int dev) { return lane(dev).stream; }

bool DeviceWindow::own_memory(const char* p, uint64_t bytes, p2p::MemLoc* loc) const {
  const uintptr_t at = reinterpret_cast<uintptr_t>(p);
  auto inside = [&](uintptr_t base, uint64_t size, int dev) {
    if (!base || dev == kHostDevice || at < base || at - base > size || bytes > size - (at - base)) return false;
    loc->device = true;
    loc->dev = dev;
    loc->base = base;
    loc->size = size;
    return true;
  };
  if (flavor_ != Flavor::Dynamic) {
    const Region& r = static_[rank_];
    return inside(reinterpret_cast<uintptr_t>(r.local), r.bytes, r.dev);
  }
  // This rank alone writes its slot: its regions are read without the version check.
  const WinRankSlot& s = shm().slot(rank_);
  for (const WinRegionDesc& d : s.regions)
    if (d.present && inside(d.base, d.bytes, d.dev)) return true;
  return false;
}

void DeviceWindow::allow_peer(int dev, int peer) {
  if (peer_enabled_.insert({dev, peer}).second && backend_.can_access_peer(dev, peer))
    backend_.enable_peer_access(dev, peer);
}

void DeviceWindow::issued_on(Pending& p, Lane& l) {
  p.lane = l.dev;
  p.seq = ++l.issued;
}

void DeviceWindow::copy_plain(void* dst, int dst_dev, const void* src, int src_dev, uint64_t bytes, int on,
                              Pending& p) {
  copy_plain(dst, dst_dev, src, src_dev, bytes, lane(on), p);
}

void DeviceWindow::copy_plain(void* dst, int dst_dev, const void* src, int src_dev, uint64_t bytes, Lane& l,
                              Pending& p) {
  backend_.copy_async_prechecked(dst, dst_dev, src, src_dev, bytes, l.stream);
  issued_on(p, l);
}

DeviceWindow::PutRoute& DeviceWindow::put_route(Region& r, int from) {
  PutRoute& route = r.put_route;
  if (route.from == from) return route;
  ++host_counts.route_lookups;
  route = PutRoute{};
  route.from = from;
  route.direct_limit = direct_limit_of(from, r.dev);
  route.lane = &lane(from);  // lanes_ is a std::map: its elements stay where they are
  return route;
}

bool DeviceWindow::finished(Pending& p) {
  if (p.lane == kHostDevice) return rt_.mover().done(p.ticket);
  Lane& l = lanes_.at(p.lane);
  if (l.done >= p.seq) return true;
  if (l.recorded < p.seq) {
    // One event after everything on the stream so far: it completes this copy and every
    // earlier one.
    std::vector<EventHandle>& pool = free_events_[l.dev];
    EventHandle e = nullptr;
    if (pool.empty()) {
      e = backend_.create_event(l.dev, false);
    } else {
      e = pool.back();
      pool.pop_back();
    }
    try {
      backend_.record_event(e, l.stream);
    } catch (...) {
      pool.push_back(e);
      throw;
    }
    l.events.emplace_back(l.issued, e);
    l.recorded = l.issued;
    ++host_counts.completion_marks;
  }
  // Within one poll pass a lane whose oldest event was seen running is not asked again (an event
  // query is a driver call, and a window's copies share their lane's events).
  if (l.busy_pass == pass_) return false;
  while (!l.events.empty()) {
    if (!backend_.query_event(l.events.front().second)) {
      l.busy_pass = pass_;
      break;
    }
    l.done = l.events.front().first;
    free_events_[l.dev].push_back(l.events.front().second);
    l.events.pop_front();
  }
  return l.done >= p.seq;
}

uint64_t DeviceWindow::put(const void* origin, int ocount, MPI_Datatype otype, int target, MPI_Aint disp, int tcount,
                           MPI_Datatype ttype) {
  return transfer(const_cast<void*>(origin), ocount, otype, target, disp, tcount, ttype, true, "MPI_Put");
}

uint64_t DeviceWindow::get(void* origin, int ocount, MPI_Datatype otype, int target, MPI_Aint disp, int tcount,
                           MPI_Datatype ttype) {
  return transfer(origin, ocount, otype, target, disp, tcount, ttype, false, "MPI_Get");
}

bool DeviceWindow::op_done(uint64_t id) {
  rt_.mover().new_pass();  // each call asks anew (see complete_ops)
  ++pass_;
  for (auto it = pending_.begin(); it != pending_.end(); ++it) {
    if (it->id != id) continue;
    if (!finished(*it)) return false;
    pending_.erase(it);
    return true;
  }
  return true;  // completed by a synchronization call already
}

void DeviceWindow::complete_ops(int target) {
  if (pending_.empty()) return;
  bool waited = false, ticked = false;
  // Made at the first poll that finds copies still running: most waits are short, and naming
  // one and reading its timeout cost the host time while the copies run.
  std::optional<ipc::Waiter> w;
  for (;;) {
    // Every poll is a new pass of the mover: within one pass it does not ask again about a
    // stream whose oldest copy it saw running, and the endpoint's progress (which starts
    // passes) runs here only at the Waiter's liveness tick, every 5 ms: without this, a copy
    // still running at the first poll would be seen complete only at the next tick.
    rt_.mover().new_pass();
    ++pass_;
    bool all = true;
    for (auto it = pending_.begin(); it != pending_.end();) {
      if ((target < 0 || it->target == target) && finished(*it)) {
        it = pending_.erase(it);
        continue;
      }
      if (target < 0 || it->target == target) all = false;
      ++it;
    }
    if (all) break;
    waited = true;
    if (!w)
      w.emplace(format("window: rank %d waiting for its puts and gets to complete", rank_), [this, &ticked] {
        ticked = true;
        idle();
      });
    w->pause();
  }
  if (!waited) return;
  ++wait_counts.waits;
  if (ticked) ++wait_counts.ticked;
}

void DeviceWindow::check_members() const {
  for (int r = 0; r < n_; ++r)
    if (r != rank_) rt_.endpoint().check_source(channel_rank_[r]);
}

void DeviceWindow::free() {
  if (!locked_.empty() || lock_all_ || !access_.empty() || !exposure_.empty())
    throw WinError(MPI_ERR_RMA_SYNC, format("MPI_Win_free while an epoch is open (%s): close it first",
                                            lock_all_           ? "MPI_Win_lock_all"
                                            : !locked_.empty()  ? "MPI_Win_lock"
                                            : !access_.empty()  ? "MPI_Win_start"
                                                                : "MPI_Win_post"));
  complete_ops(-1);
  // Pool memory: every importer closes its import before the owner may free the buffer, i.e.
  // before the owner leaves MPI_Win_free; the mappings of this window's own are closed there too.
  release_leases();
  close_all_pushed();
  // Nobody still reads or writes this rank's memory once every member is here.
  barrier("MPI_Win_free");
}

}  // namespace gpustripe::mpi
