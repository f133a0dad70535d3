// Rendezvous: the ranks of a job launched without MPI (Slurm's srun, torchrun)
// meet over TCP, so that the NCCL communicator needs no MPI.
//
// Rank 0 listens on `port` (every interface) and waits for the other size-1
// ranks; they connect to addr:port, retrying until the deadline. Rank 0 is the
// hub of a star: each small host collective (broadcast, all-gather, barrier)
// goes in to rank 0 and back out. For control data (the ncclUniqueId, flags,
// error strings, checkpoint metadata), not for tensors.
//
// Every step has the deadline timeout_s. Errors are mxdp::Error, on every rank
// still connected:
//   - a rank that never connects: rank 0 names the missing ranks and tells the
//     ranks that did connect;
//   - rank 0 unreachable: the address, the port and the last reason;
//   - the port taken: names the port and where it came from (`origin`);
//   - a rank that skips a collective, calls another one or another size, or
//     exits: named by rank 0, which tells the others.
// Frames are raw fixed-width integers: every rank runs the same binary on
// the same architecture.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace mxdp {

class Rendezvous {
 public:
  struct Options {
    std::string addr = "127.0.0.1";  // rank 0's host, for the others
    int port = 0;
    std::string origin = "port";     // where addr/port came from, e.g. "MASTER_ADDR:MASTER_PORT"
    int rank = 0, size = 1;
    double timeout_s = 300.0;
  };

  // Returns once all size ranks are connected (rank 0) or this rank is
  // connected and rank 0 has seen all of them (others).
  explicit Rendezvous(const Options& o);
  ~Rendezvous();
  Rendezvous(const Rendezvous&) = delete;
  Rendezvous& operator=(const Rendezvous&) = delete;

  int rank() const { return o_.rank; }
  int size() const { return o_.size; }

  // buf (bytes) of rank root to every rank.
  void broadcast(void* buf, size_t bytes, int root);
  // In place: rank r's bytes_per_rank bytes at buf + r * bytes_per_rank reach
  // every rank's buf.
  void all_gather(void* buf, size_t bytes_per_rank);
  void barrier();

 private:
  struct Frame;
  void server_accept();
  void server_listen();
  std::string hello_problem(const Frame& h) const;
  void client_connect();
  // One host collective through rank 0 (kind: broadcast, all-gather, barrier).
  void collective(uint32_t kind, int root, size_t bytes, void* buf);
  [[noreturn]] void server_fail(const std::string& why);
  std::string where() const;

  Options o_;
  int listen_fd_ = -1;
  std::vector<int> peers_;  // rank 0: fd of rank r (peers_[0] unused); others: peers_[0] = rank 0
  uint64_t seq_ = 0;
  bool broken_ = false;
};

}  // namespace mxdp
