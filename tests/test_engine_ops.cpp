// The CPU ops' fused optimizer work (engine_ops.h) against the separate ops it
// stands for: adamw_quantize = adamw then quantize, adamw_amax = adamw then an
// amax fold, the device-amax NVFP4 ops = the host-amax ones. Bitwise, on sizes
// that are not whole blocks, with and without a clip coefficient.
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <vector>

#include "check.h"
#include "engine_ops.h"
#include "layout.h"
#include "quant.h"
#include "compare_util.h"
#include "flat_payload.h"

using namespace mxdp;
using mxdp::testing::FlatShape;
using mxdp::testing::flat_shape;
using mxdp::testing::same_bits;

namespace {

std::vector<float> randn(size_t n, uint32_t seed, float scale) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0, scale);
  std::vector<float> v(n);
  for (auto& x : v) x = nd(rng);
  return v;
}


struct State {
  std::vector<float> p, m, v;
};
State start(size_t n, uint32_t seed) {
  State s{randn(n, seed, 0.02f), randn(n, seed + 1, 0.01f), randn(n, seed + 2, 1e-4f)};
  for (auto& x : s.v) x = x * x;  // second moments are non-negative
  return s;
}


}  // namespace

TEST(CpuEngineOps, FusedAdamWQuantizeIsAdamWThenQuantize) {
  auto ops = make_cpu_ops();
  for (int64_t n : {int64_t(1), int64_t(31), int64_t(32), int64_t(33), int64_t(1000), int64_t(4096 + 7), int64_t(65599)})
    for (WeightFormat f : {WeightFormat::Bf16, WeightFormat::Mxfp8})
      for (ScaleRounding r : {ScaleRounding::RCeil, ScaleRounding::Floor})
        for (float gs : {1.0f, 0.37f}) {
          const std::string what = std::string(to_string(f)) + " " + to_string(r) + " n=" + std::to_string(n) +
                                   " grad_scale=" + std::to_string(gs);
          State a = start(n, uint32_t(n)), b = a;
          const FlatShape ps = flat_shape(f, n);
          std::vector<uint8_t> pa(ps.shard_bytes + 64, 0xAB), pb = pa;
          for (int t = 1; t <= 3; ++t) {
            auto g = randn(n, 100 + t, 1.0f);
            const AdamWParams ap{1e-3f, 0.9f, 0.95f, 1e-8f, t == 2 ? 0.0f : 0.1f, t};
            ops->adamw_quantize(f, r, a.p.data(), a.m.data(), a.v.data(), g.data(), n, gs, ap, pa.data(),
                                pa.data() + ps.code_bytes);
            std::vector<float> gb = g;
            if (gs != 1.0f) ops->scale(gb.data(), n, gs);
            ops->adamw(b.p.data(), b.m.data(), b.v.data(), gb.data(), n, ap);
            ops->quantize(f, r, b.p.data(), n, 0.0f, pb.data(), pb.data() + ps.code_bytes);
          }
          EXPECT_TRUE(same_bits(a.p, b.p)) << what << ": masters";
          EXPECT_TRUE(same_bits(a.m, b.m)) << what << ": first moments";
          EXPECT_TRUE(same_bits(a.v, b.v)) << what << ": second moments";
          EXPECT_TRUE(same_bits(pa, pb)) << what << ": payload";
        }
  std::vector<float> x(64);
  EXPECT_THROW(ops->adamw_quantize(WeightFormat::Nvfp4, ScaleRounding::RCeil, x.data(), x.data(), x.data(), x.data(),
                                   64, 1.0f, {1e-3f, 0.9f, 0.95f, 1e-8f, 0.0f, 1}, nullptr, nullptr),
               Error);
}

TEST(CpuEngineOps, AdamWAmaxThenDeviceAmaxNvfp4IsAdamWThenQuantize) {
  auto ops = make_cpu_ops();
  for (int64_t n : {int64_t(1), int64_t(15), int64_t(16), int64_t(17), int64_t(4096 + 7), int64_t(65599)})
    for (float gs : {1.0f, 0.37f}) {
      const std::string what = "n=" + std::to_string(n) + " grad_scale=" + std::to_string(gs);
      State a = start(n, uint32_t(n) + 7), b = a;
      auto g = randn(n, 5, 1.0f);
      const AdamWParams ap{1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 4};
      float am = 0.0f;
      ops->adamw_amax(a.p.data(), a.m.data(), a.v.data(), g.data(), n, gs, ap, &am);
      std::vector<float> gb = g;
      if (gs != 1.0f) ops->scale(gb.data(), n, gs);
      ops->adamw(b.p.data(), b.m.data(), b.v.data(), gb.data(), n, ap);
      EXPECT_TRUE(same_bits(a.p, b.p) && same_bits(a.m, b.m) && same_bits(a.v, b.v)) << what;
      EXPECT_EQ(am, ops->amax(b.p.data(), n)) << what;
      // A fold: a larger amax already there (another piece of the tensor) stays.
      float big = 3.0f * am;
      ops->adamw_amax(a.p.data(), a.m.data(), a.v.data(), g.data(), n, gs, ap, &big);
      EXPECT_EQ(big, 3.0f * am) << what;
      float again = 0.0f;
      ops->amax_into(a.p.data(), n, &again);
      EXPECT_EQ(again, ops->amax(a.p.data(), n)) << what;
      // Quantize and dequantize with the amax in ops memory = with the host value.
      const float tensor_amax = 2.0f * am;  // as if the tensor were sharded
      const FlatShape ps = flat_shape(WeightFormat::Nvfp4, n);
      std::vector<uint8_t> qa(ps.shard_bytes + 16, 0), qb = qa;
      ops->quantize_nvfp4(a.p.data(), n, &tensor_amax, qa.data(), qa.data() + ps.code_bytes);
      ops->quantize(WeightFormat::Nvfp4, ScaleRounding::RCeil, a.p.data(), n, tensor_amax, qb.data(),
                    qb.data() + ps.code_bytes);
      EXPECT_TRUE(same_bits(qa, qb)) << what;
      for (ComputeDType dt : {ComputeDType::F32, ComputeDType::BF16}) {
        const size_t es = dt == ComputeDType::F32 ? 4 : 2;
        std::vector<uint8_t> ya(n * es), yb(n * es);
        ops->dequantize_nvfp4(qa.data(), qa.data() + ps.code_bytes, n, &tensor_amax, ya.data(), dt);
        ops->dequantize(WeightFormat::Nvfp4, qb.data(), qb.data() + ps.code_bytes, n, tensor_amax, yb.data(), dt);
        EXPECT_TRUE(same_bits(ya, yb)) << what;
      }
    }
  double d = 0;
  ops->write_f64(&d, 2.5);
  EXPECT_EQ(d, 2.5);
  EXPECT_EQ(ops->host_waits(), 0);
}
