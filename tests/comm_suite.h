// The communicator test suite, shared by every backend: mpitest_comm.cpp runs
// it on host buffers (Self, MPI), mpigputest_comm.cpp on GPU buffers (NCCL).
// The including file provides the memory (Mem) and says when a backend cannot
// run (suite_skip_reason), then instantiates CommTest with its backends.
//
// Inputs are chosen so that every result is exact in any summation order
// (small integers), as nccl-tests' `verifiable` does; each rank counts its
// wrong elements. Expected values are computed here from the input formula,
// never by the code under test.
#pragma once

#include <gtest/gtest.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "util/check.h"
#include "comm/comm.h"
#include "mpi_session.h"

extern char** environ;

namespace mxdp {
inline void PrintTo(Backend b, std::ostream* os) { *os << backend_name(b); }
}  // namespace mxdp

namespace mxdp_test {
using namespace mxdp;

// Where a backend's buffers live and how test data gets there and back.
struct Mem {
  virtual ~Mem() = default;
  virtual void* alloc(size_t bytes) = 0;
  virtual void release(void* p) = 0;
  virtual void upload(void* dst, const void* src, size_t bytes) = 0;    // ordered on stream()
  virtual void download(void* dst, const void* src, size_t bytes) = 0;  // complete on return
  virtual void* stream() = 0;                                           // the caller stream
  virtual void sync() = 0;                                              // host waits for stream()
};

// Provided by the file that includes this one.
Mem& suite_mem(Backend b);
std::string suite_skip_reason(Backend b);  // empty when b can run here
// Empty when a 2-rank child job of backend b can run here (timeout test).
std::string suite_child_skip_reason(Backend b);

constexpr double kSuiteTimeout = 60.0;

inline std::map<Backend, std::unique_ptr<Communicator>>& suite_comms() {
  static std::map<Backend, std::unique_ptr<Communicator>> comms;
  return comms;
}
// The communicators are destroyed at the end of the test run, on every rank in
// the same order, before exit (MPI_Finalize, CUDA teardown).
struct CommSuiteEnv : ::testing::Environment {
  void TearDown() override { suite_comms().clear(); }
};
inline ::testing::Environment* const kCommSuiteEnv = ::testing::AddGlobalTestEnvironment(new CommSuiteEnv);

// One communicator per backend for the whole run, with the size check on.
inline Communicator& suite_comm(Backend b) {
  auto& c = suite_comms()[b];
  if (!c) {
    Communicator::Options o;
    o.backend = b;
    o.timeout_s = kSuiteTimeout;
    o.check_sizes = true;
    c = make_communicator(o);
  }
  return *c;
}

class Buf {
 public:
  Buf(Mem& m, size_t bytes) : m_(m), bytes_(bytes), p_(m.alloc(bytes)) {}
  ~Buf() { m_.release(p_); }
  Buf(const Buf&) = delete;
  Buf& operator=(const Buf&) = delete;
  void* get() const { return p_; }
  char* bytes_ptr() const { return static_cast<char*>(p_); }
  void put(const std::vector<uint8_t>& h, size_t offset = 0) { m_.upload(bytes_ptr() + offset, h.data(), h.size()); }
  std::vector<uint8_t> fetch() const {
    std::vector<uint8_t> h(bytes_);
    m_.download(h.data(), p_, bytes_);
    return h;
  }

