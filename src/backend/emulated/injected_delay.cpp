#include "backend/emulated/injected_delay.hpp"

#include <chrono>
#include <cstring>
#include <random>
#include <thread>

#include "common/config.hpp"
#include "common/error.hpp"

namespace gpustripe::emu {
namespace {

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

}  // namespace

InjectedDelay InjectedDelay::from_settings() {
  const int64_t jitter = parse_int(test_hook("emu_jitter_us", "0"), "GPUSTRIPE_TEST emu_jitter_us");
  const double gbps = parse_double(test_hook("emu_gbps", "0"), "GPUSTRIPE_TEST emu_gbps");
  GS_REQUIRE(jitter >= 0, GPUSTRIPE_ERR_CONFIG, "GPUSTRIPE_TEST emu_jitter_us: %lld is negative",
             static_cast<long long>(jitter));
  GS_REQUIRE(gbps >= 0, GPUSTRIPE_ERR_CONFIG, "GPUSTRIPE_TEST emu_gbps: %g is negative", gbps);
  return InjectedDelay(jitter, gbps);
}

void InjectedDelay::jitter() const {
  if (jitter_us_ <= 0) return;
  thread_local std::mt19937_64 rng{std::random_device{}()};
  std::uniform_int_distribution<int64_t> dist(0, jitter_us_);
  std::this_thread::sleep_for(std::chrono::microseconds(dist(rng)));
}

void InjectedDelay::pace(size_t bytes, double started_s) const {
  if (gbps_ <= 0) return;
  double until = started_s + static_cast<double>(bytes) / (gbps_ * 1e9);
  double left = until - now_s();
  if (left > 0) std::this_thread::sleep_for(std::chrono::duration<double>(left));
}

void InjectedDelay::copy(void* dst, const void* src, size_t bytes) const {
  double t0 = gbps_ > 0 ? now_s() : 0;
  std::memmove(dst, src, bytes);
  pace(bytes, t0);
}

void InjectedDelay::fill(void* dst, int value, size_t bytes) const {
  double t0 = gbps_ > 0 ? now_s() : 0;
  std::memset(dst, value, bytes);
  pace(bytes, t0);
}

}  // namespace gpustripe::emu
