// Another user on the node attacks a job: forked ranks on the emulated backend (VMM-like
// memfd buffers go through the descriptor exchange, as VMM and pool buffers do on the GPUs),
// and an attacker process that drops to uid/gid 65534 (nobody) and does what any user of the
// node can: read /proc/net/unix and /dev/shm, send datagrams to abstract sockets, bind
// abstract names, create shared-memory segments. Each test asserts that the attack is refused
// and that the job's data is intact. The tests need root (to fork a process of another
// user); without it they are skipped, saying so.
#include <gtest/gtest.h>
#include <dirent.h>
#include <fcntl.h>
#include <grp.h>
#include <poll.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>
#include <thread>

#include "backend/backend.hpp"
#include "ipc/fd_exchange.hpp"
#include "ipc/wait.hpp"
#include "test_ipc_ranks.hpp"
#include "test_util.hpp"
#include "topology/topology.hpp"

using namespace gpustripe;
using DeviceAlloc = Backend::DeviceAlloc;

namespace {

constexpr uid_t kNobody = 65534;
constexpr unsigned char kForged = 0x66;

#define REQUIRE_ROOT()                                                                                          \
  do {                                                                                                          \
    if (geteuid() != 0)                                                                                         \
      GTEST_SKIP() << "attacker test skipped: it forks a process of another user (uid " << kNobody               \
                   << "), which needs root; run as root (CI does)";                                             \
  } while (0)

std::unique_ptr<Backend> emulated() { return make_emulated_backend(load_topology_file("h200x4")); }

void become_nobody() {
  RANK_CHECK(setgroups(0, nullptr) == 0);
  RANK_CHECK(setresgid(kNobody, kNobody, kNobody) == 0);
  RANK_CHECK(setresuid(kNobody, kNobody, kNobody) == 0);
  RANK_CHECK(getuid() == kNobody && geteuid() == kNobody);
}

// One-way signals between the processes of a test (made by the parent before forking).
struct Pipe {
  int r = -1, w = -1;
  Pipe() {
    int fds[2];
    RANK_CHECK(pipe(fds) == 0);
    r = fds[0];
    w = fds[1];
  }
  ~Pipe() {
    close(r);
    close(w);
  }
  void put(const void* p, size_t n) const {
    const char* c = static_cast<const char*>(p);
    while (n) {
      ssize_t k = write(w, c, n);
      RANK_CHECK(k > 0 || errno == EINTR);
      if (k > 0) c += k, n -= static_cast<size_t>(k);
    }
  }
  void get(void* p, size_t n) const {  // bounded: a peer that failed does not hang the test
    char* c = static_cast<char*>(p);
    while (n) {
      pollfd f{r, POLLIN, 0};
      RANK_CHECK(poll(&f, 1, 20000) == 1);
      ssize_t k = read(r, c, n);
      RANK_CHECK(k > 0 || errno == EINTR);
      if (k > 0) c += k, n -= static_cast<size_t>(k);
    }
  }
  void signal() const { put("x", 1); }
  void wait() const {
    char c;
    get(&c, 1);
  }
};

// The descriptor exchange's datagram header as it goes over the wire (ipc/fd_exchange.cpp):
// what an attacker reads off the source or a packet dump.
struct ForgedWire {
  uint32_t magic = 0x67736664;
  uint32_t type = 1;  // a descriptor
  int32_t from = 0;
  uint32_t pieces = 0;
  Backend::IpcMemHandle handle;
};

// The abstract names of every descriptor socket on the node, as any user reads them.
std::vector<std::string> descriptor_sockets() {
  std::vector<std::string> names;
  std::ifstream in("/proc/net/unix");
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream ls(line);
    std::string tok, last;
    while (ls >> tok) last = tok;
    if (last.rfind("@gpustripe-fd", 0) == 0) names.push_back(last.substr(1));
  }
  return names;
}

sockaddr_un abstract(const std::string& name, socklen_t* len) {
  sockaddr_un a{};
  a.sun_family = AF_UNIX;
  size_t n = std::min(name.size(), sizeof a.sun_path - 1);
  std::memcpy(a.sun_path + 1, name.data(), n);
  *len = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + n);
  return a;
}

