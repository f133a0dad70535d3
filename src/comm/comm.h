// Communicator: the only way any part of mxdp talks to other ranks.
//
// One interface, three backends:
//   - MPI  : buffers in host memory, non-blocking MPI collectives (Open MPI).
//   - NCCL : buffers in GPU memory, one process per GPU under mpirun; the NCCL
//            unique id is broadcast over MPI; the device is chosen by local rank.
//   - Self : one rank (mxdp run without mpirun): every collective is a copy, so
//            callers never branch on the world size.
//
// Ordering on the GPU: an operation enqueued with a caller stream runs on the
// communicator's own stream, ordered after the caller's stream by an event;
// Work::wait() makes the caller's stream wait for the operation (no host
// synchronisation). On the CPU, wait() blocks until the operation completes.
//
// No silent hangs: every wait has a deadline (Options::timeout_s); past it the
// operation is reported with what was pending and the job is aborted.
//
// Buffers: all-gather may be in place (in == out + rank * bytes_per_rank).
// Reduce-scatter, all-reduce and broadcast take distinct or identical buffers
// as documented on each call.
//
// Reductions (reduce-scatter, all-reduce) take F32, BF16 or F64 with Sum, Avg
// or Max. BF16 is summed pairwise in fp32 and rounded to nearest-even after
// every addition. Avg is Sum followed by a division by size() (x / n in the
// element type's arithmetic, then RNE for BF16), the same on every backend.
// Results are deterministic run to run for the same inputs and rank count.
//
// Threads: a communicator and its Works are used from one thread at a time.
// All ranks must issue the same collectives in the same order with the same
// sizes; with Options::check_sizes (env MXDP_COMM_CHECK=1) a mismatch (or a
// rank that skipped a collective) is reported on every rank as an mxdp::Error
// before anything is transferred.
//
// Environment: MXDP_COMM_TIMEOUT=<seconds> overrides Options::timeout_s;
// MXDP_COMM_CHECK=1 turns check_sizes on. See docs/comm.md.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "util/check.h"

namespace mxdp {

enum class DType : uint8_t { F32, BF16, F64, U8 };
enum class RedOp : uint8_t { Sum, Avg, Max };

size_t dtype_size(DType t);
const char* dtype_name(DType t);
const char* redop_name(RedOp op);

enum class Backend : uint8_t { Auto, Self, Mpi, Nccl };
const char* backend_name(Backend b);

// A pending asynchronous operation. Destroying an unfinished Work waits for it.
class Work {
 public:
  virtual ~Work() = default;
  // Blocks (CPU) or orders the caller's stream after the operation (GPU).
  virtual void wait() = 0;
  // Non-blocking: true once the operation has completed (and then wait() is free).
  virtual bool test() = 0;
};

class Communicator {
 public:
  struct Options {
    Backend backend = Backend::Auto;  // Auto: Self for one rank, else MPI
    double timeout_s = 300.0;         // a collective not done by then is an error
    // Before every collective, an extra small all-reduce compares (op, type,
    // count, root, sequence number) across ranks and fails on a mismatch.
    // Also on when the environment has MXDP_COMM_CHECK=1.
    bool check_sizes = false;
    // On timeout: report and abort the whole job (MPI_Abort), the default.
    // false (tests only): throw mxdp::Error instead; the communicator is then
    // unusable unless the missing peers catch up (MPI only).
    bool abort_on_timeout = true;
  };

  virtual ~Communicator() = default;

  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual Backend backend() const = 0;
  // Rank among the processes of this host and their number (one GPU each
  // under NCCL: the device is local_rank()).
  virtual int local_rank() const { return 0; }
  virtual int local_size() const { return 1; }
  // NCCL: the communicator's own cudaStream_t (collectives run there);
  // nullptr on host backends.
  virtual void* comm_stream() const { return nullptr; }
  // True when buffers must be device (GPU) memory.
  virtual bool device_memory() const = 0;

