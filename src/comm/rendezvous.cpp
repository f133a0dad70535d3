// Rendezvous over TCP (rendezvous.h): POSIX sockets, non-blocking, every wait
// a poll() bounded by the deadline.
#include "comm/rendezvous.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <sstream>
#include <thread>

#include "util/check.h"

namespace mxdp {

namespace {

using Clock = std::chrono::steady_clock;

constexpr uint32_t kMagic = 0x6d786470;  // "mxdp"
constexpr uint64_t kVersion = 1;
// A rank other than 0 waits this much longer than the deadline for rank 0's
// answer, so that rank 0's report (which rank is missing) reaches it first.
constexpr double kGrace_s = 5.0;
// How long rank 0, failing, waits for its peers to read why and close.
constexpr double kDrain_s = 2.0;
enum Kind : uint32_t { kHello = 1, kWelcome, kBroadcast, kAllGather, kBarrier };

const char* kind_name(uint32_t k) {
  switch (k) {
    case kHello: return "hello";
    case kWelcome: return "welcome";
    case kBroadcast: return "broadcast";
    case kAllGather: return "all_gather";
    case kBarrier: return "barrier";
  }
  return "unknown operation";
}

Clock::time_point deadline_in(double s) {
  return Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(s));
}
int ms_left(Clock::time_point deadline) {
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
  return int(std::clamp<long long>(left, 0, 1000));  // wake at least every second
}

std::string errno_text(int e) { return std::strerror(e); }
std::string secs(double s) {
  std::ostringstream os;
  os << s << " s";
  return os.str();
}

void set_socket_options(int fd) {
  const int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof one);
  const int flags = fcntl(fd, F_GETFL, 0);
  fcntl(fd, F_SETFL, flags | O_NONBLOCK);
}

// Why an I/O on a peer stopped: it closed, timed out or failed.
enum class Io { Ok, Closed, Timeout, Failed };

// Sends or receives exactly n bytes before the deadline.
Io transfer(int fd, void* p, size_t n, bool send, Clock::time_point deadline, int* err) {
  auto* b = static_cast<char*>(p);
  while (n > 0) {
    const ssize_t r = send ? ::send(fd, b, n, MSG_NOSIGNAL) : ::recv(fd, b, n, 0);
    if (r > 0) {
      b += r;
      n -= size_t(r);
      continue;
    }
    if (r == 0 && !send) return Io::Closed;
    if (r < 0 && errno == EINTR) continue;
    if (r < 0 && errno != EAGAIN && errno != EWOULDBLOCK) {
      *err = errno;
      return (errno == EPIPE || errno == ECONNRESET) ? Io::Closed : Io::Failed;
    }
    if (Clock::now() >= deadline) return Io::Timeout;
    pollfd pf{fd, short(send ? POLLOUT : POLLIN), 0};
    if (::poll(&pf, 1, ms_left(deadline)) < 0 && errno != EINTR) {
      *err = errno;
      return Io::Failed;
    }
  }
  return Io::Ok;
}

// Stops sending on each socket (what was sent still arrives, then the end of
// the stream) and reads and drops what the peers still send, until each has
// closed its end or the deadline passes. Closing a socket with bytes unread
// makes TCP reset the connection, and a reset can throw away what the peer had
// not read yet: the reason rank 0 just sent it.
void drain_until_closed(const std::vector<int>& fds, Clock::time_point deadline) {
  std::vector<pollfd> open;
  for (int fd : fds)
    if (fd >= 0) {
      ::shutdown(fd, SHUT_WR);
      open.push_back({fd, POLLIN, 0});
    }
  static thread_local char sink[1 << 16];
  while (!open.empty() && Clock::now() < deadline) {
    if (::poll(open.data(), open.size(), ms_left(deadline)) < 0 && errno != EINTR) return;
    for (size_t i = 0; i < open.size();) {
      bool closed = false;
      if (open[i].revents != 0) {
        for (;;) {
          const ssize_t r = ::recv(open[i].fd, sink, sizeof sink, 0);
          if (r > 0 || (r < 0 && errno == EINTR)) continue;
          closed = !(r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK));  // end of stream, or an error
          break;
        }
      }
      if (closed)
        open.erase(open.begin() + std::ptrdiff_t(i));
      else
        ++i;
    }
  }
}

}  // namespace

