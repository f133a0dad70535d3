// Communicator tests on host buffers: the Self and MPI backends, under
// `mpirun -np 1..4`. The suite itself is in comm_suite.h (shared with the
// NCCL tests in mpigputest_comm.cpp). Also checks make_communicator's choice
// of backend and the environment knobs.
#include <cstdlib>

#include "comm_suite.h"

namespace mxdp_test {

namespace {
struct HostMem final : Mem {
  void* alloc(size_t bytes) override { return bytes ? std::aligned_alloc(256, (bytes + 255) / 256 * 256) : nullptr; }
  void release(void* p) override { std::free(p); }
  void upload(void* dst, const void* src, size_t bytes) override { if (bytes) std::memcpy(dst, src, bytes); }
  void download(void* dst, const void* src, size_t bytes) override { if (bytes) std::memcpy(dst, src, bytes); }
  void* stream() override { return nullptr; }
  void sync() override {}
};
}  // namespace

Mem& suite_mem(Backend) {
  static HostMem m;
  return m;
}
std::string suite_skip_reason(Backend b) {
  return b == Backend::Nccl ? "NCCL runs in mpigputest_comm" : "";
}

INSTANTIATE_TEST_SUITE_P(Host, CommTest, ::testing::Values(Backend::Self, Backend::Mpi),
                         [](const auto& info) { return std::string(backend_name(info.param)); });

TEST(CommChoice, AutoIsSelfForOneRankElseMpi) {
  auto mpi = make_communicator({Backend::Mpi});
  auto aut = make_communicator({});
  EXPECT_EQ(aut->backend(), mpi->size() == 1 ? Backend::Self : Backend::Mpi);
  EXPECT_EQ(aut->size(), mpi->size());
  EXPECT_EQ(aut->rank(), mpi->rank());
  EXPECT_FALSE(aut->device_memory());
  EXPECT_GE(mpi->local_rank(), 0);
  EXPECT_LT(mpi->local_rank(), mpi->local_size());
  EXPECT_LE(mpi->local_size(), mpi->size());
}

TEST(CommChoice, SelfIsOneRankEvenUnderMpirun) {
  auto c = make_communicator({Backend::Self});
  EXPECT_EQ(c->size(), 1);
  EXPECT_EQ(c->rank(), 0);
}

TEST(CommOptions, EnvironmentIsValidated) {
  setenv("MXDP_COMM_TIMEOUT", "abc", 1);
  try {
    make_communicator({Backend::Self});
    ADD_FAILURE() << "bad MXDP_COMM_TIMEOUT accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("MXDP_COMM_TIMEOUT"), std::string::npos) << e.what();
  }
  unsetenv("MXDP_COMM_TIMEOUT");
  setenv("MXDP_COMM_CHECK", "yes", 1);
  EXPECT_THROW(make_communicator({Backend::Self}), Error);
  unsetenv("MXDP_COMM_CHECK");
  EXPECT_THROW(make_communicator({Backend::Self, -1.0}), Error);
#ifndef MXDP_HAVE_NCCL
  EXPECT_THROW(make_communicator({Backend::Nccl}), Error);
#endif
}

// MXDP_COMM_CHECK=1 turns the size check on without touching the code.
TEST(CommOptions, EnvTurnsSizeCheckOn) {
  setenv("MXDP_COMM_CHECK", "1", 1);
  auto c = make_communicator({Backend::Mpi});
  unsetenv("MXDP_COMM_CHECK");
  if (c->size() < 2) GTEST_SKIP() << "needs 2 ranks";
  std::vector<float> x(8, 1.0f);
  EXPECT_THROW(c->all_reduce(x.data(), x.data(), c->rank() == 0 ? 8 : 7, DType::F32, RedOp::Sum), Error);
  c->barrier();
}

}  // namespace mxdp_test