 private:
  Mem& m_;
  size_t bytes_;
  void* p_;
};

// ---- exact reference arithmetic, independent of the code under test ------

// float -> bf16 value, round to nearest even, for finite normal floats: keep 8
// significant bits by scaling to an integer and rounding with nearbyint.
inline float bf16_ref(float x) {
  if (x == 0 || !std::isfinite(x)) return x;
  int e = 0;
  std::frexp(x, &e);  // x = m * 2^e, 0.5 <= |m| < 1
  const double scale = std::ldexp(1.0, e - 8);
  return float(std::nearbyint(double(x) / scale) * scale);
}

inline double value(int rank, size_t i) { return double(int64_t((i * 7 + size_t(rank) * 13) % 61) - 30); }

inline void store(std::vector<uint8_t>& h, DType t, size_t i, double v) {
  switch (t) {
    case DType::F32: { float f = float(v); std::memcpy(&h[i * 4], &f, 4); break; }
    case DType::F64: std::memcpy(&h[i * 8], &v, 8); break;
    case DType::BF16: {  // v is an exact bf16 value here: take the high half of its float
      float f = float(v);
      uint32_t u;
      std::memcpy(&u, &f, 4);
      uint16_t b = uint16_t(u >> 16);
      std::memcpy(&h[i * 2], &b, 2);
      break;
    }
    case DType::U8: h[i] = uint8_t(v); break;
  }
}
inline double load(const std::vector<uint8_t>& h, DType t, size_t i) {
  switch (t) {
    case DType::F32: { float f; std::memcpy(&f, &h[i * 4], 4); return f; }
    case DType::F64: { double d; std::memcpy(&d, &h[i * 8], 8); return d; }
    case DType::BF16: {
      uint16_t b;
      std::memcpy(&b, &h[i * 2], 2);
      uint32_t u = uint32_t(b) << 16;
      float f;
      std::memcpy(&f, &u, 4);
      return f;
    }
    case DType::U8: return h[i];
  }
  return 0;
}

// Rank `rank`'s input: count elements starting at global index `first`.
inline std::vector<uint8_t> make_input(DType t, size_t count, int rank, size_t first = 0) {
  std::vector<uint8_t> h(count * dtype_size(t));
  for (size_t i = 0; i < count; ++i) store(h, t, i, value(rank, first + i));
  return h;
}

inline double expected_reduce(DType t, RedOp op, size_t i, int n) {
  double sum = 0, mx = -1e300;
  for (int r = 0; r < n; ++r) sum += value(r, i), mx = std::max(mx, value(r, i));
  if (op == RedOp::Max) return mx;
  if (op == RedOp::Sum) return sum;  // |sum| <= 30 n: exact in every type
  switch (t) {                       // Avg: the exact sum divided by n
    case DType::F32: return float(sum) / float(n);
    case DType::F64: return sum / double(n);
    case DType::BF16: return bf16_ref(float(sum) / float(n));
    default: return 0;
  }
}

// Counts elements of got that differ from want(i); reports the first few.
template <class F>
size_t count_wrong(const std::vector<uint8_t>& got, DType t, size_t count, F want, std::string* first) {
  size_t wrong = 0;
  for (size_t i = 0; i < count; ++i) {
    const double g = load(got, t, i), w = want(i);
    if (!(g == w)) {
      if (wrong < 3) *first += " [" + std::to_string(i) + "]=" + std::to_string(g) + " want " + std::to_string(w);
      ++wrong;
    }
  }
  return wrong;
}

inline std::vector<uint8_t> gather_bytes(int rank, size_t bytes) {
  std::vector<uint8_t> h(bytes);
  for (size_t i = 0; i < bytes; ++i) h[i] = uint8_t((i * 31 + size_t(rank) * 101 + 7) & 0xff);
  return h;
}

// ---- the parameterised suite ----------------------------------------------

class CommTest : public ::testing::TestWithParam<Backend> {
 protected:
  void SetUp() override {
    std::string why = suite_skip_reason(GetParam());
    if (!why.empty()) GTEST_SKIP() << why;
    c = &suite_comm(GetParam());
    m = &suite_mem(GetParam());
    n = c->size();
    r = c->rank();
  }
  void* s() { return m->stream(); }

  // One all-reduce or reduce-scatter checked element by element.
  void check_reduce(bool scatter, DType t, RedOp op, size_t count) {
    const size_t es = dtype_size(t);
    const size_t in_count = scatter ? count * size_t(n) : count;
    Buf in(*m, in_count * es), out(*m, count * es);
    in.put(make_input(t, in_count, r));
    out.put(std::vector<uint8_t>(count * es, 0xEE));
    if (scatter)
      c->reduce_scatter(in.get(), out.get(), count, t, op, s());
    else
      c->all_reduce(in.get(), out.get(), count, t, op, s());
    const size_t first = scatter ? size_t(r) * count : 0;
    std::string where;
    size_t wrong = count_wrong(out.fetch(), t, count,
                               [&](size_t i) { return expected_reduce(t, op, first + i, n); }, &where);
    EXPECT_EQ(wrong, 0u) << (scatter ? "reduce_scatter " : "all_reduce ") << dtype_name(t) << " "
                         << redop_name(op) << " count " << count << " rank " << r << " of " << n << ":" << where;
  }

