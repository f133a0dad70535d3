// CPU ops (the reference) vs CUDA ops on the same inputs: every operation the
// engine uses is bitwise equal, except sum_squares (another fixed reduction
// tree: equal within rounding, and bitwise repeatable on the device).
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "cuda/engine_ops_cuda.h"
#include "cuda_check.h"
#include "engine_ops.h"
#include "layout.h"
#include "gpu_test_util.h"

using namespace mxdp;

namespace {


std::vector<float> random_floats(size_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0, scale);
  std::vector<float> v(n);
  for (auto& x : v) x = nd(rng);
  // Edge values the formats treat specially.
  if (n > 8) {
    v[1] = 0.0f;
    v[2] = -0.0f;
    v[3] = 1e-40f;  // subnormal
    v[4] = 3e38f;
    v[5] = -448.0f;
  }
  return v;
}

// Copies host data to the device ops' memory and back.
template <class T>
struct Dev {
  EngineOps& ops;
  DeviceArray<T> a;
  Dev(EngineOps& o, const std::vector<T>& h) : ops(o), a(o, h.size()) { ops.copy_from_host(a.data(), h.data(), a.bytes()); }
  std::vector<T> get() {
    std::vector<T> h(a.size());
    ops.copy_to_host(h.data(), a.data(), a.bytes());
    return h;
  }
};

template <class T>
size_t mismatches(const std::vector<T>& a, const std::vector<T>& b) {
  size_t bad = a.size() == b.size() ? 0 : 1;
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) bad += std::memcmp(&a[i], &b[i], sizeof(T)) != 0;
  return bad;
}

}  // namespace

TEST(GpuEngineOps, ElementwiseBitwiseEqualToCpu) {
  REQUIRE_GPU();
  auto cpu = make_cpu_ops();
  auto gpu = cuda::make_cuda_ops();
  const size_t n = 1000003;
  auto x = random_floats(n, 1);
  // bf16 both ways
  std::vector<uint16_t> c16(n);
  cpu->to_bf16(x.data(), c16.data(), n);
  Dev<float> dx(*gpu, x);
  Dev<uint16_t> d16(*gpu, std::vector<uint16_t>(n));
  gpu->to_bf16(dx.a.data(), d16.a.data(), n);
  EXPECT_EQ(mismatches(d16.get(), c16), 0u);
  std::vector<float> back(n);
  cpu->from_bf16(c16.data(), back.data(), n);
  Dev<float> dback(*gpu, std::vector<float>(n));
  gpu->from_bf16(d16.a.data(), dback.a.data(), n);
  EXPECT_EQ(mismatches(dback.get(), back), 0u);
  // scale
  std::vector<float> xs = x;
  cpu->scale(xs.data(), n, 0.3f);
  gpu->scale(dx.a.data(), n, 0.3f);
  EXPECT_EQ(mismatches(dx.get(), xs), 0u);
  // amax
  EXPECT_EQ(gpu->amax(dx.a.data(), n), cpu->amax(xs.data(), n));
}

TEST(GpuEngineOps, AdamWBitwiseEqualToCpuOverManySteps) {
  REQUIRE_GPU();
  auto cpu = make_cpu_ops();
  auto gpu = cuda::make_cuda_ops();
  const size_t n = 300007;
  auto p = random_floats(n, 2, 0.02f);
  std::vector<float> m(n, 0), v(n, 0);
  Dev<float> dp(*gpu, p), dm(*gpu, m), dv(*gpu, v);
  for (int t = 1; t <= 20; ++t) {
    auto g = random_floats(n, 100 + t, t % 3 ? 1.0f : 1e-6f);
    Dev<float> dg(*gpu, g);
    const AdamWParams a{3e-3f, 0.9f, 0.95f, 1e-8f, t % 2 ? 0.1f : 0.0f, t};
    cpu->adamw(p.data(), m.data(), v.data(), g.data(), n, a);
    gpu->adamw(dp.a.data(), dm.a.data(), dv.a.data(), dg.a.data(), n, a);
  }
  EXPECT_EQ(mismatches(dp.get(), p), 0u) << "params";
  EXPECT_EQ(mismatches(dm.get(), m), 0u) << "first moments";
  EXPECT_EQ(mismatches(dv.get(), v), 0u) << "second moments";
}

TEST(GpuEngineOps, QuantizeDequantizeBitwiseEqualToCpu) {
  REQUIRE_GPU();
  auto cpu = make_cpu_ops();
  auto gpu = cuda::make_cuda_ops();
  const int64_t n = 256 * 1031;  // a shard: whole blocks of every format
  auto x = random_floats(n, 3, 0.05f);
  for (WeightFormat f : {WeightFormat::Bf16, WeightFormat::Mxfp8, WeightFormat::Nvfp4})
    for (ScaleRounding r : {ScaleRounding::RCeil, ScaleRounding::Floor}) {
      const PayloadShape ps = payload_shape(f, n);
      const float tensor_amax = 2.0f * cpu->amax(x.data(), n);  // as if sharded: larger than this range's
      std::vector<uint8_t> cpay(ps.shard_bytes, 0);
      cpu->quantize(f, r, x.data(), n, tensor_amax, cpay.data(), cpay.data() + ps.code_bytes);
      Dev<float> dx(*gpu, x);
      Dev<uint8_t> dpay(*gpu, std::vector<uint8_t>(ps.shard_bytes, 0));
      gpu->quantize(f, r, dx.a.data(), n, tensor_amax, dpay.a.data(), dpay.a.data() + ps.code_bytes);
      EXPECT_EQ(mismatches(dpay.get(), cpay), 0u) << to_string(f) << " " << to_string(r) << " payload";
      std::vector<float> cy(n);
      cpu->dequantize(f, cpay.data(), cpay.data() + ps.code_bytes, n, tensor_amax, cy.data(), ComputeDType::F32);
      Dev<float> dy(*gpu, std::vector<float>(n));
      gpu->dequantize(f, dpay.a.data(), dpay.a.data() + ps.code_bytes, n, tensor_amax, dy.a.data(), ComputeDType::F32);
      EXPECT_EQ(mismatches(dy.get(), cy), 0u) << to_string(f) << " " << to_string(r) << " dequantized";
    }
}

TEST(GpuEngineOps, SumSquaresCloseToCpuAndRepeatable) {
  REQUIRE_GPU();
  auto cpu = make_cpu_ops();
  auto gpu = cuda::make_cuda_ops();
  for (size_t n : {size_t(1), size_t(255), size_t(1000003), size_t(40'000'000)}) {
    auto x = random_floats(n, 4);
    for (auto& v : x)
      if (std::abs(v) > 1e30f) v = 1.0f;  // keep the sum finite
    Dev<float> dx(*gpu, x);
    const double c = cpu->sum_squares(x.data(), n);
    const double g1 = gpu->sum_squares(dx.a.data(), n), g2 = gpu->sum_squares(dx.a.data(), n);
    EXPECT_EQ(std::memcmp(&g1, &g2, sizeof g1), 0) << "not repeatable, n = " << n;
    // Both sum n non-negative fp64 terms; the sequential CPU sum's error bound
    // is n * 2^-53 relative (the tree's is smaller): allow that.
    EXPECT_NEAR(g1, c, double(n) * 0x1p-53 * c) << "n = " << n;
  }
}
