#include "ipc/fd_exchange.hpp"

#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>

#include "common/error.hpp"
#include "common/log.hpp"
#include "ipc/wait.hpp"

namespace gpustripe::ipc {
namespace {

constexpr uint32_t kMagic = 0x67736664;  // "gsfd"
enum : uint32_t { kFd = 1, kRequest = 2, kGone = 3 };
constexpr size_t kInboxMax = 64;     // handles received and not taken yet (each holds the peer's memory)
constexpr size_t kInboxFdsMax = 256;  // their descriptors (a vmm-multi handle brings up to kMaxIpcPieces)
constexpr size_t kSentMax = 1 << 14;  // offers remembered; past it they are sent again (harmless)
// How long a peer's socket may be missing before we stop waiting for it: a peer just
// starting binds within milliseconds; one without a backend (host memory only) never does.
constexpr double kNotBoundGraceS = 2.0;

sockaddr_un address(const std::string& name, socklen_t* len) {
  sockaddr_un a{};
  a.sun_family = AF_UNIX;
  // Abstract namespace: a leading NUL, no file, gone with the last process holding it.
  size_t n = std::min(name.size(), sizeof a.sun_path - 1);
  std::memcpy(a.sun_path + 1, name.data(), n);
  *len = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + n);
  return a;
}

const char* kind_word(uint32_t kind) { return ipc_kind_name(static_cast<Backend::IpcKind>(kind)); }
template <typename K>
uint32_t k_kind(const K& k) {
  return std::get<1>(k);
}

void close_all(const std::vector<int>& fds) {
  for (int fd : fds)
    if (fd >= 0) close(fd);
}

}  // namespace

struct FdExchange::Wire {
  uint32_t magic = kMagic;
  uint32_t type = 0;
  int32_t from = -1;
  uint32_t pieces = 0;           // IpcPiece records after this header (a vmm-multi handle's layout)
  Backend::IpcMemHandle handle;  // what the descriptor, request or answer is about
};

std::string FdExchange::socket_name(int rank) const {
  std::string token = ch_.socket_token(rank);
  return token.empty() ? std::string() : "gpustripe-fd:" + token;
}

bool FdExchange::authentic(const msghdr& m, int from) const {
  if (from < 0 || from >= ch_.size() || from == ch_.rank()) return false;
  for (cmsghdr* c = CMSG_FIRSTHDR(&m); c; c = CMSG_NXTHDR(const_cast<msghdr*>(&m), c))
    if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_CREDENTIALS && c->cmsg_len >= CMSG_LEN(sizeof(ucred))) {
      ucred cr{};
      std::memcpy(&cr, CMSG_DATA(c), sizeof cr);
      // The kernel vouches for both: a process can claim only its own pid and uids.
      const int pid = ch_.pid_of(from);
      return cr.uid == getuid() && pid > 0 && cr.pid == pid;
    }
  return false;  // SO_PASSCRED makes the kernel attach them to every datagram: none is a bug
}

FdExchange::FdExchange(Channel& channel, Backend& backend) : ch_(channel), backend_(backend) {
  int s = socket(AF_UNIX, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (s < 0) {
    GS_LOG_INFO(Subsys::Ipc, "rank %d: no Unix datagram socket (%s): VMM and pool buffers take the stream path",
                ch_.rank(), strerror(errno));
    return;
  }
  // Before bind, so that no datagram arrives without its sender's credentials.
  const int on = 1;
  if (setsockopt(s, SOL_SOCKET, SO_PASSCRED, &on, sizeof on) != 0) {
    GS_LOG_INFO(Subsys::Ipc, "rank %d: the descriptor socket cannot check senders (SO_PASSCRED: %s): VMM and pool "
                "buffers take the stream path", ch_.rank(), strerror(errno));
    close(s);
    return;
  }
  socklen_t len = 0;
  sockaddr_un a = address(socket_name(ch_.rank()), &len);
  if (bind(s, reinterpret_cast<sockaddr*>(&a), len) != 0) {
    GS_LOG_INFO(Subsys::Ipc, "rank %d: cannot bind the descriptor socket (%s): VMM and pool buffers take the "
                "stream path", ch_.rank(), strerror(errno));
    close(s);
    return;
  }
  sock_ = s;
  requests_seen_.store(ch_.fd_requests(), std::memory_order_relaxed);
}

FdExchange::~FdExchange() {
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& kv : inbox_) close_all(kv.second.fds);
  if (sock_ >= 0) close(sock_);
}