  Communicator* c = nullptr;
  Mem* m = nullptr;
  int n = 1, r = 0;
};

inline const DType kRedTypes[] = {DType::F32, DType::BF16, DType::F64};
inline const RedOp kRedOps[] = {RedOp::Sum, RedOp::Avg, RedOp::Max};
inline const size_t kCounts[] = {0, 1, 3, 1000, 1000003};

TEST_P(CommTest, AllReduceEveryTypeOpAndSize) {
  for (DType t : kRedTypes)
    for (RedOp op : kRedOps)
      for (size_t count : kCounts) check_reduce(false, t, op, count);
}

TEST_P(CommTest, ReduceScatterEveryTypeOpAndSize) {
  for (DType t : kRedTypes)
    for (RedOp op : kRedOps)
      for (size_t count : kCounts) check_reduce(true, t, op, count);
}

TEST_P(CommTest, AllReduceInPlace) {
  for (DType t : kRedTypes) {
    const size_t count = 1000003, es = dtype_size(t);
    Buf buf(*m, count * es);
    buf.put(make_input(t, count, r));
    c->all_reduce(buf.get(), buf.get(), count, t, RedOp::Sum, s());
    std::string where;
    size_t wrong = count_wrong(buf.fetch(), t, count,
                               [&](size_t i) { return expected_reduce(t, RedOp::Sum, i, n); }, &where);
    EXPECT_EQ(wrong, 0u) << dtype_name(t) << " rank " << r << ":" << where;
  }
}

TEST_P(CommTest, AllGatherOutOfPlaceAndInPlace) {
  for (bool in_place : {false, true})
    for (size_t bytes : kCounts) {
      Buf out(*m, bytes * size_t(n));
      out.put(std::vector<uint8_t>(bytes * size_t(n), 0xEE));
      std::unique_ptr<Buf> in;
      const void* src;
      if (in_place) {
        out.put(gather_bytes(r, bytes), size_t(r) * bytes);
        src = out.bytes_ptr() + size_t(r) * bytes;
      } else {
        in = std::make_unique<Buf>(*m, bytes);
        in->put(gather_bytes(r, bytes));
        src = in->get();
      }
      c->all_gather(src, out.get(), bytes, s());
      std::vector<uint8_t> got = out.fetch();
      size_t wrong = 0;
      for (int q = 0; q < n; ++q) {
        std::vector<uint8_t> want = gather_bytes(q, bytes);
        for (size_t i = 0; i < bytes; ++i) wrong += got[size_t(q) * bytes + i] != want[i];
      }
      EXPECT_EQ(wrong, 0u) << "all_gather " << bytes << " bytes per rank, in_place " << in_place << ", rank " << r;
    }
}

TEST_P(CommTest, BroadcastFromEveryRoot) {
  for (int root = 0; root < n; ++root)
    for (size_t bytes : {size_t(0), size_t(1), size_t(1000003)}) {
      Buf buf(*m, bytes);
      buf.put(r == root ? gather_bytes(root, bytes) : std::vector<uint8_t>(bytes, 0xEE));
      c->broadcast(buf.get(), bytes, root, s());
      EXPECT_EQ(buf.fetch(), gather_bytes(root, bytes)) << "broadcast root " << root << " bytes " << bytes
                                                        << " rank " << r;
    }
}

// Several operations in flight at once, completed in reverse order.
TEST_P(CommTest, OutstandingOpsCompletedOutOfOrder) {
  const size_t count = 100003;
  Buf ag_in(*m, count), ag_out(*m, count * size_t(n));
  Buf rs_in(*m, count * size_t(n) * 4), rs_out(*m, count * 4);
  Buf ar(*m, count * 2), bc(*m, count);
  ag_in.put(gather_bytes(r, count));
  rs_in.put(make_input(DType::F32, count * size_t(n), r));
  ar.put(make_input(DType::BF16, count, r));
  const int root = n - 1;
  bc.put(r == root ? gather_bytes(root, count) : std::vector<uint8_t>(count, 0));
  std::vector<std::unique_ptr<Work>> works;
  works.push_back(c->all_gather_async(ag_in.get(), ag_out.get(), count, s()));
  works.push_back(c->reduce_scatter_async(rs_in.get(), rs_out.get(), count, DType::F32, RedOp::Sum, s()));
  works.push_back(c->all_reduce_async(ar.get(), ar.get(), count, DType::BF16, RedOp::Max, s()));
  works.push_back(c->broadcast_async(bc.get(), count, root, s()));
  for (auto it = works.rbegin(); it != works.rend(); ++it) (*it)->wait();
  // On the GPU wait() only orders the caller's stream; the host learns of
  // completion once that stream has drained (on the CPU this is a no-op).
  m->sync();
  for (auto& w : works) EXPECT_TRUE(w->test());  // done, and wait() again is free
  for (auto& w : works) w->wait();
  std::vector<uint8_t> got = ag_out.fetch();
  size_t wrong = 0;
  for (int q = 0; q < n; ++q) {
    auto want = gather_bytes(q, count);
    for (size_t i = 0; i < count; ++i) wrong += got[size_t(q) * count + i] != want[i];
  }
  std::string where;
  wrong += count_wrong(rs_out.fetch(), DType::F32, count,
                       [&](size_t i) { return expected_reduce(DType::F32, RedOp::Sum, size_t(r) * count + i, n); },
                       &where);
  wrong += count_wrong(ar.fetch(), DType::BF16, count,
                       [&](size_t i) { return expected_reduce(DType::BF16, RedOp::Max, i, n); }, &where);
  EXPECT_EQ(bc.fetch(), gather_bytes(root, count));
  EXPECT_EQ(wrong, 0u) << "rank " << r << ":" << where;
}

TEST_P(CommTest, TestBecomesTrue) {
  const size_t count = 1000003;
  Buf in(*m, count * 4), out(*m, count * 4);
  in.put(make_input(DType::F32, count, r));
  auto w = c->all_reduce_async(in.get(), out.get(), count, DType::F32, RedOp::Sum, s());
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  bool done = false;
  while (!(done = w->test()) && std::chrono::steady_clock::now() < deadline) std::this_thread::yield();
  ASSERT_TRUE(done) << "test() still false after 30 s";
  w->wait();
  std::string where;
  EXPECT_EQ(count_wrong(out.fetch(), DType::F32, count,
                        [&](size_t i) { return expected_reduce(DType::F32, RedOp::Sum, i, n); }, &where),
            0u)
      << where;
}

// BF16 sums round to nearest even once per addition. Rank 0 holds a, rank 1
// holds b, every other rank 0, so only one inexact addition happens whatever
// the order. Expected values worked out by hand (bf16 has 8 significant bits).
TEST_P(CommTest, Bf16SumRoundsToNearestEven) {
  if (n < 2) GTEST_SKIP() << "needs 2 ranks";
  struct Case { float a, b, want; };
  const Case cases[] = {
      {256, 1, 256},           // 257: tie between 256 and 258 -> even 256
      {256, 3, 260},           // 259: tie between 258 and 260 -> even 260
      {256, 1.5f, 258},        // 257.5: nearer 258
      {1, 0x1p-8f, 1},         // 1 + 2^-8: tie -> 1
      {1, 0x3p-8f, 0x41p-6f},  // 1 + 3*2^-8: tie between 1+2^-7 and 1+2^-6 -> 1+2^-6
      {-256, -3, -260},        // sign-symmetric
      {0x1p127f, 0x1p127f, 0},  // 2^128 overflows -> inf (checked below)
  };
  const size_t k = std::size(cases);
  std::vector<uint8_t> h(k * 2);
  for (size_t i = 0; i < k; ++i) store(h, DType::BF16, i, r == 0 ? cases[i].a : r == 1 ? cases[i].b : 0.0);
  Buf in(*m, k * 2), out(*m, k * 2);
  in.put(h);
  c->all_reduce(in.get(), out.get(), k, DType::BF16, RedOp::Sum, s());
  std::vector<uint8_t> got = out.fetch();
  for (size_t i = 0; i < k; ++i) {
    const double want = i + 1 == k ? double(INFINITY) : double(cases[i].want);
    EXPECT_EQ(load(got, DType::BF16, i), want) << "case " << i << ": " << cases[i].a << " + " << cases[i].b;
  }
}

// The same inexact inputs give bitwise the same result run after run.
TEST_P(CommTest, DeterministicRunToRun) {
  const size_t count = 300007;
  std::vector<uint8_t> h(count * 4);
  uint32_t x = 12345u + uint32_t(r) * 7919u;
  for (size_t i = 0; i < count; ++i) {
    x = x * 1664525u + 1013904223u;
    float f = float(int32_t(x >> 8)) * 0x1p-20f;  // inexact sums
    std::memcpy(&h[i * 4], &f, 4);
  }
  Buf in(*m, count * 4), out(*m, count * 4);
  in.put(h);
  std::vector<uint8_t> first;
  for (int rep = 0; rep < 3; ++rep) {
    c->all_reduce(in.get(), out.get(), count, DType::F32, RedOp::Sum, s());
    auto got = out.fetch();
    if (rep == 0) first = got;
    EXPECT_TRUE(got == first) << "all_reduce f32 result changed on repetition " << rep;
  }
}

// With the size check on, mismatched collectives fail on every rank, before
// any data moves, and the communicator stays usable.
TEST_P(CommTest, MismatchedSizesDetected) {
  if (n < 2) GTEST_SKIP() << "needs 2 ranks";
  Buf a(*m, 64), b(*m, 64 * size_t(n));
  const size_t count = r == n - 1 ? 11 : 10;
  try {
    c->all_reduce(a.get(), a.get(), count, DType::F32, RedOp::Sum, s());
    ADD_FAILURE() << "mismatched all_reduce counts not detected on rank " << r;
  } catch (const Error& e) {
    std::string msg = e.what();
    EXPECT_NE(msg.find("mismatched collective"), std::string::npos) << msg;
    EXPECT_NE(msg.find("count ranges over [10, 11]"), std::string::npos) << msg;
    EXPECT_NE(e.where().find("comm_mpi.cpp:"), std::string::npos) << e.where();
  }
  try {  // a rank calling a different collective
    if (r == 0)
      c->broadcast(a.get(), 8, 0, s());
    else
      c->all_gather(a.get(), b.get(), 8, s());
    ADD_FAILURE() << "broadcast vs all_gather not detected on rank " << r;
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("operation ranges over"), std::string::npos) << e.what();
  }
  c->barrier();
  check_reduce(false, DType::F32, RedOp::Sum, 1000);  // still usable
}