// What travels before every payload.
struct Rendezvous::Frame {
  uint32_t magic = kMagic;
  uint32_t kind = 0;
  uint64_t seq = 0;    // hello: the protocol version
  uint64_t bytes = 0;  // per rank (hello: the world size; an error: the message's length)
  int32_t root = -1;   // hello: the sender's rank
  int32_t status = 0;  // 0, or 1: an error message follows
};

namespace {

// Bytes rank r sends in, and gets back, for an operation.
size_t in_bytes(uint32_t kind, int r, int root, size_t bytes) {
  return kind == kAllGather ? bytes : (kind == kBroadcast && r == root) ? bytes : 0;
}
size_t out_bytes(uint32_t kind, int r, int root, size_t bytes, int size) {
  return kind == kAllGather ? bytes * size_t(size) : (kind == kBroadcast && r != root) ? bytes : 0;
}
// Where rank r's contribution lies in buf.
size_t in_offset(uint32_t kind, int r, size_t bytes) { return kind == kAllGather ? size_t(r) * bytes : 0; }

}  // namespace

std::string Rendezvous::where() const {
  std::ostringstream os;
  os << "rendezvous of " << o_.size << " ranks at " << o_.addr << ":" << o_.port << " (" << o_.origin << "), rank "
     << o_.rank;
  return os.str();
}

Rendezvous::Rendezvous(const Options& o) : o_(o) {
  MXDP_CHECK(o_.size >= 1 && o_.rank >= 0 && o_.rank < o_.size, "rendezvous: rank ", o_.rank, " of ", o_.size);
  MXDP_CHECK(o_.timeout_s > 0, "rendezvous: the timeout must be positive, got ", o_.timeout_s);
  if (o_.size == 1) return;  // nobody to meet: no socket, no port
  if (o_.port < 1 || o_.port > 65535) MXDP_FAIL(where(), ": ", o_.port, " is not a TCP port (1..65535)");
  peers_.assign(o_.rank == 0 ? size_t(o_.size) : 1, -1);
  try {
    if (o_.rank == 0)
      server_accept();
    else
      client_connect();
  } catch (...) {
    for (int fd : peers_)
      if (fd >= 0) ::close(fd);
    if (listen_fd_ >= 0) ::close(listen_fd_);
    throw;
  }
}

Rendezvous::~Rendezvous() {
  for (int fd : peers_)
    if (fd >= 0) ::close(fd);
  if (listen_fd_ >= 0) ::close(listen_fd_);
}

// Rank 0: tells every connected rank why the job stops, then throws it.
void Rendezvous::server_fail(const std::string& why) {
  broken_ = true;
  const std::string msg = where() + ": " + why;
  Frame f;
  f.kind = kWelcome;
  f.status = 1;
  f.bytes = msg.size();
  int err = 0;
  for (size_t r = 1; r < peers_.size(); ++r) {
    if (peers_[r] < 0) continue;
    const auto d = deadline_in(1.0);  // best effort: a peer that reads nothing must not hold us
    if (transfer(peers_[r], &f, sizeof f, true, d, &err) == Io::Ok)
      transfer(peers_[r], const_cast<char*>(msg.data()), msg.size(), true, d, &err);
  }
  // The peers read the reason and close; only then do ours close (~Rendezvous).
  drain_until_closed({peers_.begin() + 1, peers_.end()}, deadline_in(kDrain_s));
  throw Error(msg);
}

