// MPI backend: host buffers, non-blocking MPI collectives on a private
// duplicate of MPI_COMM_WORLD, and the MPI runtime shared with the NCCL
// backend (initialisation, local rank, the deadline wait, the size check).
//
// Non-blocking collectives in Open MPI progress only inside MPI calls, so
// Work::wait() polls MPI_Test (yielding the core between polls: CI runs 4
// ranks on 2 cores) and checks the clock; past the deadline it reports what
// was pending and aborts the job.
#include <sched.h>

#include <cmath>
#include <cstdio>
#include <climits>
#include <list>
#include <mutex>
#include <sstream>

#include "comm/comm_internal.h"

namespace mxdp::comm_detail {

std::string mpi_error_string(int err) {
  char s[MPI_MAX_ERROR_STRING];
  int n = 0;
  if (MPI_Error_string(err, s, &n) != MPI_SUCCESS) return "MPI error " + std::to_string(err);
  return std::string(s, size_t(n));
}

namespace {

bool g_we_initialized = false;

void finalize_at_exit() {
  int inited = 0, finalized = 0;
  MPI_Initialized(&inited);
  MPI_Finalized(&finalized);
  if (inited && !finalized) MPI_Finalize();
}

// BF16 reductions: widen to fp32, combine, round to nearest even. One rounding
// per pairwise combination, so the result does not depend on the order of the
// combinations whenever the exact sum is representable.
void bf16_sum_fn(void* in, void* inout, int* len, MPI_Datatype*) {
  const auto* a = static_cast<const uint16_t*>(in);
  auto* b = static_cast<uint16_t*>(inout);
  for (int i = 0; i < *len; ++i) b[i] = codec::bf16_from_f32(codec::bf16_to_f32(a[i]) + codec::bf16_to_f32(b[i]));
}
void bf16_max_fn(void* in, void* inout, int* len, MPI_Datatype*) {
  const auto* a = static_cast<const uint16_t*>(in);
  auto* b = static_cast<uint16_t*>(inout);
  for (int i = 0; i < *len; ++i) {
    float x = codec::bf16_to_f32(a[i]), y = codec::bf16_to_f32(b[i]);
    if (std::isnan(x) || x > y) b[i] = a[i];
  }
}

MPI_Op g_bf16_sum = MPI_OP_NULL, g_bf16_max = MPI_OP_NULL;

int to_int(size_t n, const char* what) {
  MXDP_CHECK(n <= size_t(INT_MAX), what, ": ", n, " elements exceed MPI's int count (", INT_MAX,
             "); split the buffer");
  return int(n);
}

}  // namespace

void mpi_ensure_initialized() {
  static std::mutex mu;
  std::lock_guard<std::mutex> lock(mu);
  int inited = 0;
  MXDP_MPI_CHECK(MPI_Initialized(&inited));
  if (!inited) {
    int finalized = 0;
    MXDP_MPI_CHECK(MPI_Finalized(&finalized));
    MXDP_CHECK(!finalized, "MPI was already finalized; cannot create a communicator");
    int provided = 0;
    // MULTIPLE so that the NCCL watchdog thread may call MPI_Abort.
    MXDP_MPI_CHECK(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &provided));
    g_we_initialized = true;
    std::atexit(finalize_at_exit);
  }
  if (g_bf16_sum == MPI_OP_NULL) {
    MXDP_MPI_CHECK(MPI_Op_create(bf16_sum_fn, /*commute=*/1, &g_bf16_sum));
    MXDP_MPI_CHECK(MPI_Op_create(bf16_max_fn, /*commute=*/1, &g_bf16_max));
  }
}

void mpi_local_rank(MPI_Comm comm, int* local_rank, int* local_size) {
  MPI_Comm node;
  MXDP_MPI_CHECK(MPI_Comm_split_type(comm, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node));
  MXDP_MPI_CHECK(MPI_Comm_rank(node, local_rank));
  MXDP_MPI_CHECK(MPI_Comm_size(node, local_size));
  MXDP_MPI_CHECK(MPI_Comm_free(&node));
}

void mpi_bootstrap(MPI_Comm* comm, int* rank, int* size, int* local_rank, int* local_size) {
  mpi_ensure_initialized();
  MXDP_MPI_CHECK(MPI_Comm_dup(MPI_COMM_WORLD, comm));
  MXDP_MPI_CHECK(MPI_Comm_set_errhandler(*comm, MPI_ERRORS_RETURN));
  MXDP_MPI_CHECK(MPI_Comm_rank(*comm, rank));
  MXDP_MPI_CHECK(MPI_Comm_size(*comm, size));
  mpi_local_rank(*comm, local_rank, local_size);
}

