#include "mpi/coll_staging.hpp"

#include <algorithm>
#include <cstring>
#include <string>

#include "common/error.hpp"
#include "common/log.hpp"

namespace gpustripe::mpi {

TeamStaging::~TeamStaging() {
  try {
    drop();
  } catch (const Error& e) {
    GS_LOG_WARN(Subsys::Mpi, "releasing the collectives' shared host staging: %s", e.what());
  }
}

void TeamStaging::drop() {
  if (registered_) {
    registered_ = false;
    backend_.unregister_host(seg_.data());
  }
  seg_ = ipc::ShmSegment{};
}

void TeamStaging::grow(size_t bytes) {
  GS_REQUIRE(owner_, GPUSTRIPE_ERR_INTERNAL, "shared host staging: only its owner grows it");
  if (bytes <= this->bytes()) return;
  // Geometric, as the device scratch: a sweep of sizes replaces it a few times, not every call.
  size_t n = std::max<size_t>(this->bytes(), size_t(1) << 20);
  while (n < bytes) n *= 2;
  drop();
  seg_ = ipc::ShmSegment::create(ipc::unique_shm_name("collhost"), n);
  ++generation_;
  pin();
  GS_LOG_DEBUG(Subsys::Mpi, "shared host staging %s: %zu bytes (generation %llu)", seg_.name().c_str(), n,
               static_cast<unsigned long long>(generation_));
}

void TeamStaging::follow(const Note& owner) {
  GS_REQUIRE(!owner_, GPUSTRIPE_ERR_INTERNAL, "shared host staging: its owner follows nobody");
  if (owner.generation == 0 || owner.generation == generation_) return;
  const std::string name(owner.name, strnlen(owner.name, sizeof owner.name));
  drop();
  generation_ = 0;
  seg_ = ipc::ShmSegment::open(name);
  GS_REQUIRE(seg_.size() >= owner.bytes, GPUSTRIPE_ERR_INTERNAL,
             "shared host staging %s: %zu bytes mapped, its owner made %llu", name.c_str(), seg_.size(),
             static_cast<unsigned long long>(owner.bytes));
  generation_ = owner.generation;
  pin();
}

void TeamStaging::pin() {
  registered_ = backend_.register_host(seg_.data(), seg_.size()) != nullptr;
  if (!registered_)
    GS_LOG_INFO(Subsys::Mpi, "shared host staging of %zu bytes is not pinned for the GPUs here: its copies run from "
                "pageable memory", seg_.size());
}

TeamStaging::Note TeamStaging::note() const {
  Note n;
  if (owner_ && generation_ != 0) {
    std::strncpy(n.name, seg_.name().c_str(), sizeof n.name - 1);
    n.bytes = bytes();
    n.generation = generation_;
  }
  n.seen = generation_;
  return n;
}

}  // namespace gpustripe::mpi