namespace {

// A socket bound to `port` on every address: IPv6 with IPv4 mapped, or IPv4 alone where this
// host has no IPv6. -1 when it cannot bind, with the reason in err.
int bind_any(int port, int& err) {
  const int one = 1, zero = 0;
  int fd = ::socket(AF_INET6, SOCK_STREAM | SOCK_CLOEXEC, 0);
  err = errno;
  if (fd >= 0) {
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof zero);  // IPv4 too
    sockaddr_in6 a{};
    a.sin6_family = AF_INET6;
    a.sin6_addr = in6addr_any;
    a.sin6_port = htons(uint16_t(port));
    if (::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0) return fd;
    err = errno;
    ::close(fd);
    if (err == EADDRINUSE) return -1;
  }
  fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);  // no IPv6 here: IPv4 alone
  if (fd < 0) {
    err = errno;
    return -1;
  }
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_ANY);
  a.sin_port = htons(uint16_t(port));
  if (::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0) return fd;
  err = errno;
  ::close(fd);
  return -1;
}

}  // namespace

// Rank 0: listens on the port, or says why it cannot.
void Rendezvous::server_listen() {
  const char* origin = o_.origin.c_str();
  int err = 0;
  const int fd = bind_any(o_.port, err);
  if (fd < 0 && err == EADDRINUSE)
    MXDP_FAIL("rank 0 cannot listen on port ", o_.port, " (", origin, "): the port is in use on this host by another "
              "program (another job, an earlier run, or torchrun's agent store); choose another port with "
              "MASTER_PORT or MXDP_RDZV_PORT");
  if (fd < 0) MXDP_FAIL("rank 0 cannot listen on port ", o_.port, " (", origin, "): ", errno_text(err));
  listen_fd_ = fd;
  if (::listen(fd, std::max(o_.size, 16)) != 0)
    MXDP_FAIL("rank 0 cannot listen on port ", o_.port, " (", origin, "): ", errno_text(errno));
  set_socket_options(fd);
}

// What is wrong with a rank's hello, in a sentence; empty when it may join.
std::string Rendezvous::hello_problem(const Frame& h) const {
  if (h.seq != kVersion)
    return "a rank of another mxdp version (rendezvous protocol " + std::to_string(h.seq) + ") connected";
  if (h.bytes != uint64_t(o_.size))
    return "a process of a " + std::to_string(h.bytes) + "-rank job connected to this " + std::to_string(o_.size) +
           "-rank one (the world size must be the same on every process)";
  if (h.root < 1 || h.root >= o_.size)
    return "a process claiming rank " + std::to_string(h.root) + " connected (ranks are 1.." +
           std::to_string(o_.size - 1) + ")";
  if (peers_[size_t(h.root)] >= 0)
    return "rank " + std::to_string(h.root) + " connected twice: two processes have the same rank";
  return "";
}

void Rendezvous::server_accept() {
  server_listen();
  int err = 0;
  const auto deadline = deadline_in(o_.timeout_s);
  int arrived = 1;
  while (arrived < o_.size) {
    if (Clock::now() >= deadline) {
      std::ostringstream os;
      int missing = 0;
      for (int r = 1; r < o_.size; ++r)
        if (peers_[size_t(r)] < 0) os << (missing++ ? ", " : "") << r;
      server_fail((missing == 1 ? "rank " : "ranks ") + os.str() + " of " + std::to_string(o_.size) +
                  (missing == 1 ? " has" : " have") + " not connected within " + secs(o_.timeout_s) +
                  " (--comm-timeout / MXDP_COMM_TIMEOUT): did " + (missing == 1 ? "it" : "they") +
                  " start, with this address and port?");
    }
    pollfd pf{listen_fd_, POLLIN, 0};
    if (::poll(&pf, 1, ms_left(deadline)) <= 0) continue;
    const int c = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (c < 0) continue;
    set_socket_options(c);
    Frame h;
    if (transfer(c, &h, sizeof h, false, std::min(deadline, deadline_in(10.0)), &err) != Io::Ok || h.magic != kMagic ||
        h.kind != kHello) {
      ::close(c);  // not an mxdp rank (a port scanner, a stray client): ignore it
      continue;
    }
    if (const std::string bad = hello_problem(h); !bad.empty()) {
      peers_.push_back(c);  // told too, then closed with the others
      server_fail(bad);
    }
    peers_[size_t(h.root)] = c;
    ++arrived;
  }
  Frame w;
  w.kind = kWelcome;
  for (int r = 1; r < o_.size; ++r)
    if (transfer(peers_[size_t(r)], &w, sizeof w, true, deadline_in(o_.timeout_s), &err) != Io::Ok)
      server_fail("rank " + std::to_string(r) + " went away during the rendezvous");
}

