#include "mpi/coll_team.hpp"

#include <signal.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstring>
#include <limits>
#include <mutex>

#include "common/config.hpp"
#include "common/error.hpp"
#include "common/log.hpp"
#include "common/text_file.hpp"
#include "ipc/wait.hpp"
#include "p2p/trace.hpp"
#include "topology/topology.hpp"

namespace gpustripe::mpi {
namespace {

constexpr size_t kExportsKept = 64;
constexpr size_t kShapesKept = 256;
// A training step's calls each come with their own buffers, hence their own Program (FSDP: two
// all-gathers and a reduce-scatter per shard unit; DDP: one all-reduce per bucket): a step's
// set must fit, or the cache, emptied whenever full, rebuilds every call of a step that
// cycles through more than it holds.
constexpr size_t kProgramsKept = 256;

// Nonblocking calls pending on the teams of this process, and what advances all of them.
std::atomic<int> g_pending_calls{0};
std::atomic<void (*)()> g_progress_all{nullptr};
std::atomic<bool> g_die_in_next{false};      // test hook: SIGKILL inside the next call
std::atomic<bool> g_fail_next_setup{false};  // test hook: the next team's setup fails here

// Where the sizing build puts the buffers of every rank: addresses never dereferenced.
char* placeholder(size_t k) { return reinterpret_cast<char*>((k + 1) << 40); }

// Test only: the forms of the timed-choice calls run here (test_measured_forms_run), the first
// kFormsKept bytes.
constexpr size_t kFormsKept = 4096;
std::mutex g_forms_lock;
std::string g_forms_run;

// A test item's value for `rank`: "A:B:C" gives rank r the r-th number (the last one past the
// end), a single number every rank.
double rank_value(const std::string& name, const std::string& value, int rank) {
  std::vector<std::string> each = split(value, ':');
  GS_REQUIRE(!each.empty(), GPUSTRIPE_ERR_CONFIG, "GPUSTRIPE_TEST coll.%s: no value", name.c_str());
  const std::string& v = each[std::min<size_t>(static_cast<size_t>(rank), each.size() - 1)];
  char* end = nullptr;
  const double d = std::strtod(v.c_str(), &end);
  GS_REQUIRE(end && *end == 0 && !v.empty() && d > 0, GPUSTRIPE_ERR_CONFIG,
             "GPUSTRIPE_TEST coll.%s: '%s' is no positive number", name.c_str(), v.c_str());
  return d;
}

}  // namespace

void set_collective_progress(void (*progress_all)()) { g_progress_all.store(progress_all); }

int pending_collectives() { return g_pending_calls.load(); }

namespace {
// Every GPU of the node, as every rank sees them alike.
std::vector<int> node_gpus(Backend& backend, const Topology& topo) {
  std::vector<int> gpus(std::min(topo.gpu_count(), backend.device_count()));
  for (size_t i = 0; i < gpus.size(); ++i) gpus[i] = static_cast<int>(i);
  return gpus;
}
}  // namespace

coll::TeamResources team_resources(Backend& backend, const Topology& topo, int nranks) {
  // Every rank must build the same program, and a rank does not know the others' GPUs before
  // the call, so this looks at every GPU of the node: the same answer on every rank.
  coll::TeamResources res = coll::describe_team(backend, topo, node_gpus(backend, topo));
  res.n = nranks;
  res.socket_groups.clear();  // groups of the node's GPUs, not of the ranks: no "hier" across processes
  // Two ranks' broadcasts from Tuning::chain_min go as a chain, chunks alternating between two
  // copy lanes: across processes it leads the direct copy from 32M to 128M.
  res.chain_pairs = true;
  return res;
}

void test_die_in_next_collective() { g_die_in_next.store(true); }
void test_fail_next_team_setup() { g_fail_next_setup.store(true); }
std::string test_measured_forms_run() {
  std::lock_guard<std::mutex> l(g_forms_lock);
  return g_forms_run;
}

// A buffer as another process maps it: the allocation's handle and the offset in it.
struct CollTeam::Desc {
  Backend::IpcMemHandle handle;
  uint64_t base = 0;    // the owner's address of the allocation
  uint64_t offset = 0;  // of the buffer in it
  uint8_t present = 0;
};

struct CollTeam::RankInfo {
  int32_t eligible = 0;
  int32_t device = -1;
  Desc send, recv, scratch;
  TeamStaging::Note staging;  // rank 0's shared host staging; every rank's generation mapped
  FormTrials::Posted timed;   // this rank's time of its latest timed trial call (FormTrials)
  uint32_t blocks = 0;  // CollCall::send_at and the rest, where the call has them
  uint64_t send_at[CollCall::kMaxBlocks] = {}, send_len[CollCall::kMaxBlocks] = {}, recv_len[CollCall::kMaxBlocks] = {};
};

// What of a rank's message the others read: the senders' layouts only where the call has them
// (MPI_Alltoallv/w). The rest of every rank's entry in a call's Entry::all stays zero (blocks 0).
size_t CollTeam::message_bytes(const RankInfo& m) {
  return m.blocks ? sizeof(RankInfo) : offsetof(RankInfo, send_at);
}

// Whether two calls' messages are the same, field by field (their padding is not).
bool CollTeam::same_messages(const std::vector<RankInfo>& a, const std::vector<RankInfo>& b) {
  if (a.size() != b.size()) return false;
  auto same_desc = [](const Desc& x, const Desc& y) {
    const Backend::IpcMemHandle &h = x.handle, &k = y.handle;
    return x.present == y.present && x.base == y.base && x.offset == y.offset && h.device == k.device &&
           h.kind == k.kind && h.base == k.base && h.size == k.size && h.buffer_id == k.buffer_id &&
           h.share_id == k.share_id && std::memcmp(h.bytes, k.bytes, sizeof h.bytes) == 0;
  };
  for (size_t r = 0; r < a.size(); ++r) {
    const RankInfo &x = a[r], &y = b[r];
    if (x.eligible != y.eligible || x.device != y.device || x.blocks != y.blocks || !same_desc(x.send, y.send) ||
        !same_desc(x.recv, y.recv) || !same_desc(x.scratch, y.scratch) ||
        std::memcmp(&x.staging, &y.staging, sizeof x.staging) != 0)
      return false;
    const size_t n = std::min<size_t>(x.blocks, CollCall::kMaxBlocks) * sizeof(uint64_t);
    if (std::memcmp(x.send_at, y.send_at, n) || std::memcmp(x.send_len, y.send_len, n) ||
        std::memcmp(x.recv_len, y.recv_len, n))
      return false;
  }
  return true;
}

CollTeam::CollTeam(Context& ctx, p2p::Endpoint& endpoint, std::unique_ptr<ipc::Bootstrap> boot,
                   std::vector<int> channel_rank, bool host_paced)
    : ctx_(ctx), ep_(endpoint), backend_(ctx.backend()), boot_(std::move(boot)), channel_rank_(std::move(channel_rank)) {
  rank_ = boot_->rank();
  n_ = boot_->size();
  GS_REQUIRE(static_cast<int>(channel_rank_.size()) == n_, GPUSTRIPE_ERR_INVALID_ARGUMENT,
             "collective team: %zu channel ranks for %d members", channel_rank_.size(), n_);

  const Topology& topo = ctx_.topology();
  res_ = team_resources(backend_, topo, n_);
  res_.host_paced = host_paced;
  node_gpus_ = node_gpus(backend_, topo);
  // The team maps the other ranks' buffers into this rank's GPU's context (map()), so its
  // kernels read and write them as the single-process communicator's kernels read peers'
  // buffers: the schedules are the native ones (one-shot, two-shot, pull, the copy kernels'
  // exchanges) wherever every pair of GPUs maps peers.
  bool peer_kernels = true;
  // A host-paced team (the interposer's) reduces large allreduces by two-shot with pushed
  // inputs, not by the copy engines' rounds (rs_ag_copy): with each call ended on the host, the
  // rounds across processes ran at one of two paces from one batch of calls to the next, the
  // slower a third longer, while the pushes stayed near the faster
  // (bench/results/*-mpi-coll-4gpu-allreduce-forms-*, docs/mpi-coll.md). Back-to-back
  // stream-ordered calls (NodeTeam's) keep the rounds, which ran faster there than the pushes.
  // A pair's copy-engine allreduce (ce_twoshot, one copy per input half) keeps its pace across
  // processes: host-paced pairs take it as one process does
  // (bench/results/*-mpi-coll-2gpu-allreduce-ce-*).
  if (host_paced) {
    tuning_.ar_copy_min = std::numeric_limits<uint64_t>::max();
    tuning_.push_max = std::numeric_limits<uint64_t>::max();
  }
  // Test only (GPUSTRIPE_TEST's coll.NAME items): the MPI test programs reach the schedules'
  // pipelining and corner cases at small sizes, and coll.peer_kernels=no the copy-engine
  // schedules that nodes without peer access take.
  for (const auto& [name, value] : test_hooks("coll.")) {
    if (name == "peer_kernels") peer_kernels = parse_bool(value, "GPUSTRIPE_TEST coll.peer_kernels");
    else if (name.rfind("trial_us_", 0) == 0) trial_us_[name.substr(9)] = rank_value(name, value, rank_);
    else tuning_.set(name, value);
  }
  tuning_.validate();
  if (!peer_kernels) res_.all_peer = false;

  // The flags the ranks' hosts order cross-rank steps with, and this rank's runner. A step
  // failing on one rank (no memory, no shared memory left) must fail the team on every
  // rank, never leave the others waiting for it: each rank sets up what it can, then
  // the ranks agree on the outcome (the bootstrap's all-reduction of the statuses) before
  // anyone relies on a peer's part. The bootstrap's waits end on a dead peer.
  std::vector<int> peers;
  for (int r = 0; r < n_; ++r)
    if (r != rank_) peers.push_back(channel_rank_[r]);
  p2p::Endpoint* ep = &ep_;
  std::function<void()> check_peers = [ep, peers] {
    for (int p : peers) ep->check_source(p);
    if (ipc::FdExchange* fds = ep->fd_exchange()) fds->serve();  // a peer re-mapping our VMM / pool buffers
  };
  // The watchdog's check (coll_watchdog.hpp), on its own thread: the peers' liveness only
  // (the channel's pid slots), nothing of the endpoint's state.
  std::function<void()> check_alive = [ep, peers] {
    for (int p : peers) ep->check_source(p);
  };
  // A team is set up at its communicator's first collective, which may come while calls of
  // other communicators are pending here: the setup's waits advance them, as every wait does
  // (a rank they need may be waiting for them before it reaches this setup).
  boot_->watch_peers([check_peers] {
    check_peers();
    if (void (*all)() = g_progress_all.load()) all();
  });
  char name[128] = {};
  ipc::ShmSegment seg;
  Status failed = GPUSTRIPE_SUCCESS;
  std::string why;
  auto attempt = [&](const std::function<void()>& step) {
    if (failed != GPUSTRIPE_SUCCESS) return;
    try {
      if (g_fail_next_setup.exchange(false)) GS_THROW(GPUSTRIPE_ERR_NO_MEMORY, "test hook: this rank's setup fails");
      step();
    } catch (const Error& e) {
      failed = e.status();
      why = e.what();
    } catch (const std::exception& e) {
      failed = GPUSTRIPE_ERR_INTERNAL;
      why = e.what();
    }
  };
  if (rank_ == 0) {
    attempt([&] {
      std::string nm = ipc::unique_shm_name("coll");
      seg = ipc::ShmSegment::create(nm, TeamFlags::segment_bytes());
      std::strncpy(name, nm.c_str(), sizeof name - 1);
    });
  }
  boot_->bcast(name, sizeof name, 0);
  // No name: rank 0 failed, and says so in the agreement below.
  if (rank_ != 0 && name[0]) attempt([&] { seg = ipc::ShmSegment::open(name); });
  if (name[0]) {
    attempt([&] {
      flags_ = std::make_unique<TeamFlags>(std::move(seg));
      reducer_ = coll::make_reducer(backend_);
      runner_ = std::make_unique<SliceRunner>(backend_, *reducer_, rank_, n_, *flags_, check_peers, check_alive);
    });
  }
  // Every rank has opened the segment (or given up): after this its name can go.
  int all[2] = {static_cast<int>(failed), failed != GPUSTRIPE_SUCCESS ? rank_ : -1};  // the worst status, its rank
  boot_->allreduce_max(all, 2);
  if (rank_ == 0) {
    if (flags_) flags_->unlink();
    else seg.unlink();
  }
  if (all[0] != GPUSTRIPE_SUCCESS) {
    runner_.reset();
    reducer_.reset();
    flags_.reset();
    if (failed != GPUSTRIPE_SUCCESS)
      GS_THROW(failed, "setting up the collectives of a %d-rank communicator on rank %d: %s", n_, rank_, why.c_str());
    GS_THROW(static_cast<Status>(all[0]), "setting up the collectives of a %d-rank communicator failed on rank %d (%s; "
             "its reason is on its stderr)", n_, all[1], status_name(static_cast<Status>(all[0])));
  }
  staging_ = std::make_unique<TeamStaging>(backend_, rank_ == 0);
  GS_LOG_DEBUG(Subsys::Mpi, "collectives of a %d-rank communicator: rank %d", n_, rank_);
}

CollTeam::~CollTeam() {
  // A nonblocking call still pending (the communicator freed before its wait): it ends
  // first, on every rank, as the MPI lets it.
  try {
    finish(false);
  } catch (...) {
  }
  // Not ended by finish (an unexpected error): its request fails instead of waiting for a team
  // that is gone, and it is no longer pending in this process.
  if (pending_) {
    const std::string why = "its communicator's collectives were closed before it ended";
    try {
      abandon(std::make_exception_ptr(Error(GPUSTRIPE_ERR_INTERNAL, why)), GPUSTRIPE_ERR_INTERNAL, why);
    } catch (...) {
      take_pending();
    }
  }
  if (times_.calls) {
    const PhaseTimes t = phase_times(false);
    GS_LOG_DEBUG(Subsys::Mpi, "collectives of rank %d (%llu calls on gpustripe, %llu stream-ordered): us per call: "
                 "lookup %.1f, prepare %.1f, exchange %.1f, map+program %.1f, enqueue %.1f, "
                 "wait for the ranks' GPUs %.1f, host barriers %.1f",
                 rank_, static_cast<unsigned long long>(t.calls), static_cast<unsigned long long>(t.ordered), t.lookup,
                 t.prepare, t.exchange, t.map, t.enqueue, t.drain, t.barrier);
  }
  try {
    settle();
  } catch (const Error& e) {
    GS_LOG_WARN(Subsys::Mpi, "closing the collectives of rank %d: %s", rank_, e.what());
  }
  close_staging();   // no stream of this rank uses the slots any more
  staging_.reset();  // nor the shared host staging
  runner_.reset();
  for (Owned* b : {&scratch_, &temp_}) {
    if (!b->p) continue;
    try {
      backend_.free_device(b->p);
    } catch (const Error& e) {
      GS_LOG_WARN(Subsys::Mpi, "freeing collective scratch: %s", e.what());
    }
  }
}

CollTeam::PhaseTimes CollTeam::phase_times(bool reset) {
  PhaseTimes t;
  t.calls = times_.calls;
  t.ordered = times_.ordered;
  t.built = times_.built;
  t.staged = times_.staged;
  if (times_.calls) {
    const double c = static_cast<double>(times_.calls);
    const double drain = runner_->drain_us() - times_.drain0, barrier = runner_->barrier_us() - times_.barrier0;
    t.lookup = times_.lookup / c;
    t.prepare = times_.prepare / c;
    t.exchange = times_.exchange / c;
    t.map = times_.map / c;
    t.enqueue = (times_.run - drain - barrier) / c;
    t.drain = drain / c;
    t.barrier = barrier / c;
  }
  if (reset) {
    times_ = Times{};
    times_.drain0 = runner_->drain_us();
    times_.barrier0 = runner_->barrier_us();
  }
  return t;
}

void CollTeam::settle() {
  if (runner_) runner_->settle();
  if (stage_barrier_) stage_barrier_->check();
}

void CollTeam::grow(Owned& b, int dev, size_t bytes) {
  if (b.bytes >= bytes && b.dev == dev) return;
  runner_->settle();  // a stream-ordered call may still use the old buffer
  size_t n = b.bytes && b.dev == dev ? b.bytes : (size_t(1) << 20);
  while (n < bytes) n *= 2;
  // Every earlier call has completed on every rank: nobody uses the old buffer.
  if (&b == &scratch_) scratch_desc_.reset();
  if (b.p) backend_.free_device(b.p);
  b = Owned{};
  b.p = static_cast<char*>(backend_.alloc_device(dev, n));
  b.bytes = n;
  b.dev = dev;
}

char* CollTeam::temp(int dev, size_t bytes) {
  grow(temp_, dev, bytes);
  return temp_.p;
}

CollTeam::Desc CollTeam::describe(const void* p, size_t bytes, const std::vector<p2p::MemLoc>& located) {
  Desc d;
  if (!p || bytes == 0) return d;
  PointerInfo info;
  const uintptr_t at = reinterpret_cast<uintptr_t>(p);
  const p2p::MemLoc* loc = nullptr;
  for (const p2p::MemLoc& l : located)
    if (l.device && l.buffer_id != 0 && l.size != 0 && at >= l.base && at - l.base < l.size) loc = &l;
  if (loc) {
    info.base = loc->base;
    info.size = loc->size;
    info.buffer_id = loc->buffer_id;
  } else {
    info = backend_.pointer_info(p);
  }
  // Exporting asks the driver each time; the same allocation (same buffer id) keeps its handle.
  auto it = exports_.find(info.base);
  const uintptr_t u = reinterpret_cast<uintptr_t>(p);
  if (it != exports_.end() && info.buffer_id != 0 && it->second.buffer_id == info.buffer_id && u >= it->second.base &&
      u - it->second.base + bytes <= it->second.size) {
    d.handle = it->second;
  } else {
    // VMM memory spanning several allocations gets a vmm-multi handle; it is not kept (the key
    // names one piece, and a later piece freed and reallocated must give a new handle).
    d.handle = backend_.ipc_export_range(p, bytes);
    if (exports_.size() >= kExportsKept) exports_.clear();
    if (d.handle.kind != Backend::IpcKind::VmmMulti) exports_[info.base] = d.handle;
  }
  // Pool pointers: CUDA wants every importer's import freed before the exporter frees the
  // buffer, and a collective's ranks return (and may free) independently while the mappings and
  // programs here are kept for the next call: such buffers take the MPI's way (p2p leases them
  // per message instead: ipc/handle_cache.hpp).
  GS_REQUIRE(!ipc::HandleCache::leased(d.handle), GPUSTRIPE_ERR_NOT_SUPPORTED,
             "%p is memory of a cudaMallocAsync pool: its imports cannot outlive the call", p);
  d.base = d.handle.base;  // VMM: the allocation in the reservation, not the reservation
  d.offset = reinterpret_cast<uintptr_t>(p) - d.handle.base;
  GS_REQUIRE(d.offset + bytes <= d.handle.size, GPUSTRIPE_ERR_NOT_SUPPORTED,
             "a buffer spanning memory of several kinds has no one IPC handle");
  // Fd kinds (VMM, pools): every peer may map it, so every peer gets the descriptor before
  // the allgather that names the buffer (once per peer and allocation or pool).
  ipc::FdExchange* fds = ep_.fd_exchange();
  for (int r = 0; r < n_; ++r)
    if (r != rank_)
      GS_REQUIRE(fds && fds->offer(channel_rank_[r], d.handle), GPUSTRIPE_ERR_NOT_SUPPORTED,
                 "no descriptor exchange for a %s buffer", ipc_kind_name(d.handle.kind));
  d.present = 1;
  return d;
}

char* CollTeam::map(int r, const Desc& d, int reader) {
  if (!d.present) return nullptr;
  ipc::HandleCache* cache = ep_.handle_cache();
  GS_REQUIRE(cache, GPUSTRIPE_ERR_NOT_SUPPORTED, "collectives need the IPC mapping cache of the p2p layer");
  GS_REQUIRE(d.offset < d.handle.size, GPUSTRIPE_ERR_INTERNAL, "rank %d's buffer lies past its allocation", r);
  return static_cast<char*>(cache->map(channel_rank_[r], d.base, d.handle, reader)) + d.offset;
}

bool CollTeam::peer_ok(int dev, int peer) {
  auto key = std::make_pair(dev, peer);
  auto it = peer_ok_.find(key);
  if (it == peer_ok_.end()) it = peer_ok_.emplace(key, backend_.can_access_peer(dev, peer)).first;
  return it->second;
}

void CollTeam::map_all(int r, int reader, std::initializer_list<const Desc*> descs, std::initializer_list<char**> out) {
  try {
    auto o = out.begin();
    for (const Desc* d : descs) **o++ = map(r, *d, reader);
  } catch (const Error& e) {
    // The driver refuses a second mapping of memory this process has mapped already. With
    // the legacy IPC API that happens when the owner freed a buffer we still have mapped
    // (the cache keeps mappings) and its new buffer reuses that memory: drop this rank's
    // cached mappings and map again, once (Open MPI's CUDA IPC cache does the same).
    if (e.status() != GPUSTRIPE_ERR_CUDA || std::strstr(e.what(), "AlreadyMapped") == nullptr) throw;
    GS_LOG_INFO(Subsys::Mpi, "rank %d's buffer is mapped here already (%s): closing the cached mappings of its "
                "buffers and mapping again", r, e.what());
    ep_.handle_cache()->evict_peer(channel_rank_[r]);
    auto o = out.begin();
    for (const Desc* d : descs) **o++ = map(r, *d, reader);
  }
}

CollTeam::BcastSize& CollTeam::bcast_size(size_t bytes) {
  auto it = bcast_sizes_.find(bytes);
  if (it != bcast_sizes_.end()) return it->second;
  if (bcast_sizes_.size() >= kShapesKept) bcast_sizes_.clear();
  return bcast_sizes_[bytes];
}

coll::Choice CollTeam::choose(const CollCall& call, const std::string& form) {
  // A 2-rank broadcast is one transfer: the planner's host path for it, over every pair of the
  // node's GPUs (each rank chooses before it learns the others' GPUs, and all must choose alike).
  coll::PlannedHost planned;
  if (call.op == coll::CollOp::Bcast && coll::wants_bcast_host_share(res_, tuning_) && ctx_.planner()) {
    BcastSize& size = bcast_size(call.bytes);
    if (!size.planned) size.planned = coll::plan_pair_host(*ctx_.planner(), node_gpus_, call.bytes);
    planned = *size.planned;
  }
  coll::Choice c = coll::choose_schedule(call.op, res_, call.bytes, call.elem_size, tuning_, planned, form);
  // The exchanges' host path could stage through the team's shared host memory as the
  // broadcast's does, but it does not pay: in one process it gained ~1% at 256M per rank
  // (against 5-10% for one pair's copy), every GPU on the host path both ways at once.
  if (c.exchange.host_share > 0) {
    c.exchange.host_share = 0;
    c.why += " (no host share across processes)";
  }
  // The same for the round-major allreduce's gather.
  if (c.reduce.gather_host_share > 0) {
    c.reduce.gather_host_share = 0;
    c.why += " (no host share across processes)";
  }
  return c;
}

// A call from its start to the launch of this rank's part: what the exchange carries and
// what the launch needs of step 1.
struct CollTeam::Entry {
  coll::Team team;
  std::string shape_key;
  coll::Choice choice;
  RankInfo mine;
  std::string form;          // the measured form (FormTrials), where the call has candidates
  int trial_cls = -1;        // its size class there
  int trial_index = -1;      // its number in the class where this rank times it
  const char* cs = nullptr;  // the send buffer, and where it lies in the receive buffer
  bool send_in_recv = false, recv_in_send = false;
  bool ordered = false;        // stream-ordered behind call.stream (stream flags)
  uint64_t posted = 0;         // the shared-memory exchange's call number
  std::vector<RankInfo> all;   // every rank's message (the MPI's exchange: from the start)
  std::chrono::steady_clock::time_point t0, t1, t2;
};

// The nonblocking call in flight.
struct CollTeam::Pending {
  CollCall call;
  std::function<int()> mpi;
  Entry entry;
  std::shared_ptr<CollPending> state;
  bool launched = false;  // this rank's part started on the runner
};

// The phase trace (GPUSTRIPE_P2P_TRACE, p2p/trace.hpp) of a call up to its part's enqueue: keyed
// by (rank, the exchange's call number, form: 0 blocking, 1 nonblocking), as every rank numbers
// the calls alike. coll_in: the interposer got the call; coll_pre: the team got it (lookup
// done); coll_post: its message goes into the exchange; coll_all: every rank's message seen;
// coll_prog: the mappings and the Program ready; coll_launch: the part's first driver call begins
// (none where this rank has no op in it); coll_enq: this rank's part enqueued. Then
// coll_done (every rank's done word seen) and coll_ret (returning to the program; for a
// nonblocking call, its request seen complete by a wait or test).
void CollTeam::trace_launch(const CollCall& call, const Entry& e, std::chrono::steady_clock::time_point prog,
                            bool nonblocking) const {
  if (!p2p::trace_on()) return;
  const uint64_t form = nonblocking ? 1 : 0;
  if (call.entered != std::chrono::steady_clock::time_point{})
    p2p::trace_at(call.entered, "coll_in", rank_, e.posted, form, call.bytes);
  p2p::trace_at(e.t0, "coll_pre", rank_, e.posted, form, call.bytes);
  p2p::trace_at(e.t1, "coll_post", rank_, e.posted, form, call.bytes);
  p2p::trace_at(e.t2, "coll_all", rank_, e.posted, form, call.bytes);
  p2p::trace_at(prog, "coll_prog", rank_, e.posted, form, call.bytes);
  if (runner_->launched_at() != std::chrono::steady_clock::time_point{})
    p2p::trace_at(runner_->launched_at(), "coll_launch", rank_, e.posted, form, call.bytes);
  p2p::trace_at(runner_->enqueued_at(), "coll_enq", rank_, e.posted, form, call.bytes);
}

bool CollTeam::run(const CollCall& call) {
  // A call that failed half way leaves the team's flags and peers in no known state (a
  // peer died, or flags were released for streams that waited on it): every later call
  // fails the same way instead of reading flags set for another call.
  finish();
  if (failed_ != GPUSTRIPE_SUCCESS)
    GS_THROW(failed_, "%s: an earlier collective on this communicator failed (%s)", call.name, failure_.c_str());
  if (call.stream == nullptr && call.ready == nullptr && g_pending_calls.load() > 0) {
    // Calls of other communicators are pending here: this one runs as theirs do, its waits
    // advancing them (a rank may need them done before it gets to this call) and its steps
    // that wait for other ranks held on the host (SliceRunner::start's host_waits).
    bool served = true;
    std::shared_ptr<CollPending> state = start(call, [&served] {
      served = false;
      return 0;
    });
    finish();
    if (state->error) std::rethrow_exception(state->error);
    return served;
  }
  try {
    if (run_staged(call)) return true;
    Entry e;
    enter(call, e);
    auto collected = [&] { return runner_->collect(e.posted, sizeof(RankInfo), e.all.data()); };
    if (!runner_->ready_soon(collected)) {
      ipc::Waiter w(format("collective entry: rank %d waiting for the other ranks to call it", rank_),
                    [this] { runner_->check_peers(); });
      while (!collected()) w.pause();
    }
    e.t2 = std::chrono::steady_clock::now();
    if (!launch(call, e, false)) return false;
    // Host-ordered calls only: a stream-ordered one returns before its end.
    if (!e.ordered) time_trial(e);
    if (call.after) call.after();
    p2p::trace("coll_ret", rank_, e.posted, 0, call.bytes);
    return true;
  } catch (const Error& e) {
    failed_ = e.status();
    failure_ = e.what();
    throw;
  }
}

std::shared_ptr<CollPending> CollTeam::start(CollCall call, std::function<int()> mpi) {
  GS_REQUIRE(mpi != nullptr, GPUSTRIPE_ERR_INVALID_ARGUMENT, "%s: a nonblocking collective without the MPI's way",
             call.name);
  // Its part starts on the team's streams as soon as every rank has posted, not behind a
  // caller's stream (CollCall::stream is for the blocking, stream-ordered calls).
  GS_REQUIRE(call.stream == nullptr && call.ready == nullptr, GPUSTRIPE_ERR_INVALID_ARGUMENT,
             "%s: a nonblocking collective on a stream",
             call.name);
  finish();
  if (failed_ != GPUSTRIPE_SUCCESS)
    GS_THROW(failed_, "%s: an earlier collective on this communicator failed (%s)", call.name, failure_.c_str());
  std::unique_ptr<Pending> p = spare_ ? std::move(spare_) : std::make_unique<Pending>();
  p->call = std::move(call);
  p->mpi = std::move(mpi);
  p->state = std::make_shared<CollPending>();
  try {
    enter(p->call, p->entry);
  } catch (const Error& e) {
    failed_ = e.status();
    failure_ = e.what();
    throw;
  }
  std::shared_ptr<CollPending> state = p->state;
  state->rank = rank_;
  state->call = p->entry.posted;
  state->bytes = p->call.bytes;
  state->team = this;
  pending_ = std::move(p);
  ++g_pending_calls;
  // The last rank to start finds every handle there: its part goes to the GPUs now. So does a
  // rank whose peers post within a few polls (ranks started together, as a program that starts
  // and then waits, or computes, has them): its part launches here rather than at its next wait
  // or test -- a blocking call's host would be spinning for them inside the call. A bounded
  // look, not a wait: a peer that comes later is met by the progress of a later call.
  ipc::ready_within_polls([this] {
    progress();
    return !pending_ || pending_->launched;
  });
  return state;
}

std::unique_ptr<CollTeam::Pending> CollTeam::take_pending() {
  if (pending_) {
    --g_pending_calls;
    pending_->state->team = nullptr;
  }
  return std::move(pending_);
}

void CollTeam::recycle(std::unique_ptr<Pending> p) {
  *p = Pending{};  // what the call held goes now, its request's state included
  spare_ = std::move(p);
}

bool CollTeam::progress_soon() {
  return runner_->ready_soon([this] {
    progress();
    return !pending_;
  });
}

bool CollTeam::pending() const { return pending_ != nullptr; }

void CollTeam::check_peers() const { runner_->check_peers(); }

void CollTeam::progress() {
  if (!pending_) return;
  Pending& p = *pending_;
  try {
    if (!p.launched) {
      if (!runner_->collect(p.entry.posted, sizeof(RankInfo), p.entry.all.data())) return;
      p.entry.t2 = std::chrono::steady_clock::now();
      if (!launch(p.call, p.entry, true)) {
        // Some rank cannot take this path: every rank learns it at this call's exchange and
        // runs the MPI's way, blocking, here.
        std::unique_ptr<Pending> done = take_pending();
        done->state->mpi_rc = done->mpi();
        done->state->done = true;
        recycle(std::move(done));
        return;
      }
      p.launched = true;
    }
    if (runner_->started() && !runner_->poll()) return;
    p2p::trace("coll_done", rank_, p.entry.posted, 1, p.call.bytes);
    time_trial(p.entry);
    std::unique_ptr<Pending> done = take_pending();
    if (done->call.after) done->call.after();
    done->state->served = true;
    done->state->done = true;
    recycle(std::move(done));
  } catch (const Error& e) {
    abandon(std::current_exception(), e.status(), e.what());
  } catch (const std::exception& e) {
    abandon(std::current_exception(), GPUSTRIPE_ERR_INTERNAL, e.what());
  }
}

void CollTeam::abandon(std::exception_ptr why, Status status, const std::string& what) {
  runner_->abandon();
  failed_ = status;
  failure_ = what;
  if (!pending_) return;
  std::unique_ptr<Pending> done = take_pending();
  done->state->error = why;
  done->state->done = true;
}

void CollTeam::finish(bool all) {
  if (!pending_) return;
  std::shared_ptr<CollPending> state = pending_->state;
  const char* name = pending_->call.name;
  // Every pending call of the process advances while this one is waited for: another rank
  // may wait for those first (they are on other communicators, in any order).
  void (*progress_all)() = all ? g_progress_all.load() : nullptr;
  auto step = [&] {
    if (progress_all) progress_all();
    progress();
  };
  try {
    ipc::Waiter w(format("%s: rank %d waiting for the other ranks to complete it", name, rank_),
                  [this] { runner_->check_peers(); });
    for (step(); pending_; step()) w.pause();
  } catch (const Error& e) {
    abandon(std::current_exception(), e.status(), e.what());
  }
}

bool CollTeam::run_part(const CollCall& call, bool ordered, const coll::Program& prog,
                        const coll::CrossSlots& slots) {
  if (ordered && runner_->can_order(prog, slots)) {
    runner_->run_ordered(prog, call.device, call.stream, &slots, call.ready, call.on_stream && !call.ready);
    return true;
  }
  if (ordered) {
    // The same program on every rank, so every rank comes here: the hosts order it after all.
    runner_->settle();
    wait_ready(call);
    runner_->barrier("collective entry");
  }
  runner_->run(prog, call.device, &slots);
  return false;
}

void CollTeam::time_trial(const Entry& e) {
  if (e.trial_index < 0) return;
  auto injected = trial_us_.find(e.form);
  const double ns = injected != trial_us_.end()
                        ? injected->second * 1e3
                        : std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - e.t0).count();
  bcast_trials_.timed(e.trial_cls, e.trial_index, static_cast<uint64_t>(ns));
}

