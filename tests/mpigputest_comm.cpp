// Communicator tests on GPU buffers: the NCCL backend under `mpirun -np 1`
// and `-np 2`, one process per GPU. Runs the same suite as the host backends
// (comm_suite.h): data is staged host <-> device on a caller stream that is
// not the default stream, so a missing event dependency in either direction
// shows up as wrong data. Skips without a GPU or with fewer GPUs than ranks.
#include <cuda_runtime.h>

#include "comm_suite.h"
#include "util/cuda_check.h"

namespace mxdp_test {

namespace {

int gpu_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) return 0;
  return n;
}

// Ranks on this host, without creating an NCCL communicator.
int ranks_on_host() {
  static int local = make_communicator({Backend::Mpi})->local_size();
  return local;
}

struct DevMem final : Mem {
  cudaStream_t s = nullptr;
  DevMem() { MXDP_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking)); }
  void* alloc(size_t bytes) override {
    void* p = nullptr;
    if (bytes) MXDP_CUDA_CHECK(cudaMalloc(&p, bytes));
    return p;
  }
  void release(void* p) override {
    if (p) {
      MXDP_CUDA_CHECK(cudaStreamSynchronize(s));
      MXDP_CUDA_CHECK(cudaFree(p));
    }
  }
  void upload(void* dst, const void* src, size_t bytes) override {
    if (bytes) MXDP_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, s));
  }
  void download(void* dst, const void* src, size_t bytes) override {
    if (bytes) MXDP_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, s));
    sync();
  }
  void* stream() override { return s; }
  void sync() override { MXDP_CUDA_CHECK(cudaStreamSynchronize(s)); }
};

}  // namespace

Mem& suite_mem(Backend) {
  static DevMem m;  // created after the communicator has chosen the device
  return m;
}

std::string suite_skip_reason(Backend) {
  const int g = gpu_count();
  if (g == 0) return "no GPU";
  if (ranks_on_host() > g)
    return std::to_string(ranks_on_host()) + " ranks on this host but " + std::to_string(g) + " GPUs";
  return "";
}
std::string suite_child_skip_reason(Backend) {
  return gpu_count() >= 2 ? "" : "the timeout child job needs 2 GPUs";
}

// Tells ctest (SKIP_REGULAR_EXPRESSION in tests/CMakeLists.txt) that this run
// could not use GPUs at all.
struct GpuSkipMarker : ::testing::Environment {
  void SetUp() override {
    std::string why = suite_skip_reason(Backend::Nccl);
    if (!why.empty()) std::printf("mxdp-gpu-tests-skipped: %s\n", why.c_str());
  }
};
const auto* const kGpuSkipMarker = ::testing::AddGlobalTestEnvironment(new GpuSkipMarker);

INSTANTIATE_TEST_SUITE_P(Gpu, CommTest, ::testing::Values(Backend::Nccl),
                         [](const auto& info) { return std::string(backend_name(info.param)); });

TEST(NcclComm, PropertiesAndHostPointerRejected) {
  std::string why = suite_skip_reason(Backend::Nccl);
  if (!why.empty()) GTEST_SKIP() << why;
  Communicator& c = suite_comm(Backend::Nccl);
  EXPECT_TRUE(c.device_memory());
  EXPECT_EQ(c.backend(), Backend::Nccl);
  EXPECT_NE(c.comm_stream(), nullptr);
  int dev = -1;
  MXDP_CUDA_CHECK(cudaGetDevice(&dev));
  EXPECT_EQ(dev, c.local_rank());
  std::vector<float> host(16, 1.0f);
  try {
    c.all_reduce(host.data(), host.data(), 16, DType::F32, RedOp::Sum, suite_mem(Backend::Nccl).stream());
    ADD_FAILURE() << "host pointer accepted by the NCCL backend";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("needs GPU memory"), std::string::npos) << e.what();
  }
  c.barrier();
}

// The legacy default stream (nullptr) as the caller stream.
TEST(NcclComm, DefaultStream) {
  std::string why = suite_skip_reason(Backend::Nccl);
  if (!why.empty()) GTEST_SKIP() << why;
  Communicator& c = suite_comm(Backend::Nccl);
  const size_t count = 1 << 20;
  float* d = nullptr;
  MXDP_CUDA_CHECK(cudaMalloc(&d, count * 4));
  std::vector<uint8_t> h = make_input(DType::F32, count, c.rank());
  MXDP_CUDA_CHECK(cudaMemcpy(d, h.data(), count * 4, cudaMemcpyHostToDevice));
  c.all_reduce(d, d, count, DType::F32, RedOp::Sum, nullptr);
  MXDP_CUDA_CHECK(cudaMemcpy(h.data(), d, count * 4, cudaMemcpyDeviceToHost));
  MXDP_CUDA_CHECK(cudaFree(d));
  std::string where;
  EXPECT_EQ(count_wrong(h, DType::F32, count,
                        [&](size_t i) { return expected_reduce(DType::F32, RedOp::Sum, i, c.size()); }, &where),
            0u)
      << where;
}

}  // namespace mxdp_test
