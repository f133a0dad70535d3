// Internals shared by the communicator backends (comm*.cpp, cuda/comm_nccl*).
// Not part of the public API: include comm.h instead.
#pragma once

#include <mpi.h>

#include <chrono>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <string>

#include "util/check.h"
#include "formats/codec.h"  // codec::bf16_from_f32 / bf16_to_f32 (the one BF16 codec)
#include "comm/comm.h"

// Every MPI call is checked; the error carries file:line, the call and MPI's
// own error string (communicators use MPI_ERRORS_RETURN, so errors come back).
#define MXDP_MPI_CHECK(call)                                                     \
  do {                                                                           \
    int mxdp_mpi_err_ = (call);                                                  \
    if (mxdp_mpi_err_ != MPI_SUCCESS)                                            \
      MXDP_FAIL("MPI call failed: " #call ": ", ::mxdp::comm_detail::mpi_error_string(mxdp_mpi_err_)); \
  } while (0)

namespace mxdp::comm_detail {

std::string mpi_error_string(int err);

// MPI_Init_thread once per process (if nobody else did); MPI_Finalize at exit
// if we initialised it. Returns MPI_COMM_WORLD's size.
void mpi_ensure_initialized();
// True when this process was started by a launcher (mpirun, srun...).
bool launched_by_mpirun();
// Rank and size of this host's processes (MPI_Comm_split_type SHARED).
void mpi_local_rank(MPI_Comm comm, int* local_rank, int* local_size);
// The MPI bootstrap of a communicator backend (MPI and NCCL): MPI initialised
// if needed, *comm = a duplicate of MPI_COMM_WORLD with MPI_ERRORS_RETURN, and
// this process's rank, size, local rank and local size in it.
void mpi_bootstrap(MPI_Comm* comm, int* rank, int* size, int* local_rank, int* local_size);
// Frees *comm from mpi_bootstrap unless MPI is already finalized (destructors).
void mpi_release(MPI_Comm* comm);
// Writes a last message to stderr and aborts the whole job.
[[noreturn]] void abort_job(const std::string& message);

// Options with the environment applied (MXDP_COMM_TIMEOUT, MXDP_COMM_CHECK).
Communicator::Options resolve_options(Communicator::Options opts);

// What an operation was, for error reports and the size check.
enum class OpKind : int64_t { AllGather = 1, ReduceScatter, AllReduce, Broadcast, Barrier };
const char* op_kind_name(OpKind k);

struct OpDesc {
  OpKind kind;
  DType type = DType::U8;
  RedOp op = RedOp::Sum;
  size_t count = 0;  // elements (bytes for all-gather/broadcast)
  int root = -1;
  uint64_t seq = 0;  // per-communicator sequence number
  std::chrono::steady_clock::time_point posted{};
  std::string str(int rank, int size) const;
};

// Waits for req, driving MPI progress, until done or timeout_s has passed.
// On timeout: reports describe() (called only then); aborts the job, or throws
// mxdp::Error when abort_on_timeout is false.
void mpi_wait_deadline(MPI_Request* req, double timeout_s, bool abort_on_timeout,
                       const std::function<std::string()>& describe);
// The text of a timeout report (shared by the MPI and NCCL backends).
std::string timeout_message(double timeout_s, const std::string& what);

// The cross-rank consistency check (Options::check_sizes): a small all-reduce
// of (min, max) of every field of d; throws mxdp::Error on every rank if any
// differs.
void mpi_check_consistent(MPI_Comm comm, const OpDesc& d, int rank, int size, double timeout_s,
                          bool abort_on_timeout);

// The same check's verdict from the per-field minima and maxima of the six
// values (operation, type, reduction, count, root, sequence number) over all
// ranks: throws mxdp::Error naming the fields that differ.
void check_consistent_ranges(const int64_t mn[6], const int64_t mx[6], const OpDesc& d, int rank, int size);
// The six values of d, in that order.
void op_fields(const OpDesc& d, int64_t v[6]);

// The host-side group a device communicator (NCCL) is bootstrapped with and
// runs its host collectives over: MPI (under mpirun or PMI), the TCP
// rendezvous (Slurm, torchrun: rendezvous.h), or the process alone (one rank,
// no launcher). Each call blocks, bounded by the options' timeout; d
// describes it in reports. Errors: mxdp::Error (MPI: a timeout aborts the job
// unless abort_on_timeout is false).
class HostGroup {
 public:
  virtual ~HostGroup() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual int local_rank() const = 0;
  virtual int local_size() const = 0;
  virtual void broadcast(void* buf, size_t bytes, int root, const OpDesc& d) = 0;
  virtual void all_gather(void* buf, size_t bytes_per_rank, const OpDesc& d) = 0;  // in place
  virtual void barrier(const OpDesc& d) = 0;
  virtual void check_consistent(const OpDesc& d) = 0;  // Options::check_sizes
};
std::unique_ptr<HostGroup> make_mpi_host_group(const Communicator::Options& opts);
// The group this process's launcher calls for (launcher.h): MPI under Open MPI
// and PMI, the rendezvous under Slurm and torchrun, else the process alone.
std::unique_ptr<HostGroup> make_host_group(const Communicator::Options& opts);

MPI_Datatype mpi_datatype(DType t);
// The MPI_Op for a reduction: built-in for F32/F64, user-defined for BF16.
MPI_Op mpi_op(DType t, RedOp op);

void check_reduction_type(DType t, RedOp op, const char* where);

// Avg's second half on the host: buf[i] = buf[i] / n in the element type.
void divide_host(void* buf, size_t count, DType t, int n);

// True when [a, a+na) and [b, b+nb) share a byte.
inline bool overlaps(const void* a, size_t na, const void* b, size_t nb) {
  auto pa = reinterpret_cast<uintptr_t>(a), pb = reinterpret_cast<uintptr_t>(b);
  return na && nb && pa < pb + nb && pb < pa + na;
}

std::unique_ptr<Communicator> make_self_communicator(const Communicator::Options& opts);
std::unique_ptr<Communicator> make_mpi_communicator(const Communicator::Options& opts);
#ifdef MXDP_HAVE_NCCL
std::unique_ptr<Communicator> make_nccl_communicator(const Communicator::Options& opts);
#endif

}  // namespace mxdp::comm_detail