// Memory of the attacker's, full of kForged, that it passes off as a rank's buffer.
int forged_memory(size_t n) {
  int fd = memfd_create("attacker", MFD_CLOEXEC);
  RANK_CHECK(fd >= 0 && ftruncate(fd, static_cast<off_t>(n)) == 0);
  void* p = mmap(nullptr, n, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  RANK_CHECK(p != MAP_FAILED);
  std::memset(p, kForged, n);
  munmap(p, n);
  return fd;
}

// Sends "here is rank `from`'s descriptor of h" with the attacker's memory to every descriptor
// socket on the node; returns how many it reached.
int inject(const Backend::IpcMemHandle& h, int from, int memfd) {
  int s = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  RANK_CHECK(s >= 0);
  int reached = 0;
  for (const std::string& name : descriptor_sockets()) {
    socklen_t len = 0;
    sockaddr_un a = abstract(name, &len);
    ForgedWire w;
    w.from = from;
    w.handle = h;
    iovec io{&w, sizeof w};
    alignas(cmsghdr) char ctl[CMSG_SPACE(sizeof(int))] = {};
    msghdr m{};
    m.msg_name = &a;
    m.msg_namelen = len;
    m.msg_iov = &io;
    m.msg_iovlen = 1;
    m.msg_control = ctl;
    m.msg_controllen = sizeof ctl;
    cmsghdr* c = CMSG_FIRSTHDR(&m);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int));
    std::memcpy(CMSG_DATA(c), &memfd, sizeof memfd);
    if (sendmsg(s, &m, MSG_DONTWAIT | MSG_NOSIGNAL) == static_cast<ssize_t>(sizeof w)) ++reached;
  }
  close(s);
  return reached;
}

// Rank 0's side of a transfer of one VMM-like buffer to rank 1: names it to rank 1 over the
// channel (after offering its descriptor when `offer`), serves rank 1's requests until rank 1
// says it is done.
void export_to_rank1(ipc::Channel& ch, ipc::FdExchange& fx, Backend& be, void* buf, bool offer,
                     const Pipe* handle_out, const Pipe* offered = nullptr) {
  Backend::IpcMemHandle h = be.ipc_export(buf);
  if (handle_out) handle_out->put(&h, sizeof h);  // the worst case: the attacker knows the ids
  if (offer) RANK_CHECK(fx.offer(1, h));
  if (offered) offered->signal();
  while (!ch.try_send(1, &h, sizeof h, nullptr, 0)) std::this_thread::yield();
  size_t bytes = 0;
  ipc::Waiter w("rank 0 waiting for rank 1's done");
  while (!ch.peek(1, &bytes)) {
    fx.serve();
    w.pause();
  }
  ch.consume(1);
}

// Rank 1's side: maps rank 0's buffer through the exchange and checks it holds rank 0's bytes.
void import_from_rank0(ipc::Channel& ch, ipc::FdExchange& fx, Backend& be, size_t n, int seed) {
  size_t bytes = 0;
  const void* rec = nullptr;
  ipc::Waiter w("rank 1 waiting for rank 0's handle");
  while (!(rec = ch.peek(0, &bytes))) w.pause();
  Backend::IpcMemHandle h;
  std::memcpy(&h, rec, sizeof h);
  ch.consume(0);
  int fd = fx.take(0, h);
  void* mapped = be.ipc_open(h, fd);
  close(fd);
  std::vector<unsigned char> got = device_get(be, mapped, h.device, n);
  be.ipc_close(mapped);
  const char done = 1;
  while (!ch.try_send(0, &done, 1, nullptr, 0)) std::this_thread::yield();
  RANK_CHECK(got[0] != kForged || got[n - 1] != kForged);  // not the attacker's memory
  RANK_CHECK(got == seeded_bytes(seed, n));                 // rank 0's bytes, all of them
}

}  // namespace

