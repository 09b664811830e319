#include "topology/nvml_loader.hpp"

#include <dlfcn.h>

#include <mutex>

#include "common/error.hpp"
#include "common/log.hpp"

namespace gpustripe::nvml {
namespace {

struct Loaded {
  Api api;
  bool ok = false;
  std::string why;
};

template <class F>
bool bind(void* lib, const char* name, F& fn, bool required, std::string& why) {
  fn = reinterpret_cast<F>(dlsym(lib, name));
  if (!fn && required) why = std::string("libnvidia-ml.so.1 lacks ") + name;
  return fn || !required;
}

Loaded load() {
  Loaded l;
  void* lib = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    l.why = std::string("cannot load libnvidia-ml.so.1: ") + dlerror();
    return l;
  }
  Return (*init)() = nullptr;
  Api& a = l.api;
  bool ok = bind(lib, "nvmlInit_v2", init, true, l.why) &&
            bind(lib, "nvmlDeviceGetHandleByPciBusId_v2", a.DeviceGetHandleByPciBusId_v2, true, l.why) &&
            bind(lib, "nvmlSystemGetDriverVersion", a.SystemGetDriverVersion, true, l.why) &&
            bind(lib, "nvmlDeviceGetNvLinkState", a.DeviceGetNvLinkState, true, l.why) &&
            bind(lib, "nvmlDeviceGetNvLinkVersion", a.DeviceGetNvLinkVersion, true, l.why) &&
            bind(lib, "nvmlDeviceGetNvLinkRemotePciInfo_v2", a.DeviceGetNvLinkRemotePciInfo_v2, true, l.why) &&
            bind(lib, "nvmlDeviceGetFieldValues", a.DeviceGetFieldValues, true, l.why) &&
            bind(lib, "nvmlDeviceGetMaxPcieLinkGeneration", a.DeviceGetMaxPcieLinkGeneration, true, l.why) &&
            bind(lib, "nvmlDeviceGetMaxPcieLinkWidth", a.DeviceGetMaxPcieLinkWidth, true, l.why) &&
            bind(lib, "nvmlDeviceGetCurrPcieLinkGeneration", a.DeviceGetCurrPcieLinkGeneration, true, l.why) &&
            bind(lib, "nvmlDeviceGetCurrPcieLinkWidth", a.DeviceGetCurrPcieLinkWidth, true, l.why) &&
            bind(lib, "nvmlErrorString", a.ErrorString, true, l.why) &&
            bind(lib, "nvmlDeviceGetNvLinkRemoteDeviceType", a.DeviceGetNvLinkRemoteDeviceType, false, l.why) &&
            bind(lib, "nvmlDeviceGetNumaNodeId", a.DeviceGetNumaNodeId, false, l.why);
  if (!ok) return l;
  Return r = init();
  if (r != kSuccess) {
    l.why = format("nvmlInit_v2 failed: %s", a.ErrorString(r));
    return l;
  }
  l.ok = true;
  return l;
}

}  // namespace

const Api* api(std::string* why) {
  static Loaded* loaded = nullptr;
  static std::once_flag once;
  std::call_once(once, [] {
    loaded = new Loaded(load());  // never freed: NVML stays initialised for the process
    if (loaded->ok) GS_LOG_DEBUG(Subsys::Topology, "NVML loaded");
  });
  if (why) *why = loaded->why;
  return loaded->ok ? &loaded->api : nullptr;
}

std::string error_string(Return r) {
  const Api* a = api();
  return a ? a->ErrorString(r) : format("NVML error %d", r);
}

}  // namespace gpustripe::nvml
