// Helpers of the engine tests: a small emulated node, hand-made plans, patterned buffers.
#pragma once
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <random>
#include <vector>

#include "backend/backend.hpp"
#include "model/plan.hpp"
#include "model/planner.hpp"
#include "topology/topology.hpp"

namespace engine_test {

using namespace gpustripe;

// n GPUs on one socket, all peers (the shape of the h200x4 node, without reading a file).
inline Topology small_node(int n = 4) {
  Topology t;
  t.name = "test node";
  for (int i = 0; i < n; ++i) {
    GpuInfo g;
    g.index = i;
    g.name = "emulated";
    g.memory_bytes = 1ull << 32;
    g.host_gbps = 55;
    g.nvlinks = 18;
    g.nvlink_gbps = 26.6;
    g.nvswitch = true;
    t.gpus.push_back(g);
  }
  t.sockets.push_back(SocketInfo{});
  t.peer_access.assign(n, std::vector<uint8_t>(n, 1));
  for (int i = 0; i < n; ++i) t.peer_access[i][i] = 0;
  return t;
}

struct PathSpec {
  PathKind kind;
  int via;
  double share;  // fraction of the message; the last path takes the rest
  int chunks;
  int taper_head = 0, taper_tail = 0;  // PathPlan's tapered chunks
};

inline Plan make_plan(int src, int dst, uint64_t bytes, std::initializer_list<PathSpec> specs) {
  Plan p;
  p.src = src;
  p.dst = dst;
  p.bytes = bytes;
  p.source = "fixed";
  uint64_t off = 0;
  size_t i = 0;
  for (const PathSpec& s : specs) {
    PathPlan pp;
    pp.kind = s.kind;
    pp.via = s.via;
    pp.offset = off;
    pp.bytes = ++i == specs.size() ? bytes - off : static_cast<uint64_t>(bytes * s.share);
    pp.chunks = static_cast<int>(std::max<uint64_t>(1, std::min<uint64_t>(s.chunks, pp.bytes)));
    pp.taper_head = std::min(s.taper_head, pp.chunks - 1);
    pp.taper_tail = std::min(s.taper_tail, pp.chunks - 1 - pp.taper_head);
    off += pp.bytes;
    if (pp.bytes) p.paths.push_back(pp);
  }
  return p;
}

// A planner that returns one fixed plan shape for every transfer (tests of copy_async).
class FixedPlanner : public Planner {
 public:
  explicit FixedPlanner(std::vector<PathSpec> specs) : specs_(std::move(specs)) {}
  Plan plan(int src, int dst, uint64_t bytes) override {
    // Staging through GPU `via` needs a third GPU: pick the first one that is neither end.
    Plan p = make_plan(src, dst, bytes, {});
    p.paths.clear();
    uint64_t off = 0;
    for (size_t i = 0; i < specs_.size(); ++i) {
      PathSpec s = specs_[i];
      if (s.kind == PathKind::GpuStaged) {
        s.via = 0;
        while (s.via == src || s.via == dst) ++s.via;
      }
      PathPlan pp;
      pp.kind = s.kind;
      pp.via = s.kind == PathKind::Direct ? -1 : s.via;
      pp.offset = off;
      pp.bytes = i + 1 == specs_.size() ? bytes - off : static_cast<uint64_t>(bytes * s.share);
      pp.chunks = static_cast<int>(std::max<uint64_t>(1, std::min<uint64_t>(s.chunks, pp.bytes)));
      if (!pp.bytes) continue;
      off += pp.bytes;
      p.paths.push_back(pp);
    }
    return p;
  }
  std::vector<Plan> plan_concurrent(const std::vector<TransferSpec>& t) override {
    std::vector<Plan> out;
    for (const auto& x : t) out.push_back(plan(x.src, x.dst, x.bytes));
    return out;
  }
  double predict_us(const Plan&) override { return 0; }

 private:
  std::vector<PathSpec> specs_;
};

// Deterministic non-zero pattern: byte i of stream `seed`.
inline std::vector<uint8_t> pattern(size_t n, uint32_t seed) {
  std::vector<uint8_t> v(n);
  std::mt19937 rng(seed * 2654435761u + 1);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<uint8_t>(rng() % 255 + 1);
  return v;
}

// Host <-> device through the backend (pinned bounce buffer, synchronous).
inline void upload(Backend& b, void* dev_ptr, int dev, const std::vector<uint8_t>& data, StreamHandle s) {
  void* pinned = b.alloc_pinned(data.size());
  std::memcpy(pinned, data.data(), data.size());
  b.copy_async(dev_ptr, dev, pinned, kHostDevice, data.size(), s);
  b.synchronize_stream(s);
  b.free_pinned(pinned);
}

inline std::vector<uint8_t> download(Backend& b, const void* dev_ptr, int dev, size_t n, StreamHandle s) {
  void* pinned = b.alloc_pinned(n);
  b.copy_async(pinned, kHostDevice, dev_ptr, dev, n, s);
  b.synchronize_stream(s);
  std::vector<uint8_t> out(n);
  std::memcpy(out.data(), pinned, n);
  b.free_pinned(pinned);
  return out;
}

// Index of the first byte that differs, or -1.
inline long long first_mismatch(const std::vector<uint8_t>& a, const uint8_t* b, size_t n) {
  for (size_t i = 0; i < n; ++i)
    if (a[i] != b[i]) return static_cast<long long>(i);
  return -1;
}

}  // namespace engine_test