void mpi_release(MPI_Comm* comm) {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized) MPI_Comm_free(comm);
}

void abort_job(const std::string& message) {
  std::fprintf(stderr, "mxdp: fatal: %s\n", message.c_str());
  std::fflush(stderr);
  std::fflush(stdout);
  int inited = 0, finalized = 0;
  MPI_Initialized(&inited);
  MPI_Finalized(&finalized);
  if (inited && !finalized) MPI_Abort(MPI_COMM_WORLD, 3);
  std::_Exit(3);
}

std::string timeout_message(double timeout_s, const std::string& what) {
  std::ostringstream os;
  os << "communication timed out after " << timeout_s << " s (Options::timeout_s / MXDP_COMM_TIMEOUT): "
     << what << ". A rank is missing from this collective, stuck before it, or called a different one.";
  return os.str();
}

void mpi_wait_deadline(MPI_Request* req, double timeout_s, bool abort_on_timeout,
                       const std::function<std::string()>& describe) {
  using clock = std::chrono::steady_clock;
  const auto deadline = clock::now() + std::chrono::duration_cast<clock::duration>(
                                           std::chrono::duration<double>(timeout_s));
  for (unsigned it = 0;; ++it) {
    int flag = 0;
    MXDP_MPI_CHECK(MPI_Test(req, &flag, MPI_STATUS_IGNORE));
    if (flag) return;
    if ((it & 255) == 0 && clock::now() > deadline) {
      std::string msg = "comm_mpi.cpp:" + std::to_string(__LINE__) + ": " + timeout_message(timeout_s, describe());
      if (abort_on_timeout) abort_job(msg);
      MXDP_FAIL(msg);
    }
    sched_yield();
  }
}

// Here rather than in comm.cpp: its reports name comm_mpi.cpp, as the tests expect.
void check_consistent_ranges(const int64_t mn[6], const int64_t mx[6], const OpDesc& d, int rank, int size) {
  static const char* names[] = {"operation", "type", "reduction", "count", "root", "sequence number"};
  std::ostringstream os;
  for (int i = 0; i < 6; ++i)
    if (mn[i] != mx[i]) os << "; " << names[i] << " ranges over [" << mn[i] << ", " << mx[i] << "] across ranks";
  if (!os.str().empty())
    MXDP_FAIL("mismatched collective across ranks (MXDP_COMM_CHECK): this rank called ", d.str(rank, size),
              os.str());
}

void mpi_check_consistent(MPI_Comm comm, const OpDesc& d, int rank, int size, double timeout_s,
                          bool abort_on_timeout) {
  int64_t v[6];
  op_fields(d, v);
  int64_t buf[12];
  for (int i = 0; i < 6; ++i) buf[2 * i] = v[i], buf[2 * i + 1] = -v[i];
  MPI_Request req;
  MXDP_MPI_CHECK(MPI_Iallreduce(MPI_IN_PLACE, buf, 12, MPI_INT64_T, MPI_MAX, comm, &req));
  mpi_wait_deadline(&req, timeout_s, abort_on_timeout,
                    [&] { return "size check before " + d.str(rank, size); });
  int64_t mn[6], mx[6];
  for (int i = 0; i < 6; ++i) mx[i] = buf[2 * i], mn[i] = -buf[2 * i + 1];
  check_consistent_ranges(mn, mx, d, rank, size);
}

MPI_Datatype mpi_datatype(DType t) {
  switch (t) {
    case DType::F32: return MPI_FLOAT;
    case DType::F64: return MPI_DOUBLE;
    case DType::BF16: return MPI_UINT16_T;  // reduced by our own ops
    case DType::U8: return MPI_BYTE;
  }
  MXDP_FAIL("unknown DType ", int(t));
}

MPI_Op mpi_op(DType t, RedOp op) {
  const bool max = op == RedOp::Max;
  if (t == DType::BF16) return max ? g_bf16_max : g_bf16_sum;
  return max ? MPI_MAX : MPI_SUM;  // Avg = Sum, then divide_host
}

namespace {

class MpiComm;

class MpiWork final : public Work {
 public:
  MpiWork(MpiComm* c, std::list<OpDesc>::iterator it) : c_(c), it_(it) {}
  ~MpiWork() override;
  void wait() override;
  bool test() override;

  MPI_Request req = MPI_REQUEST_NULL;
  void* avg_buf = nullptr;  // Avg: divide these elements by size() on completion
  size_t avg_count = 0;
  DType avg_type = DType::F32;