// The attacker sends "rank 0's descriptor" of the very buffer rank 0 names to rank 1 (it
// guessed or learnt the buffer id), with its own memory behind it, to every descriptor socket
// it finds in /proc/net/unix, before rank 1 maps the buffer. Rank 1 must refuse it (the
// sender is not rank 0's process) and map rank 0's memory.
TEST(Attacker, ForgedDescriptorIsRefusedAndTheReceiveGetsTheSendersData) {
  REQUIRE_ROOT();
  ScopedEnv timeout("GPUSTRIPE_TIMEOUT", "15");
  const std::string name = ipc::unique_shm_name("attack");
  ipc::ShmSegment seg = ipc::Channel::create_segment(name, 2);
  Pipe bound0, bound1, handle, injected;
  const size_t n = (1 << 20) + 4096;
  auto res = run_processes(3, [&](int who) {
    if (who == 2) {  // the attacker
      become_nobody();
      bound0.wait();
      bound1.wait();
      Backend::IpcMemHandle h;
      handle.get(&h, sizeof h);
      int memfd = forged_memory(h.size);
      RANK_CHECK(inject(h, 0, memfd) >= 2);  // it reached both ranks' sockets
      RANK_CHECK(inject(h, 1, memfd) >= 2);
      close(memfd);
      injected.signal();
      return;
    }
    ipc::Channel ch(ipc::ShmSegment::open(name), who);
    ch.wait_all_attached();
    auto be = emulated();
    ipc::FdExchange fx(ch, *be);
    RANK_CHECK(fx.enabled());
    if (who == 0) {
      bound0.signal();
      void* buf = be->alloc_device_as(0, n, DeviceAlloc::VmmFd);
      device_put(*be, buf, 0, seeded_bytes(7, n));
      // Not offered: rank 1 asks for the descriptor when it maps (as after a dropped offer),
      // so the attacker's datagram is the first one there.
      export_to_rank1(ch, fx, *be, buf, false, &handle);
      RANK_CHECK(device_get(*be, buf, 0, n) == seeded_bytes(7, n));
      be->free_device(buf);
    } else {
      bound1.signal();
      injected.wait();
      import_from_rank0(ch, fx, *be, n, 7);
      RANK_CHECK(fx.stats().refused >= 1);  // the forged datagram did arrive, and was dropped
    }
  }, 60);
  EXPECT_RANKS_OK(res);
}

// The attacker binds, before the ranks start, the socket names it can predict from what it
// sees (the channel's name: /dev/shm, or another rank's socket in /proc/net/unix), hoping to
// receive the descriptors rank 0 offers rank 1. Rank 1 must still get its own socket, and
// the attacker nothing of the job's: a datagram is the job's when the kernel says its sender
// runs as the job's user. (Others may arrive: the injecting attacker of the test above sprays
// every descriptor socket on the node, this one's too when ctest runs the two at once.)
TEST(Attacker, CannotTakeARanksSocketNameAndReceiveItsDescriptors) {
  REQUIRE_ROOT();
  ScopedEnv timeout("GPUSTRIPE_TIMEOUT", "15");
  const std::string name = ipc::unique_shm_name("attack");
  ipc::ShmSegment seg = ipc::Channel::create_segment(name, 2);
  Pipe squatted, offered;
  const size_t n = 1 << 20;
  auto res = run_processes(3, [&](int who) {
    if (who == 2) {
      const uid_t job_uid = getuid();
      become_nobody();
      std::vector<int> socks;
      const std::string word = name.substr(1);
      for (int r = 0; r < 2; ++r)  // names derived from the channel and the rank
      {
        int s = socket(AF_UNIX, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
        RANK_CHECK(s >= 0);
        const int on = 1;  // every datagram then carries its sender's credentials
        RANK_CHECK(setsockopt(s, SOL_SOCKET, SO_PASSCRED, &on, sizeof on) == 0);
        socklen_t len = 0;
        sockaddr_un a = abstract("gpustripe-fd:" + word + ":" + std::to_string(r), &len);
        RANK_CHECK(bind(s, reinterpret_cast<sockaddr*>(&a), len) == 0);
        socks.push_back(s);
      }
      squatted.signal();  // once per rank
      squatted.signal();
      offered.wait();
      int got = 0;
      for (int s : socks) {
        char buf[4096];
        alignas(cmsghdr) char ctl[CMSG_SPACE(sizeof(int) * 64) + CMSG_SPACE(sizeof(ucred))];
        iovec io{buf, sizeof buf};
        msghdr m{};
        m.msg_iov = &io;
        m.msg_iovlen = 1;
        m.msg_control = ctl;
        m.msg_controllen = sizeof ctl;
        while (recvmsg(s, &m, MSG_DONTWAIT) >= 0) {
          for (cmsghdr* c = CMSG_FIRSTHDR(&m); c; c = CMSG_NXTHDR(&m, c)) {
            if (c->cmsg_level != SOL_SOCKET) continue;
            if (c->cmsg_type == SCM_CREDENTIALS) {
              ucred cr{};
              std::memcpy(&cr, CMSG_DATA(c), sizeof cr);
              if (cr.uid == job_uid) ++got;
            } else if (c->cmsg_type == SCM_RIGHTS) {
              const size_t k = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
              for (size_t i = 0; i < k; ++i) {
                int fd = -1;
                std::memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof fd);
                close(fd);
              }
            }
          }
          m.msg_controllen = sizeof ctl;
        }
        close(s);
      }
      RANK_CHECK(got == 0);  // nothing of the job's came to the attacker
      return;
    }
    squatted.wait();
    ipc::Channel ch(ipc::ShmSegment::open(name), who);
    ch.wait_all_attached();
    auto be = emulated();
    ipc::FdExchange fx(ch, *be);
    RANK_CHECK(fx.enabled());  // its name was not taken
    if (who == 0) {
      void* buf = be->alloc_device_as(0, n, DeviceAlloc::VmmFd);
      device_put(*be, buf, 0, seeded_bytes(9, n));
      export_to_rank1(ch, fx, *be, buf, true, nullptr, &offered);
      be->free_device(buf);
    } else {
      import_from_rank0(ch, fx, *be, n, 9);
    }
  }, 60);
  EXPECT_RANKS_OK(res);
}