TEST_P(CommTest, BadArgumentsRejected) {
  Buf a(*m, 4096);
  EXPECT_THROW(c->broadcast(a.get(), 8, n, s()), Error);
  EXPECT_THROW(c->broadcast(a.get(), 8, -1, s()), Error);
  EXPECT_THROW(c->reduce_scatter(a.get(), a.bytes_ptr() + 4, 4, DType::F32, RedOp::Sum, s()), Error);
  EXPECT_THROW(c->all_reduce(a.get(), a.get(), 4, DType::U8, RedOp::Sum, s()), Error);
  c->barrier();
}

// ---- the timeout path, in a child job ---------------------------------------
// A rank that never joins a collective must end the job with a clear error
// within the timeout. The parent (a 1-rank job) starts `mpirun -np 2` of this
// same executable running only CommChild.SkipCollective, whose rank 1 skips an
// all_reduce; rank 0 must report it and abort the job in about 2 s, long
// before rank 1's 40 s sleep ends.

inline const char* kChildEnv = "MXDP_COMM_CHILD";

TEST(CommChild, SkipCollective) {
  const char* b = std::getenv(kChildEnv);
  if (!b) GTEST_SKIP() << "only runs as the child job of CommTest.TimeoutAbortsJobWithClearError";
  const Backend backend = std::string(b) == "nccl" ? Backend::Nccl : Backend::Mpi;
  Communicator::Options o;
  o.backend = backend;
  o.timeout_s = 2.0;
  auto c = make_communicator(o);
  Mem& m = suite_mem(backend);
  Buf buf(m, 4000);
  buf.put(std::vector<uint8_t>(4000, 0));
  if (c->rank() == 0) {
    c->all_reduce(buf.get(), buf.get(), 1000, DType::F32, RedOp::Sum, m.stream());
    m.sync();  // NCCL: wait() only orders the stream; the host blocks here
    std::printf("CHILD-UNEXPECTED: rank 0 completed the collective\n");
  } else {
    std::this_thread::sleep_for(std::chrono::seconds(40));
  }
}

