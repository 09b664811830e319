#include "model/hop.hpp"

#include "common/error.hpp"

namespace gpustripe {

const char* hop_kind_name(HopKind kind) {
  switch (kind) {
    case HopKind::Peer: return "peer";
    case HopKind::D2H: return "d2h";
    case HopKind::H2D: return "h2d";
    case HopKind::Local: return "local";
    case HopKind::Kernel: return "kernel";
    case HopKind::Count: break;
  }
  return "?";
}

HopKind hop_kind_from_name(const std::string& name) {
  for (int k = 0; k < kHopKinds; ++k)
    if (name == hop_kind_name(static_cast<HopKind>(k))) return static_cast<HopKind>(k);
  GS_THROW(GPUSTRIPE_ERR_PROFILE, "unknown hop kind '%s' (peer, d2h, h2d, local, kernel)", name.c_str());
}

}  // namespace gpustripe