void CollTeam::wait_ready(const CollCall& call) {
  if (call.ready)
    backend_.synchronize_event(call.ready);
  else if (call.stream)
    backend_.synchronize_stream(call.stream);
}

void CollTeam::enter(const CollCall& call, Entry& e) {
  ++calls_;
  e.t0 = std::chrono::steady_clock::now();
  coll::Team& team = e.team;
  for (int r = 0; r < n_; ++r) {
    team.rank.push_back(r);
    team.dev.push_back(call.device);
  }
  // Where the send buffer lies in the receive buffer (or the other way round): in-place
  // rules of the builders look at it, so it is part of the shape.
  const char* cs = static_cast<const char*>(call.send);
  const char* cr = static_cast<const char*>(call.recv);
  const bool send_in_recv = cs && cr && cs >= cr && cs < cr + call.recv_bytes;
  const bool recv_in_send = cs && cr && cr > cs && cr < cs + call.send_bytes;
  e.cs = cs;
  e.send_in_recv = send_in_recv;
  e.recv_in_send = recv_in_send;
  std::string& shape_key = e.shape_key;
  if (!call.shape.empty()) {
    shape_key = call.shape;
    auto put = [&](const auto& v) { shape_key.append(reinterpret_cast<const char*>(&v), sizeof v); };
    put(call.device);
    put(call.bytes);
    put(call.elem_size);
    put(call.send_bytes);
    put(call.recv_bytes);
    const ptrdiff_t rel = send_in_recv ? cs - cr : recv_in_send ? -(cr - cs) : PTRDIFF_MIN;
    put(rel);
    put(cs != nullptr);
    put(cr != nullptr);
  }
  // A call whose schedule its team times (FormTrials): the form every rank takes this time, a
  // Program of its own per form.
  bool timed = false;
  if (call.op == coll::CollOp::Bcast && res_.host_paced && n_ == 2) {
    BcastSize& size = bcast_size(call.bytes);
    if (!size.timed) size.timed = !coll::measured_candidates(call.op, res_, call.bytes, tuning_).empty();
    timed = *size.timed;
  }
  if (timed) {
    e.trial_cls = FormTrials::size_class(call.bytes);
    e.form = bcast_trials_.next(e.trial_cls);
    if (!shape_key.empty()) shape_key += "/" + e.form;
  }

  // 1. Size this rank's scratch: a build over placeholders (every rank's buffers laid
  //    out as this rank's are, which is what in-place rules look at).
  RankInfo& mine = e.mine;
  mine.eligible = call.eligible ? 1 : 0;
  mine.device = call.device;
  if (call.eligible) {
    auto known = shape_key.empty() ? shapes_.end() : shapes_.find(shape_key);
    size_t wanted = 0, host_wanted = 0;
    if (known != shapes_.end()) {
      e.choice = known->second.choice;
      wanted = known->second.scratch;
      host_wanted = known->second.host;
    } else {
      e.choice = choose(call, e.form);
      coll::Scratch sizing(backend_, team.dev);
      sizing.set_external_host(placeholder(3 * n_), 0);
      std::vector<char*> send(n_), recv(n_);
      for (int r = 0; r < n_; ++r) {
        sizing.set_external(r, placeholder(3 * r + 2), 0);
        send[r] = call.send ? placeholder(3 * r) : nullptr;
        recv[r] = call.recv ? placeholder(3 * r + 1) : nullptr;
        if (send_in_recv) send[r] = recv[r] + (cs - cr);
        if (recv_in_send) recv[r] = send[r] + (cr - cs);
      }
      coll::Program sizing_prog(n_);
      call.build(sizing_prog, team, send, recv, sizing, e.choice);
      wanted = sizing.wanted(rank_);
      host_wanted = sizing.host_wanted();
      if (!shape_key.empty()) {
        if (shapes_.size() >= kShapesKept) shapes_.clear();
        shapes_[shape_key] = Shape{e.choice, wanted, host_wanted};
      }
    }
    if (wanted) grow(scratch_, call.device, wanted);
    // Rank 0 owns the team's shared host staging: grown here, before its message names it
    // (every earlier call is done on every rank once its own streams are: settle()).
    if (rank_ == 0 && host_wanted > staging_->bytes()) {
      runner_->settle();
      staging_->grow(host_wanted);
    }
    try {
      mine.send = describe(call.send, call.send_bytes, call.located);
      mine.recv = describe(call.recv, call.recv_bytes, call.located);
    } catch (const Error& err) {
      // Buffers without an IPC handle (the default pool of cudaMallocAsync): every rank
      // takes the MPI's way for this call (the allgather tells them).
      if (err.status() != GPUSTRIPE_ERR_NOT_SUPPORTED) throw;
      static bool said = false;
      if (!said) GS_LOG_INFO(Subsys::Mpi, "%s: a buffer cannot be shared with the other ranks (%s): such calls take the "
                             "MPI's way", call.name, err.what());
      said = true;
      mine.eligible = 0;
    }
    if (mine.eligible && wanted) {
      // This rank's own allocation, until grow() replaces it: described once.
      if (!scratch_desc_) scratch_desc_ = std::make_unique<Desc>(describe(scratch_.p, scratch_.bytes, {}));
      mine.scratch = *scratch_desc_;
    }
  }

  mine.staging = staging_->note();
  mine.timed = bcast_trials_.take_posted();

  if (!call.send_at.empty()) {
    const size_t n = call.send_at.size();
    if (n > CollCall::kMaxBlocks || call.send_len.size() != n || call.recv_len.size() != n) {
      mine.eligible = 0;
    } else {
      mine.blocks = static_cast<uint32_t>(n);
      std::copy(call.send_at.begin(), call.send_at.end(), mine.send_at);
      std::copy(call.send_len.begin(), call.send_len.end(), mine.send_len);
      std::copy(call.recv_len.begin(), call.recv_len.end(), mine.recv_len);
    }
  }

  // A call that the hosts order (no stream flags, or no stream) starts once this rank's
  // buffers are ready and no stream-ordered call is still running.
  e.ordered = call.stream != nullptr || call.ready != nullptr;
  if (!e.ordered && mine.eligible) {
    runner_->settle();
    wait_ready(call);
  }

  // 2. Every rank's handles and eligibility (the entry barrier of the call). Through the
  //    team's shared segment, posted here and collected without waiting (a few microseconds
  //    less than the MPI's allgather, which is a blocking exchange right here).
  static_assert(sizeof(RankInfo) <= TeamFlags::kMessageBytes, "a rank's message outgrew its exchange slot");
  e.all.resize(n_);
  e.t1 = std::chrono::steady_clock::now();
  e.posted = runner_->post(&mine, message_bytes(mine));
}

