#include "ipc/fd_exchange.hpp"

#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <functional>

#include "common/error.hpp"
#include "common/log.hpp"
#include "ipc/wait.hpp"

namespace gpustripe::ipc {
namespace {

constexpr uint32_t kMagic = 0x67736664;  // "gsfd"
enum : uint32_t { kFd = 1, kRequest = 2, kGone = 3 };
constexpr size_t kInboxMax = 64;     // descriptors received and not taken yet (each holds the peer's memory)
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

}  // namespace

struct FdExchange::Wire {
  uint32_t magic = kMagic;
  uint32_t type = 0;
  int32_t from = -1;
  uint32_t reserved = 0;
  Backend::IpcMemHandle handle;  // what the descriptor, request or answer is about
};

std::string FdExchange::socket_name(const std::string& channel, int rank) {
  std::string c = channel;
  if (!c.empty() && c[0] == '/') c.erase(0, 1);
  std::string name = "gpustripe-fd:" + c + ":" + std::to_string(rank);
  if (name.size() > 100) name = "gpustripe-fd:" + std::to_string(std::hash<std::string>{}(c)) + ":" + std::to_string(rank);
  return name;
}

FdExchange::FdExchange(Channel& channel, Backend& backend) : ch_(channel), backend_(backend) {
  int s = socket(AF_UNIX, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (s < 0) {
    GS_LOG_INFO(Subsys::Ipc, "rank %d: no Unix datagram socket (%s): VMM and pool buffers take the stream path",
                ch_.rank(), strerror(errno));
    return;
  }
  socklen_t len = 0;
  sockaddr_un a = address(socket_name(ch_.name(), ch_.rank()), &len);
  if (bind(s, reinterpret_cast<sockaddr*>(&a), len) != 0) {
    GS_LOG_INFO(Subsys::Ipc, "rank %d: cannot bind the descriptor socket %s (%s): VMM and pool buffers take the "
                "stream path", ch_.rank(), socket_name(ch_.name(), ch_.rank()).c_str(), strerror(errno));
    close(s);
    return;
  }
  sock_ = s;
  requests_seen_.store(ch_.fd_requests(), std::memory_order_relaxed);
}

FdExchange::~FdExchange() {
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& kv : inbox_) close(kv.second);
  if (sock_ >= 0) close(sock_);
}

FdExchangeStats FdExchange::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

FdExchange::Sent FdExchange::send_locked(int dst, const Wire& w, int fd, bool wait_if_full) {
  socklen_t len = 0;
  sockaddr_un a = address(socket_name(ch_.name(), dst), &len);
  iovec io{const_cast<Wire*>(&w), sizeof w};
  msghdr m{};
  m.msg_name = &a;
  m.msg_namelen = len;
  m.msg_iov = &io;
  m.msg_iovlen = 1;
  alignas(cmsghdr) char ctl[CMSG_SPACE(sizeof(int))] = {};
  if (fd >= 0) {
    m.msg_control = ctl;
    m.msg_controllen = sizeof ctl;
    cmsghdr* c = CMSG_FIRSTHDR(&m);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int));
    std::memcpy(CMSG_DATA(c), &fd, sizeof fd);
  }
  Waiter wait(format("rank %d: passing a file descriptor to rank %d (its socket %s is full)", ch_.rank(), dst,
                     socket_name(ch_.name(), dst).c_str()),
              [&] { ch_.check_peer(dst, true); });
  const auto start = std::chrono::steady_clock::now();
  for (;;) {
    if (sendmsg(sock_, &m, MSG_DONTWAIT | MSG_NOSIGNAL) == static_cast<ssize_t>(sizeof w)) return Sent::Yes;
    int err = errno;
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

void FdExchange::keep_locked(const Key& k, int fd) {
  auto it = inbox_.find(k);
  if (it != inbox_.end()) {
    close(it->second);  // a second offer of the same memory: keep the newer one
    it->second = fd;
    return;
  }
  while (inbox_.size() >= kInboxMax && !inbox_order_.empty()) {
    auto old = inbox_.find(inbox_order_.front());
    inbox_order_.pop_front();
    if (old != inbox_.end()) {
      close(old->second);
      inbox_.erase(old);
    }
  }
  inbox_[k] = fd;
  inbox_order_.push_back(k);
  gone_.erase(k);
}

void FdExchange::drain_locked() {
  for (;;) {
    Wire w;
    iovec io{&w, sizeof w};
    msghdr m{};
    m.msg_iov = &io;
    m.msg_iovlen = 1;
    alignas(cmsghdr) char ctl[CMSG_SPACE(sizeof(int))] = {};
    m.msg_control = ctl;
    m.msg_controllen = sizeof ctl;
    ssize_t n = recvmsg(sock_, &m, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
    if (n < 0) {
      if (errno == EINTR) continue;
      return;  // EAGAIN: nothing more
    }
    int fd = -1;
    for (cmsghdr* c = CMSG_FIRSTHDR(&m); c; c = CMSG_NXTHDR(&m, c))
      if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS) std::memcpy(&fd, CMSG_DATA(c), sizeof fd);
    if (n != static_cast<ssize_t>(sizeof w) || w.magic != kMagic || w.from < 0 || w.from >= ch_.size()) {
      if (fd >= 0) close(fd);
      GS_LOG_WARN(Subsys::Ipc, "rank %d: dropped a malformed datagram on the descriptor socket", ch_.rank());
      continue;
    }
    Key k{w.from, static_cast<uint32_t>(w.handle.kind), w.handle.share_id};
    switch (w.type) {
      case kFd:
        if (fd < 0) break;
        ++stats_.received;
        keep_locked(k, fd);
        fd = -1;
        break;
      case kRequest:
        pending_.push_back(w.handle);
        pending_from_.push_back(w.from);
        has_pending_.store(true, std::memory_order_relaxed);
        break;
      case kGone: gone_.insert(k); break;
      default: break;
    }
    if (fd >= 0) close(fd);
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
    int fd = -1;
    try {
      fd = backend_.ipc_export_fd(h);
      w.type = kFd;
    } catch (const Error& e) {
      GS_LOG_WARN(Subsys::Ipc, "rank %d: rank %d asked for the descriptor of buffer %llu (%s): %s", ch_.rank(), to,
                  static_cast<unsigned long long>(h.buffer_id), kind_word(static_cast<uint32_t>(h.kind)), e.what());
      w.type = kGone;
    }
    bool sent = false;
    try {
      sent = send_locked(to, w, fd, true) == Sent::Yes;
    } catch (...) {
      if (fd >= 0) close(fd);
      throw;
    }
    if (fd >= 0) close(fd);
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
  int fd = backend_.ipc_export_fd(h);
  Sent sent = Sent::No;
  try {
    // Never blocks on a full queue: an MPI_Isend must not wait for a peer that may be in
    // another call. The importer then asks for the descriptor when it maps the buffer.
    sent = send_locked(dst, w, fd, false);
  } catch (...) {
    close(fd);
    throw;
  }
  close(fd);
  if (sent == Sent::NotBound) {
    GS_LOG_INFO(Subsys::Ipc, "rank %d: rank %d has no descriptor socket (%s): its %s buffers stream", ch_.rank(), dst,
                socket_name(ch_.name(), dst).c_str(), kind_word(static_cast<uint32_t>(h.kind)));
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
  return true;
}

int FdExchange::take(int src, const Backend::IpcMemHandle& h) {
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
      int fd = it->second;
      inbox_.erase(it);
      for (auto o = inbox_order_.begin(); o != inbox_order_.end(); ++o)
        if (*o == k) {
          inbox_order_.erase(o);
          break;
        }
      ++stats_.taken;
      return fd;
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
      GS_REQUIRE(send_locked(src, w, -1, true) == Sent::Yes, GPUSTRIPE_ERR_PEER_FAILED,
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