FdExchangeStats FdExchange::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

FdExchange::Sent FdExchange::send_locked(int dst, const Wire& w0, const ReceivedFds& what, bool wait_if_full) {
  sockaddr_un a{};
  socklen_t len = 0;
  Wire w = w0;
  w.pieces = static_cast<uint32_t>(what.pieces.size());
  GS_REQUIRE(what.pieces.size() <= Backend::kMaxIpcPieces && what.fds.size() <= Backend::kMaxIpcPieces,
             GPUSTRIPE_ERR_INTERNAL, "rank %d: %zu descriptors in one message", ch_.rank(), what.fds.size());
  iovec io[2] = {{&w, sizeof w},
                 {const_cast<Backend::IpcPiece*>(what.pieces.data()), what.pieces.size() * sizeof(Backend::IpcPiece)}};
  const size_t total = sizeof w + io[1].iov_len;
  msghdr m{};
  m.msg_iov = io;
  m.msg_iovlen = what.pieces.empty() ? 1 : 2;
  alignas(cmsghdr) char ctl[CMSG_SPACE(sizeof(int) * Backend::kMaxIpcPieces)] = {};
  if (!what.fds.empty()) {
    m.msg_control = ctl;
    m.msg_controllen = CMSG_SPACE(sizeof(int) * what.fds.size());
    cmsghdr* c = CMSG_FIRSTHDR(&m);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int) * what.fds.size());
    std::memcpy(CMSG_DATA(c), what.fds.data(), sizeof(int) * what.fds.size());
  }
  Waiter wait(format("rank %d: passing a file descriptor to rank %d (its socket is full)", ch_.rank(), dst),
              [&] { ch_.check_peer(dst, true); });
  const auto start = std::chrono::steady_clock::now();
  for (;;) {
    // A rank that left or died no longer owns its socket's name, and another process may
    // have bound it since: nothing goes there.
    const PeerState st = ch_.peer_state(dst);
    if (st == PeerState::Left || st == PeerState::Dead) return Sent::NotBound;
    // The name is known once dst has attached (its token); until then it is "not bound".
    const std::string name = socket_name(dst);
    int err = ENOENT;
    if (!name.empty()) {
      a = address(name, &len);
      m.msg_name = &a;
      m.msg_namelen = len;
      if (sendmsg(sock_, &m, MSG_DONTWAIT | MSG_NOSIGNAL) == static_cast<ssize_t>(total)) return Sent::Yes;
      err = errno;
    }
    if ((err == ECONNREFUSED || err == ENOENT) &&
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() > kNotBoundGraceS)
      return Sent::NotBound;
    if ((err == EAGAIN || err == EWOULDBLOCK || err == ENOBUFS) && !wait_if_full) return Sent::Full;
    // Not bound yet (the peer has not made its endpoint), or its queue is full: wait, and
    // answer our own peers meanwhile (they may be the ones filling queues).
    if (err != ECONNREFUSED && err != ENOENT && err != EAGAIN && err != EWOULDBLOCK && err != ENOBUFS && err != EINTR)
      GS_THROW(GPUSTRIPE_ERR_IO, "rank %d: sending a file descriptor to rank %d: %s", ch_.rank(), dst, strerror(err));
    drain_locked();
    serve_locked();
    wait.pause();
  }
}

void FdExchange::drop_oldest_locked() {
  auto old = inbox_.find(inbox_order_.front());
  inbox_order_.pop_front();
  if (old == inbox_.end()) return;
  close_all(old->second.fds);
  inbox_fds_ -= old->second.fds.size();
  inbox_.erase(old);
}

