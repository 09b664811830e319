// The multi-path engine: executes a Plan (model/plan.hpp) on a Backend as a 2-D
// pipeline (paths x chunks), stream-ordered with respect to the caller's stream.
//
// Ordering contract of copy_async (C API: gpustripe_copy_async):
//   - `stream` belongs to src_dev (nullptr: the legacy default stream, src_dev current);
//     the copy starts after the work enqueued on it before the call and the work enqueued
//     after the call starts after the copy has completed on every path.
//   - Safe to call from many threads on many streams at once: the schedule of one copy is
//     enqueued as a unit (engine mutex). Its direct path runs on the caller's stream, like a
//     plain copy; its staged paths run on the engine's per-direction lanes, so their chunks
//     of one message go before the next message's.
//   - Below the size where splitting pays (single direct path), one plain backend copy on
//     the caller's stream and nothing else.
//   - src_dev == dst_dev: one device-local copy on the caller's stream.
//   - bytes == 0: nothing happens (devices are still checked, pointers are not).
//   - Arguments are checked before anything is enqueued; a bad one throws a clear Error.
#pragma once
#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "backend/backend.hpp"
#include "model/plan.hpp"

namespace gpustripe {

struct Topology;
class Planner;
class LaneSet;
class StagingArea;
class GraphCache;
class ResourceTails;

// How the engine runs schedules. The defaults are the engine's behaviour; tests construct other
// values (a small graph cache, two relay lanes, GPU-staged replays) to reach corner cases.
struct EngineOptions {
  bool graphs = true;  // replay a captured graph of a multi-path transfer seen before (where the backend can)
  // Replay plans with GPU-staged paths too. Off: on 4x H200 replays of such plans ran at 50-95%
  // of their enqueued speed, while direct + host plans gain from replay.
  bool replay_gpu_staged = false;
  size_t graph_cache = 256;  // captured schedules kept (LRU; a graph is a few KB)
  int host_lanes = 1;        // streams of the host-to-GPU hop of a host-staged path (1 to 8)
  uint64_t host_staging = 128ull << 20;  // pinned host staging per CPU socket and source GPU
  uint64_t gpu_staging = 256ull << 20;   // scratch per staging GPU
  // The defaults, with the staging sizes of GPUSTRIPE_HOST_STAGING and GPUSTRIPE_GPU_STAGING.
  static EngineOptions from_settings();
};

struct EngineStats {
  uint64_t plain_copies = 0;     // single-path copies issued as one backend copy
  uint64_t schedules = 0;        // multi-path schedules enqueued directly
  uint64_t graph_captures = 0;   // schedules captured into a CUDA graph
  uint64_t graph_launches = 0;   // replays of captured schedules
  uint64_t staging_bytes = 0;    // staging memory allocated (host + GPU)
};

class Engine {
 public:
  // `planner` may be null: copy_async then always makes one plain copy.
  // Throws Error(ERR_CONFIG) for a staging area under a page.
  Engine(Backend& backend, const Topology& topo, Planner* planner,
         EngineOptions options = EngineOptions::from_settings());
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  void copy_async(void* dst, int dst_dev, const void* src, int src_dev, uint64_t bytes, StreamHandle stream);
  // copy_async, then waits for `stream` to drain.
  void copy(void* dst, int dst_dev, const void* src, int src_dev, uint64_t bytes, StreamHandle stream);
  // One plain copy on `stream` (the direct path alone between two GPUs, peer access enabled
  // once), with no pointer queries and no plan: for callers that checked both ranges already
  // and know the direct path alone is the plan (the p2p layer's messages below the size where
  // the planner splits: its per-message host cost is what their latency is made of).
  // Devices and null pointers are still checked.
  void copy_direct_prechecked(void* dst, int dst_dev, const void* src, int src_dev, uint64_t bytes,
                              StreamHandle stream);
  // copy_async into memory that must be written from its own GPU's context: another process's
  // memory mapped into this one lives in the context of the GPU it was opened on, and copies
  // into it issued from another GPU's context take a slow path (about PCIe speed). `stream`
  // belongs to dst_dev: the direct path runs on it and the staged paths' relays on lanes of
  // dst_dev, as always; the first hops read src on lanes of src_dev, forked from `stream`. Where
  // the plan stages through another GPU (whose relay would write from that GPU) or is the direct
  // path alone: one plain copy on `stream`. Enqueued, never replayed as a graph.
  void copy_async_from_dst(void* dst, int dst_dev, const void* src, int src_dev, uint64_t bytes,
                           StreamHandle stream);
  // copy_direct_prechecked for `n` copies on one stream, in one backend call
  // (Backend::copy_batch_prechecked): a window of small messages enqueued together.
  void copy_direct_batch_prechecked(const Backend::BatchCopy* copies, size_t n, StreamHandle stream);
  // Executes a given plan (forced plans of the model's accuracy check and the tuner).
  // The plan's src/dst/bytes name the devices and size; pointers are checked like copy_async's.
  void copy_with_plan(const Plan& plan, void* dst, const void* src, StreamHandle stream);
  // copy_with_plan for a plan of a direct path and one staged path whose paths do NOT wait for
  // the work enqueued on `stream` before the call (the caller knows none of it touches these
  // buffers: a p2p window's messages, each into its own receive): the direct path, issued as
  // plain copies before the staged part is launched (a graph of its own where graphs are on),
  // goes behind the earlier detached copies' direct paths
  // on a lane of the link, so the link never idles between them, and the staged part behind the
  // earlier user of its staging area only. Work enqueued on `stream` after the call still waits
  // for both paths. Other plan shapes run as copy_with_plan would (stream-ordered).
  // `second_area`: the host-staged pieces go through the second staging area of the source GPU
  // (a lane and staging memory of its own, replayed as a graph of its own): two transfers
  // from one GPU that alternate between the two areas overlap, the next one's host pipeline
  // filling while the previous one's drains (a window of messages to one peer). `replay` false: the staged part is enqueued, never
  // replayed: its pieces take the next free range of the area's ring and go behind the earlier
  // enqueued pieces on the same lanes, so the staged parts of consecutive copies stream into
  // each other (a replay holds its area whole).
  void copy_with_plan_detached(const Plan& plan, void* dst, const void* src, StreamHandle stream,
                               bool second_area = false, bool replay = true);