 private:
  void finish();
  MpiComm* c_;
  std::list<OpDesc>::iterator it_;
  bool done_ = false;
};

class MpiComm final : public Communicator {
 public:
  explicit MpiComm(const Options& o) : opts_(o) {
    mpi_bootstrap(&comm_, &rank_, &size_, &local_rank_, &local_size_);
  }
  ~MpiComm() override {
    if (!pending_.empty())
      abort_job("MPI communicator destroyed while " + std::to_string(pending_.size()) +
                " operation(s) are pending, first: " + pending_.front().str(rank_, size_));
    mpi_release(&comm_);
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  int local_rank() const override { return local_rank_; }
  int local_size() const override { return local_size_; }
  Backend backend() const override { return Backend::Mpi; }
  bool device_memory() const override { return false; }

  std::unique_ptr<Work> all_gather_async(const void* in, void* out, size_t bytes, void*) override {
    const int n = to_int(bytes, "all_gather");
    auto* o = static_cast<char*>(out);
    const bool in_place = in == o + size_t(rank_) * bytes;
    MXDP_CHECK(bytes == 0 || (in && out), "all_gather: null buffer with ", bytes, " bytes");
    MXDP_CHECK(in_place || !overlaps(in, bytes, out, bytes * size_t(size_)),
               "all_gather: in overlaps out but is not out + rank * bytes_per_rank (in place)");
    auto w = post({OpKind::AllGather, DType::U8, RedOp::Sum, bytes, -1});
    MXDP_MPI_CHECK(MPI_Iallgather(in_place ? MPI_IN_PLACE : in, n, MPI_BYTE, out, n, MPI_BYTE, comm_, &w->req));
    return w;
  }

  std::unique_ptr<Work> reduce_scatter_async(const void* in, void* out, size_t count, DType t, RedOp op,
                                             void*) override {
    check_reduction_type(t, op, "reduce_scatter");
    const int n = to_int(count, "reduce_scatter");
    const size_t bytes = count * dtype_size(t);
    MXDP_CHECK(bytes == 0 || (in && out), "reduce_scatter: null buffer with ", count, " elements");
    MXDP_CHECK(!overlaps(in, bytes * size_t(size_), out, bytes), "reduce_scatter: in and out overlap");
    auto w = post({OpKind::ReduceScatter, t, op, count, -1});
    MXDP_MPI_CHECK(MPI_Ireduce_scatter_block(in, out, n, mpi_datatype(t), mpi_op(t, op), comm_, &w->req));
    set_avg(*w, op, out, count, t);
    return w;
  }

  std::unique_ptr<Work> all_reduce_async(const void* in, void* out, size_t count, DType t, RedOp op,
                                         void*) override {
    check_reduction_type(t, op, "all_reduce");
    const int n = to_int(count, "all_reduce");
    const size_t bytes = count * dtype_size(t);
    MXDP_CHECK(bytes == 0 || (in && out), "all_reduce: null buffer with ", count, " elements");
    MXDP_CHECK(in == out || !overlaps(in, bytes, out, bytes), "all_reduce: in and out overlap but differ");
    auto w = post({OpKind::AllReduce, t, op, count, -1});
    MXDP_MPI_CHECK(MPI_Iallreduce(in == out ? MPI_IN_PLACE : in, out, n, mpi_datatype(t), mpi_op(t, op),
                                  comm_, &w->req));
    set_avg(*w, op, out, count, t);
    return w;
  }

  std::unique_ptr<Work> broadcast_async(void* buf, size_t bytes, int root, void*) override {
    MXDP_CHECK(root >= 0 && root < size_, "broadcast: root ", root, " out of range for ", size_, " ranks");
    const int n = to_int(bytes, "broadcast");
    MXDP_CHECK(bytes == 0 || buf, "broadcast: null buffer with ", bytes, " bytes");
    auto w = post({OpKind::Broadcast, DType::U8, RedOp::Sum, bytes, root});
    MXDP_MPI_CHECK(MPI_Ibcast(buf, n, MPI_BYTE, root, comm_, &w->req));
    return w;
  }

  void barrier() override {
    auto w = post({OpKind::Barrier, DType::U8, RedOp::Sum, 0, -1});
    MXDP_MPI_CHECK(MPI_Ibarrier(comm_, &w->req));
    w->wait();
  }

  // Called by MpiWork.
  void wait_request(MPI_Request* req, std::list<OpDesc>::iterator it) {
    mpi_wait_deadline(req, opts_.timeout_s, opts_.abort_on_timeout, [&] {
      std::string s = "waiting for " + it->str(rank_, size_);
      if (pending_.size() > 1) {
        s += "; pending on this rank:";
        for (const OpDesc& d : pending_) s += " [" + d.str(rank_, size_) + "]";
      }
      return s;
    });
  }
  void retire(std::list<OpDesc>::iterator it) { pending_.erase(it); }

 private:
  std::unique_ptr<MpiWork> post(OpDesc d) {
    d.seq = seq_++;
    d.posted = std::chrono::steady_clock::now();
    if (opts_.check_sizes) mpi_check_consistent(comm_, d, rank_, size_, opts_.timeout_s, opts_.abort_on_timeout);
    pending_.push_back(d);
    return std::make_unique<MpiWork>(this, std::prev(pending_.end()));
  }
  void set_avg(MpiWork& w, RedOp op, void* out, size_t count, DType t) {
    if (op == RedOp::Avg && size_ > 1) w.avg_buf = out, w.avg_count = count, w.avg_type = t;
  }

  Options opts_;
  MPI_Comm comm_ = MPI_COMM_NULL;
  int rank_ = 0, size_ = 1, local_rank_ = 0, local_size_ = 1;
  uint64_t seq_ = 0;
  std::list<OpDesc> pending_;
};

MpiWork::~MpiWork() {
  if (done_) return;
  try {
    wait();
  } catch (const std::exception& e) {
    abort_job(std::string("unfinished collective failed while its Work was destroyed: ") + e.what());
  }
}

void MpiWork::wait() {
  if (done_) return;
  c_->wait_request(&req, it_);
  finish();
}

bool MpiWork::test() {
  if (done_) return true;
  int flag = 0;
  MXDP_MPI_CHECK(MPI_Test(&req, &flag, MPI_STATUS_IGNORE));
  if (flag) finish();
  return flag != 0;
}

void MpiWork::finish() {
  if (avg_buf) divide_host(avg_buf, avg_count, avg_type, c_->size());
  c_->retire(it_);
  done_ = true;
}

}  // namespace

std::unique_ptr<Communicator> make_mpi_communicator(const Communicator::Options& opts) {
  return std::make_unique<MpiComm>(opts);
}

namespace {

// The NCCL backend's host side under mpirun: a duplicate of MPI_COMM_WORLD.
class MpiHostGroup final : public HostGroup {
 public:
  explicit MpiHostGroup(const Communicator::Options& o) : o_(o) {
    mpi_bootstrap(&comm_, &rank_, &size_, &local_rank_, &local_size_);
  }
  ~MpiHostGroup() override { mpi_release(&comm_); }
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  int local_rank() const override { return local_rank_; }
  int local_size() const override { return local_size_; }