struct ChildResult {
  int exit_code = -1;
  double seconds = 0;
  std::string output;
};

// Runs `mpirun -np 2 <this executable> --gtest_filter=CommChild.*` with a clean
// launcher environment (a nested mpirun must not inherit its parent's job).
inline ChildResult run_child_job(const std::string& backend, double limit_s) {
  std::vector<std::string> env;
  for (char** e = environ; *e; ++e) {
    std::string v = *e;
    auto starts = [&](const char* p) { return v.rfind(p, 0) == 0; };
    // Drop what the parent's mpirun put there for its own ranks; keep the
    // user's settings (e.g. OMPI_MCA_plm_rsh_agent on machines without ssh).
    const bool launcher_mca = starts("OMPI_MCA_ess") || starts("OMPI_MCA_orte_") || starts("OMPI_MCA_pmix") ||
                              starts("OMPI_MCA_initial_wdir") || starts("OMPI_MCA_mpi_oversubscribe") ||
                              starts("OMPI_MCA_rmaps_base_oversubscribe") || starts("OMPI_MCA_shmem_RUNTIME");
    const bool user_ompi = (starts("OMPI_MCA_") && !launcher_mca) || starts("OMPI_ALLOW_RUN_AS_ROOT");
    if ((starts("OMPI_") && !user_ompi) || starts("PMIX_") || starts("PMI_") || starts("OPAL_") ||
        starts("PRTE_") || starts("ORTE_") || starts("HYDRA_") || starts("MXDP_COMM_"))
      continue;
    env.push_back(v);
  }
  env.push_back(std::string(kChildEnv) + "=" + backend);
  // Its own Open MPI session directory (the parent's was dropped above with the
  // rest of its launcher's settings): concurrent mpiruns race on a shared one.
  const mxdp::testing::MpiSessionDir session;
  for (const std::string& v : session.env()) env.push_back(v);
  std::vector<char*> envp;
  for (auto& v : env) envp.push_back(v.data());
  envp.push_back(nullptr);

  char exe[4096];
  ssize_t len = readlink("/proc/self/exe", exe, sizeof exe - 1);
  EXPECT_GT(len, 0);
  exe[len > 0 ? len : 0] = '\0';
  char tmpl[] = "/tmp/mxdp_comm_child_XXXXXX";
  int fd = mkstemp(tmpl);
  EXPECT_GE(fd, 0);
  close(fd);
  std::string mpirun = "mpirun";
#ifdef MXDP_MPIEXEC
  if (std::string(MXDP_MPIEXEC).size()) mpirun = MXDP_MPIEXEC;
#endif
  std::string cmd = "exec " + mpirun + " --allow-run-as-root --oversubscribe --bind-to none -np 2 '" + exe +
                    "' --gtest_filter=CommChild.SkipCollective >" + tmpl + " 2>&1";
  std::string sh = "/bin/sh", dash_c = "-c";
  char* argv[] = {sh.data(), dash_c.data(), cmd.data(), nullptr};
  const auto t0 = std::chrono::steady_clock::now();
  pid_t pid = 0;
  ChildResult res;
  if (posix_spawn(&pid, "/bin/sh", nullptr, nullptr, argv, envp.data()) != 0) {
    res.output = "posix_spawn failed";
    return res;
  }
  int status = 0;
  for (;;) {
    pid_t w = waitpid(pid, &status, WNOHANG);
    res.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (w == pid) break;
    if (res.seconds > limit_s) {  // never hang the parent: kill mpirun (it kills its ranks)
      kill(pid, SIGTERM);
      waitpid(pid, &status, 0);
      res.output = "child job killed after " + std::to_string(limit_s) + " s\n";
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  res.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  std::ifstream f(tmpl);
  res.output += std::string(std::istreambuf_iterator<char>(f), {});
  unlink(tmpl);
  return res;
}

TEST_P(CommTest, TimeoutAbortsJobWithClearError) {
  if (GetParam() == Backend::Self) GTEST_SKIP() << "one rank cannot wait for another";
  if (n != 1) GTEST_SKIP() << "runs from the 1-rank job (it starts a 2-rank child job)";
  std::string why = suite_child_skip_reason(GetParam());
  if (!why.empty()) GTEST_SKIP() << why;
  ChildResult res = run_child_job(GetParam() == Backend::Nccl ? "nccl" : "mpi", 60.0);
  EXPECT_NE(res.exit_code, 0) << res.output;
  EXPECT_LT(res.seconds, 30.0) << "the job was not aborted soon after the 2 s timeout\n" << res.output;
  EXPECT_NE(res.output.find("communication timed out after 2 s"), std::string::npos) << res.output;
  EXPECT_NE(res.output.find("all_reduce #"), std::string::npos) << res.output;
  EXPECT_NE(res.output.find("on rank 0 of 2"), std::string::npos) << res.output;
  EXPECT_EQ(res.output.find("CHILD-UNEXPECTED"), std::string::npos) << res.output;
}

}  // namespace mxdp_test
