// StreamGraphs (src/models/cuda/stream_graphs.h) on its own: a segment runs eagerly
// on first sight of a key, is captured on the second and replayed after; keys
// are kept per segment up to a limit (least recently used out); a segment
// whose capture fails runs eagerly from then on, its work done once either
// way. Each check counts what the GPU did (a kernel that adds into a device
// counter), not only what the class reports.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstdint>

#include "models/cuda/stream_graphs.h"
#include "util/cuda_check.h"
#include "gpu_test_util.h"

using mxdp::cuda::StreamGraphs;

namespace {

__global__ void add_kernel(int64_t* counter, int64_t v) { *counter += v; }

struct Rig {
  cudaStream_t s = nullptr;
  int64_t* counter = nullptr;
  Rig() {
    MXDP_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    MXDP_CUDA_CHECK(cudaMalloc(&counter, sizeof(int64_t)));
    MXDP_CUDA_CHECK(cudaMemset(counter, 0, sizeof(int64_t)));
  }
  ~Rig() {
    cudaStreamSynchronize(s);
    cudaFree(counter);
    cudaStreamDestroy(s);
  }
  // Two kernels, so a graph holds more than one node.
  void add(int64_t v) {
    add_kernel<<<1, 1, 0, s>>>(counter, v);
    add_kernel<<<1, 1, 0, s>>>(counter, 1000 * v);
    MXDP_CUDA_CHECK(cudaGetLastError());
  }
  int64_t value() {
    int64_t v = 0;
    MXDP_CUDA_CHECK(cudaStreamSynchronize(s));
    MXDP_CUDA_CHECK(cudaMemcpy(&v, counter, sizeof v, cudaMemcpyDeviceToHost));
    return v;
  }
};

TEST(StreamGraphs, EagerThenCapturedThenReplayedEachRunDoneOnce) {
  REQUIRE_GPU();
  Rig r;
  StreamGraphs g(r.s, true);
  for (int i = 0; i < 5; ++i) g.run(7, {1, 2}, [&] { r.add(1); });
  EXPECT_EQ(r.value(), 1001 * 5) << "a capture does not execute: it must be launched once";
  EXPECT_EQ(g.eager_runs(), 1);
  EXPECT_EQ(g.launches(), 4);
  EXPECT_EQ(g.graphs(), 1);
}

// A replay runs what was captured: the arguments of the capture's run.
TEST(StreamGraphs, AReplayRepeatsTheCapturedArguments) {
  REQUIRE_GPU();
  Rig r;
  StreamGraphs g(r.s, true);
  for (int i = 1; i <= 4; ++i) g.run(0, {9}, [&] { r.add(i); });
  EXPECT_EQ(r.value(), 1001 * (1 + 2 + 2 + 2)) << "runs 3 and 4 replay run 2's launches";
}

TEST(StreamGraphs, KeysAreKeptPerSegmentLeastRecentlyUsedOut) {
  REQUIRE_GPU();
  Rig r;
  StreamGraphs g(r.s, true);
  const int K = StreamGraphs::kKeysPerSegment;
  for (int k = 0; k < K; ++k)
    for (int i = 0; i < 2; ++i) g.run(3, {k}, [&] { r.add(1); });  // each key: eager, then captured
  EXPECT_EQ(g.graphs(), K);
  const int64_t eager = g.eager_runs();
  for (int k = 0; k < K; ++k) g.run(3, {k}, [&] { r.add(1); });  // all replays
  EXPECT_EQ(g.eager_runs(), eager);
  g.run(3, {K}, [&] { r.add(1); });  // a new key: key 0, least recently used, goes
  EXPECT_EQ(g.graphs(), K - 1);
  g.run(3, {0}, [&] { r.add(1); });
  EXPECT_EQ(g.eager_runs(), eager + 2) << "key 0 was dropped: seen again, it starts eager";
  // Another segment id with the same key is another segment.
  g.run(4, {1}, [&] { r.add(1); });
  EXPECT_EQ(g.eager_runs(), eager + 3);
  EXPECT_EQ(r.value(), 1001 * (2 * K + K + 3));
}

TEST(StreamGraphs, ASegmentThatCannotBeCapturedRunsEagerly) {
  REQUIRE_GPU();
  Rig r;
  StreamGraphs g(r.s, true);
  // A host wait inside the work is not allowed in a capture: the capture fails
  // (the synchronise throws), the work runs eagerly instead, and from then on.
  const auto work = [&] {
    r.add(1);
    MXDP_CUDA_CHECK(cudaStreamSynchronize(r.s));
  };
  for (int i = 0; i < 4; ++i) g.run(1, {5}, work);
  EXPECT_EQ(r.value(), 1001 * 4) << "each run's work done exactly once";
  EXPECT_EQ(g.launches(), 0);
  EXPECT_EQ(g.eager_runs(), 4);
  EXPECT_EQ(g.graphs(), 0);
  cudaStreamCaptureStatus st;
  ASSERT_EQ(cudaStreamIsCapturing(r.s, &st), cudaSuccess);
  EXPECT_EQ(st, cudaStreamCaptureStatusNone) << "the failed capture was ended";
  EXPECT_EQ(cudaGetLastError(), cudaSuccess) << "no error left behind";
}

TEST(StreamGraphs, DisabledRunsEverythingEagerly) {
  REQUIRE_GPU();
  Rig r;
  StreamGraphs g(r.s, false);
  for (int i = 0; i < 3; ++i) g.run(0, {1}, [&] { r.add(2); });
  EXPECT_EQ(r.value(), 1001 * 6);
  EXPECT_EQ(g.launches(), 0);
  EXPECT_EQ(g.eager_runs(), 3);
}

}  // namespace
