// NCCL backend: GPU buffers, one process per GPU under mpirun.
//
// - Bootstrap: a host group (comm_internal.h): MPI under mpirun, the TCP
//   rendezvous under Slurm or torchrun (no MPI at all), or the process alone;
//   it gives rank, size and local rank, carries rank 0's ncclUniqueId (unless
//   NCCL_COMM_ID is set: then NCCL bootstraps itself there) and the host
//   collectives; the device is the local rank (one GPU per process).
// - The NCCL communicator is non-blocking (config.blocking = 0): no NCCL call
//   can block the host indefinitely (init and lazy connection set-up included);
//   every call is followed by polling ncclCommGetAsyncError with the deadline.
// - Ordering: each op records an event on the caller's stream, the comm stream
//   waits for it, NCCL runs on the comm stream (plus the Avg division), and a
//   done event is recorded. Work::wait() makes the caller's stream wait for the
//   done event (no host sync); Work::test() queries it.
// - No silent hang: a watchdog thread polls every pending op's done event and
//   ncclCommGetAsyncError. An op not complete timeout_s after it was posted, or
//   an asynchronous NCCL error, is reported (op, bytes, rank) and the
//   communicator is aborted (ncclCommAbort), then the job (MPI_Abort).
// - Nothing here enables NVLink multicast (NVLS); NCCL's environment is left
//   as the user set it (NCCL_NVLS_ENABLE=0 on shared machines).
#ifdef MXDP_HAVE_NCCL

#include <cuda_runtime.h>
#include <nccl.h>
#include <sched.h>

#include <atomic>
#include <cstdlib>
#include <condition_variable>
#include <cstdio>
#include <list>
#include <mutex>
#include <thread>

#include "comm/comm_internal.h"
#include "comm/cuda/comm_nccl.h"
#include "util/cuda_check.h"

#define MXDP_NCCL_CHECK(call)                                                                \
  do {                                                                                       \
    ncclResult_t mxdp_nccl_r_ = (call);                                                      \
    if (mxdp_nccl_r_ != ncclSuccess && mxdp_nccl_r_ != ncclInProgress)                       \
      MXDP_FAIL("NCCL call failed: " #call ": ", ncclGetErrorString(mxdp_nccl_r_), " (",     \
                ncclGetLastError(nullptr), ")");                                             \
  } while (0)

namespace mxdp::comm_detail {
namespace {

using clock = std::chrono::steady_clock;

ncclDataType_t nccl_type(DType t) {
  switch (t) {
    case DType::F32: return ncclFloat32;
    case DType::BF16: return ncclBfloat16;
    case DType::F64: return ncclFloat64;
    case DType::U8: return ncclUint8;
  }
  MXDP_FAIL("unknown DType ", int(t));
}

// Avg = Sum, then divide by size on the comm stream (same as the MPI backend;
// NCCL's own ncclAvg pre-multiplies by 1/n, which rounds differently).
ncclRedOp_t nccl_op(RedOp op) { return op == RedOp::Max ? ncclMax : ncclSum; }

// One posted operation, shared by its Work and the watchdog.
struct Pending {
  OpDesc desc;
  cudaEvent_t done = nullptr;
  ~Pending() {
    if (done) cudaEventDestroy(done);
  }
};

class NcclComm;

class NcclWork final : public Work {
 public:
  NcclWork(NcclComm* c, std::shared_ptr<Pending> p, cudaStream_t caller) : c_(c), p_(std::move(p)), caller_(caller) {}
  ~NcclWork() override;
  void wait() override;
  bool test() override;