  void broadcast(void* buf, size_t bytes, int root, const OpDesc& d) override {
    for (size_t off = 0; off < bytes; off += size_t(1) << 30) {  // MPI counts are int
      const int n = int(std::min<size_t>(size_t(1) << 30, bytes - off));
      MPI_Request req;
      MXDP_MPI_CHECK(MPI_Ibcast(static_cast<char*>(buf) + off, n, MPI_BYTE, root, comm_, &req));
      wait(&req, d);
    }
  }
  void all_gather(void* buf, size_t bytes_per_rank, const OpDesc& d) override {
    MXDP_CHECK(bytes_per_rank * size_t(size_) < (size_t(1) << 31), "host_all_gather: ", bytes_per_rank,
               " bytes per rank is too large for host values");
    MPI_Request req;
    MXDP_MPI_CHECK(MPI_Iallgather(MPI_IN_PLACE, 0, MPI_BYTE, buf, int(bytes_per_rank), MPI_BYTE, comm_, &req));
    wait(&req, d);
  }
  void barrier(const OpDesc& d) override {
    MPI_Request req;
    MXDP_MPI_CHECK(MPI_Ibarrier(comm_, &req));
    wait(&req, d);
  }
  void check_consistent(const OpDesc& d) override {
    mpi_check_consistent(comm_, d, rank_, size_, o_.timeout_s, o_.abort_on_timeout);
  }

 private:
  void wait(MPI_Request* req, const OpDesc& d) {
    mpi_wait_deadline(req, o_.timeout_s, o_.abort_on_timeout, [&] { return d.str(rank_, size_); });
  }
  Communicator::Options o_;
  MPI_Comm comm_ = MPI_COMM_NULL;
  int rank_ = 0, size_ = 1, local_rank_ = 0, local_size_ = 1;
};

}  // namespace

std::unique_ptr<HostGroup> make_mpi_host_group(const Communicator::Options& opts) {
  return std::make_unique<MpiHostGroup>(opts);
}

}  // namespace mxdp::comm_detail
