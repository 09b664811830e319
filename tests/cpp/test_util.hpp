// Shared helpers for the C++ tests.
#pragma once
#include <gtest/gtest.h>

#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "backend/backend.hpp"

// Sets an environment variable for one scope and restores the old value.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    const char* old = std::getenv(name);
    had_ = old != nullptr;
    if (had_) old_ = old;
    if (value) setenv(name, value, 1);
    else unsetenv(name);
  }
  ~ScopedEnv() {
    if (had_) setenv(name_.c_str(), old_.c_str(), 1);
    else unsetenv(name_.c_str());
  }

 private:
  std::string name_, old_;
  bool had_ = false;
};

// GPU tests run only where CUDA sees a device; elsewhere they are skipped, loudly.
#define GS_REQUIRE_GPU(n)                                                                         \
  do {                                                                                            \
    int have_ = ::gpustripe::cuda_device_count();                                                 \
    if (have_ < (n)) GTEST_SKIP() << "GPU test skipped: needs " << (n) << " CUDA GPU(s), found " << have_; \
  } while (0)

// For a test of the default node that uses devices 0..n-1: the emulated node (no GPU visible) has
// them; a machine with fewer GPUs skips it.
#define GS_REQUIRE_DEVICES(n)                                                                     \
  do {                                                                                            \
    int have_ = ::gpustripe::cuda_device_count();                                                 \
    if (have_ > 0 && have_ < (n)) GTEST_SKIP() << "needs " << (n) << " devices, this node has " << have_ << " GPU(s)"; \
  } while (0)

inline std::string source_path(const std::string& rel) { return std::string(GPUSTRIPE_SOURCE_DIR) + "/" + rel; }

// n bytes from a generator seeded with `seed`: data that differs per message and is known to
// the receiver without sending it.
inline std::vector<unsigned char> seeded_bytes(int seed, size_t n) {
  std::vector<unsigned char> v(n);
  std::mt19937 rng(static_cast<unsigned>(seed));
  for (auto& b : v) b = static_cast<unsigned char>(rng());
  return v;
}

// Blocking copies between host bytes and memory of device `dev` (a stream of its own).
inline void device_put(gpustripe::Backend& b, void* dst, int dev, const std::vector<unsigned char>& v) {
  gpustripe::StreamHandle s = b.create_stream(dev);
  b.copy_async(dst, dev, v.data(), gpustripe::kHostDevice, v.size(), s);
  b.synchronize_stream(s);
  b.destroy_stream(s);
}
inline std::vector<unsigned char> device_get(gpustripe::Backend& b, const void* src, int dev, size_t n) {
  std::vector<unsigned char> v(n);
  gpustripe::StreamHandle s = b.create_stream(dev);
  b.copy_async(v.data(), gpustripe::kHostDevice, src, dev, n, s);
  b.synchronize_stream(s);
  b.destroy_stream(s);
  return v;
}