void FdExchange::keep_locked(const Key& k, ReceivedFds got) {
  auto it = inbox_.find(k);
  if (it != inbox_.end()) {  // a second offer of the same memory: keep the newer one
    close_all(it->second.fds);
    inbox_fds_ -= it->second.fds.size();
    inbox_fds_ += got.fds.size();
    it->second = std::move(got);
    return;
  }
  // Bounded in handles and in descriptors (each holds the peer's memory, and a process has a
  // limited number of descriptors): the oldest go; their importer asks again if it needs them.
  while (!inbox_order_.empty() && (inbox_.size() >= kInboxMax || inbox_fds_ + got.fds.size() > kInboxFdsMax))
    drop_oldest_locked();
  inbox_fds_ += got.fds.size();
  inbox_[k] = std::move(got);
  inbox_order_.push_back(k);
  gone_.erase(k);
}

void FdExchange::drain_locked() {
  struct {
    Wire w;
    Backend::IpcPiece pieces[Backend::kMaxIpcPieces];
  } in;
  for (;;) {
    Wire& w = in.w;
    w = Wire{};
    iovec io{&in, sizeof in};
    msghdr m{};
    m.msg_iov = &io;
    m.msg_iovlen = 1;
    alignas(cmsghdr) char ctl[CMSG_SPACE(sizeof(ucred)) + CMSG_SPACE(sizeof(int) * Backend::kMaxIpcPieces)] = {};
    m.msg_control = ctl;
    m.msg_controllen = sizeof ctl;
    ssize_t n = recvmsg(sock_, &m, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
    if (n < 0) {
      if (errno == EINTR) continue;
      return;  // EAGAIN: nothing more
    }
    std::vector<int> fds;
    for (cmsghdr* c = CMSG_FIRSTHDR(&m); c; c = CMSG_NXTHDR(&m, c))
      if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS) {
        size_t k = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
        for (size_t i = 0; i < k; ++i) {
          int fd;
          std::memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof fd);
          fds.push_back(fd);
        }
      }
    // Only the processes of this job's ranks may speak here: the sender must run as our user
    // and be the process registered for the rank it claims to be. The abstract namespace has
    // no permissions, and anyone on the node can see the socket's name in /proc/net/unix;
    // without this check another user could hand us its own memory as a peer's buffer
    // (injecting data into a receive, or receiving what a push sends) or ask for ours.
    if (n >= static_cast<ssize_t>(sizeof w) && !authentic(m, w.from)) {
      close_all(fds);
      if (stats_.refused++ < 8)
        GS_LOG_WARN(Subsys::Ipc, "rank %d: refused a datagram on the descriptor socket from a process that is not "
                    "the rank it names (another user, or not a rank of this job)", ch_.rank());
      continue;
    }
    const bool whole = !(m.msg_flags & (MSG_CTRUNC | MSG_TRUNC));
    if (!whole && !(m.msg_flags & MSG_TRUNC) && n >= static_cast<ssize_t>(sizeof w) && w.magic == kMagic &&
        w.type == kFd && w.from >= 0 && w.from < ch_.size()) {
      // The descriptors did not all fit (the kernel installs what the open-file limit allows and
      // drops the rest): the importer's wait for them ends in a clear error, not the timeout.
      close_all(fds);
      Key k{w.from, static_cast<uint32_t>(w.handle.kind), w.handle.share_id};
      truncated_.insert(k);
      GS_LOG_WARN(Subsys::Ipc, "rank %d: rank %d's descriptors of its %s buffer %llu did not fit in this process (%u "
                  "expected; open-file limit, ulimit -n?)", ch_.rank(), w.from, kind_word(k_kind(k)),
                  static_cast<unsigned long long>(w.handle.buffer_id), std::max<uint32_t>(w.pieces, 1));
      continue;
    }
    if (!whole || n < static_cast<ssize_t>(sizeof w) || w.magic != kMagic || w.from < 0 || w.from >= ch_.size() ||
        w.pieces > Backend::kMaxIpcPieces ||
        static_cast<size_t>(n) != sizeof w + w.pieces * sizeof(Backend::IpcPiece)) {
      close_all(fds);
      GS_LOG_WARN(Subsys::Ipc, "rank %d: dropped a %s datagram on the descriptor socket", ch_.rank(),
                  whole ? "malformed" : "truncated (descriptor limit reached?)");
      continue;
    }
    Key k{w.from, static_cast<uint32_t>(w.handle.kind), w.handle.share_id};
    switch (w.type) {
      case kFd: {
        const size_t want = w.handle.kind == Backend::IpcKind::VmmMulti ? w.pieces : 1;
        if (fds.size() != want || want == 0) break;
        ++stats_.received;
        keep_locked(k, ReceivedFds{std::move(fds), std::vector<Backend::IpcPiece>(in.pieces, in.pieces + w.pieces)});
        fds.clear();
        break;
      }
      case kRequest:
        pending_.push_back(w.handle);
        pending_from_.push_back(w.from);
        has_pending_.store(true, std::memory_order_relaxed);
        break;
      case kGone: gone_.insert(k); break;
      default: break;
    }
    close_all(fds);
  }
}

