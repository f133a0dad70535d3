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
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

namespace mxdp {

enum class DType : uint8_t { F32, BF16, F64, U8 };
enum class RedOp : uint8_t { Sum, Avg, Max };

size_t dtype_size(DType t);
const char* dtype_name(DType t);

enum class Backend : uint8_t { Auto, Self, Mpi, Nccl };

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
  };

  virtual ~Communicator() = default;

  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual Backend backend() const = 0;
  // True when buffers must be device (GPU) memory.
  virtual bool device_memory() const = 0;

  // out[r * bytes_per_rank .. ) = rank r's in[0 .. bytes_per_rank). In place
  // when in == out + rank() * bytes_per_rank.
  virtual std::unique_ptr<Work> all_gather_async(const void* in, void* out, size_t bytes_per_rank,
                                                 void* stream = nullptr) = 0;
  // in holds size() * count elements; out (count elements, distinct from in)
  // gets chunk rank() reduced over ranks. Ops: Sum, Avg. Types: F32, BF16.
  virtual std::unique_ptr<Work> reduce_scatter_async(const void* in, void* out, size_t count,
                                                     DType type, RedOp op,
                                                     void* stream = nullptr) = 0;
  // Ops: Sum, Max. Types: F32, F64. in may equal out.
  virtual std::unique_ptr<Work> all_reduce_async(const void* in, void* out, size_t count,
                                                 DType type, RedOp op,
                                                 void* stream = nullptr) = 0;
  virtual std::unique_ptr<Work> broadcast_async(void* buf, size_t bytes, int root,
                                                void* stream = nullptr) = 0;
  virtual void barrier() = 0;

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
// (MPI_Init_thread) and finalised at exit. Without mpirun, size() == 1.
std::unique_ptr<Communicator> make_communicator(const Communicator::Options& opts = {});

}  // namespace mxdp
