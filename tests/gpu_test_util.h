// What every single-process GPU test needs: skip cleanly (GTEST_SKIP, which
// ctest reports as skipped) when this machine has no usable CUDA device; fp32
// device gradient buffers for driving a GPU model without the engine, and host
// ones for the CPU model it is held to; the inputs of those comparisons
// (gputest_gpt.cu, gputest_llama.cu): bf16-exact random values and random tokens.
#pragma once

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <vector>

#include "formats/codec.h"
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

// ModelHooks whose gradient buffers are fp32 host memory, zeroed: the CPU
// model's side of a comparison with a GPU model.
struct HostHooks final : ModelHooks {
  std::vector<std::vector<float>> g;
  explicit HostHooks(const std::vector<ParamSpec>& ps) {
    for (const auto& p : ps) g.emplace_back(p.numel(), 0.f);
  }
  void before_layer(int) override {}
  float* grad(int p) override { return g[size_t(p)].data(); }
  void after_layer_backward(int) override {}
};

// n normal(0, scale) floats from std::mt19937_64(seed), each rounded to bf16
// (round to nearest even): inputs the GPU (bf16) and the CPU (fp32) side both
// hold exactly.
inline std::vector<float> randn(size_t n, uint64_t seed, float scale = 1.f) {
  std::mt19937_64 g(seed);
  std::normal_distribution<float> d(0.f, 1.f);
  std::vector<float> v(n);
  for (auto& x : v) x = codec::bf16_to_f32(codec::bf16_from_f32(scale * d(g)));
  return v;
}

// B*T random input tokens and as many targets below V, from std::mt19937_64(seed).
inline void make_tokens(int V, int B, int T, uint64_t seed, std::vector<int32_t>& in, std::vector<int32_t>& tgt) {
  std::mt19937_64 g(seed);
  in.resize(size_t(B) * T);
  tgt.resize(in.size());
  for (size_t i = 0; i < in.size(); ++i) {
    in[i] = int32_t(g() % uint64_t(V));
    tgt[i] = int32_t(g() % uint64_t(V));
  }
}

}  // namespace mxdp::gputest

#define REQUIRE_GPU()                                                                    \
  do {                                                                                   \
    if (!::mxdp::gputest::have_gpu()) GTEST_SKIP() << "no CUDA device present";          \
  } while (0)
