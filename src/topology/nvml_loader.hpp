// NVML, loaded at run time with dlopen("libnvidia-ml.so.1"), so the library runs
// on machines without the driver. There is no nvml.h here: the few types and
// functions used are declared below as nvml.h declares them (NVML's ABI is stable;
// NCCL's nvmlwrap does the same). Optional functions (newer drivers) may be null.
#pragma once
#include <string>

namespace gpustripe::nvml {

using Return = int;  // nvmlReturn_t
constexpr Return kSuccess = 0;
using Device = struct nvmlDevice_st*;

constexpr unsigned kMaxLinks = 18;  // NVML_NVLINK_MAX_LINKS
constexpr unsigned kFieldNvlinkSpeedMbpsCommon = 90;  // NVML_FI_DEV_NVLINK_SPEED_MBPS_COMMON
constexpr unsigned kFieldNvlinkLinkCount = 91;        // NVML_FI_DEV_NVLINK_LINK_COUNT
// nvmlIntNvLinkDeviceType_t
constexpr int kNvlinkDeviceGpu = 0x00, kNvlinkDeviceIbmNpu = 0x01, kNvlinkDeviceSwitch = 0x02;

struct PciInfo {  // nvmlPciInfo_t
  char bus_id_legacy[16];
  unsigned domain, bus, device, pci_device_id, pci_subsystem_id;
  char bus_id[32];
};

union Value {  // nvmlValue_t
  double d;
  unsigned int ui;
  unsigned long ul;
  unsigned long long ull;
  signed long long sll;
  signed int si;
  unsigned short us;
};

struct FieldValue {  // nvmlFieldValue_t
  unsigned field_id;
  unsigned scope_id;
  long long timestamp;
  long long latency_usec;
  int value_type;
  Return nvml_return;
  Value value;
};

struct Api {
  Return (*DeviceGetHandleByPciBusId_v2)(const char*, Device*) = nullptr;
  Return (*SystemGetDriverVersion)(char*, unsigned) = nullptr;
  Return (*DeviceGetNvLinkState)(Device, unsigned, int*) = nullptr;
  Return (*DeviceGetNvLinkVersion)(Device, unsigned, unsigned*) = nullptr;
  Return (*DeviceGetNvLinkRemotePciInfo_v2)(Device, unsigned, PciInfo*) = nullptr;
  Return (*DeviceGetNvLinkRemoteDeviceType)(Device, unsigned, int*) = nullptr;
  Return (*DeviceGetFieldValues)(Device, int, FieldValue*) = nullptr;
  Return (*DeviceGetMaxPcieLinkGeneration)(Device, unsigned*) = nullptr;
  Return (*DeviceGetMaxPcieLinkWidth)(Device, unsigned*) = nullptr;
  Return (*DeviceGetCurrPcieLinkGeneration)(Device, unsigned*) = nullptr;
  Return (*DeviceGetCurrPcieLinkWidth)(Device, unsigned*) = nullptr;
  Return (*DeviceGetNumaNodeId)(Device, unsigned*) = nullptr;  // optional: drivers since r535
  const char* (*ErrorString)(Return) = nullptr;
};

// The loaded and initialised API, or null with `why` saying what is missing.
// Loads once per process; never unloaded (NVML handles stay valid for the process).
const Api* api(std::string* why = nullptr);

// "NVML_ERROR_..." text of a return code (the code as a number when NVML is absent).
std::string error_string(Return r);

}  // namespace gpustripe::nvml
