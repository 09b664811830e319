#include "model/plan.hpp"

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

std::string Plan::describe() const {
  std::string out;
  for (const PathPlan& p : paths) {
    if (!out.empty()) out += " + ";
    std::string name = path_kind_name(p.kind);
    if (p.kind != PathKind::Direct) name += std::to_string(p.via);
    double share = bytes ? 100.0 * static_cast<double>(p.bytes) / static_cast<double>(bytes) : 0;
    out += format("%s %.1f%% x%d", name.c_str(), share, p.chunks);
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
    GS_REQUIRE(p.kind == PathKind::Direct || p.via >= 0, GPUSTRIPE_ERR_INTERNAL, "staged path without a staging device");
    next += p.bytes;
  }
  GS_REQUIRE(next == bytes, GPUSTRIPE_ERR_INTERNAL, "plan covers %llu of %llu bytes",
             static_cast<unsigned long long>(next), static_cast<unsigned long long>(bytes));
}

}  // namespace gpustripe