 private:
  NcclComm* c_;
  std::shared_ptr<Pending> p_;
  cudaStream_t caller_;
  bool waited_ = false;
};

class NcclComm final : public Communicator {
 public:
  explicit NcclComm(const Options& o) : opts_(o) {
    host_ = make_host_group(opts_);
    rank_ = host_->rank();
    size_ = host_->size();
    local_rank_ = host_->local_rank();
    local_size_ = host_->local_size();

    int ndev = 0;
    MXDP_CUDA_CHECK(cudaGetDeviceCount(&ndev));
    MXDP_CHECK(local_size_ <= ndev, "NCCL backend: ", local_size_, " processes on this host but ", ndev,
               " GPUs visible; run one process per GPU (at most as many processes per host as GPUs)");
    device_ = local_rank_;
    MXDP_CUDA_CHECK(cudaSetDevice(device_));
    MXDP_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    MXDP_CUDA_CHECK(cudaEventCreateWithFlags(&ready_, cudaEventDisableTiming));

    // NCCL_COMM_ID: NCCL's own bootstrap at that address; every rank derives
    // the same id from it. Otherwise rank 0's id travels over the host group.
    ncclUniqueId id;
    if (std::getenv("NCCL_COMM_ID")) {
      MXDP_NCCL_CHECK(ncclGetUniqueId(&id));
    } else {
      if (rank_ == 0) MXDP_NCCL_CHECK(ncclGetUniqueId(&id));
      OpDesc d{OpKind::Broadcast, DType::U8, RedOp::Sum, sizeof id, 0};
      d.posted = clock::now();
      host_->broadcast(&id, sizeof id, 0, d);
    }

    ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
    cfg.blocking = 0;
    MXDP_NCCL_CHECK(ncclCommInitRankConfig(&nccl_, size_, id, rank_, &cfg));
    wait_nccl_ready([&] { return "ncclCommInitRankConfig on rank " + std::to_string(rank_) + " of " +
                                 std::to_string(size_); });
    watchdog_ = std::thread([this] { watchdog(); });
  }

