// The host groups of a device communicator that need no MPI (comm_internal.h):
// the TCP rendezvous of a job started by Slurm or torchrun, and the process
// alone. make_host_group() chooses by launcher (launcher.h); the MPI group is
// in comm_mpi.cpp.
#include <algorithm>
#include <vector>

#include "comm/comm_internal.h"
#include "comm/launcher.h"
#include "comm/rendezvous.h"

namespace mxdp::comm_detail {
namespace {

class RendezvousGroup final : public HostGroup {
 public:
  RendezvousGroup(const LaunchInfo& l, const Communicator::Options& o)
      : local_rank_(l.local_rank), local_size_(l.local_size), rdzv_(options(l, o)) {}
  int rank() const override { return rdzv_.rank(); }
  int size() const override { return rdzv_.size(); }
  int local_rank() const override { return local_rank_; }
  int local_size() const override { return local_size_; }
  void broadcast(void* buf, size_t bytes, int root, const OpDesc&) override { rdzv_.broadcast(buf, bytes, root); }
  void all_gather(void* buf, size_t bytes_per_rank, const OpDesc&) override { rdzv_.all_gather(buf, bytes_per_rank); }
  void barrier(const OpDesc&) override { rdzv_.barrier(); }
  void check_consistent(const OpDesc& d) override {
    std::vector<int64_t> all(6 * size_t(size()));
    op_fields(d, all.data() + 6 * size_t(rank()));
    rdzv_.all_gather(all.data(), 6 * sizeof(int64_t));
    int64_t mn[6], mx[6];
    for (int i = 0; i < 6; ++i) mn[i] = mx[i] = all[size_t(i)];
    for (size_t r = 1; r < size_t(size()); ++r)
      for (int i = 0; i < 6; ++i) mn[i] = std::min(mn[i], all[6 * r + i]), mx[i] = std::max(mx[i], all[6 * r + i]);
    check_consistent_ranges(mn, mx, d, rank(), size());
  }

 private:
  static Rendezvous::Options options(const LaunchInfo& l, const Communicator::Options& o) {
    Rendezvous::Options r;
    r.addr = l.rdzv_addr;
    r.port = l.rdzv_port;
    r.origin = l.rdzv_origin;
    r.rank = l.rank;
    r.size = l.size;
    r.timeout_s = o.timeout_s;
    return r;
  }
  int local_rank_, local_size_;
  Rendezvous rdzv_;
};

// One rank, no launcher: nothing to meet.
class AloneGroup final : public HostGroup {
 public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  int local_rank() const override { return 0; }
  int local_size() const override { return 1; }
  void broadcast(void*, size_t, int root, const OpDesc&) override {
    MXDP_CHECK(root == 0, "host broadcast: root ", root, " out of range for 1 rank");
  }
  void all_gather(void*, size_t, const OpDesc&) override {}
  void barrier(const OpDesc&) override {}
  void check_consistent(const OpDesc&) override {}
};

}  // namespace

std::unique_ptr<HostGroup> make_host_group(const Communicator::Options& opts) {
  const LaunchInfo& l = this_launch();
  switch (l.launcher) {
    case Launcher::Slurm:
    case Launcher::Torchrun: return std::make_unique<RendezvousGroup>(l, opts);
    case Launcher::OpenMpi:
    case Launcher::Pmi: return make_mpi_host_group(opts);
    case Launcher::None: break;
  }
  // Started by another MPI launcher (PMIx without Slurm, MPICH's Hydra): MPI.
  if (launched_by_mpirun()) return make_mpi_host_group(opts);
  return std::make_unique<AloneGroup>();
}

}  // namespace mxdp::comm_detail