const CollTeam::Cached* CollTeam::resolve(const CollCall& call, Entry& e, coll::Program& built, bool* build_now) {
  const std::vector<RankInfo>& all = e.all;
  coll::Team& team = e.team;
  // Mapping another allocation may close an older mapping (the cache's capacity, a stale entry):
  // no stream-ordered call may be using it then.
  {
    std::string names;
    for (int r = 0; r < n_; ++r)
      for (const Desc* d : {&all[r].send, &all[r].recv, &all[r].scratch}) {
        if (r == rank_ || !d->present) continue;
        for (uint64_t v : {uint64_t(r), d->base, d->handle.buffer_id, d->handle.share_id, uint64_t(d->handle.size)})
          names.append(reinterpret_cast<const char*>(&v), sizeof v);
      }
    if (!mapped_sets_.count(names)) {
      runner_->settle();
      if (mapped_sets_.size() >= kShapesKept) mapped_sets_.clear();
      mapped_sets_.insert(std::move(names));
    }
  }
  // Rank 0's shared host staging as this process maps it: a new one replaces the old, which
  // no call of this rank uses once its streams are done.
  if (rank_ != 0 && all[0].staging.generation != 0 && all[0].staging.generation != staging_->generation()) {
    runner_->settle();
    staging_->follow(all[0].staging);
  }
  std::vector<char*> send(n_), recv(n_), scr(n_);
  coll::Scratch scratch(backend_, team.dev);
  scratch.set_external_host(staging_->data(), staging_->bytes());
  for (int r = 0; r < n_; ++r) {
    team.dev[r] = all[r].device;
    // Kernels and copies of this GPU reach the peers' buffers over NVLink only where its
    // context has peer access to their GPUs (idempotent; the legacy mappings' open enables it too).
    if (team.dev[r] != call.device && peer_ok(call.device, team.dev[r]))
      backend_.enable_peer_access(call.device, team.dev[r]);
    if (r == rank_) {
      send[r] = static_cast<char*>(const_cast<void*>(call.send));
      recv[r] = static_cast<char*>(call.recv);
      scr[r] = scratch_.p;
      scratch.set_external(r, scratch_.p, scratch_.bytes);
    } else {
      map_all(r, call.device, {&all[r].send, &all[r].recv, &all[r].scratch}, {&send[r], &recv[r], &scr[r]});
      scratch.set_external(r, scr[r], all[r].scratch.present ? all[r].scratch.handle.size : 0);
    }
  }
  if (!call.send_at.empty())
    for (int r = 0; r < n_; ++r)
      if (send[r]) send[r] += all[r].send_at[rank_];
  // The same shape over the same pointers: the same Program (built and checked before).
  std::string prog_key;
  if (!e.shape_key.empty()) {
    prog_key = e.shape_key;
    auto put = [&](const auto& v) { prog_key.append(reinterpret_cast<const char*>(&v), sizeof v); };
    for (int r = 0; r < n_; ++r) {
      put(team.dev[r]);
      put(send[r]);
      put(recv[r]);
      put(scr[r]);
      put(r == rank_ ? scratch_.bytes : all[r].scratch.present ? all[r].scratch.handle.size : size_t(0));
    }
    put(staging_->data());
    put(staging_->bytes());
  }
  auto cached = prog_key.empty() ? programs_.end() : programs_.find(prog_key);
  *build_now = cached == programs_.end();
  if (*build_now) {
    call.build(built, team, send, recv, scratch, e.choice);
    for (int r = 0; r < n_; ++r)
      GS_REQUIRE(scratch.wanted(r) == 0 || scratch.wanted(r) <= all[r].scratch.handle.size - all[r].scratch.offset,
                 GPUSTRIPE_ERR_INTERNAL, "%s: rank %d's scratch (%zu bytes) is smaller than the schedule needs (%zu)",
                 call.name, r, static_cast<size_t>(all[r].scratch.handle.size), scratch.wanted(r));
    // Every rank sized the staging from the same choice: rank 0's is large enough for all.
    GS_REQUIRE(scratch.host_wanted() <= staging_->bytes(), GPUSTRIPE_ERR_INTERNAL,
               "%s: the schedule stages %zu bytes through host memory, the team's shared staging holds %zu",
               call.name, scratch.host_wanted(), staging_->bytes());
    const char* host = staging_->data();
    const size_t held = staging_->bytes();
    auto staged = [&](const void* p, size_t bytes) {
      const char* c = static_cast<const char*>(p);
      return host && c >= host && bytes <= held && static_cast<size_t>(c - host) <= held - bytes;
    };
    for (const coll::Op& op : built.ops())
      GS_REQUIRE(op.kind != coll::Op::Copy || ((op.src_dev != kHostDevice || staged(op.src, op.bytes)) &&
                                               (op.dst_dev != kHostDevice || staged(op.dst, op.bytes))),
                 GPUSTRIPE_ERR_INTERNAL, "%s: a schedule with host memory other than the team's shared staging",
                 call.name);
    GS_LOG_DEBUG(Subsys::Mpi, "%s %zu bytes on %d ranks: %s; rank %d runs its part of %s", call.name, call.bytes, n_,
                 e.choice.describe().c_str(), rank_, built.summary().c_str());
    if (prog_key.empty()) return nullptr;
    if (programs_.size() >= kProgramsKept) programs_.clear();
    coll::CrossSlots cs = coll::cross_slots(built);
    cached = programs_.emplace(prog_key, Cached{std::move(built), std::move(cs)}).first;
  }
  return &cached->second;
}