  ~NcclComm() override {
    try {
      // Let in-flight work finish (the watchdog still guards the deadline).
      if (!failed_.load()) {
        const auto deadline = clock::now() + seconds(opts_.timeout_s);
        while (cudaStreamQuery(stream_) == cudaErrorNotReady && clock::now() < deadline && !failed_.load())
          std::this_thread::sleep_for(std::chrono::microseconds(100));
      }
      {
        std::lock_guard<std::mutex> lock(mu_);
        stop_ = true;
      }
      cv_.notify_all();
      if (watchdog_.joinable()) watchdog_.join();
      if (!aborted_.load() && nccl_) {
        // Finalize flushes and may wait for peers: non-blocking, with a deadline.
        ncclResult_t st = ncclCommFinalize(nccl_);
        const auto deadline = clock::now() + seconds(opts_.timeout_s);
        while (st == ncclInProgress && clock::now() < deadline) {
          sched_yield();
          if (ncclCommGetAsyncError(nccl_, &st) != ncclSuccess) break;
        }
        if (st == ncclSuccess)
          ncclCommDestroy(nccl_);
        else
          ncclCommAbort(nccl_);
      }
      if (ready_) cudaEventDestroy(ready_);
      if (stream_) cudaStreamDestroy(stream_);
      host_.reset();
    } catch (...) {
    }
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  int local_rank() const override { return local_rank_; }
  int local_size() const override { return local_size_; }
  Backend backend() const override { return Backend::Nccl; }
  bool device_memory() const override { return true; }
  void* comm_stream() const override { return stream_; }

  std::unique_ptr<Work> all_gather_async(const void* in, void* out, size_t bytes, void* stream) override {
    auto* o = static_cast<char*>(out);
    const bool in_place = in == o + size_t(rank_) * bytes;
    check_device(in, bytes, "all_gather in");
    check_device(out, bytes * size_t(size_), "all_gather out");
    MXDP_CHECK(in_place || !overlaps(in, bytes, out, bytes * size_t(size_)),
               "all_gather: in overlaps out but is not out + rank * bytes_per_rank (in place)");
    return enqueue({OpKind::AllGather, DType::U8, RedOp::Sum, bytes, -1}, stream, bytes, [&](cudaStream_t s) {
      return ncclAllGather(in, out, bytes, ncclUint8, nccl_, s);
    });
  }

  std::unique_ptr<Work> reduce_scatter_async(const void* in, void* out, size_t count, DType t, RedOp op,
                                             void* stream) override {
    check_reduction_type(t, op, "reduce_scatter");
    const size_t bytes = count * dtype_size(t);
    check_device(in, bytes * size_t(size_), "reduce_scatter in");
    check_device(out, bytes, "reduce_scatter out");
    MXDP_CHECK(!overlaps(in, bytes * size_t(size_), out, bytes), "reduce_scatter: in and out overlap");
    return enqueue({OpKind::ReduceScatter, t, op, count, -1}, stream, bytes,
                   [&](cudaStream_t s) { return ncclReduceScatter(in, out, count, nccl_type(t), nccl_op(op), nccl_, s); },
                   op == RedOp::Avg ? out : nullptr, count, t);
  }

  std::unique_ptr<Work> all_reduce_async(const void* in, void* out, size_t count, DType t, RedOp op,
                                         void* stream) override {
    check_reduction_type(t, op, "all_reduce");
    const size_t bytes = count * dtype_size(t);
    check_device(in, bytes, "all_reduce in");
    check_device(out, bytes, "all_reduce out");
    MXDP_CHECK(in == out || !overlaps(in, bytes, out, bytes), "all_reduce: in and out overlap but differ");
    return enqueue({OpKind::AllReduce, t, op, count, -1}, stream, bytes,
                   [&](cudaStream_t s) { return ncclAllReduce(in, out, count, nccl_type(t), nccl_op(op), nccl_, s); },
                   op == RedOp::Avg ? out : nullptr, count, t);
  }

  std::unique_ptr<Work> broadcast_async(void* buf, size_t bytes, int root, void* stream) override {
    MXDP_CHECK(root >= 0 && root < size_, "broadcast: root ", root, " out of range for ", size_, " ranks");
    check_device(buf, bytes, "broadcast buf");
    return enqueue({OpKind::Broadcast, DType::U8, RedOp::Sum, bytes, root}, stream, bytes, [&](cudaStream_t s) {
      return ncclBroadcast(buf, buf, bytes, ncclUint8, root, nccl_, s);
    });
  }

  // A host barrier over the host group (MPI or the rendezvous): all ranks
  // have reached this call (GPU work they enqueued before it may still run).
  void barrier() override {
    OpDesc d = host_op(OpKind::Barrier, 0);
    host_call([&] { host_->barrier(d); });
  }

  // Host bytes from root to every rank, over the host group NCCL was
  // bootstrapped with (no device memory needed, same deadline as barrier).
  void host_broadcast(void* buf, size_t bytes, int root) override {
    MXDP_CHECK(root >= 0 && root < size_, "host_broadcast: root ", root, " out of range for ", size_, " ranks");
    if (size_ == 1) return;
    OpDesc d = host_op(OpKind::Broadcast, bytes, root);
    host_call([&] { host_->broadcast(buf, bytes, root, d); });
  }

  // Host bytes of every rank to every rank, in place, over the same group.
  void host_all_gather(void* buf, size_t bytes_per_rank) override {
    if (size_ == 1) return;
    OpDesc d = host_op(OpKind::AllGather, bytes_per_rank);
    host_call([&] { host_->all_gather(buf, bytes_per_rank, d); });
  }

  void throw_if_failed() {
    if (failed_.load()) {
      std::lock_guard<std::mutex> lock(mu_);
      MXDP_FAIL("NCCL communicator has failed earlier: ", fail_msg_);
    }
  }

 private:
  template <class F>
  std::unique_ptr<Work> enqueue(OpDesc d, void* stream, size_t bytes, F&& call, void* avg_buf = nullptr,
                                size_t avg_count = 0, DType avg_type = DType::F32) {
    throw_if_failed();
    d.seq = seq_++;
    d.posted = clock::now();
    if (opts_.check_sizes) host_->check_consistent(d);
    auto caller = static_cast<cudaStream_t>(stream);
    auto p = std::make_shared<Pending>();
    p->desc = d;
    MXDP_CUDA_CHECK(cudaEventCreateWithFlags(&p->done, cudaEventDisableTiming));
    MXDP_CUDA_CHECK(cudaEventRecord(ready_, caller));
    MXDP_CUDA_CHECK(cudaStreamWaitEvent(stream_, ready_, 0));
    if (bytes > 0) {  // every rank has the same size (checkable): all skip or none
      MXDP_NCCL_CHECK(call(stream_));
      wait_nccl_ready([&] { return "issuing " + d.str(rank_, size_); });
      if (avg_buf && size_ > 1) launch_divide(avg_buf, avg_count, avg_type, size_, stream_);
    }
    MXDP_CUDA_CHECK(cudaEventRecord(p->done, stream_));
    {
      std::lock_guard<std::mutex> lock(mu_);
      pending_.push_back(p);
    }
    return std::make_unique<NcclWork>(this, std::move(p), caller);
  }

  void check_device(const void* p, size_t bytes, const char* what) {
    if (bytes == 0) return;
    MXDP_CHECK(p, what, ": null buffer with ", bytes, " bytes");
    cudaPointerAttributes a{};
    MXDP_CUDA_CHECK(cudaPointerGetAttributes(&a, p));
    MXDP_CHECK(a.type == cudaMemoryTypeDevice || a.type == cudaMemoryTypeManaged, what,
               ": the NCCL backend needs GPU memory, got a host pointer");
  }

  // A host collective's description, after the size check (Options::check_sizes).
  OpDesc host_op(OpKind kind, size_t count, int root = -1) {
    throw_if_failed();
    OpDesc d{kind};
    d.count = count;
    d.root = root;
    d.seq = seq_++;
    d.posted = clock::now();
    if (opts_.check_sizes) host_->check_consistent(d);
    return d;
  }
  // A host collective whose failure (a rank gone, the deadline) ends the job
  // like a failed NCCL operation: other ranks may wait in NCCL kernels.
  template <class F>
  void host_call(F&& f) {
    try {
      f();
    } catch (const Error& e) {
      fail(e.what());
    }
  }

  static clock::duration seconds(double s) {
    return std::chrono::duration_cast<clock::duration>(std::chrono::duration<double>(s));
  }

  // After a non-blocking NCCL call: poll until it has been issued.
  void wait_nccl_ready(const std::function<std::string()>& what) {
    const auto deadline = clock::now() + seconds(opts_.timeout_s);
    for (;;) {
      ncclResult_t st = ncclSuccess;
      MXDP_NCCL_CHECK(ncclCommGetAsyncError(nccl_, &st));
      if (st == ncclSuccess) return;
      if (st != ncclInProgress)
        fail("NCCL error in " + what() + ": " + ncclGetErrorString(st) + " (" + ncclGetLastError(nullptr) + ")");
      if (clock::now() > deadline) fail(timeout_message(opts_.timeout_s, what()));
      sched_yield();
    }
  }

  // Records the failure, aborts the NCCL communicator (so that its kernels
  // return), then aborts the job or, in tests, throws.
  void fail(const std::string& why) {
    std::string msg = "comm_nccl.cpp: " + why;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (fail_msg_.empty()) fail_msg_ = msg;
    }
    failed_ = true;
    if (opts_.abort_on_timeout) {
      // ncclCommAbort makes NCCL's kernels return; give it a few seconds, then
      // end the job whatever it does (a hung abort must not hang the job).
      std::atomic<bool>* done = new std::atomic<bool>(false);  // outlives a stuck thread
      std::thread([this, done] { abort_nccl(); *done = true; }).detach();
      const auto give_up = clock::now() + std::chrono::seconds(5);
      while (!done->load() && clock::now() < give_up) std::this_thread::sleep_for(std::chrono::milliseconds(10));
      abort_job(msg);  // prints msg
    }
    abort_nccl();
    MXDP_FAIL(msg);
  }
  void abort_nccl() {
    bool expected = false;
    if (aborted_.compare_exchange_strong(expected, true)) ncclCommAbort(nccl_);
  }