// Shared memory: the attacker can list /dev/shm but open none of the job's segments (the
// channel, emulated device memory); and a segment it makes under the name a job will open
// (a channel joined by name, made readable by everyone and attached to by the attacker) is
// refused by the job's rank instead of joined.
TEST(Attacker, CannotOpenTheJobsSegmentsNorPlantOne) {
  REQUIRE_ROOT();
  ScopedEnv timeout("GPUSTRIPE_TIMEOUT", "10");
  const std::string name = ipc::unique_shm_name("attack");
  ipc::ShmSegment seg = ipc::Channel::create_segment(name, 2);
  auto be = emulated();
  void* dev = be->alloc_device_as(1, 1 << 20, DeviceAlloc::Plain);  // a named segment
  device_put(*be, dev, 1, seeded_bytes(3, 1 << 20));
  const std::string word = "attack-plant-" + std::to_string(getpid());
  Pipe planted, tried;
  auto res = run_processes(2, [&](int who) {
    if (who == 1) {
      become_nobody();
      int opened = 0, tried_n = 0;
      DIR* d = opendir("/dev/shm");
      RANK_CHECK(d != nullptr);
      while (dirent* e = readdir(d)) {
        if (std::strncmp(e->d_name, "gpustripe", 9) != 0) continue;
        struct stat st {};
        if (fstatat(dirfd(d), e->d_name, &st, 0) != 0 || st.st_uid != 0) continue;  // the job's (root's)
        ++tried_n;
        for (int mode : {O_RDONLY, O_RDWR}) {
          int fd = shm_open((std::string("/") + e->d_name).c_str(), mode, 0);
          if (fd >= 0) {
            ++opened;
            close(fd);
          }
        }
      }
      closedir(d);
      RANK_CHECK(tried_n >= 2);  // the channel and the device memory at least
      RANK_CHECK(opened == 0);
      // Plant a channel under the name the job will join, open to all, and sit in it as rank 0.
      ipc::ShmSegment mine = ipc::Channel::create_segment("/gpustripe-" + word, 2);
      RANK_CHECK(chmod(("/dev/shm/gpustripe-" + word).c_str(), 0666) == 0);
      ipc::Channel as0(ipc::ShmSegment::open("/gpustripe-" + word), 0);
      planted.signal();
      tried.wait();
      RANK_CHECK(as0.peer_state(1) == ipc::PeerState::Absent);  // the job's rank did not join it
      return;
    }
    planted.wait();
    gpustripe_status_t st = GPUSTRIPE_SUCCESS;
    try {
      auto ch = ipc::join_channel_by_name(word, 1, 2);
    } catch (const Error& e) {
      st = e.status();
      std::fprintf(stderr, "[rank 1] refused as it should: %s\n", e.what());
    }
    tried.signal();
    RANK_CHECK(st == GPUSTRIPE_ERR_INVALID_ARGUMENT);
  }, 60);
  shm_unlink(("/gpustripe-" + word).c_str());
  EXPECT_RANKS_OK(res);
  EXPECT_EQ(device_get(*be, dev, 1, 1 << 20), seeded_bytes(3, 1 << 20));
  be->free_device(dev);
}