  Backend& backend() { return backend_; }
  const Topology& topology() const { return topo_; }
  Planner* planner() { return planner_; }
  bool uses_graphs() const { return graphs_; }
  EngineStats stats() const;
  // The split copy_async runs for this transfer now: the planner's plan. Throws like
  // copy_async for a bad pair.
  Plan current_plan(int src, int dst, uint64_t bytes);

 private:
  std::shared_ptr<const Plan> cached_plan(int src, int dst, uint64_t bytes);
  // How a schedule is run: replayed as a graph where it can be (else enqueued); its direct
  // path always goes on the caller's stream (no fork or join for it).
  struct RunMode {
    bool replay = true;
    bool own_area = false;  // host staging in the source GPU's second area
    bool apart = false;     // the direct path issued before the staged part's launch
    bool detached = false;  // copy_with_plan_detached (with apart)
    bool caller_on_dst = false;  // the caller's stream belongs to the destination GPU (copy_async_from_dst)
    // The allocations the copy reads and writes (check_copy's queries): a captured graph refers
    // to the allocations behind its pointers, so its key names them (base, size, buffer id).
    PointerInfo src_alloc, dst_alloc;
  };
  // copy_with_plan and its variants.
  void run_given(const Plan& plan, void* dst, const void* src, StreamHandle stream, RunMode mode);
  void execute(const Plan& plan, void* dst, const void* src, StreamHandle stream, RunMode mode);
  // The direct path of `plan` (direct_plus_one_staged) as plain copies on `caller`, then its
  // staged part as a schedule of its own on lane (src, `lane_key`, `lane_index`) forked from
  // the caller before the direct copies and joined back. `mode.detached`: nothing forked from
  // the caller, the direct copies on the link's lane of detached copies, joined back too.
  void run_apart(const Plan& plan, char* dst, const char* src, StreamHandle caller, const RunMode& mode, int lane_key,
                 int lane_index);
  // The schedule of a checked plan: replayed as a graph where it can be (true), else enqueued (under mu_).
  bool run_schedule(const Plan& plan, void* dst, const void* src, StreamHandle stream, RunMode mode);
  void check_plan(const Plan& plan) const;
  void ensure_peer(int a, int b);
  void enqueue_schedule(const Plan& plan, char* dst, const char* src, StreamHandle caller, bool capturing,
                        RunMode mode);
  // Creates the lanes, staging areas and events `plan` uses (never during a capture).
  void prepare(const Plan& plan, bool second_area = false);
  // Replays the captured schedule of this transfer on `caller`, capturing it first when the
  // transfer was seen before; false (nothing enqueued) the first time a transfer is seen.
  bool launch_graph(const Plan& plan, char* dst, const char* src, StreamHandle caller, const RunMode& mode);
  StagingArea& host_area(int socket, int src, bool queues = false);
  StagingArea& gpu_area(int gpu);
  EventHandle caller_event(int dev);

  Backend& backend_;
  const Topology& topo_;
  Planner* planner_;
  EngineOptions opt_;
  bool graphs_ = false;       // opt_.graphs where the backend replays graphs; off after a failed capture
  bool thrash_logged_ = false;
  int ndev_ = 0;
  uint64_t id_ = 0;

  mutable std::mutex mu_;  // guards everything below and the enqueue of one schedule
  std::unique_ptr<LaneSet> lanes_;
  std::vector<std::unique_ptr<StagingArea>> host_areas_;  // per (socket, source GPU), then the queues' own
  int sockets_ = 1;
  std::vector<std::unique_ptr<StagingArea>> gpu_areas_;   // per GPU
  std::vector<EventHandle> caller_events_;                // per device: "the caller's earlier work"
  std::vector<StreamHandle> capture_streams_;             // per device, graph mode
  std::unique_ptr<GraphCache> graphs_cache_;
  std::unique_ptr<ResourceTails> tails_;
  std::unique_ptr<std::atomic<bool>[]> peer_enabled_;    // ndev x ndev, set once per pair
  std::atomic<uint64_t> plain_copies_{0}, schedules_{0}, graph_captures_{0}, graph_launches_{0}, staging_bytes_{0};
};

}  // namespace gpustripe