  void watchdog() {
    cudaSetDevice(device_);
    std::unique_lock<std::mutex> lock(mu_);
    while (!stop_) {
      cv_.wait_for(lock, std::chrono::milliseconds(2));
      if (stop_ || failed_.load()) continue;
      std::string why;
      for (auto it = pending_.begin(); it != pending_.end();) {
        cudaError_t e = cudaEventQuery((*it)->done);
        if (e == cudaSuccess) {
          it = pending_.erase(it);
        } else if (e != cudaErrorNotReady) {
          why = std::string("CUDA error while waiting for ") + (*it)->desc.str(rank_, size_) + ": " +
                cudaGetErrorString(e);
          break;
        } else if (clock::now() - (*it)->desc.posted > seconds(opts_.timeout_s)) {
          std::string what = "waiting for " + (*it)->desc.str(rank_, size_);
          if (pending_.size() > 1) {
            what += "; pending on this rank:";
            for (auto& q : pending_) what += " [" + q->desc.str(rank_, size_) + "]";
          }
          why = timeout_message(opts_.timeout_s, what);
          break;
        } else {
          ++it;
        }
      }
      if (why.empty()) {
        ncclResult_t st = ncclSuccess;
        if (ncclCommGetAsyncError(nccl_, &st) == ncclSuccess && st != ncclSuccess && st != ncclInProgress)
          why = std::string("asynchronous NCCL error on rank ") + std::to_string(rank_) + ": " +
                ncclGetErrorString(st) + " (" + ncclGetLastError(nullptr) + ")";
      }
      if (!why.empty()) {
        lock.unlock();
        try {
          fail(why);  // aborts the job unless abort_on_timeout is false
        } catch (const Error&) {
          // tests: the error is kept; the next call on this communicator throws it
        }
        lock.lock();
      }
    }
  }

