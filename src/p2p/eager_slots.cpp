#include "p2p/eager_slots.hpp"

#include <sys/mman.h>

#include <atomic>
#include <cstring>

#include "common/error.hpp"
#include "common/log.hpp"

namespace gpustripe::p2p {
namespace {
// Layout: the header, the state words, then the slots from the first page boundary (the
// copies' alignment, and what registration pins).
constexpr uint32_t kMagic = 0x45534c54;  // "ESLT"
constexpr size_t kPage = 4096;
struct Header {
  uint32_t magic;
  uint32_t count;
  uint64_t slot_bytes;
};
constexpr size_t kStatesAt = 64;
constexpr uint32_t kMaxCount = (kPage - kStatesAt) / sizeof(uint32_t);

std::atomic<uint32_t>* states(void* base) {
  return reinterpret_cast<std::atomic<uint32_t>*>(static_cast<char*>(base) + kStatesAt);
}
char* slots(void* base) { return static_cast<char*>(base) + kPage; }
}  // namespace

EagerSlots::EagerSlots(ipc::Channel& channel, Backend* backend, uint64_t slot_bytes, int count)
    : ch_(channel),
      backend_(backend),
      slot_bytes_((slot_bytes + 63) / 64 * 64),
      count_(count),
      out_(channel.size()),
      in_(channel.size()),
      out_failed_(channel.size(), false) {
  GS_REQUIRE(slot_bytes > 0 && count > 0 && static_cast<uint32_t>(count) <= kMaxCount, GPUSTRIPE_ERR_INTERNAL,
             "eager slots: %d slots of %llu bytes (1..%u slots of at least a byte)", count,
             static_cast<unsigned long long>(slot_bytes), kMaxCount);
}

EagerSlots::~EagerSlots() {
  for (int p = 0; p < ch_.size(); ++p) {
    if (!out_[p]) continue;
    drop(*out_[p]);
    // A receiver alive may still read our last records and map the area then: the name is
    // its to remove (it does when it maps, or when it leaves without having mapped it).
    if (ch_.peer_state(p) == ipc::PeerState::Alive) out_[p]->seg.leave_name();
  }
  for (int p = 0; p < ch_.size(); ++p) {
    if (in_[p]) {
      drop(*in_[p]);
    } else if (p != ch_.rank()) {
      // An area a peer made for us that we never mapped (it died, or its first record was
      // never read): its name goes with us.
      shm_unlink(name(p, ch_.rank()).c_str());
    }
  }
}

void EagerSlots::drop(Area& a) {
  if (a.registered) {
    try {
      backend_->unregister_host(a.seg.data());
    } catch (const Error& e) {
      GS_LOG_WARN(Subsys::P2p, "rank %d: eager slots not unregistered: %s", ch_.rank(), e.what());
    }
    a.registered = false;
  }
}

std::string EagerSlots::name(int src, int dst) const {
  return ch_.name() + "-eager-" + std::to_string(src) + "-" + std::to_string(dst);
}

bool EagerSlots::create_outbound(int dst) {
  try {
    auto a = std::make_unique<Area>();
    a->count = static_cast<uint32_t>(count_);
    a->slot_bytes = slot_bytes_;
    const size_t bytes = kPage + (static_cast<size_t>(count_) * slot_bytes_ + kPage - 1) / kPage * kPage;
    a->seg = ipc::ShmSegment::create(name(ch_.rank(), dst), bytes);
    auto* h = static_cast<Header*>(a->seg.data());
    h->count = a->count;
    h->slot_bytes = a->slot_bytes;
    std::atomic_thread_fence(std::memory_order_release);
    h->magic = kMagic;  // the receiver maps it only after a record naming a slot, later still
    // Registered, the device's copies into the slots are DMA from and to pinned pages; where
    // the backend cannot register, they still work, through the driver's staged copies.
    a->registered = backend_ && backend_->register_host(a->seg.data(), a->seg.size()) != nullptr;
    out_[dst] = std::move(a);
    return true;
  } catch (const Error& e) {
    GS_LOG_WARN(Subsys::P2p, "rank %d: no eager slots to rank %d (%s): small device messages to it go through "
                "bounce buffers", ch_.rank(), dst, e.what());
    return false;
  }
}

int EagerSlots::acquire(int dst) {
  if (!out_[dst]) {
    if (out_failed_[dst]) return -1;
    if (!create_outbound(dst)) {
      out_failed_[dst] = true;
      return -1;
    }
  }
  Area& a = *out_[dst];
  std::atomic<uint32_t>* st = states(a.seg.data());
  for (uint32_t i = 0; i < a.count; ++i) {
    const uint32_t s = (a.next + i) % a.count;
    // Acquire: the receiver's copy out of the slot happened before it wrote 0.
    if (st[s].load(std::memory_order_acquire) == 0) {
      st[s].store(1, std::memory_order_relaxed);
      a.next = (s + 1) % a.count;
      ++taken_;
      return static_cast<int>(s);
    }
  }
  return -1;
}

char* EagerSlots::outbound(int dst, int slot) const {
  return slots(out_[dst]->seg.data()) + static_cast<size_t>(slot) * out_[dst]->slot_bytes;
}

void EagerSlots::open_inbound(int src) {
  auto a = std::make_unique<Area>();
  const std::string n = name(src, ch_.rank());
  a->seg = ipc::ShmSegment::open(n);
  shm_unlink(n.c_str());  // both ends have it mapped now: a crash leaves nothing behind
  const auto* h = static_cast<const Header*>(a->seg.data());
  GS_REQUIRE(a->seg.size() >= kPage && h->magic == kMagic && h->count > 0 && h->count <= kMaxCount &&
                 h->slot_bytes > 0 && h->slot_bytes <= (a->seg.size() - kPage) / h->count,
             GPUSTRIPE_ERR_INTERNAL, "rank %d: rank %d's eager slots %s are not laid out as slots", ch_.rank(), src,
             n.c_str());
  std::atomic_thread_fence(std::memory_order_acquire);
  a->count = h->count;
  a->slot_bytes = h->slot_bytes;
  a->registered = backend_ && backend_->register_host(a->seg.data(), a->seg.size()) != nullptr;
  in_[src] = std::move(a);
}

const char* EagerSlots::inbound(int src, int slot, uint64_t bytes) {
  if (!in_[src]) open_inbound(src);
  Area& a = *in_[src];
  GS_REQUIRE(slot >= 0 && static_cast<uint32_t>(slot) < a.count && bytes <= a.slot_bytes, GPUSTRIPE_ERR_INTERNAL,
             "rank %d: rank %d names eager slot %d of %llu bytes; its area has %u slots of %llu", ch_.rank(), src, slot,
             static_cast<unsigned long long>(bytes), a.count, static_cast<unsigned long long>(a.slot_bytes));
  return slots(a.seg.data()) + static_cast<size_t>(slot) * a.slot_bytes;
}

void EagerSlots::release(int src, int slot) {
  states(in_[src]->seg.data())[slot].store(0, std::memory_order_release);
}

int EagerSlots::held(int dst) const {
  if (!out_[dst]) return 0;
  const std::atomic<uint32_t>* st = states(out_[dst]->seg.data());
  int n = 0;
  for (uint32_t i = 0; i < out_[dst]->count; ++i) n += st[i].load(std::memory_order_acquire) != 0;
  return n;
}

}  // namespace gpustripe::p2p
