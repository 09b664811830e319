#include "backend/emulated/pointer_table.hpp"

#include <sys/random.h>
#include <unistd.h>

#include <atomic>
#include <mutex>

namespace gpustripe::emu {

namespace {

// The high half of this process's buffer ids, random: an id is not to be guessed from the
// pid by another process (as CUDA's are not meant to be relied on for that either).
uint32_t random_id_prefix() {
  uint32_t r = 0;
  while (r == 0)
    if (getrandom(&r, sizeof r, 0) != static_cast<ssize_t>(sizeof r)) r = static_cast<uint32_t>(getpid());
  return r;
}

}  // namespace

uint64_t next_buffer_id() {
  static const uint64_t prefix = static_cast<uint64_t>(random_id_prefix()) << 32;
  static std::atomic<uint64_t> counter{0};
  return prefix | ((counter.fetch_add(1) + 1) & 0xffffffffull);
}

void PointerTable::insert(const Allocation& a) {
  std::unique_lock lock(mu_);
  by_base_[a.base] = a;
}

std::optional<Allocation> PointerTable::find(const void* p) const {
  uintptr_t u = reinterpret_cast<uintptr_t>(p);
  std::shared_lock lock(mu_);
  auto it = by_base_.upper_bound(u);
  if (it == by_base_.begin()) return std::nullopt;
  --it;
  if (u - it->second.base >= it->second.size) return std::nullopt;
  return it->second;
}

std::optional<Allocation> PointerTable::find_base(const void* p) const {
  std::shared_lock lock(mu_);
  auto it = by_base_.find(reinterpret_cast<uintptr_t>(p));
  if (it == by_base_.end()) return std::nullopt;
  return it->second;
}

void PointerTable::erase(const void* base) {
  std::unique_lock lock(mu_);
  by_base_.erase(reinterpret_cast<uintptr_t>(base));
}

int PointerTable::add_open(const void* base, int delta) {
  std::unique_lock lock(mu_);
  auto it = by_base_.find(reinterpret_cast<uintptr_t>(base));
  if (it == by_base_.end()) return 0;
  return it->second.open_count += delta;
}

std::vector<Allocation> PointerTable::take_all() {
  std::unique_lock lock(mu_);
  std::vector<Allocation> all;
  for (auto& [base, a] : by_base_) all.push_back(std::move(a));
  by_base_.clear();
  return all;
}

}  // namespace gpustripe::emu
