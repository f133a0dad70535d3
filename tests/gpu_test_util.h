// What every single-process GPU test needs: skip cleanly (GTEST_SKIP, which
// ctest reports as skipped) when this machine has no usable CUDA device; fp32
// device gradient buffers for driving a GPU model without the engine.
#pragma once

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "util/cuda_check.h"
#include "models/model.h"

namespace mxdp::gputest {

inline bool have_gpu() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    (void)cudaGetLastError();  // clear the sticky "no device" error
    return false;
  }
  return n > 0;
}

// ModelHooks whose gradient buffers are fp32 device memory, zeroed (what the
// engine hands a GPU model); records the hook order.
struct DevHooks final : ModelHooks {
  std::vector<float*> g;
  std::vector<int64_t> n;
  std::vector<int> fwd, bwd;
  explicit DevHooks(const std::vector<ParamSpec>& ps) {
    for (const auto& p : ps) {
      float* d = nullptr;
      MXDP_CUDA_CHECK(cudaMalloc(&d, p.numel() * 4));
      MXDP_CUDA_CHECK(cudaMemset(d, 0, p.numel() * 4));
      g.push_back(d);
      n.push_back(p.numel());
    }
    // The zeros (legacy default stream) land before a model's non-blocking
    // stream adds to them. Zero again between steps with cudaMemsetAsync on
    // the model's stream, never with cudaMemset.
    MXDP_CUDA_CHECK(cudaDeviceSynchronize());
  }
  ~DevHooks() override {
    for (float* d : g) cudaFree(d);
  }
  void before_layer(int l) override { fwd.push_back(l); }
  float* grad(int p) override { return g[p]; }
  void after_layer_backward(int l) override { bwd.push_back(l); }
  std::vector<float> get(int p) const {
    MXDP_CUDA_CHECK(cudaDeviceSynchronize());
    std::vector<float> h(n[p]);
    MXDP_CUDA_CHECK(cudaMemcpy(h.data(), g[p], h.size() * 4, cudaMemcpyDeviceToHost));
    return h;
  }
};

}  // namespace mxdp::gputest

#define REQUIRE_GPU()                                                                    \
  do {                                                                                   \
    if (!::mxdp::gputest::have_gpu()) GTEST_SKIP() << "no CUDA device present";          \
  } while (0)
