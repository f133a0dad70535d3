// CPU ops (the reference) vs CUDA ops on the same inputs: every operation the
// engine uses is bitwise equal, except sum_squares (another fixed reduction
// tree: equal within rounding, and bitwise repeatable on the device).
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <cstring>
#include <random>
#include <limits>
#include <span>
#include <string>
#include <vector>

#include "engine/cuda/engine_ops_cuda.h"
#include "util/cuda_check.h"
#include "engine/engine_ops.h"
#include "engine/layout.h"
#include "formats/cuda/fp8_block_cuda.h"
#include "formats/fp8_block.h"
#include "formats/quant.h"
#include "adamw_ranges_case.h"
#include "compare_util.h"
#include "flat_payload.h"
#include "gpu_test_util.h"

using namespace mxdp;
using mxdp::testing::FlatShape;
using mxdp::testing::flat_shape;
using mxdp::testing::same_bits;
using mxdp::testing::step_ctl;

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

// After a test's steps: the device's masters and moments bit for bit the
// host's, a failure named by `what`.
void expect_state_equal(Dev<float>& dp, Dev<float>& dm, Dev<float>& dv, const std::vector<float>& p,
                        const std::vector<float>& m, const std::vector<float>& v, const std::string& what) {
  EXPECT_EQ(mismatches(dp.get(), p), 0u) << what << ": masters";
  EXPECT_EQ(mismatches(dm.get(), m), 0u) << what << ": first moments";
  EXPECT_EQ(mismatches(dv.get(), v), 0u) << what << ": second moments";
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
      cpu->quantize(f, r, x.data(), n, &tensor_amax, cpay.data(), cpay.data() + ps.code_bytes);
      Dev<float> dx(*gpu, x);
      Dev<float> dam(*gpu, std::vector<float>{tensor_amax});
      Dev<uint8_t> dpay(*gpu, std::vector<uint8_t>(ps.shard_bytes, 0));
      gpu->quantize(f, r, dx.a.data(), n, dam.a.data(), dpay.a.data(), dpay.a.data() + ps.code_bytes);
      EXPECT_EQ(mismatches(dpay.get(), cpay), 0u) << to_string(f) << " " << to_string(r) << " payload";
      std::vector<float> cy(n);
      cpu->dequantize(f, cpay.data(), cpay.data() + ps.code_bytes, n, &tensor_amax, cy.data(), ComputeDType::F32);
      Dev<float> dy(*gpu, std::vector<float>(n));
      gpu->dequantize(f, dpay.a.data(), dpay.a.data() + ps.code_bytes, n, dam.a.data(), dy.a.data(), ComputeDType::F32);
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

// The fused optimizer ops (engine_ops.h) on the device against the CPU's
// separate adamw then quantize (which test_engine_ops holds equal to the CPU's
// fused ops): bitwise, several steps, sizes that are not whole blocks or whole
// float4s, pointers that are not 16-byte aligned (the general kernel) and that
// are (the vectorized one, with the tail in the general kernel), with and
// without a clip coefficient. Each format: bf16, mxfp8 (rceil, floor), and
// nvfp4 (adamw_amax folding into an amax in device memory, then quantize
// reading it there). None of them waits on the host.
TEST(GpuEngineOps, FusedAdamWStageBitwiseEqualToCpuAdamWThenQuantize) {
  REQUIRE_GPU();
  auto cpu = make_cpu_ops();
  auto gpu = cuda::make_cuda_ops();
  int checked = 0;
  for (int64_t n : {int64_t(1), int64_t(5), int64_t(31), int64_t(32), int64_t(33), int64_t(100), int64_t(4096 + 7),
                    int64_t(300007), int64_t(1 << 20) + 96})
    for (int64_t shift : {int64_t(0), int64_t(1)})  // elements: 1 makes every pointer 4-byte aligned only
      for (WeightFormat f : {WeightFormat::Bf16, WeightFormat::Mxfp8, WeightFormat::Nvfp4})
        for (ScaleRounding r : {ScaleRounding::RCeil, ScaleRounding::Floor}) {
          if (f != WeightFormat::Mxfp8 && r == ScaleRounding::Floor) continue;
          const std::string what = std::string(to_string(f)) + " " + to_string(r) + " n=" + std::to_string(n) +
                                   " shift=" + std::to_string(shift);
          const size_t len = size_t(n + shift);
          auto p = random_floats(len, 11 + uint32_t(n), 0.02f);
          std::vector<float> m(len, 0.0f), v(len, 0.0f);
          const FlatShape ps = flat_shape(f, n);
          const int64_t code_shift = f == WeightFormat::Bf16 ? 2 * shift : (f == WeightFormat::Mxfp8 ? shift : 0);
          std::vector<uint8_t> pay(size_t(ps.shard_bytes + code_shift + 64), 0x5A);
          Dev<float> dp(*gpu, p), dm(*gpu, m), dv(*gpu, v);
          Dev<uint8_t> dpay(*gpu, pay);
          Dev<float> damax(*gpu, std::vector<float>(1, 0.0f));
          int64_t waits = 0;  // in the fused ops
          for (int t = 1; t <= 4; ++t) {
            auto g = random_floats(len, 200 + t, t == 3 ? 1e-6f : 1.0f);
            Dev<float> dg(*gpu, g);
            const float gs = t % 2 ? 1.0f : 0.25f;
            const bool skip = t == 4;  // a skipped step: no update, the payload of the unchanged masters
            const AdamWParams a{2e-3f, 0.9f, 0.95f, 1e-8f, t == 2 ? 0.0f : 0.1f, t};
            AdamWParams first = a;  // t even: the device picks the choice's second scalars
            first.t = t - (t % 2 == 0 ? 1 : 0);
            const AdamWChoice ch = adamw_choice(first);
            Dev<StepControl> dc(*gpu, {step_ctl(t, gs, skip)});
            float* P = p.data() + shift;
            float* M = m.data() + shift;
            float* V = v.data() + shift;
            std::vector<float> gc(g.begin() + shift, g.end());
            cpu->scale(gc.data(), n, gs);
            if (!skip) cpu->adamw(P, M, V, gc.data(), n, a);
            uint8_t* codes = pay.data() + code_shift;
            uint8_t* dcodes = dpay.a.data() + code_shift;
            float* gP = dp.a.data() + shift;
            float* gM = dm.a.data() + shift;
            float* gV = dv.a.data() + shift;
            const float* gG = dg.a.data() + shift;
            const int64_t w0 = gpu->host_waits();
            if (f != WeightFormat::Nvfp4) {
              cpu->quantize(f, r, P, n, nullptr, codes, codes + ps.code_bytes);
              gpu->adamw_quantize(f, r, gP, gM, gV, gG, n, dc.a.data(), ch, dcodes, dcodes + ps.code_bytes);
              waits += gpu->host_waits() - w0;
            } else {
              const float tensor_amax = cpu->amax(P, n);
              cpu->quantize(f, r, P, n, &tensor_amax, codes, codes + ps.code_bytes);
              gpu->zero(damax.a.data(), sizeof(float));
              gpu->adamw_amax(gP, gM, gV, gG, n, dc.a.data(), ch, damax.a.data());
              gpu->quantize(f, r, gP, n, damax.a.data(), dcodes, dcodes + ps.code_bytes);
              waits += gpu->host_waits() - w0;
              EXPECT_EQ(damax.get()[0], tensor_amax) << what << " step " << t << ": amax";
            }
          }
          EXPECT_EQ(waits, 0) << what << ": the fused ops waited on the host";
          expect_state_equal(dp, dm, dv, p, m, v, what);
          EXPECT_EQ(mismatches(dpay.get(), pay), 0u) << what << ": payload (codes, scales, and nothing past them)";
          ++checked;
        }
  EXPECT_EQ(checked, 9 * 2 * 4);
}

// The NVFP4 ops with the tensor amax in device memory, the amax fold, and the
// device write: the same bits as their host-valued counterparts, no host wait.
TEST(GpuEngineOps, DeviceAmaxOpsBitwiseEqualToCpu) {
  REQUIRE_GPU();
  auto cpu = make_cpu_ops();
  auto gpu = cuda::make_cuda_ops();
  for (int64_t n : {int64_t(1), int64_t(16), int64_t(17), int64_t(256 * 1031), int64_t(256 * 1031) + 3}) {
    auto x = random_floats(size_t(n), 7 + uint32_t(n), 0.05f);
    Dev<float> dx(*gpu, x);
    const float tensor_amax = 1.5f * cpu->amax(x.data(), n);
    // Slot 2 starts above any finite amax (random_floats holds 3e38): it must stay.
    Dev<float> dam(*gpu, std::vector<float>{tensor_amax, 0.0f, std::numeric_limits<float>::max()});
    int64_t waits = gpu->host_waits();
    gpu->amax_into(dx.a.data(), n, dam.a.data() + 1);   // from 0
    gpu->amax_into(dx.a.data(), n, dam.a.data() + 2);   // a larger value stays
    const FlatShape ps = flat_shape(WeightFormat::Nvfp4, n);
    std::vector<uint8_t> cpay(ps.shard_bytes, 0);
    cpu->quantize(WeightFormat::Nvfp4, ScaleRounding::RCeil, x.data(), n, &tensor_amax, cpay.data(),
                  cpay.data() + ps.code_bytes);
    Dev<uint8_t> dpay(*gpu, std::vector<uint8_t>(ps.shard_bytes, 0));
    Dev<float> dy(*gpu, std::vector<float>(n));
    Dev<uint16_t> dy16(*gpu, std::vector<uint16_t>(n));
    const std::vector<float> losses{2.5f, 1.0f / 3.0f, 7.125f, 1e-7f};
    Dev<float> dl(*gpu, losses);
    // Grad-norm partials, 3 rows of 4 (+ a loss column): finite, then with a NaN.
    std::vector<double> part(15);
    for (size_t i = 0; i < part.size(); ++i) part[i] = 0.37 * double(i + 1) * double(n % 97 + 1);
    std::vector<double> bad = part;
    bad[6] = std::nan("");
    Dev<double> dpart(*gpu, part), dbad(*gpu, bad);
    const StepControl c0 = step_ctl(9, 1.0f);
    Dev<StepControl> dctl(*gpu, {c0, c0, c0});
    DeviceArray<double> d(*gpu, 1);
    waits = gpu->host_waits() - waits;  // the uploads above wait; the ops below must not
    const int64_t w0 = gpu->host_waits();
    gpu->quantize(WeightFormat::Nvfp4, ScaleRounding::RCeil, dx.a.data(), n, dam.a.data(), dpay.a.data(),
                  dpay.a.data() + ps.code_bytes);
    std::vector<float> cy(n);
    cpu->dequantize(WeightFormat::Nvfp4, cpay.data(), cpay.data() + ps.code_bytes, n, &tensor_amax, cy.data(),
                    ComputeDType::F32);
    std::vector<uint16_t> cy16(n);
    cpu->dequantize(WeightFormat::Nvfp4, cpay.data(), cpay.data() + ps.code_bytes, n, &tensor_amax, cy16.data(),
                    ComputeDType::BF16);
    gpu->dequantize(WeightFormat::Nvfp4, dpay.a.data(), dpay.a.data() + ps.code_bytes, n, dam.a.data(), dy.a.data(),
                    ComputeDType::F32);
    gpu->dequantize(WeightFormat::Nvfp4, dpay.a.data(), dpay.a.data() + ps.code_bytes, n, dam.a.data(), dy16.a.data(),
                    ComputeDType::BF16);
    gpu->sum_into(dl.a.data(), int64_t(losses.size()), d.data());
    gpu->step_control(dpart.a.data(), 3, 5, 4, 0.5, dctl.a.data());
    gpu->step_control(dpart.a.data(), 3, 5, 4, 0.0, dctl.a.data() + 1);
    gpu->step_control(dbad.a.data(), 3, 5, 4, 0.5, dctl.a.data() + 2);
    EXPECT_EQ(gpu->host_waits(), w0) << "n = " << n;
    EXPECT_EQ(waits, 7) << "n = " << n << ": the seven uploads, and the amax folds made none";
    std::vector<StepControl> cc{c0, c0, c0};
    cpu->step_control(part.data(), 3, 5, 4, 0.5, &cc[0]);
    cpu->step_control(part.data(), 3, 5, 4, 0.0, &cc[1]);
    cpu->step_control(bad.data(), 3, 5, 4, 0.5, &cc[2]);
    const std::vector<StepControl> gc = dctl.get();
    for (int i = 0; i < 3; ++i) {
      EXPECT_TRUE(same_bits(gc[i].grad_norm, cc[i].grad_norm) && same_bits(gc[i].grad_scale, cc[i].grad_scale) &&
                  gc[i].skip == cc[i].skip && gc[i].updates == cc[i].updates)
          << "n = " << n << ": step_control " << i << ": " << gc[i].grad_norm << " vs " << cc[i].grad_norm;
    }
    EXPECT_LT(cc[0].grad_scale, 1.0f);
    EXPECT_EQ(cc[2].skip, 1);
    const std::vector<float> am = dam.get();
    EXPECT_EQ(am[1], cpu->amax(x.data(), n)) << "n = " << n;
    EXPECT_EQ(am[2], std::numeric_limits<float>::max()) << "n = " << n;
    EXPECT_EQ(mismatches(dpay.get(), cpay), 0u) << "n = " << n;
    EXPECT_EQ(mismatches(dy.get(), cy), 0u) << "n = " << n;
    EXPECT_EQ(mismatches(dy16.get(), cy16), 0u) << "n = " << n;
    double h = 0, want = 0;
    gpu->copy_to_host(&h, d.data(), sizeof h);
    cpu->sum_into(losses.data(), int64_t(losses.size()), &want);
    EXPECT_TRUE(same_bits(h, want)) << h << " vs " << want;
  }
}

// The unpack's one launch for all pieces of a bucket against the CPU's
// dequantize of each piece: bitwise, every format, bf16 and fp32 compute
// weights, lengths that are not whole vectors, destinations with and without
// 16-byte alignment, one NVFP4 tensor amax per piece.
TEST(GpuEngineOps, DequantizePiecesBitwiseEqualToCpuDequantizeEach) {
  REQUIRE_GPU();
  auto cpu = make_cpu_ops();
  auto gpu = cuda::make_cuda_ops();
  const std::vector<int64_t> lens{5, 32, 1000, 4096 + 16, 48, 100000};
  for (WeightFormat f : {WeightFormat::Bf16, WeightFormat::Mxfp8, WeightFormat::Nvfp4})
    for (ComputeDType dt : {ComputeDType::BF16, ComputeDType::F32}) {
      const size_t es = dt == ComputeDType::F32 ? 4 : 2;
      std::vector<std::vector<uint8_t>> pay;
      std::vector<float> amaxes;
      std::vector<std::vector<uint8_t>> want;
      for (size_t i = 0; i < lens.size(); ++i) {
        const int64_t n = lens[i];
        auto x = random_floats(size_t(n), 31 + uint32_t(i), 0.05f);
        const FlatShape ps = flat_shape(f, n);
        pay.emplace_back(size_t(ps.shard_bytes), 0);
        const float am = 1.25f * cpu->amax(x.data(), n);
        amaxes.push_back(am);
        cpu->quantize(f, ScaleRounding::RCeil, x.data(), n, &am, pay.back().data(), pay.back().data() + ps.code_bytes);
        want.emplace_back(size_t(n) * es);
        cpu->dequantize(f, pay.back().data(), pay.back().data() + ps.code_bytes, n, &am, want.back().data(), dt);
      }
      Dev<float> dam(*gpu, amaxes);
      std::vector<Dev<uint8_t>> dpay;
      for (auto& p : pay) dpay.emplace_back(*gpu, p);
      // All outputs in one buffer, odd pieces one element past a 16-byte boundary.
      std::vector<int64_t> at;
      int64_t total = 0;
      for (size_t i = 0; i < lens.size(); ++i) {
        total = (total + 7) / 8 * 8 + int64_t(i % 2);
        at.push_back(total);
        total += lens[i];
      }
      Dev<uint8_t> out(*gpu, std::vector<uint8_t>(size_t(total) * es, 0));
      std::vector<UnpackPiece> t;
      for (size_t i = 0; i < lens.size(); ++i) {
        UnpackPiece u;
        u.codes = dpay[i].a.data();
        u.scales = dpay[i].a.data() + flat_shape(f, lens[i]).code_bytes;
        u.amax = dam.a.data() + i;
        u.dst = out.a.data() + at[i] * int64_t(es);
        u.len = lens[i];
        t.push_back(u);
      }
      Dev<UnpackPiece> dt_table(*gpu, t);
      const int64_t w0 = gpu->host_waits();
      gpu->dequantize_pieces(f, dt_table.a.data(), int(t.size()), 100000, dt);
      EXPECT_EQ(gpu->host_waits(), w0);
      const std::vector<uint8_t> got = out.get();
      for (size_t i = 0; i < lens.size(); ++i) {
        const std::vector<uint8_t> g(got.begin() + at[i] * int64_t(es), got.begin() + (at[i] + lens[i]) * int64_t(es));
        EXPECT_EQ(mismatches(g, want[i]), 0u) << to_string(f) << " " << to_string(dt) << " piece " << i;
      }
    }
}

// fp8b128 (slab ranges, the ops take cols): the fused AdamW + tile quantize,
// dequantize (fp32, bf16), dequantize_pieces, the transpose and the GEMM scale
// layout, bitwise equal to the CPU ops.
TEST(GpuEngineOps, Fp8b128OpsBitwiseEqualToCpu) {
  REQUIRE_GPU();
  auto cpu = make_cpu_ops();
  auto gpu = cuda::make_cuda_ops();
  const AdamWChoice ch = adamw_choice(AdamWParams{1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 1});
  const StepControl c = step_ctl(1, 0.5f);
  // Whole tiles, and partial ones at the right and bottom edges (GPT-2 1558M's
  // 1600 columns, 48 columns, a last slab of 64 or 44 rows).
  const std::vector<std::pair<int64_t, int64_t>> shapes = {{384, 128}, {384, 768}, {320, 1600}, {300, 48}};
  for (const auto& [rows, cols] : shapes) {
    const int64_t n = rows * cols, sc = fp8b128_scale_count(rows, cols);
    auto p = random_floats(size_t(n), 3, 0.02f), m = random_floats(size_t(n), 4, 0.01f), v = random_floats(size_t(n), 5, 1e-4f);
    for (auto& x : v) x = x * x;
    auto g = random_floats(size_t(n), 6, 1.0f);
    std::vector<uint8_t> pay(static_cast<size_t>(n + 4 * sc));
    Dev<float> dp(*gpu, p), dm(*gpu, m), dv(*gpu, v), dg(*gpu, g);
    Dev<StepControl> dc(*gpu, std::vector<StepControl>{c});
    Dev<uint8_t> dpay(*gpu, pay);
    cpu->adamw_quantize(WeightFormat::Fp8b128, ScaleRounding::RCeil, p.data(), m.data(), v.data(), g.data(), n, &c, ch,
                        pay.data(), pay.data() + n, cols);
    gpu->adamw_quantize(WeightFormat::Fp8b128, ScaleRounding::RCeil, dp.a.data(), dm.a.data(), dv.a.data(), dg.a.data(),
                        n, dc.a.data(), ch, dpay.a.data(), dpay.a.data() + n, cols);
    EXPECT_EQ(mismatches(dp.get(), p), 0u) << cols;
    EXPECT_EQ(mismatches(dpay.get(), pay), 0u) << cols << ": payload";
    for (ComputeDType dt : {ComputeDType::F32, ComputeDType::BF16}) {
      const size_t es = dt == ComputeDType::F32 ? 4 : 2;
      std::vector<uint8_t> want(size_t(n) * es);
      cpu->dequantize(WeightFormat::Fp8b128, pay.data(), pay.data() + n, n, nullptr, want.data(), dt, cols);
      Dev<uint8_t> out(*gpu, std::vector<uint8_t>(want.size(), 0)), out2(*gpu, std::vector<uint8_t>(want.size(), 0));
      gpu->dequantize(WeightFormat::Fp8b128, dpay.a.data(), dpay.a.data() + n, n, nullptr, out.a.data(), dt, cols);
      EXPECT_EQ(mismatches(out.get(), want), 0u) << cols << " " << to_string(dt);
      // Two pieces, 128 rows and the rest, as the unpack hands them out.
      std::vector<UnpackPiece> t(2);
      for (int i = 0; i < 2; ++i) {
        const int64_t r0 = i == 0 ? 0 : 128, len = (i == 0 ? 128 : rows - 128) * cols;
        t[i].codes = dpay.a.data() + r0 * cols;
        t[i].scales = dpay.a.data() + n + 4 * fp8b128_scale_count(r0, cols);
        t[i].dst = out2.a.data() + r0 * cols * int64_t(es);
        t[i].len = len;
        t[i].cols = cols;
      }
      Dev<UnpackPiece> tab(*gpu, t);
      gpu->dequantize_pieces(WeightFormat::Fp8b128, tab.a.data(), 2, (rows - 128) * cols, dt);
      EXPECT_EQ(mismatches(out2.get(), want), 0u) << cols << " " << to_string(dt) << ": pieces";
    }
    std::vector<uint8_t> ct(static_cast<size_t>(n));
    std::vector<float> gm(static_cast<size_t>(fp8b128_gemm_scale_count(rows, cols))),
        gmt(static_cast<size_t>(fp8b128_gemm_scale_count(cols, rows)));
    const float* scales = reinterpret_cast<const float*>(pay.data() + n);
    cpu->fp8b128_scales_for_gemm(scales, rows, cols, gm.data());
    cpu->fp8b128_transpose_gemm(pay.data(), gm.data(), rows, cols, ct.data(), gmt.data());
    Dev<uint8_t> dct(*gpu, std::vector<uint8_t>(ct.size(), 0));
    Dev<float> dgm(*gpu, std::vector<float>(gm.size(), -1)), dgmt(*gpu, std::vector<float>(gmt.size(), -1));
    gpu->fp8b128_scales_for_gemm(reinterpret_cast<const float*>(dpay.a.data() + n), rows, cols, dgm.a.data());
    gpu->fp8b128_transpose_gemm(dpay.a.data(), dgm.a.data(), rows, cols, dct.a.data(), dgmt.a.data());
    EXPECT_EQ(mismatches(dgm.get(), gm), 0u) << cols << ": GEMM layout";
    EXPECT_EQ(mismatches(dct.get(), ct), 0u) << cols << ": transposed codes";
    EXPECT_EQ(mismatches(dgmt.get(), gmt), 0u) << cols << ": transposed scales, GEMM layout";
  }
}

// The batched GEMM-layout ops (one launch a bucket) against the formats
// reference (formats/fp8_block.h, host code) matrix by matrix: GPT-2-like
// shapes (4800, 1600 and 6400 rows of 1600; 1600 rows of 6400), a partial
// last tile row (400 rows), a piece of a weight written into the middle of
// its GEMM layout, and a list with a matrix whose rows are not a multiple of
// 16 (its transposes go one by one). The outputs start as a sentinel, so a
// byte written outside its place shows.
TEST(GpuEngineOps, Fp8b128ManyOpsMatchTheFormatsReference) {
  REQUIRE_GPU();
  auto gpu = cuda::make_cuda_ops();
  struct Shape {
    int64_t rows, cols;
  };
  const std::vector<Shape> gpt2 = {{4800, 1600}, {1600, 1600}, {6400, 1600}, {1600, 6400}, {400, 144}};
  const std::vector<Shape> odd = {{256, 48}, {200, 64}, {128, 16}};
  for (const std::vector<Shape>& shapes : {gpt2, odd}) {
    const size_t k = shapes.size();
    std::vector<std::vector<uint8_t>> codes(k), want_ct(k);
    std::vector<std::vector<float>> compact(k), want_gm(k), want_gmt(k);
    std::vector<Dev<uint8_t>> dcodes, dct;
    std::vector<Dev<float>> dcompact, dgm, dgmt;
    std::vector<Fp8b128Job> pads(k), trs(k);
    for (auto* v : {&dcodes, &dct}) v->reserve(k);
    for (auto* v : {&dcompact, &dgm, &dgmt}) v->reserve(k);
    for (size_t i = 0; i < k; ++i) {
      const int64_t rows = shapes[i].rows, cols = shapes[i].cols, n = rows * cols;
      const auto x = random_floats(size_t(n), 70 + uint32_t(i), 0.05f);
      codes[i].resize(size_t(n));
      compact[i].resize(size_t(fp8b128_scale_count(rows, cols)));
      mxdp::fp8b128_quantize(x.data(), rows, cols, codes[i].data(), compact[i].data());
      // The reference writes over the same sentinel the device outputs start as.
      want_gm[i].assign(size_t(fp8b128_gemm_scale_count(rows, cols) + 8), -3.0f);
      want_gmt[i].assign(size_t(fp8b128_gemm_scale_count(cols, rows)), -3.0f);
      want_ct[i].assign(size_t(n), 0xEE);
      // The first matrix's scales go in as two pieces: its first 128 rows, and
      // the rest into the middle of the GEMM layout (as the unpack does).
      mxdp::fp8b128_scales_for_gemm(compact[i].data(), rows, cols, want_gm[i].data() + 8);
      mxdp::fp8b128_transpose_gemm(codes[i].data(), want_gm[i].data() + 8, rows, cols, want_ct[i].data(),
                                   want_gmt[i].data());
      dcodes.emplace_back(*gpu, codes[i]);
      dcompact.emplace_back(*gpu, compact[i]);
      dgm.emplace_back(*gpu, std::vector<float>(want_gm[i].size(), -3.0f));
      dgmt.emplace_back(*gpu, std::vector<float>(want_gmt[i].size(), -3.0f));
      dct.emplace_back(*gpu, std::vector<uint8_t>(want_ct[i].size(), 0xEE));
      pads[i] = {nullptr, dcompact[i].a.data(), nullptr, dgm[i].a.data() + 8, rows, cols};
      trs[i] = {dcodes[i].a.data(), dgm[i].a.data() + 8, dct[i].a.data(), dgmt[i].a.data(), rows, cols};
    }
    // Matrix 0's scales in two pieces: rows 0..127, then the rest from its second tile row.
    const int64_t r0 = shapes[0].rows, c0 = shapes[0].cols;
    pads[0].rows = 128;
    pads.push_back({nullptr, dcompact[0].a.data() + fp8b128_scale_cols(c0), nullptr,
                    dgm[0].a.data() + 8 + fp8b128_gemm_scale_ld(c0), r0 - 128, c0});
    Dev<Fp8b128Job> dpads(*gpu, pads), dtrs(*gpu, trs);
    gpu->fp8b128_scales_for_gemm_many(pads, dpads.a.data());
    gpu->fp8b128_transpose_gemm_many(trs, dtrs.a.data());
    bool one = true;
    for (const Fp8b128Job& j : trs) one = one && cuda::fp8b128_transpose_many_ok(j);
    EXPECT_EQ(one, k == 5) << "the GPT-2 shapes take one launch, the list with 200 rows does not";
    for (size_t i = 0; i < k; ++i) {
      const std::string what = std::to_string(shapes[i].rows) + " x " + std::to_string(shapes[i].cols);
      EXPECT_EQ(mismatches(dgm[i].get(), want_gm[i]), 0u) << what << ": GEMM-layout scales";
      EXPECT_EQ(mismatches(dct[i].get(), want_ct[i]), 0u) << what << ": transposed codes";
      EXPECT_EQ(mismatches(dgmt[i].get(), want_gmt[i]), 0u) << what << ": transposed scales";
    }
  }
}

// fp8b128's AdamW + stage: the one-pass kernel (adamw_tile_quant, as the ops
// take it where the vectors allow, with either occupancy) and the two-pass
// fallback (arrays 4 bytes off their 16-byte alignment), each bitwise equal
// to the CPU's AdamW then tile
// quantize: masters, both moments, codes and scales, on a step that applies
// (clipped) and on one that skips.
TEST(GpuEngineOps, Fp8b128AdamWStageOnePassAndFallbackBitwiseEqualToCpu) {
  REQUIRE_GPU();
  auto cpu = make_cpu_ops();
  auto gpu = cuda::make_cuda_ops();
  const AdamWChoice ch = adamw_choice(AdamWParams{1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 1});
  enum class Path { Ops, OneCtaAnSm, Misaligned };
  struct Case {
    int64_t rows, cols;
    Path path;
  };
  const std::vector<Case> cases = {{384, 1600, Path::Ops},       {300, 48, Path::Ops},
                                   {384, 1600, Path::OneCtaAnSm}, {300, 48, Path::OneCtaAnSm},
                                   {200, 144, Path::Ops},        {256, 1600, Path::Misaligned}};
  for (const Case& k : cases)
    for (bool skip : {false, true}) {
      const int64_t n = k.rows * k.cols, sc = fp8b128_scale_count(k.rows, k.cols);
      const int64_t off = k.path == Path::Misaligned ? 1 : 0;  // floats before the arrays' first element
      auto p = random_floats(size_t(n + off), 13, 0.02f), m = random_floats(size_t(n + off), 14, 0.01f),
           v = random_floats(size_t(n + off), 15, 1e-4f);
      for (auto& x : v) x = x * x;
      const auto g = random_floats(size_t(n + off), 16, 1.0f);
      const StepControl c = step_ctl(3, 0.5f, skip);
      std::vector<uint8_t> codes(size_t(n), 0);
      std::vector<float> scales(size_t(sc), 0.0f);
      Dev<float> dp(*gpu, p), dm(*gpu, m), dv(*gpu, v), dg(*gpu, g), dscales(*gpu, scales);
      Dev<uint8_t> dcodes(*gpu, codes);
      Dev<StepControl> dc(*gpu, std::vector<StepControl>{c});
      cpu->adamw_quantize(WeightFormat::Fp8b128, ScaleRounding::RCeil, p.data() + off, m.data() + off,
                          v.data() + off, g.data() + off, n, &c, ch, codes.data(),
                          reinterpret_cast<uint8_t*>(scales.data()), k.cols);
      if (k.path == Path::OneCtaAnSm) {
        ASSERT_TRUE(cuda::detail::adamw_tile_quant(dp.a.data(), dm.a.data(), dv.a.data(), dg.a.data(), k.rows, k.cols,
                                                   dc.a.data(), ch, dcodes.a.data(), dscales.a.data(), nullptr, 1));
        MXDP_CUDA_CHECK(cudaDeviceSynchronize());  // the default stream, not the ops' own
      } else {
        gpu->adamw_quantize(WeightFormat::Fp8b128, ScaleRounding::RCeil, dp.a.data() + off, dm.a.data() + off,
                            dv.a.data() + off, dg.a.data() + off, n, dc.a.data(), ch, dcodes.a.data(),
                            reinterpret_cast<uint8_t*>(dscales.a.data()), k.cols);
      }
      const std::string what = std::to_string(k.rows) + " x " + std::to_string(k.cols) + " path " +
                               std::to_string(int(k.path)) + (skip ? " skip" : " apply");
      EXPECT_EQ(mismatches(dp.get(), p), 0u) << what << ": masters";
      EXPECT_EQ(mismatches(dm.get(), m), 0u) << what << ": m";
      EXPECT_EQ(mismatches(dv.get(), v), 0u) << what << ": v";
      EXPECT_EQ(mismatches(dcodes.get(), codes), 0u) << what << ": codes";
      EXPECT_EQ(mismatches(dscales.get(), scales), 0u) << what << ": scales";
    }
  // The one-pass kernel takes what it can and says so.
  Dev<float> x(*gpu, std::vector<float>(8 * 128 + 4, 1.0f));
  Dev<uint8_t> q(*gpu, std::vector<uint8_t>(8 * 128, 0));
  Dev<StepControl> dc(*gpu, std::vector<StepControl>{step_ctl(1, 1.0f)});
  EXPECT_FALSE(cuda::detail::adamw_tile_quant(x.a.data() + 1, x.a.data(), x.a.data(), x.a.data(), 8, 128, dc.a.data(),
                                              ch, q.a.data(), x.a.data(), nullptr));
  EXPECT_FALSE(cuda::detail::adamw_tile_quant(x.a.data(), x.a.data(), x.a.data(), x.a.data(), 8, 126, dc.a.data(), ch,
                                              q.a.data(), x.a.data(), nullptr));
}

// One shard's adamw_quantize_ranges, CPU against GPU, over four steps: one
// that applies, one clipped with the choices' second scalars, one skipped,
// one with tiny gradients. The payload is compared after each step, the
// masters and moments after all; the arrays start `shift` floats past their
// allocation (16-byte aligned), the codes code_shift bytes past theirs, the
// scales rc.code_bytes after the codes. `first` sees the GPU's ranges and base
// pointers before the first step. Every GPU call must leave the host unwaited.
static void expect_ranges_bitwise(EngineOps& cpu, EngineOps& gpu, WeightFormat f, ScaleRounding r,
                                  const mxdp::testing::RangeCase& rc, int64_t shift, int64_t code_shift, uint32_t seed,
                                  const std::string& what,
                                  const std::function<void(const AdamWRanges&, const float*, const float*,
                                                           const float*, const float*, const uint8_t*,
                                                           const uint8_t*)>& first = {}) {
  const size_t len = size_t(rc.numel + shift);
  auto p = random_floats(len, seed, 0.02f), m = random_floats(len, seed + 1, 0.01f),
       v = random_floats(len, seed + 2, 1e-4f);
  for (auto& x : v) x = x * x;
  std::vector<uint8_t> pay(size_t(rc.payload_bytes + code_shift + 64), 0x5A);
  Dev<float> dp(gpu, p), dm(gpu, m), dv(gpu, v);
  Dev<uint8_t> dpay(gpu, pay);
  const std::unique_ptr<AdamWRanges> cr = cpu.adamw_ranges(f, rc.list), gr = gpu.adamw_ranges(f, rc.list);
  uint8_t *codes = pay.data() + code_shift, *dcodes = dpay.a.data() + code_shift;
  int64_t waits = 0;
  for (int t = 1; t <= 4; ++t) {
    auto g = random_floats(len, 10 * seed + uint32_t(t), t == 4 ? 1e-6f : 1.0f);
    Dev<float> dg(gpu, g);
    const auto choices = mxdp::testing::range_choices(t == 2 ? 1 : t);
    const StepControl c = step_ctl(t, t == 2 ? 0.37f : 1.0f, t == 3);
    Dev<StepControl> dc(gpu, {c});
    if (t == 1 && first)
      first(*gr, dp.a.data() + shift, dm.a.data() + shift, dv.a.data() + shift, dg.a.data() + shift, dcodes,
            dcodes + rc.code_bytes);
    cpu.adamw_quantize_ranges(r, p.data() + shift, m.data() + shift, v.data() + shift, g.data() + shift, &c, choices,
                              *cr, codes, codes + rc.code_bytes);
    const int64_t w0 = gpu.host_waits();
    gpu.adamw_quantize_ranges(r, dp.a.data() + shift, dm.a.data() + shift, dv.a.data() + shift, dg.a.data() + shift,
                              dc.a.data(), choices, *gr, dcodes, dcodes + rc.code_bytes);
    waits += gpu.host_waits() - w0;
    EXPECT_EQ(mismatches(dpay.get(), pay), 0u) << what << " step " << t << ": payload";
  }
  EXPECT_EQ(waits, 0) << what << ": the ranged pass waited on the host";
  expect_state_equal(dp, dm, dv, p, m, v, what);
}

// adamw_quantize_ranges on the device (one launch for every range of a shard)
// against the CPU's (which test_engine_ops holds equal to adamw_quantize range
// by range): bitwise, bf16 and mxfp8 (rceil, floor), hundreds of tiny ranges
// (biases, LayerNorm params, one block, lengths that are not whole blocks or
// float4s, gaps, empty ranges) around one long range, and one long range
// alone; base pointers 16-byte aligned (the vectorized code, its tails in the
// general one) and not (the general code throughout); steps that apply, clip,
// pick the choices' second scalars, and skip. None of them waits on the host,
// and no byte outside the ranges' elements and payload moves.
TEST(GpuEngineOps, AdamWQuantizeRangesBitwiseEqualToCpu) {
  REQUIRE_GPU();
  auto cpu = make_cpu_ops();
  auto gpu = cuda::make_cuda_ops();
  int checked = 0;
  struct Shape {
    int tiny;
    int64_t big;
  };
  for (const Shape sh : {Shape{300, 3'000'000 + 5}, Shape{0, 5'000'000 + 96}, Shape{2, 100}})
    for (int64_t shift : {int64_t(0), int64_t(1)})  // elements: 1 makes every base pointer 4-byte aligned only
      for (WeightFormat f : {WeightFormat::Bf16, WeightFormat::Mxfp8})
        for (ScaleRounding r : {ScaleRounding::RCeil, ScaleRounding::Floor}) {
          if (f != WeightFormat::Mxfp8 && r == ScaleRounding::Floor) continue;
          const mxdp::testing::RangeCase rc = mxdp::testing::range_case(f, sh.tiny, sh.big);
          const std::string what = std::string(to_string(f)) + " " + to_string(r) + " ranges=" +
                                   std::to_string(rc.list.size()) + " big=" + std::to_string(sh.big) +
                                   " shift=" + std::to_string(shift);
          const int64_t code_shift = f == WeightFormat::Bf16 ? 2 * shift : shift;
          expect_ranges_bitwise(*cpu, *gpu, f, r, rc, shift, code_shift, 41, what);
          ++checked;
        }
  EXPECT_EQ(checked, 3 * 2 * 3);
}

// fp8b128's ranges on the device (one launch for every piece of a shard,
// each a matrix with its own tiles) against the CPU's (which test_engine_ops
// holds equal to adamw_quantize piece by piece): bitwise, masters, moments,
// codes and scales, on pieces of GPT-2-like and odd shapes (widths 1600, 48,
// 144, 16, 128; rows that fill no last tile; an empty piece) with 6.4M
// elements of one in the middle. Gaps of whole float4s and aligned bases take
// the one launch; a 3-element gap or a base one float off takes adamw_quantize
// piece by piece; both are checked to take the way they should. Steps that
// apply, clip, pick the choices' second scalars, and skip; no host wait, and
// no byte outside the pieces' elements and scales moves.
TEST(GpuEngineOps, Fp8b128AdamWQuantizeRangesBitwiseEqualToCpu) {
  REQUIRE_GPU();
  auto cpu = make_cpu_ops();
  auto gpu = cuda::make_cuda_ops();
  const WeightFormat f = WeightFormat::Fp8b128;
  int one_launch = 0, checked = 0;
  for (bool gap4 : {true, false})
    for (int64_t shift : {int64_t(0), int64_t(1)}) {
      const mxdp::testing::RangeCase rc = mxdp::testing::slab_case(f, 4000, gap4);
      const std::string what = std::string("gap4=") + (gap4 ? "1" : "0") + " shift=" + std::to_string(shift);
      expect_ranges_bitwise(*cpu, *gpu, f, ScaleRounding::RCeil, rc, shift, 0, 51, what,
                            [&](const AdamWRanges& gr, const float* p, const float* m, const float* v, const float* g,
                                const uint8_t* codes, const uint8_t* scales) {
                              const bool one = cuda::detail::slab_ranges_in_one_launch(gr, p, m, v, g, codes, scales);
                              EXPECT_EQ(one, gap4 && shift == 0) << what;
                              one_launch += one;
                            });
      ++checked;
    }
  EXPECT_EQ(checked, 4);
  EXPECT_EQ(one_launch, 1);
}

// The device reads the ranges from its own table: ranges the CPU ops made have
// none, and are refused with the reason.
TEST(GpuEngineOps, AdamWQuantizeRangesRefusesAnotherOpsTable) {
  REQUIRE_GPU();
  auto cpu = make_cpu_ops();
  auto gpu = cuda::make_cuda_ops();
  const auto host_made = cpu->adamw_ranges(WeightFormat::Bf16, {{0, 64, 0}});
  DeviceArray<float> x(*gpu, 64);
  DeviceArray<uint8_t> out(*gpu, 128);
  Dev<StepControl> dc(*gpu, {step_ctl(1, 1.0f)});
  const auto choices = mxdp::testing::range_choices(1);
  try {
    gpu->adamw_quantize_ranges(ScaleRounding::RCeil, x.data(), x.data(), x.data(), x.data(), dc.a.data(), choices,
                               *host_made, out.data(), out.data() + 128);
    ADD_FAILURE() << "a table without device memory was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("not made by CUDA ops"), std::string::npos) << e.what();
  }
}