  // out[r * bytes_per_rank .. ) = rank r's in[0 .. bytes_per_rank). In place
  // when in == out + rank() * bytes_per_rank.
  virtual std::unique_ptr<Work> all_gather_async(const void* in, void* out, size_t bytes_per_rank,
                                                 void* stream = nullptr) = 0;
  // in holds size() * count elements; out (count elements, not overlapping in)
  // gets chunk rank() reduced over ranks. Ops: Sum, Avg (Max also works).
  // Types: F32, BF16 (F64 also works).
  virtual std::unique_ptr<Work> reduce_scatter_async(const void* in, void* out, size_t count,
                                                     DType type, RedOp op,
                                                     void* stream = nullptr) = 0;
  // Ops: Sum, Max (Avg also works). Types: F32, F64 (BF16 also works).
  // in may equal out; otherwise they must not overlap.
  virtual std::unique_ptr<Work> all_reduce_async(const void* in, void* out, size_t count,
                                                 DType type, RedOp op,
                                                 void* stream = nullptr) = 0;
  // buf (bytes) of rank root is copied to every rank's buf.
  virtual std::unique_ptr<Work> broadcast_async(void* buf, size_t bytes, int root,
                                                void* stream = nullptr) = 0;
  // Host-side barrier over all ranks (with the same deadline as collectives).
  virtual void barrier() = 0;
  // Host memory from root to every rank, on any backend (NCCL: over its MPI
  // bootstrap communicator). Blocking; for small control data (errors, flags).
  // One rank: nothing moves.
  virtual void host_broadcast(void* buf, size_t bytes, int root) {
    MXDP_CHECK(!device_memory(), "host_broadcast: a device-memory communicator must provide its own");
    if (size() == 1) return;
    broadcast(buf, bytes, root);
  }
  // Host memory, in place: rank r's bytes_per_rank bytes at
  // buf + r * bytes_per_rank reach every rank's buf. Blocking, on any backend
  // (NCCL: over its MPI bootstrap communicator); for small values (flags, sums).
  virtual void host_all_gather(void* buf, size_t bytes_per_rank) {
    MXDP_CHECK(!device_memory(), "host_all_gather: a device-memory communicator must provide its own");
    if (size() == 1) return;
    uint8_t* h = static_cast<uint8_t*>(buf);
    all_gather(h + size_t(rank()) * bytes_per_rank, h, bytes_per_rank);
  }

  // Blocking conveniences.
  void all_gather(const void* in, void* out, size_t bytes_per_rank, void* stream = nullptr) {
    all_gather_async(in, out, bytes_per_rank, stream)->wait();
  }
  void reduce_scatter(const void* in, void* out, size_t count, DType t, RedOp op, void* stream = nullptr) {
    reduce_scatter_async(in, out, count, t, op, stream)->wait();
  }
  void all_reduce(const void* in, void* out, size_t count, DType t, RedOp op, void* stream = nullptr) {
    all_reduce_async(in, out, count, t, op, stream)->wait();
  }
  void broadcast(void* buf, size_t bytes, int root, void* stream = nullptr) {
    broadcast_async(buf, bytes, root, stream)->wait();
  }
};

// Creates the communicator for this process. MPI is initialised on first use
// (MPI_Init_thread) and finalised at exit. Without a launcher, size() == 1.
// Auto: Self when not launched by mpirun or when the job has one rank, else
// MPI. Nccl must be asked for (it needs GPU buffers); it is bootstrapped over
// MPI under mpirun, over a TCP rendezvous under Slurm or torchrun (comm/launcher.h).
// Auto and Mpi refuse a job that a launcher started with several ranks but no
// MPI world (torchrun, srun without a PMI plugin), and an MPI world whose size
// is not the launcher's, rather than let each process train alone.
std::unique_ptr<Communicator> make_communicator(const Communicator::Options& opts = {});

// The launcher that started this process and what it said, for run headers:
// "torchrun: rank 0 of 2 (local 0 of 2), rendezvous 10.0.0.1:29501 (...)".
std::string launch_description();

// Runs fn on rank 0 only. Then every rank returns normally, or throws the error
// fn threw on rank 0, so that no rank goes on alone into a collective the others
// never reach. `broadcast(host_ptr, bytes)` moves host bytes from rank 0 to all;
// empty means comm.host_broadcast (any backend).
void on_rank0(Communicator& comm, const std::function<void()>& fn,
              const std::function<void(void*, size_t)>& broadcast = {});

// Runs fn on every rank. Then every rank returns normally, or every rank
// throws the error of the lowest rank whose fn threw ("on rank r: ..." when
// not every rank failed). Its where() stays with the rank that failed.
void on_every_rank(Communicator& comm, const std::function<void()>& fn);

}  // namespace mxdp
