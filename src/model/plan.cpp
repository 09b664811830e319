#include "model/plan.hpp"

#include <algorithm>
#include <cstdio>

#include "common/error.hpp"

namespace gpustripe {

const char* path_kind_name(PathKind kind) {
  switch (kind) {
    case PathKind::Direct: return "direct";
    case PathKind::GpuStaged: return "gpu";
    case PathKind::HostStaged: return "host";
  }
  return "?";
}

std::vector<uint64_t> chunk_edges(const PathPlan& p) {
  const int n = std::max(1, p.chunks);
  const uint64_t chunks = static_cast<uint64_t>(n);
  constexpr uint64_t kPage = 4096;
  const uint64_t unit = p.bytes >= chunks * kPage ? kPage : 1;
  const int head = std::clamp(p.taper_head, 0, kMaxTaper), tail = std::clamp(p.taper_tail, 0, kMaxTaper);
  // Integer weights: the steady chunk weighs 2^scale, tapered ones a power of two less.
  const int scale = std::max(head, tail);
  auto weight = [&](int j) {
    int down = std::max({0, head - j, j - (n - 1 - tail)});
    return uint64_t{1} << (scale - std::min(down, scale));
  };
  uint64_t total = 0;
  for (int j = 0; j < n; ++j) total += weight(j);
  std::vector<uint64_t> e(chunks + 1, 0);
  e[chunks] = p.bytes;
  if (p.bytes < chunks) {  // a malformed path (Plan::check rejects it): empty chunks, no wrap-around
    for (uint64_t i = 1; i < chunks; ++i) e[i] = std::min<uint64_t>(i, p.bytes);
    return e;
  }
  uint64_t before = 0;
  for (int i = 1; i < n; ++i) {
    before += weight(i - 1);
    // bytes * before / total without overflow (bytes < 2^44, weights < 2^29).
    uint64_t raw = static_cast<uint64_t>(static_cast<unsigned __int128>(p.bytes) * before / total);
    raw = raw / unit * unit;
    // Every chunk keeps at least one unit, those before it and those after it alike.
    const uint64_t lo = e[i - 1] + unit, hi = (p.bytes - (chunks - i) * unit) / unit * unit;
    e[i] = std::clamp(raw, lo, std::max(lo, hi));
  }
  return e;
}

std::string Plan::describe() const {
  std::string out;
  for (const PathPlan& p : paths) {
    if (!out.empty()) out += " + ";
    std::string name = path_kind_name(p.kind);
    if (p.kind != PathKind::Direct) name += std::to_string(p.via);
    double share = bytes ? 100.0 * static_cast<double>(p.bytes) / static_cast<double>(bytes) : 0;
    out += format("%s %.1f%% x%d", name.c_str(), share, p.chunks);
    if (p.taper_head) out += format("h%d", p.taper_head);
    if (p.taper_tail) out += format("t%d", p.taper_tail);
  }
  return out.empty() ? "(empty)" : out;
}

void Plan::check() const {
  uint64_t next = 0;
  GS_REQUIRE(!paths.empty() || bytes == 0, GPUSTRIPE_ERR_INTERNAL, "plan %d->%d of %llu bytes has no path", src, dst,
             static_cast<unsigned long long>(bytes));
  for (const PathPlan& p : paths) {
    GS_REQUIRE(p.offset == next, GPUSTRIPE_ERR_INTERNAL, "plan path at offset %llu leaves a gap or overlap at %llu",
               static_cast<unsigned long long>(p.offset), static_cast<unsigned long long>(next));
    GS_REQUIRE(p.chunks >= 1 && p.bytes >= static_cast<uint64_t>(p.chunks), GPUSTRIPE_ERR_INTERNAL,
               "plan path %s carries %llu bytes in %d chunks", path_kind_name(p.kind),
               static_cast<unsigned long long>(p.bytes), p.chunks);
    GS_REQUIRE(p.taper_head >= 0 && p.taper_tail >= 0 && p.taper_head <= kMaxTaper && p.taper_tail <= kMaxTaper &&
                   (p.taper_head + p.taper_tail == 0 || p.taper_head + p.taper_tail < p.chunks),
               GPUSTRIPE_ERR_INTERNAL, "plan path %s tapers %d+%d of its %d chunks (at most %d each, fewer than the chunks)",
               path_kind_name(p.kind), p.taper_head, p.taper_tail, p.chunks, kMaxTaper);
    GS_REQUIRE(p.kind == PathKind::Direct || p.via >= 0, GPUSTRIPE_ERR_INTERNAL, "staged path without a staging device");
    next += p.bytes;
  }
  GS_REQUIRE(next == bytes, GPUSTRIPE_ERR_INTERNAL, "plan covers %llu of %llu bytes",
             static_cast<unsigned long long>(next), static_cast<unsigned long long>(bytes));
}

}  // namespace gpustripe
