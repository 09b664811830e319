// The node-local out-of-band channel between the ranks of one job.
//
// One POSIX shared-memory segment per job holds a slot per rank (pid, state) and a
// single-producer/single-consumer byte ring per ordered pair of ranks. Why shared
// memory rather than Unix domain sockets: an eager message or a control record is
// one memcpy into the ring and one atomic store, with no system call on either
// side, which is what small-message latency needs; the ranks of a node already
// share memory for the host staging path. A dead peer is detected from its pid
// (kill(pid, 0) plus the zombie state in /proc) within milliseconds; a peer that
// is alive but silent ends in ERR_TIMEOUT after GPUSTRIPE_TIMEOUT (ipc/wait.hpp).
//
// Records are variable-length and never wrap: a record that does not fit before the
// end of the ring is preceded by a skip marker. Rings are lock-free: a record is published
// by its own length word (release), which the reader polls at its position, and the reader
// gives the space back through its tail (channel.cpp says why); each ring has one writer
// and one reader thread at a time.
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "ipc/shm_segment.hpp"

namespace gpustripe::ipc {

enum class PeerState { Absent, Alive, Left, Dead };
const char* peer_state_name(PeerState s);

class Channel {
 public:
  static constexpr int kMaxRanks = 256;
  static constexpr size_t kSocketTokenBytes = 16;

  // Creates the job's segment for `nranks` ranks with rings of `ring_bytes` (rounded
  // up to a power of two; 0: 256 KB). The creator may be a rank or not
  // (a test's parent process). Attach the ranks with Channel(open(name), rank).
  static ShmSegment create_segment(const std::string& name, int nranks, size_t ring_bytes = 0);

  // Attaches `rank` to a job segment; marks this process alive in its slot.
  Channel(ShmSegment segment, int rank);
  // Marks the rank as having left (a clean exit: peers waiting on it get a clear error).
  ~Channel();
  Channel(const Channel&) = delete;
  Channel& operator=(const Channel&) = delete;

  int rank() const { return rank_; }
  int size() const { return nranks_; }
  const std::string& name() const { return seg_.name(); }
  // Removes the segment's name once every rank has attached (see ShmSegment::unlink).
  void unlink() { seg_.unlink(); }
  // True once all ranks have attached.
  bool all_attached() const;
  // Waits (bounded by GPUSTRIPE_TIMEOUT) until all ranks have attached.
  void wait_all_attached();

  // The largest record try_send accepts (a quarter of the ring, so two always fit).
  size_t max_record() const { return ring_bytes_ / 4; }
  // Appends one record [header | payload] to the ring to `dst`; false when the ring
  // has no room now. Throws ERR_INVALID_SIZE when the record exceeds max_record().
  bool try_send(int dst, const void* header, size_t header_bytes, const void* payload, size_t payload_bytes);
  // The oldest unread record from `src`, or nullptr. Valid until consume(src).
  const void* peek(int src, size_t* bytes);
  void consume(int src);
  // Whether the ring from `src` holds a record not consumed yet: two loads, no lock, for a spin
  // that looks often and finds nothing most times (the consumer's own peek then reads it).
  bool arrived(int src) const;

  // The node's board of GPU-to-GPU copies in flight, so a rank planning a copy can
  // give the model the transfers other ranks run at the same time. publish returns a
  // slot to retire once the copy is done (-1 when the board is full: not listed).
  struct InFlight {
    int src_dev, dst_dev;
    uint64_t bytes;
  };
  int publish_transfer(int src_dev, int dst_dev, uint64_t bytes);
  void retire_transfer(int slot);
  // Copies in flight of the other live ranks.
  std::vector<InFlight> transfers_of_others() const;

  // File-descriptor requests (ipc/fd_exchange.hpp): a rank that asked rank `r` for a
  // descriptor over its socket bumps r's counter, so r's progress loop learns of it with one
  // load of shared memory instead of a system call per pass.
  void ask_for_fds(int r);
  uint32_t fd_requests() const;  // this rank's counter

  // The pid rank `r` attached with (0 while it has not attached). The descriptor exchange
  // accepts a datagram claiming to come from `r` only from this process.
  int pid_of(int r) const;
  // Rank `r`'s random token (hex; empty while it has not attached), drawn when it attached:
  // the name of its descriptor socket. Only processes that can read this segment know it.
  std::string socket_token(int r) const;

  PeerState peer_state(int r) const;
  // Throws ERR_PEER_FAILED naming the rank when it died, or when it has left and
  // `left_is_error` (we still wait for something from it).
  void check_peer(int r, bool left_is_error = true) const;
  // Checks every other rank for death.
  void check_all_peers() const;

 private:
  struct Header;
  struct RingCtl;
  struct BoardSlot;
  Header* header() const;
  RingCtl* ctl(int src, int dst) const;
  char* ring(int src, int dst) const;

  ShmSegment seg_;
  int rank_ = 0;
  int nranks_ = 0;
  size_t ring_bytes_ = 0;
  std::vector<uint64_t> tail_seen_;  // per destination: its consumer's tail as last read
};

// The usual way ranks of a node open their channel, given a launcher's collectives
// over the node's ranks: rank 0 creates the segment, `bcast` hands its name (a
// NUL-terminated string in a 128-byte buffer) to the others, they attach, and once
// `barrier` says all have, the name is removed.
std::unique_ptr<Channel> join_channel(int rank, int nranks, const std::function<void(char* name128)>& bcast,
                                      const std::function<void()>& barrier);

// Joins the channel named by a word the ranks agree on without a launcher (the C
// API): rank 0 creates "/gpustripe-<name>", the others retry opening it until it
// is there (bounded by GPUSTRIPE_TIMEOUT); returns once all ranks have attached,
// after rank 0 has removed the name.
std::unique_ptr<Channel> join_channel_by_name(const std::string& name, int rank, int nranks);

}  // namespace gpustripe::ipc