bool CollTeam::launch(const CollCall& call, Entry& e, bool async) {
  using Clock = std::chrono::steady_clock;
  auto us = [](Clock::time_point a, Clock::time_point b) { return std::chrono::duration<double, std::micro>(b - a).count(); };
  const std::vector<RankInfo>& all = e.all;
  // Every rank has mapped rank 0's shared host staging: its name can go.
  const uint64_t generation = staging_->generation();
  if (rank_ == 0 && generation != 0 &&
      std::all_of(all.begin(), all.end(), [&](const RankInfo& ri) { return ri.staging.seen == generation; }))
    staging_->forget_name();
  // Every rank's time of the team's last call where it was a timed trial: the same record on
  // every rank, whichever way this call goes.
  {
    std::vector<FormTrials::Posted> timed(all.size());
    for (size_t r = 0; r < all.size(); ++r) timed[r] = all[r].timed;
    bcast_trials_.record(timed);
  }
  for (const RankInfo& ri : all)
    if (!ri.eligible) return false;
  // Senders' layouts: every rank checks every pair alike, so all agree.
  if (!call.send_at.empty()) {
    for (int i = 0; i < n_; ++i) {
      if (all[i].blocks != static_cast<uint32_t>(n_)) return false;
      for (int j = 0; j < n_; ++j)
        if (all[i].send_len[j] != all[j].recv_len[i]) return false;
    }
  }
  if (e.trial_cls >= 0) {
    e.trial_index = bcast_trials_.ran(e.trial_cls, e.form);
    std::lock_guard<std::mutex> l(g_forms_lock);
    if (g_forms_run.size() < kFormsKept) g_forms_run += (g_forms_run.empty() ? "" : ",") + e.form;
  }
  // Test hook (tests/mpi/mpi_coll_kill.c): die where the others already run the call.
  if (g_die_in_next.load()) raise(SIGKILL);

  // 3. This process's view of every rank's buffers, the program, this rank's part: the same
  //    call as the last one (its shape, every rank's message, this rank's scratch, and no
  //    mapping closed since) maps the same addresses and builds the same Program, so it takes
  //    both as they were without a lookup.
  ipc::HandleCache* cache = ep_.handle_cache();
  // Read before this call maps anything: a mapping that its own lookup closes (a cache too small
  // for the call) sends the next call the long way too.
  const uint64_t closed = cache ? cache->closed() : 0;
  coll::Program built(n_);
  const coll::Program* prog = nullptr;
  const coll::CrossSlots* slots = nullptr;
  bool build_now = false, keyed = true;
  if (last_.cached && !e.shape_key.empty() && last_.closed == closed && last_.scratch == scratch_.p &&
      last_.scratch_bytes == scratch_.bytes && last_.shape_key == e.shape_key && same_messages(last_.all, all)) {
    prog = &last_.cached->prog;
    slots = &last_.cached->slots;
  } else {
    const Cached* c = resolve(call, e, built, &build_now);
    keyed = c != nullptr;
    prog = c ? &c->prog : &built;
    slots = c ? &c->slots : nullptr;
    last_ = Last{};
    if (c) last_ = Last{c, e.shape_key, all, closed, scratch_.p, scratch_.bytes};
  }
  const Clock::time_point t3 = Clock::now();
  // Nonblocking: this rank's part goes to its streams and the call returns; a program the
  // runner cannot start so (Barrier ops) runs here, to its end.
  // A call with others pending in this process holds its waits for other ranks on the host.
  if (async && runner_->start(*prog, call.device, slots, g_pending_calls.load() > 1)) {
    trace_launch(call, e, t3, true);
    return true;
  }
  if (!keyed) {
    run_part(call, e.ordered, *prog, coll::cross_slots(*prog));
    return true;
  }
  if (run_part(call, e.ordered, *prog, *slots)) ++times_.ordered;
  if (p2p::trace_on()) {
    trace_launch(call, e, t3, false);
    p2p::trace("coll_done", rank_, e.posted, 0, call.bytes);
  }
  ++times_.calls;
  if (build_now) ++times_.built;
  if (call.entered != Clock::time_point{}) times_.lookup += us(call.entered, e.t0);
  times_.prepare += us(e.t0, e.t1);
  times_.exchange += us(e.t1, e.t2);
  times_.map += us(e.t2, t3);
  times_.run += us(t3, Clock::now());
  return true;
}

}  // namespace gpustripe::mpi
