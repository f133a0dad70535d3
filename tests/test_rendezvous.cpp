// The TCP rendezvous (comm/rendezvous.h) with several processes on loopback:
// each rank is a forked child that runs the rendezvous and reports back to
// the test over a pipe. Checked: broadcast from every root, all-gather and
// barriers against values computed here by hand (rank-dependent bytes); a
// rank that never arrives (the error names it, on rank 0 and on the ranks that
// came); a port in use (the error names it); a rank that skips a collective;
// two processes with the same rank; rank 0 unreachable.
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "comm/rendezvous.h"
#include "util/check.h"

namespace mxdp {
namespace {

// A port nobody listens on now (bound to port 0, read back, closed).
int free_port() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = 0;
  EXPECT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  socklen_t len = sizeof a;
  getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  close(fd);
  return ntohs(a.sin_port);
}

struct Outcome {
  int rank;
  bool ok;          // the body returned without an exception
  std::string msg;  // the exception's text, or the body's own complaint
};

// Runs body(rank) in one forked child per rank in `ranks` of a world of
// `size`; a child reports "OK" or the error it caught. Children that are not
// done after `limit_s` are killed (reported as such).
std::vector<Outcome> run_ranks(const std::vector<int>& ranks, const std::function<std::string(int)>& body,
                               double limit_s = 20) {
  struct Child {
    int rank;
    pid_t pid;
    int fd;
  };
  std::vector<Child> kids;
  for (int r : ranks) {
    int p[2];
    EXPECT_EQ(pipe(p), 0);
    const pid_t pid = fork();
    if (pid == 0) {
      close(p[0]);
      std::string out;
      try {
        out = body(r);
        if (out.empty()) out = "OK";
      } catch (const std::exception& e) {
        out = std::string("ERROR ") + e.what();
      }
      size_t off = 0;
      while (off < out.size()) {
        const ssize_t w = write(p[1], out.data() + off, out.size() - off);
        if (w <= 0) break;
        off += size_t(w);
      }
      close(p[1]);
      _exit(0);
    }
    close(p[1]);
    kids.push_back({r, pid, p[0]});
  }
  std::vector<Outcome> res;
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::duration<double>(limit_s);
  for (auto& k : kids) {
    int status = 0;
    while (waitpid(k.pid, &status, WNOHANG) == 0) {
      if (std::chrono::steady_clock::now() > give_up) {
        kill(k.pid, SIGKILL);
        waitpid(k.pid, &status, 0);
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    std::string out;
    char buf[4096];
    ssize_t n;
    while ((n = read(k.fd, buf, sizeof buf)) > 0) out.append(buf, size_t(n));
    close(k.fd);
    if (out.empty()) out = "ERROR killed or crashed (no report)";
    res.push_back({k.rank, out == "OK", out});
  }
  return res;
}

Rendezvous::Options opts(int port, int rank, int size, double timeout_s) {
  Rendezvous::Options o;
  o.addr = "127.0.0.1";
  o.port = port;
  o.origin = "test port";
  o.rank = rank;
  o.size = size;
  o.timeout_s = timeout_s;
  return o;
}

bool contains(const std::string& s, const std::string& what) { return s.find(what) != std::string::npos; }

TEST(Rendezvous, CollectivesAcrossFourProcesses) {
  const int n = 4, port = free_port();
  auto body = [&](int rank) -> std::string {
    Rendezvous rv(opts(port, rank, n, 20));
    if (rv.rank() != rank || rv.size() != n) return "wrong rank/size";
    // Broadcast from every root: 1000 bytes, byte i = (root * 31 + i) mod 251.
    for (int root = 0; root < n; ++root) {
      std::vector<uint8_t> b(1000, 0xEE);
      if (rank == root)
        for (size_t i = 0; i < b.size(); ++i) b[i] = uint8_t((root * 31 + i) % 251);
      rv.broadcast(b.data(), b.size(), root);
      for (size_t i = 0; i < b.size(); ++i)
        if (b[i] != uint8_t((root * 31 + i) % 251))
          return "broadcast from " + std::to_string(root) + ": byte " + std::to_string(i) + " wrong";
    }
    // All-gather, in place: rank r's 3 bytes are {r, r + 10, r + 20}.
    std::vector<uint8_t> g(3 * n, 0xEE);
    for (int k = 0; k < 3; ++k) g[size_t(3 * rank + k)] = uint8_t(rank + 10 * k);
    rv.all_gather(g.data(), 3);
    const std::vector<uint8_t> want = {0, 10, 20, 1, 11, 21, 2, 12, 22, 3, 13, 23};
    if (g != want) return "all_gather wrong";
    // A large broadcast (4 MB: more than a socket buffer) and an empty one.
    std::vector<uint8_t> big(4 << 20, 0);
    if (rank == 2)
      for (size_t i = 0; i < big.size(); ++i) big[i] = uint8_t(i * 7 + 3);
    rv.broadcast(big.data(), big.size(), 2);
    for (size_t i = 0; i < big.size(); i += 4093)
      if (big[i] != uint8_t(i * 7 + 3)) return "large broadcast wrong at " + std::to_string(i);
    rv.broadcast(nullptr, 0, 1);
    rv.all_gather(nullptr, 0);
    for (int i = 0; i < 5; ++i) rv.barrier();
    return "";
  };
  for (const Outcome& o : run_ranks({0, 1, 2, 3}, body)) EXPECT_TRUE(o.ok) << "rank " << o.rank << ": " << o.msg;
}

TEST(Rendezvous, OthersWaitForRankZeroToStart) {
  // Ranks 1 and 2 start 1.5 s before rank 0: they retry until it listens.
  const int port = free_port();
  auto body = [&](int rank) -> std::string {
    if (rank == 0) std::this_thread::sleep_for(std::chrono::milliseconds(1500));
    Rendezvous rv(opts(port, rank, 3, 20));
    int v[3] = {0, 0, 0};
    v[rank] = 100 + rank;
    rv.all_gather(v, sizeof(int));
    return v[0] == 100 && v[1] == 101 && v[2] == 102 ? "" : "all_gather wrong";
  };
  for (const Outcome& o : run_ranks({0, 1, 2}, body)) EXPECT_TRUE(o.ok) << "rank " << o.rank << ": " << o.msg;
}

TEST(Rendezvous, MissingRankIsNamedAfterTheTimeout) {
  // A world of 4 where rank 2 never starts; timeout 1 s.
  const int port = free_port();
  auto body = [&](int rank) -> std::string {
    Rendezvous rv(opts(port, rank, 4, 1.0));
    return "rendezvous completed without rank 2";
  };
  const auto t0 = std::chrono::steady_clock::now();
  const auto res = run_ranks({0, 1, 3}, body);
  const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_LT(took, 10.0);
  for (const Outcome& o : res) {
    EXPECT_FALSE(o.ok);
    EXPECT_TRUE(contains(o.msg, "rank 2 of 4 has not connected within 1 s")) << "rank " << o.rank << ": " << o.msg;
  }
}

TEST(Rendezvous, SeveralMissingRanksAreNamed) {
  const int port = free_port();
  auto body = [&](int rank) -> std::string {
    Rendezvous rv(opts(port, rank, 5, 1.0));
    return "completed";
  };
  const auto res = run_ranks({0, 3}, body);
  for (const Outcome& o : res)
    EXPECT_TRUE(contains(o.msg, "ranks 1, 2, 4 of 5 have not connected")) << "rank " << o.rank << ": " << o.msg;
}

TEST(Rendezvous, PortInUseIsNamed) {
  const int port = free_port();
  const int blocker = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_ANY);
  a.sin_port = htons(uint16_t(port));
  ASSERT_EQ(bind(blocker, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  ASSERT_EQ(listen(blocker, 4), 0);
  try {
    Rendezvous rv(opts(port, 0, 2, 5));
    ADD_FAILURE() << "rank 0 listened on a port in use";
  } catch (const Error& e) {
    EXPECT_TRUE(contains(e.what(), "port " + std::to_string(port) + " (test port)")) << e.what();
    EXPECT_TRUE(contains(e.what(), "in use")) << e.what();
  }
  close(blocker);
}

TEST(Rendezvous, RankZeroUnreachable) {
  const int port = free_port();
  try {
    Rendezvous rv(opts(port, 1, 2, 0.5));
    ADD_FAILURE() << "connected to nobody";
  } catch (const Error& e) {
    EXPECT_TRUE(contains(e.what(), "rank 0 could not be reached within 0.5 s")) << e.what();
    EXPECT_TRUE(contains(e.what(), "127.0.0.1:" + std::to_string(port))) << e.what();
  }
}

TEST(Rendezvous, RankSkippingACollectiveIsNamed) {
  // Rank 1 calls a barrier where ranks 0 and 2 call an all-gather.
  const int port = free_port();
  auto body = [&](int rank) -> std::string {
    Rendezvous rv(opts(port, rank, 3, 5));
    int v[3] = {};
    if (rank == 1)
      rv.barrier();
    else
      rv.all_gather(v, sizeof(int));
    return "no error";
  };
  for (const Outcome& o : run_ranks({0, 1, 2}, body)) {
    EXPECT_FALSE(o.ok);
    EXPECT_TRUE(contains(o.msg, "rank 1 called host collective barrier #0")) << "rank " << o.rank << ": " << o.msg;
  }
}

// The same with data in flight: ranks 0 and 2 all-gather 4 MB each, which
// rank 0 never reads once rank 1's barrier stops it. A rank 0 that closed its
// sockets with rank 2's bytes unread would reset the connection (TCP sends RST,
// not FIN), and rank 2 would see "connection reset" instead of the reason; so
// rank 0 lets its peers finish and read the reason before it closes.
TEST(Rendezvous, RankSkippingACollectiveIsNamedWithDataInFlight) {
  const int port = free_port();
  constexpr size_t kBytes = size_t(4) << 20;
  auto body = [&](int rank) -> std::string {
    Rendezvous rv(opts(port, rank, 3, 5));
    std::vector<char> v(3 * kBytes, char(rank));
    if (rank == 1)
      rv.barrier();
    else
      rv.all_gather(v.data(), kBytes);
    return "no error";
  };
  for (const Outcome& o : run_ranks({0, 1, 2}, body)) {
    EXPECT_FALSE(o.ok);
    EXPECT_TRUE(contains(o.msg, "rank 1 called host collective barrier #0")) << "rank " << o.rank << ": " << o.msg;
  }
}

TEST(Rendezvous, RankThatExitsIsNamed) {
  const int port = free_port();
  auto body = [&](int rank) -> std::string {
    Rendezvous rv(opts(port, rank, 3, 5));
    if (rank == 2) return "";  // leaves: its connection closes
    rv.barrier();
    return "no error";
  };
  for (const Outcome& o : run_ranks({0, 1, 2}, body)) {
    if (o.rank == 2) continue;
    EXPECT_TRUE(contains(o.msg, "rank 2 closed its connection")) << "rank " << o.rank << ": " << o.msg;
  }
}

TEST(Rendezvous, DuplicateRankIsAnError) {
  const int port = free_port();
  auto body = [&](int who) -> std::string {
    Rendezvous rv(opts(port, who == 0 ? 0 : 1, 3, 5));  // two processes claim rank 1
    return "no error";
  };
  const auto res = run_ranks({0, 1, 2}, body);
  EXPECT_TRUE(contains(res[0].msg, "rank 1 connected twice")) << res[0].msg;
}

// A process started with another world size is refused by rank 0 with a
// sentence that says so; the process that connected is told the same reason.
TEST(Rendezvous, WrongWorldSizeIsAnError) {
  const int port = free_port();
  auto size_body = [&](int who) -> std::string {
    Rendezvous rv(opts(port, who, who == 0 ? 2 : 3, 5));  // rank 1 thinks the job has 3 ranks
    return "no error";
  };
  const auto res = run_ranks({0, 1}, size_body);
  EXPECT_TRUE(contains(res[0].msg, "a process of a 3-rank job connected to this 2-rank one")) << res[0].msg;
  EXPECT_TRUE(contains(res[1].msg, "3-rank job")) << res[1].msg;
}

TEST(Rendezvous, OneRankNeedsNoPort) {
  Rendezvous rv(opts(0, 0, 1, 1));
  int v = 7;
  rv.broadcast(&v, sizeof v, 0);
  rv.all_gather(&v, sizeof v);
  rv.barrier();
  EXPECT_EQ(v, 7);
}

}  // namespace
}  // namespace mxdp
