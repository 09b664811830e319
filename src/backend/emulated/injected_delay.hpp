// Delays injected into emulated streams so tests see what real GPUs do: work on
// different streams completing in any order, and copies that take time.
//   GPUSTRIPE_TEST emu_jitter_us=N  random 0..N us sleep before each operation
//   GPUSTRIPE_TEST emu_gbps=X       bandwidth of one copy in GB/s (0: memcpy speed)
// Read when the backend is made.
#pragma once
#include <cstddef>
#include <cstdint>

namespace gpustripe::emu {

class InjectedDelay {
 public:
  static InjectedDelay from_settings();
  InjectedDelay(int64_t jitter_us, double gbps) : jitter_us_(jitter_us), gbps_(gbps) {}

  // Sleeps a random 0..jitter_us microseconds (nothing when jitter is 0).
  void jitter() const;
  // memmove, then paced to the configured bandwidth.
  void copy(void* dst, const void* src, size_t bytes) const;
  void fill(void* dst, int value, size_t bytes) const;

  int64_t jitter_us() const { return jitter_us_; }
  double gbps() const { return gbps_; }

 private:
  void pace(size_t bytes, double started_s) const;
  int64_t jitter_us_;
  double gbps_;
};

}  // namespace gpustripe::emu