  Options opts_;
  std::unique_ptr<HostGroup> host_;  // MPI or the rendezvous: bootstrap and host collectives
  int rank_ = 0, size_ = 1, local_rank_ = 0, local_size_ = 1, device_ = 0;
  ncclComm_t nccl_ = nullptr;
  cudaStream_t stream_ = nullptr;
  cudaEvent_t ready_ = nullptr;
  uint64_t seq_ = 0;

  std::mutex mu_;
  std::condition_variable cv_;
  std::list<std::shared_ptr<Pending>> pending_;  // guarded by mu_
  std::string fail_msg_;                         // guarded by mu_
  bool stop_ = false;                            // guarded by mu_
  std::atomic<bool> failed_{false}, aborted_{false};
  std::thread watchdog_;

  friend class NcclWork;
};

NcclWork::~NcclWork() {
  if (waited_) return;
  try {
    wait();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "mxdp: error while destroying an unfinished NCCL Work: %s\n", e.what());
  }
}

void NcclWork::wait() {
  c_->throw_if_failed();
  if (!waited_) MXDP_CUDA_CHECK(cudaStreamWaitEvent(caller_, p_->done, 0));
  waited_ = true;
}

bool NcclWork::test() {
  c_->throw_if_failed();
  cudaError_t e = cudaEventQuery(p_->done);
  if (e == cudaErrorNotReady) return false;
  MXDP_CUDA_CHECK(e);
  return true;
}

}  // namespace

std::unique_ptr<Communicator> make_nccl_communicator(const Communicator::Options& opts) {
  return std::make_unique<NcclComm>(opts);
}

}  // namespace mxdp::comm_detail

#endif  // MXDP_HAVE_NCCL
