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

inline std::string source_path(const std::string& rel) { return std::string(GPUSTRIPE_SOURCE_DIR) + "/" + rel; }

// n bytes from a generator seeded with `seed`: data that differs per message and is known to
// the receiver without sending it.
inline std::vector<unsigned char> seeded_bytes(int seed, size_t n) {
  std::vector<unsigned char> v(n);
  std::mt19937 rng(static_cast<unsigned>(seed));
  for (auto& b : v) b = static_cast<unsigned char>(rng());
  return v;
}