void FdExchange::serve_locked() {
  if (sock_ < 0) return;
  uint32_t asked = ch_.fd_requests();
  if (asked == requests_seen_.load(std::memory_order_relaxed) && pending_.empty()) return;
  requests_seen_.store(asked, std::memory_order_relaxed);
  drain_locked();
  while (!pending_.empty()) {
    Backend::IpcMemHandle h = pending_.front();
    int to = pending_from_.front();
    pending_.pop_front();
    pending_from_.pop_front();
    Wire w;
    w.from = ch_.rank();
    w.handle = h;
    ReceivedFds what;
    try {
      what.fds = backend_.ipc_export_fds(h, &what.pieces);
      w.type = kFd;
    } catch (const Error& e) {
      GS_LOG_WARN(Subsys::Ipc, "rank %d: rank %d asked for the descriptor of buffer %llu (%s): %s", ch_.rank(), to,
                  static_cast<unsigned long long>(h.buffer_id), kind_word(static_cast<uint32_t>(h.kind)), e.what());
      w.type = kGone;
    }
    bool sent = false;
    try {
      sent = send_locked(to, w, what, true) == Sent::Yes;
    } catch (...) {
      close_all(what.fds);
      throw;
    }
    close_all(what.fds);
    if (sent && w.type == kFd) {
      ++stats_.served;
      sent_.insert(Key{to, static_cast<uint32_t>(h.kind), h.share_id});
    }
  }
  has_pending_.store(false, std::memory_order_relaxed);
}

void FdExchange::serve() {
  // A peek without the lock (atomics only); serve_locked looks again.
  if (sock_ < 0 || (ch_.fd_requests() == requests_seen_.load(std::memory_order_relaxed) &&
                    !has_pending_.load(std::memory_order_relaxed)))
    return;
  std::lock_guard<std::mutex> lock(mu_);
  serve_locked();
}

bool FdExchange::offer(int dst, const Backend::IpcMemHandle& h) {
  if (h.kind == Backend::IpcKind::Legacy) return true;
  if (sock_ < 0) return false;
  std::lock_guard<std::mutex> lock(mu_);
  Key k{dst, static_cast<uint32_t>(h.kind), h.share_id};
  if (sent_.count(k)) return true;
  Wire w;
  w.type = kFd;
  w.from = ch_.rank();
  w.handle = h;
  ReceivedFds what;
  what.fds = backend_.ipc_export_fds(h, &what.pieces);
  Sent sent = Sent::No;
  try {
    // Never blocks on a full queue: an MPI_Isend must not wait for a peer that may be in
    // another call. The importer then asks for the descriptor when it maps the buffer.
    sent = send_locked(dst, w, what, false);
  } catch (...) {
    close_all(what.fds);
    throw;
  }
  close_all(what.fds);
  if (sent == Sent::NotBound) {
    GS_LOG_INFO(Subsys::Ipc, "rank %d: rank %d has no descriptor socket: its %s buffers stream", ch_.rank(), dst,
                kind_word(static_cast<uint32_t>(h.kind)));
    return false;
  }
  if (sent == Sent::Full) {
    ++stats_.deferred;
    GS_LOG_DEBUG(Subsys::Ipc, "rank %d: rank %d's descriptor queue is full: it will ask for buffer %llu's", ch_.rank(),
                 dst, static_cast<unsigned long long>(h.buffer_id));
    return true;
  }
  if (sent_.size() >= kSentMax) sent_.clear();
  sent_.insert(k);
  ++stats_.offered;
  GS_LOG_DEBUG(Subsys::Ipc, "rank %d: offered rank %d %zu descriptor(s) of its %s buffer %llu", ch_.rank(), dst,
               what.fds.size(), kind_word(static_cast<uint32_t>(h.kind)), static_cast<unsigned long long>(h.buffer_id));
  return true;
}

