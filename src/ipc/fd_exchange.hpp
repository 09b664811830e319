// File descriptors of IPC handles, passed between the ranks of one channel.
//
// VMM memory (cuMemCreate) and cudaMallocAsync pools are shared by POSIX file
// descriptors (Backend::IpcKind VmmFd / PoolFd), and a descriptor cannot travel in the
// bytes of a channel record: the kernel must install it in the receiving process. Each
// rank therefore binds one Unix datagram socket in the abstract namespace, named by a
// random token it drew when it attached to the channel (Channel::socket_token), and
// descriptors go over it with SCM_RIGHTS; nothing is left in the file system, and a dead
// process's socket goes with it.
//
// Who may speak: the abstract namespace has no permissions and its names are listed in
// /proc/net/unix, so every datagram is checked against the kernel's credentials of its
// sender (SO_PASSCRED): our uid, and the pid the channel registered for the rank the
// datagram names; anything else is dropped with its descriptors (FdExchangeStats::refused).
// Who may listen: a name is unguessable (128 random bits, readable only in the owner-only
// channel segment) until its rank binds it, so no other process can take it first, and
// nothing is sent to a rank that left or died (its name may have been taken since).
//
// A VmmMulti handle (a buffer spanning several VMM allocations) travels as one datagram with
// every piece's descriptor (one SCM_RIGHTS message) and the layout.
//
// Protocol: the exporter offers the descriptor with the announcement of the buffer
// (before the channel record that names it goes out, so it is there when the importer
// looks), once per (importer, allocation or pool). The importer takes it when it maps
// the buffer; the mapping then holds the memory and the descriptor is closed. An
// importer that needs a descriptor again (its mapping was evicted, or it never got one)
// asks the exporter over the socket and bumps the exporter's counter in the channel
// (Channel::ask_for_fds), which the exporter's progress loop checks with one load
// (serve). Waiting for a descriptor is bounded by GPUSTRIPE_TIMEOUT and ends at once in
// ERR_PEER_FAILED when the exporter dies; a waiting rank answers the requests of others
// meanwhile, so two ranks mapping each other's buffers cannot deadlock.
#pragma once
#include <sys/socket.h>

#include <atomic>
#include <cstdint>
#include <deque>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "backend/backend.hpp"
#include "ipc/channel.hpp"

namespace gpustripe::ipc {

struct FdExchangeStats {
  uint64_t offered = 0;    // descriptors sent with an announcement
  uint64_t deferred = 0;   // offers the peer's full queue refused (it asks when it maps)
  uint64_t received = 0;   // descriptors that arrived
  uint64_t taken = 0;      // descriptors handed to ipc_open
  uint64_t requested = 0;  // descriptors this rank asked a peer for (it had none)
  uint64_t served = 0;     // requests of peers answered with a descriptor
  uint64_t refused = 0;    // datagrams from a process that is not the rank they name (dropped)
};

// What the importer gets for a handle: one descriptor (VmmFd, PoolFd), or one per piece and
// the layout (VmmMulti). The caller owns and closes the descriptors.
struct ReceivedFds {
  std::vector<int> fds;
  std::vector<Backend::IpcPiece> pieces;
};

class FdExchange {
 public:
  // Binds this rank's socket. A failure (no Unix sockets, name taken) leaves the exchange
  // disabled, logged once: fd-kind buffers then take the p2p stream path.
  FdExchange(Channel& channel, Backend& backend);
  ~FdExchange();  // closes the socket and the descriptors nobody took
  FdExchange(const FdExchange&) = delete;
  FdExchange& operator=(const FdExchange&) = delete;

  bool enabled() const { return sock_ >= 0; }
  // Exporter: makes sure rank `dst` can open `h` (no-op for Legacy handles and for what
  // `dst` was sent before). False when it cannot (this exchange is disabled, or dst has bound
  // no socket within 2 s: a peer without a backend): do not announce h then. Never waits for
  // a full queue (a peer busy elsewhere): the offer is dropped and dst asks when it maps h.
  bool offer(int dst, const Backend::IpcMemHandle& h);
  // Importer: the descriptor for `h` from rank `src`, owned by the caller. Asks src for it
  // when it is not here. Throws ERR_PEER_FAILED (src died or left), ERR_TIMEOUT, or
  // ERR_INVALID_POINTER (src says the memory is gone: freed while a message named it), or
  // ERR_IO (the descriptors did not fit in this process: its open-file limit).
  int take(int src, const Backend::IpcMemHandle& h);
  // The same for any fd kind: every descriptor of `h`, with the layout for VmmMulti (checked
  // against h: ERR_INVALID_ARGUMENT when the exporter sent another).
  ReceivedFds take_all(int src, const Backend::IpcMemHandle& h);
  // Exporter: answers peers' requests; one atomic load when there are none.
  void serve();
  FdExchangeStats stats() const;

 private:
  using Key = std::tuple<int, uint32_t, uint64_t>;  // (peer, kind, share id)
  struct Wire;
  // The name of rank's socket in the abstract namespace (without the leading NUL), from its
  // random token in the channel; empty while it has not attached.
  std::string socket_name(int rank) const;
  // Whether a received datagram (its SCM_CREDENTIALS) comes from the process of rank `from`.
  bool authentic(const msghdr& m, int from) const;
  void drain_locked();
  void serve_locked();
  // Sends one datagram (with `fd` unless -1) to `dst`, waiting (for a short grace) while its
  // socket is not bound yet, and while its queue is full when `wait_if_full`.
  enum class Sent { Yes, No, NotBound, Full };
  Sent send_locked(int dst, const Wire& w, const ReceivedFds& what, bool wait_if_full);
  void keep_locked(const Key& k, ReceivedFds got);
  void drop_oldest_locked();

  Channel& ch_;
  Backend& backend_;
  int sock_ = -1;
  mutable std::mutex mu_;
  std::atomic<uint32_t> requests_seen_{0};  // the channel counter when last served
  std::atomic<bool> has_pending_{false};    // requests read from the socket, not answered yet
  std::set<Key> sent_;                    // (dst, kind, share) offered already
  std::map<Key, ReceivedFds> inbox_;      // (src, kind, share) -> descriptors not taken yet
  size_t inbox_fds_ = 0;                  // descriptors held in inbox_
  std::deque<Key> inbox_order_;           // oldest first (the inbox is bounded)
  std::set<Key> gone_;                    // the exporter answered: freed
  std::set<Key> truncated_;               // descriptors that arrived cut short (open-file limit)
  std::deque<Backend::IpcMemHandle> pending_;  // peers' requests to answer
  std::deque<int> pending_from_;
  FdExchangeStats stats_;
};

}  // namespace gpustripe::ipc