void Rendezvous::client_connect() {
  const auto deadline = deadline_in(o_.timeout_s);
  std::string last = "no attempt";
  int fd = -1;
  while (fd < 0) {
    if (Clock::now() >= deadline)
      MXDP_FAIL(where(), ": rank 0 could not be reached within ", o_.timeout_s,
                " s (--comm-timeout / MXDP_COMM_TIMEOUT); last attempt: ", last,
                ". Is rank 0 running, and is that its address?");
    addrinfo hints{};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    addrinfo* res = nullptr;
    const std::string port = std::to_string(o_.port);
    if (const int g = ::getaddrinfo(o_.addr.c_str(), port.c_str(), &hints, &res); g != 0) {
      last = std::string("cannot resolve '") + o_.addr + "': " + gai_strerror(g);
    } else {
      for (addrinfo* a = res; a && fd < 0; a = a->ai_next) {
        const int s = ::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
        if (s < 0) continue;
        set_socket_options(s);
        int e = 0;
        if (::connect(s, a->ai_addr, a->ai_addrlen) != 0) {
          e = errno;
          if (e == EINPROGRESS) {
            pollfd pf{s, POLLOUT, 0};
            const int n = ::poll(&pf, 1, std::max(1, ms_left(deadline)));
            socklen_t len = sizeof e;
            if (n <= 0)
              e = ETIMEDOUT;
            else if (getsockopt(s, SOL_SOCKET, SO_ERROR, &e, &len) != 0)
              e = errno;
          }
        }
        if (e == 0) {
          fd = s;
        } else {
          last = "connect: " + errno_text(e);
          ::close(s);
        }
      }
      ::freeaddrinfo(res);
    }
    if (fd < 0) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  peers_[0] = fd;
  Frame h;
  h.kind = kHello;
  h.seq = kVersion;
  h.bytes = uint64_t(o_.size);
  h.root = o_.rank;
  int err = 0;
  Frame w;
  // Rank 0 judges who is missing; a few seconds' grace lets its report win.
  const auto welcome_by = deadline_in(o_.timeout_s + kGrace_s);
  Io io = transfer(fd, &h, sizeof h, true, welcome_by, &err);
  if (io == Io::Ok) io = transfer(fd, &w, sizeof w, false, welcome_by, &err);
  if (io == Io::Timeout)
    MXDP_FAIL(where(), ": connected, but rank 0 did not let this rank in within ", o_.timeout_s,
              " s (--comm-timeout / MXDP_COMM_TIMEOUT): ranks are missing, or another program holds that port");
  if (io != Io::Ok || w.magic != kMagic)
    MXDP_FAIL(where(), ": rank 0 closed the connection during the rendezvous (did it fail? its error says why)");
  if (w.status != 0) {
    std::string msg(std::min<uint64_t>(w.bytes, 1 << 16), '\0');
    transfer(fd, msg.data(), msg.size(), false, deadline_in(5.0), &err);
    throw Error("rank 0 reports: " + msg);
  }
}

void Rendezvous::collective(uint32_t kind, int root, size_t bytes, void* buf) {
  MXDP_CHECK(!broken_, where(), ": an earlier host collective failed; the rendezvous cannot be used any more");
  if (o_.size == 1) return;
  const auto deadline = deadline_in(o_.timeout_s);
  const uint64_t seq = seq_++;
  auto* b = static_cast<char*>(buf);
  const std::string what = std::string(kind_name(kind)) + " #" + std::to_string(seq) + " (" + std::to_string(bytes) +
                           " bytes" + (kind == kBroadcast ? " from rank " + std::to_string(root) : "") + ")";
  int err = 0;
  auto io_error = [&](Io io, int r) {
    return "rank " + std::to_string(r) + (io == Io::Timeout ? " did not reach host collective " + what + " within " +
                                                                  secs(o_.timeout_s)
                                          : io == Io::Closed ? " closed its connection before host collective " +
                                                                   what + " (did the process exit?)"
                                                             : " failed in host collective " + what + ": " +
                                                                   errno_text(err));
  };
  if (o_.rank != 0) {
    const int fd = peers_[0];
    Frame f;
    f.kind = kind;
    f.seq = seq;
    f.bytes = bytes;
    f.root = root;
    Io io = transfer(fd, &f, sizeof f, true, deadline, &err);
    if (io == Io::Ok) io = transfer(fd, b + in_offset(kind, o_.rank, bytes), in_bytes(kind, o_.rank, root, bytes),
                                    true, deadline, &err);
    Frame g;
    const auto answer_by = deadline + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(kGrace_s));
    if (io == Io::Ok) io = transfer(fd, &g, sizeof g, false, answer_by, &err);
    if (io == Io::Ok && g.status != 0) {
      broken_ = true;
      std::string msg(std::min<uint64_t>(g.bytes, 1 << 16), '\0');
      transfer(fd, msg.data(), msg.size(), false, deadline_in(5.0), &err);
      throw Error("rank 0 reports: " + msg);
    }
    if (io == Io::Ok) io = transfer(fd, b, out_bytes(kind, o_.rank, root, bytes, o_.size), false, answer_by, &err);
    if (io == Io::Timeout) {
      broken_ = true;
      MXDP_FAIL(where(), ": host collective ", what, " was not complete within ", secs(o_.timeout_s),
                " (--comm-timeout / MXDP_COMM_TIMEOUT): rank 0 or another rank is missing from it, stuck before it, "
                "or called a different one");
    }
    if (io != Io::Ok) {
      broken_ = true;
      MXDP_FAIL(where(), ": ", io == Io::Closed ? "rank 0 closed the connection (did it exit? its error says why)"
                                                : "the connection to rank 0 failed: " + errno_text(err));
    }
    return;
  }
  for (int r = 1; r < o_.size; ++r) {
    const int fd = peers_[size_t(r)];
    Frame f;
    Io io = transfer(fd, &f, sizeof f, false, deadline, &err);
    if (io != Io::Ok) server_fail(io_error(io, r));
    if (f.kind != kind || f.seq != seq || f.bytes != bytes || f.root != root)
      server_fail("rank " + std::to_string(r) + " called host collective " + kind_name(f.kind) + " #" +
                  std::to_string(f.seq) + " (" + std::to_string(f.bytes) + " bytes, root " + std::to_string(f.root) +
                  ") where rank 0 called " + what + ": every rank must issue the same host collectives in order");
    io = transfer(fd, b + in_offset(kind, r, bytes), in_bytes(kind, r, root, bytes), false, deadline, &err);
    if (io != Io::Ok) server_fail(io_error(io, r));
  }
  Frame ok;
  ok.kind = kind;
  ok.seq = seq;
  for (int r = 1; r < o_.size; ++r) {
    const int fd = peers_[size_t(r)];
    Io io = transfer(fd, &ok, sizeof ok, true, deadline, &err);
    if (io == Io::Ok) io = transfer(fd, b, out_bytes(kind, r, root, bytes, o_.size), true, deadline, &err);
    if (io != Io::Ok) server_fail(io_error(io, r));
  }
}

void Rendezvous::broadcast(void* buf, size_t bytes, int root) {
  MXDP_CHECK(root >= 0 && root < o_.size, "rendezvous broadcast: root ", root, " out of range for ", o_.size,
             " ranks");
  MXDP_CHECK(bytes == 0 || buf, "rendezvous broadcast: null buffer with ", bytes, " bytes");
  collective(kBroadcast, root, bytes, buf);
}

void Rendezvous::all_gather(void* buf, size_t bytes_per_rank) {
  MXDP_CHECK(bytes_per_rank == 0 || buf, "rendezvous all_gather: null buffer with ", bytes_per_rank, " bytes");
  collective(kAllGather, -1, bytes_per_rank, buf);
}

void Rendezvous::barrier() { collective(kBarrier, -1, 0, nullptr); }

}  // namespace mxdp