int FdExchange::take(int src, const Backend::IpcMemHandle& h) {
  ReceivedFds got = take_all(src, h);
  if (got.fds.size() == 1) return got.fds[0];
  close_all(got.fds);
  GS_THROW(GPUSTRIPE_ERR_INVALID_ARGUMENT, "rank %d: a %s handle of rank %d came with %zu descriptors, not one", ch_.rank(),
           kind_word(static_cast<uint32_t>(h.kind)), src, got.fds.size());
}

ReceivedFds FdExchange::take_all(int src, const Backend::IpcMemHandle& h) {
  GS_REQUIRE(sock_ >= 0, GPUSTRIPE_ERR_NOT_SUPPORTED,
             "rank %d: a %s buffer of rank %d needs its file descriptor, and this rank has no descriptor socket",
             ch_.rank(), kind_word(static_cast<uint32_t>(h.kind)), src);
  std::lock_guard<std::mutex> lock(mu_);
  Key k{src, static_cast<uint32_t>(h.kind), h.share_id};
  std::string what = format("rank %d: waiting for rank %d's file descriptor of its %s buffer %llu", ch_.rank(), src,
                            kind_word(static_cast<uint32_t>(h.kind)), static_cast<unsigned long long>(h.buffer_id));
  Waiter wait(what, [&] { ch_.check_peer(src, true); });
  bool asked = false;
  for (;;) {
    drain_locked();
    auto it = inbox_.find(k);
    if (it != inbox_.end()) {
      ReceivedFds got = std::move(it->second);
      inbox_fds_ -= got.fds.size();
      inbox_.erase(it);
      for (auto o = inbox_order_.begin(); o != inbox_order_.end(); ++o)
        if (*o == k) {
          inbox_order_.erase(o);
          break;
        }
      ++stats_.taken;
      if (h.kind == Backend::IpcKind::VmmMulti) {
        try {
          ipc_check_pieces(h, got.pieces);
        } catch (...) {
          close_all(got.fds);
          throw;
        }
      }
      return got;
    }
    if (truncated_.erase(k)) {
      GS_THROW(GPUSTRIPE_ERR_IO, "rank %d: rank %d's file descriptors of its %s buffer %llu did not fit in this process "
               "(the open-file limit, ulimit -n): cannot map it", ch_.rank(), src,
               kind_word(static_cast<uint32_t>(h.kind)), static_cast<unsigned long long>(h.buffer_id));
    }
    if (gone_.count(k)) {
      gone_.erase(k);
      GS_THROW(GPUSTRIPE_ERR_INVALID_POINTER,
               "rank %d's %s buffer %llu at 0x%llx is gone (freed while a message named it): nothing to map", src,
               kind_word(static_cast<uint32_t>(h.kind)), static_cast<unsigned long long>(h.buffer_id),
               static_cast<unsigned long long>(h.base));
    }
    if (!asked) {
      Wire w;
      w.type = kRequest;
      w.from = ch_.rank();
      w.handle = h;
      // Bumped before sending too: src drains its queue (which may be full of our own offers)
      // when it sees the counter move; and after, so that it reads the request itself.
      ch_.ask_for_fds(src);
      GS_REQUIRE(send_locked(src, w, ReceivedFds{}, true) == Sent::Yes, GPUSTRIPE_ERR_PEER_FAILED,
                 "rank %d: rank %d exported a %s buffer but has no descriptor socket to ask", ch_.rank(), src,
                 kind_word(static_cast<uint32_t>(h.kind)));
      ch_.ask_for_fds(src);
      ++stats_.requested;
      asked = true;
      GS_LOG_DEBUG(Subsys::Ipc, "%s: asked for it", what.c_str());
    }
    serve_locked();
    wait.pause();
  }
}

}  // namespace gpustripe::ipc
