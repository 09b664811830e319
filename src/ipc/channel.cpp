#include "ipc/channel.hpp"

#include <sys/random.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>

#include "common/error.hpp"
#include "common/log.hpp"
#include "common/shm_reclaim.hpp"
#include "ipc/liveness.hpp"
#include "ipc/wait.hpp"

namespace gpustripe::ipc {
namespace {

// Bytes of each per-pair ring (eager messages and control records; a record may use a quarter
// of it): a 16 KB eager message fits with room for the records queued beside it.
constexpr uint64_t kRingBytes = 256 << 10;

constexpr uint64_t kMagic = 0x6770737472697065ull;  // "gpstripe"
constexpr uint32_t kVersion = 7;  // 4: fd_requests in the rank slots; 5: socket tokens; 6: board slots without retire
                                  // times; 7: records published by their own length word
constexpr int kBoardSlots = 1024;
constexpr uint64_t kSkip = ~0ull;  // record length marking "continue at the ring's start"
constexpr size_t kAlign = 64;

enum : uint32_t { kAbsent = 0, kAlive = 1, kLeft = 2 };

size_t round_up(size_t v, size_t a) { return (v + a - 1) / a * a; }

size_t pow2_at_least(size_t v) {
  size_t p = 4096;
  while (p < v) p <<= 1;
  return p;
}

}  // namespace

struct alignas(kAlign) RankSlot {
  std::atomic<int32_t> pid;
  std::atomic<uint32_t> state;
  std::atomic<uint32_t> fd_requests;  // bumped by a rank that asked this one for a file descriptor
  uint8_t socket_token[Channel::kSocketTokenBytes];  // random, written before state turns alive
};

struct Channel::BoardSlot {
  std::atomic<uint32_t> state;  // 0 free, 1 being written, 2 published
  int32_t owner;                // rank
  int32_t src_dev, dst_dev;
  uint64_t bytes;
};

struct Channel::Header {
  uint64_t magic;
  uint32_t version;
  uint32_t nranks;
  uint64_t ring_bytes;
  uint64_t rings_offset;  // from the segment start: nranks^2 RingCtl, then the ring bytes
  uint64_t data_offset;
  RankSlot ranks[kMaxRanks];
  BoardSlot board[kBoardSlots];
};

// A ring's records are published by their own first word (the record's length, or kSkip): the
// consumer polls the word at its position, so a record arriving costs it one cache line from the
// producer (the word and a small record's bytes share it) instead of a head counter's line and
// then the record's. The word at the producer's next position is always zero (written before the
// record that precedes it is published; the segment starts zeroed), so what the consumer reads
// there is either zero or a record published whole -- never stale bytes of an earlier lap. The
// producer reads the consumer's tail only when the tail it saw last leaves too little room.
struct Channel::RingCtl {
  alignas(kAlign) std::atomic<uint64_t> head;  // bytes written, ever (producer; only it reads it)
  alignas(kAlign) std::atomic<uint64_t> tail;  // bytes consumed, ever (consumer)
};

namespace {
std::atomic<uint64_t>& word_at(char* p) { return *reinterpret_cast<std::atomic<uint64_t>*>(p); }
}  // namespace

static_assert(std::atomic<uint64_t>::is_always_lock_free, "shared-memory rings need lock-free 64-bit atomics");

const char* peer_state_name(PeerState s) {
  switch (s) {
    case PeerState::Absent: return "not attached";
    case PeerState::Alive: return "alive";
    case PeerState::Left: return "finalized";
    case PeerState::Dead: return "dead";
  }
  return "?";
}

ShmSegment Channel::create_segment(const std::string& name, int nranks, size_t ring_bytes) {
  GS_REQUIRE(nranks >= 1 && nranks <= kMaxRanks, GPUSTRIPE_ERR_INVALID_ARGUMENT,
             "channel '%s': %d ranks (1..%d supported)", name.c_str(), nranks, kMaxRanks);
  if (ring_bytes == 0) ring_bytes = kRingBytes;
  ring_bytes = pow2_at_least(ring_bytes);
  size_t pairs = static_cast<size_t>(nranks) * nranks;
  size_t rings_off = round_up(sizeof(Header), 4096);
  size_t data_off = round_up(rings_off + pairs * sizeof(RingCtl), 4096);
  size_t total = data_off + pairs * ring_bytes;
  ShmSegment seg = ShmSegment::create(name, total);  // zero-filled: all slots absent, rings empty
  auto* h = static_cast<Header*>(seg.data());
  h->version = kVersion;
  h->nranks = static_cast<uint32_t>(nranks);
  h->ring_bytes = ring_bytes;
  h->rings_offset = rings_off;
  h->data_offset = data_off;
  std::atomic_thread_fence(std::memory_order_release);
  reinterpret_cast<std::atomic<uint64_t>*>(&h->magic)->store(kMagic, std::memory_order_release);
  GS_LOG_DEBUG(Subsys::Ipc, "channel %s: %d ranks, %zu-byte rings, %zu bytes", name.c_str(), nranks, ring_bytes,
               total);
  return seg;
}

Channel::Channel(ShmSegment segment, int rank) : seg_(std::move(segment)), rank_(rank) {
  auto* h = header();
  GS_REQUIRE(seg_.size() >= sizeof(Header) &&
                 reinterpret_cast<std::atomic<uint64_t>*>(&h->magic)->load(std::memory_order_acquire) == kMagic &&
                 h->version == kVersion,
             GPUSTRIPE_ERR_IO, "shared memory '%s' is not (yet) a gpustripe channel of version %u",
             seg_.name().c_str(), kVersion);
  nranks_ = static_cast<int>(h->nranks);
  ring_bytes_ = h->ring_bytes;
  tail_seen_.resize(static_cast<size_t>(nranks_), 0);
  GS_REQUIRE(rank >= 0 && rank < nranks_, GPUSTRIPE_ERR_INVALID_ARGUMENT, "channel '%s': rank %d of %d ranks",
             seg_.name().c_str(), rank, nranks_);
  RankSlot& slot = h->ranks[rank];
  uint32_t was = slot.state.load(std::memory_order_acquire);
  GS_REQUIRE(was == kAbsent, GPUSTRIPE_ERR_INVALID_ARGUMENT, "channel '%s': rank %d is already attached (pid %d)",
             seg_.name().c_str(), rank, slot.pid.load());
  // The token names this rank's descriptor socket (ipc/fd_exchange.hpp). It must be
  // unguessable: only processes that can read this (owner-only) segment learn it before the
  // socket is bound, so no other user can bind the name first and receive our descriptors.
  size_t got = 0;
  while (got < sizeof slot.socket_token) {
    ssize_t n = getrandom(slot.socket_token + got, sizeof slot.socket_token - got, 0);
    GS_REQUIRE(n > 0 || errno == EINTR, GPUSTRIPE_ERR_IO, "channel '%s': getrandom failed: %s", seg_.name().c_str(),
               strerror(errno));
    if (n > 0) got += static_cast<size_t>(n);
  }
  slot.pid.store(static_cast<int32_t>(getpid()), std::memory_order_relaxed);
  slot.state.store(kAlive, std::memory_order_release);
}

Channel::~Channel() {
  if (seg_.data()) header()->ranks[rank_].state.store(kLeft, std::memory_order_release);
}

Channel::Header* Channel::header() const { return static_cast<Header*>(seg_.data()); }

Channel::RingCtl* Channel::ctl(int src, int dst) const {
  auto* base = static_cast<char*>(seg_.data()) + header()->rings_offset;
  return reinterpret_cast<RingCtl*>(base) + (static_cast<size_t>(src) * nranks_ + dst);
}

char* Channel::ring(int src, int dst) const {
  return static_cast<char*>(seg_.data()) + header()->data_offset +
         (static_cast<size_t>(src) * nranks_ + dst) * ring_bytes_;
}

bool Channel::all_attached() const {
  for (int r = 0; r < nranks_; ++r)
    if (header()->ranks[r].state.load(std::memory_order_acquire) == kAbsent) return false;
  return true;
}

void Channel::wait_all_attached() {
  Waiter w(format("channel %s: waiting for all %d ranks to attach", seg_.name().c_str(), nranks_),
           [this] { check_all_peers(); });
  while (!all_attached()) w.pause();
}

bool Channel::try_send(int dst, const void* hdr, size_t hdr_bytes, const void* payload, size_t payload_bytes) {
  GS_REQUIRE(dst >= 0 && dst < nranks_ && dst != rank_, GPUSTRIPE_ERR_INVALID_ARGUMENT,
             "channel send to rank %d (this is rank %d of %d)", dst, rank_, nranks_);
  size_t rec = round_up(sizeof(uint64_t) + hdr_bytes + payload_bytes, 8);
  GS_REQUIRE(rec <= max_record(), GPUSTRIPE_ERR_INVALID_SIZE, "channel record of %zu bytes exceeds %zu", rec,
             max_record());
  RingCtl* c = ctl(rank_, dst);
  char* data = ring(rank_, dst);
  uint64_t head = c->head.load(std::memory_order_relaxed);
  size_t pos = head & (ring_bytes_ - 1);
  size_t to_end = ring_bytes_ - pos;
  // The record and the zero word after it fit before the end, or a skip goes first.
  const bool wrap = rec + sizeof(uint64_t) > to_end;
  const size_t need = (wrap ? to_end : 0) + rec + sizeof(uint64_t);
  uint64_t& seen = tail_seen_[dst];
  if (ring_bytes_ - (head - seen) < need) {
    seen = c->tail.load(std::memory_order_acquire);
    if (ring_bytes_ - (head - seen) < need) return false;
  }
  const size_t at = wrap ? 0 : pos;
  uint64_t len = sizeof(uint64_t) + hdr_bytes + payload_bytes;
  std::memcpy(data + at + sizeof len, hdr, hdr_bytes);
  if (payload_bytes) std::memcpy(data + at + sizeof len + hdr_bytes, payload, payload_bytes);
  word_at(data + at + rec).store(0, std::memory_order_relaxed);
  // Published last: the zero after it and its bytes are visible before its word is.
  word_at(data + at).store(len, std::memory_order_release);
  if (wrap) word_at(data + pos).store(kSkip, std::memory_order_release);  // after the record at the start
  c->head.store(head + (wrap ? to_end : 0) + rec, std::memory_order_relaxed);
  return true;
}

const void* Channel::peek(int src, size_t* bytes) {
  RingCtl* c = ctl(src, rank_);
  char* data = ring(src, rank_);
  uint64_t tail = c->tail.load(std::memory_order_relaxed);
  size_t pos = tail & (ring_bytes_ - 1);
  uint64_t len = word_at(data + pos).load(std::memory_order_acquire);
  if (len == 0) return nullptr;
  if (len == kSkip) {
    tail += ring_bytes_ - pos;
    c->tail.store(tail, std::memory_order_release);
    pos = 0;
    len = word_at(data).load(std::memory_order_acquire);  // published before the skip
    if (len == 0) return nullptr;
  }
  *bytes = len - sizeof(uint64_t);
  return data + pos + sizeof(uint64_t);
}

bool Channel::arrived(int src) const {
  const RingCtl* c = ctl(src, rank_);
  const uint64_t tail = c->tail.load(std::memory_order_relaxed);
  return word_at(ring(src, rank_) + (tail & (ring_bytes_ - 1))).load(std::memory_order_acquire) != 0;
}

void Channel::consume(int src) {
  RingCtl* c = ctl(src, rank_);
  char* data = ring(src, rank_);
  uint64_t tail = c->tail.load(std::memory_order_relaxed);
  size_t pos = tail & (ring_bytes_ - 1);
  uint64_t len = word_at(data + pos).load(std::memory_order_relaxed);
  c->tail.store(tail + round_up(len, 8), std::memory_order_release);
}

int Channel::publish_transfer(int src_dev, int dst_dev, uint64_t bytes) {
  for (int i = 0; i < kBoardSlots; ++i) {
    BoardSlot& b = header()->board[i];
    // Looked at before the compare-exchange: a failed one still takes the slot's cache line
    // from every other process reading the board, and a board of taken slots made each
    // publish ~1000 of them (tens of microseconds per copy, both ranks' scans missing too).
    if (b.state.load(std::memory_order_relaxed) != 0) continue;
    uint32_t expect = 0;
    if (!b.state.compare_exchange_strong(expect, 1, std::memory_order_acquire)) continue;
    b.owner = rank_;
    b.src_dev = src_dev;
    b.dst_dev = dst_dev;
    b.bytes = bytes;
    b.state.store(2, std::memory_order_release);
    return i;
  }
  return -1;
}

void Channel::retire_transfer(int slot) {
  if (slot < 0 || slot >= kBoardSlots) return;
  BoardSlot& b = header()->board[slot];
  b.state.store(0, std::memory_order_release);
}

std::vector<Channel::InFlight> Channel::transfers_of_others() const {
  std::vector<InFlight> out;
  for (int i = 0; i < kBoardSlots; ++i) {
    const BoardSlot& b = header()->board[i];
    if (b.state.load(std::memory_order_acquire) != 2) continue;
    InFlight t{b.src_dev, b.dst_dev, b.bytes};
    int owner = b.owner;
    // Read again: a slot taken over meanwhile is skipped, not read half old, half new.
    if (b.state.load(std::memory_order_acquire) != 2 || owner == rank_ || owner < 0 || owner >= nranks_) continue;
    // Entries of a rank that died or left are stale, not traffic.
    if (header()->ranks[owner].state.load(std::memory_order_acquire) != kAlive) continue;
    out.push_back(t);
  }
  return out;
}

void Channel::ask_for_fds(int r) {
  GS_REQUIRE(r >= 0 && r < nranks_, GPUSTRIPE_ERR_INVALID_ARGUMENT, "channel: rank %d of %d ranks", r, nranks_);
  header()->ranks[r].fd_requests.fetch_add(1, std::memory_order_release);
}

uint32_t Channel::fd_requests() const { return header()->ranks[rank_].fd_requests.load(std::memory_order_acquire); }

int Channel::pid_of(int r) const {
  GS_REQUIRE(r >= 0 && r < nranks_, GPUSTRIPE_ERR_INVALID_ARGUMENT, "channel: rank %d of %d ranks", r, nranks_);
  const RankSlot& s = header()->ranks[r];
  if (s.state.load(std::memory_order_acquire) == kAbsent) return 0;
  return s.pid.load(std::memory_order_relaxed);
}

std::string Channel::socket_token(int r) const {
  GS_REQUIRE(r >= 0 && r < nranks_, GPUSTRIPE_ERR_INVALID_ARGUMENT, "channel: rank %d of %d ranks", r, nranks_);
  const RankSlot& s = header()->ranks[r];
  if (s.state.load(std::memory_order_acquire) == kAbsent) return {};
  static const char* hex = "0123456789abcdef";
  std::string t;
  for (uint8_t b : s.socket_token) {
    t += hex[b >> 4];
    t += hex[b & 15];
  }
  return t;
}

PeerState Channel::peer_state(int r) const {
  const RankSlot& s = header()->ranks[r];
  switch (s.state.load(std::memory_order_acquire)) {
    case kAbsent: return PeerState::Absent;
    case kLeft: return PeerState::Left;
    default: return process_alive(s.pid.load(std::memory_order_relaxed)) ? PeerState::Alive : PeerState::Dead;
  }
}

void Channel::check_peer(int r, bool left_is_error) const {
  PeerState st = peer_state(r);
  if (st == PeerState::Dead)
    GS_THROW(GPUSTRIPE_ERR_PEER_FAILED, "rank %d (pid %d) died", r, header()->ranks[r].pid.load());
  if (st == PeerState::Left && left_is_error)
    GS_THROW(GPUSTRIPE_ERR_PEER_FAILED, "rank %d (pid %d) has finalized while rank %d still waits for it", r,
             header()->ranks[r].pid.load(), rank_);
}

void Channel::check_all_peers() const {
  for (int r = 0; r < nranks_; ++r)
    if (r != rank_) check_peer(r, false);
}

std::unique_ptr<Channel> join_channel(int rank, int nranks, const std::function<void(char* name128)>& bcast,
                                      const std::function<void()>& barrier) {
  reclaim_dead_segments_once();  // what a killed job of this user left behind
  char name[128] = {};
  ShmSegment seg;
  if (rank == 0) {
    std::string n = unique_shm_name("job");
    seg = Channel::create_segment(n, nranks);
    std::strncpy(name, n.c_str(), sizeof name - 1);
  }
  bcast(name);
  if (rank != 0) seg = ShmSegment::open(name);
  auto ch = std::make_unique<Channel>(std::move(seg), rank);
  barrier();
  if (rank == 0) ch->unlink();  // a crashed job leaves nothing in /dev/shm
  return ch;
}

std::unique_ptr<Channel> join_channel_by_name(const std::string& name, int rank, int nranks) {
  GS_REQUIRE(!name.empty() && name.find('/') == std::string::npos && name.size() < 200, GPUSTRIPE_ERR_INVALID_ARGUMENT,
             "channel name '%s': one word without '/', under 200 characters", name.c_str());
  GS_REQUIRE(nranks >= 1 && nranks <= Channel::kMaxRanks && rank >= 0 && rank < nranks,
             GPUSTRIPE_ERR_INVALID_ARGUMENT, "channel '%s': rank %d of %d ranks", name.c_str(), rank, nranks);
  std::string full = "/gpustripe-" + name;
  std::unique_ptr<Channel> ch;
  if (rank == 0) {
    ch = std::make_unique<Channel>(Channel::create_segment(full, nranks), 0);
  } else {
    // Rank 0 may not have created (or finished initialising) the segment yet.
    Waiter w(format("channel %s: rank %d waiting for rank 0 to create it", full.c_str(), rank));
    for (;;) {
      try {
        ch = std::make_unique<Channel>(ShmSegment::open(full), rank);
        break;
      } catch (const Error& e) {
        if (e.status() != GPUSTRIPE_ERR_IO) throw;
      }
      w.pause();
    }
    GS_REQUIRE(ch->size() == nranks, GPUSTRIPE_ERR_INVALID_ARGUMENT,
               "channel %s has %d ranks, rank %d was told %d", full.c_str(), ch->size(), rank, nranks);
  }
  ch->wait_all_attached();
  if (rank == 0) ch->unlink();
  return ch;
}

}  // namespace gpustripe::ipc
