// What the backend layer offers code above it that launches its own CUDA work (the
// collectives' kernels and stream memory operations): the driver's functions looked up at
// run time, as the CUDA backend looks up its own, so that nothing above the backend links
// libcuda or includes the CUDA backend's private headers (backend/cuda/).
#pragma once

namespace gpustripe {

// The driver function `name` of the CUDA 12.0 ABI (which every CUDA 12+ driver serves), or
// nullptr where the driver lacks it (defined in CUDA builds only); never throws,
// leaves no CUDA error behind.
void* driver_entry_point(const char* name) noexcept;

}  // namespace gpustripe
