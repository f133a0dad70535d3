// The CPU ops' fused optimizer work (engine_ops.h) against the separate ops it
// stands for: adamw_quantize = adamw then quantize, adamw_amax = adamw then an
// amax fold, adamw_quantize_ranges = adamw_quantize of each range, the
// device-amax NVFP4 ops = the host-amax ones. Bitwise, on sizes that are not
// whole blocks, with and without a clip coefficient.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <span>
#include <vector>

#include "util/check.h"
#include "engine/engine_ops.h"
#include "engine/layout.h"
#include "formats/codec.h"
#include "formats/quant.h"
#include "adamw_ranges_case.h"
#include "compare_util.h"
#include "error_of.h"
#include "flat_payload.h"
#include "fp8_ref.h"

using namespace mxdp;
using mxdp::testing::randn;
using mxdp::testing::FlatShape;
using mxdp::testing::flat_shape;
using mxdp::testing::same_bits;
using mxdp::testing::step_ctl;

namespace {


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
            const StepControl c = step_ctl(t, gs);
            ops->adamw_quantize(f, r, a.p.data(), a.m.data(), a.v.data(), g.data(), n, &c, adamw_choice(ap),
                                pa.data(), pa.data() + ps.code_bytes);
            std::vector<float> gb = g;
            if (gs != 1.0f) ops->scale(gb.data(), n, gs);
            ops->adamw(b.p.data(), b.m.data(), b.v.data(), gb.data(), n, ap);
            ops->quantize(f, r, b.p.data(), n, nullptr, pb.data(), pb.data() + ps.code_bytes);
          }
          EXPECT_TRUE(same_bits(a.p, b.p)) << what << ": masters";
          EXPECT_TRUE(same_bits(a.m, b.m)) << what << ": first moments";
          EXPECT_TRUE(same_bits(a.v, b.v)) << what << ": second moments";
          EXPECT_TRUE(same_bits(pa, pb)) << what << ": payload";
        }
  std::vector<float> x(64);
  EXPECT_THROW(ops->adamw_quantize(WeightFormat::Nvfp4, ScaleRounding::RCeil, x.data(), x.data(), x.data(), x.data(),
                                   64, nullptr, {}, nullptr, nullptr),
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
      const StepControl c = step_ctl(4, gs);
      ops->adamw_amax(a.p.data(), a.m.data(), a.v.data(), g.data(), n, &c, adamw_choice(ap), &am);
      std::vector<float> gb = g;
      if (gs != 1.0f) ops->scale(gb.data(), n, gs);
      ops->adamw(b.p.data(), b.m.data(), b.v.data(), gb.data(), n, ap);
      EXPECT_TRUE(same_bits(a.p, b.p) && same_bits(a.m, b.m) && same_bits(a.v, b.v)) << what;
      EXPECT_EQ(am, ops->amax(b.p.data(), n)) << what;
      // A fold: a larger amax already there (another piece of the tensor) stays.
      float big = 3.0f * am;
      ops->adamw_amax(a.p.data(), a.m.data(), a.v.data(), g.data(), n, &c, adamw_choice(ap), &big);
      EXPECT_EQ(big, 3.0f * am) << what;
      float again = 0.0f;
      ops->amax_into(a.p.data(), n, &again);
      EXPECT_EQ(again, ops->amax(a.p.data(), n)) << what;
      // Quantize and dequantize with the amax in ops memory = the codec given the host value.
      const float tensor_amax = 2.0f * am;  // as if the tensor were sharded
      const FlatShape ps = flat_shape(WeightFormat::Nvfp4, n);
      std::vector<uint8_t> qa(ps.shard_bytes + 16, 0), qb = qa;
      ops->quantize(WeightFormat::Nvfp4, ScaleRounding::RCeil, a.p.data(), n, &tensor_amax, qa.data(),
                    qa.data() + ps.code_bytes);
      nvfp4_quantize_rowwise(a.p.data(), 1, n, tensor_amax, qb.data(), qb.data() + ps.code_bytes);
      EXPECT_TRUE(same_bits(qa, qb)) << what;
      for (ComputeDType dt : {ComputeDType::F32, ComputeDType::BF16}) {
        const size_t es = dt == ComputeDType::F32 ? 4 : 2;
        std::vector<uint8_t> ya(n * es), yb(n * es);
        ops->dequantize(WeightFormat::Nvfp4, qa.data(), qa.data() + ps.code_bytes, n, &tensor_amax, ya.data(), dt);
        std::vector<float> y32(n);
        nvfp4_dequantize_rowwise(qb.data(), qb.data() + ps.code_bytes, nvfp4_tensor_scale(tensor_amax).s_dec, 1, n,
                                 y32.data());
        if (dt == ComputeDType::F32)
          std::memcpy(yb.data(), y32.data(), yb.size());
        else
          ops->to_bf16(y32.data(), reinterpret_cast<uint16_t*>(yb.data()), n);
        EXPECT_TRUE(same_bits(ya, yb)) << what;
      }
    }
  EXPECT_EQ(ops->host_waits(), 0);
}

// The update's AdamW count is the one the control says: with first_t = 5, a
// control at 6 (the step before was not skipped after all) applies t = 6's
// scalars; a skipped control leaves p, m, v alone and still quantizes p.
TEST(CpuEngineOps, FusedAdamWPicksTheControlsCountAndSkips) {
  auto ops = make_cpu_ops();
  const int64_t n = 1000 + 24;
  const AdamWParams a5{1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 5};
  AdamWParams a6 = a5;
  a6.t = 6;
  const AdamWChoice ch = adamw_choice(a5);
  State a = start(n, 3), b = a;
  auto g = randn(n, 9, 1.0f);
  const FlatShape ps = flat_shape(WeightFormat::Mxfp8, n);
  std::vector<uint8_t> pa(ps.shard_bytes), pb(ps.shard_bytes);
  const StepControl c6 = step_ctl(6, 1.0f);
  ops->adamw_quantize(WeightFormat::Mxfp8, ScaleRounding::RCeil, a.p.data(), a.m.data(), a.v.data(), g.data(), n,
                      &c6, ch, pa.data(), pa.data() + ps.code_bytes);
  adamw_update(b.p.data(), b.m.data(), b.v.data(), g.data(), n, a6);
  EXPECT_TRUE(same_bits(a.p, b.p) && same_bits(a.m, b.m) && same_bits(a.v, b.v));
  State c = start(n, 3);
  const State before = c;
  const StepControl skip = step_ctl(5, 1.0f, true);
  ops->adamw_quantize(WeightFormat::Mxfp8, ScaleRounding::RCeil, c.p.data(), c.m.data(), c.v.data(), g.data(), n,
                      &skip, ch, pa.data(), pa.data() + ps.code_bytes);
  EXPECT_TRUE(same_bits(c.p, before.p) && same_bits(c.m, before.m) && same_bits(c.v, before.v));
  mxfp8_quantize_rowwise(before.p.data(), 1, n, {Fp8Kind::E4M3, ScaleRounding::RCeil}, pb.data(),
                         pb.data() + ps.code_bytes);
  EXPECT_TRUE(same_bits(pa, pb)) << "a skipped step still writes the payload of the unchanged masters";
  float am = 0;
  ops->adamw_amax(c.p.data(), c.m.data(), c.v.data(), g.data(), n, &skip, ch, &am);
  EXPECT_TRUE(same_bits(c.p, before.p));
  EXPECT_EQ(am, amax(before.p.data(), n));
}

// fp8b128 through the ops (a slab range: a (n / cols) x cols matrix): the
// payload is the independent reference's tiles of that matrix (codes, then the
// compact scales), the fused pass is adamw then those tiles, dequantize is
// code * scale per tile (fp32, and bf16 of it); a range that is not whole
// 128-row slabs is refused.
// The fp8b128 ops on a (rows x cols) range against tests/fp8_ref.h: whole tiles
// (128, 384 columns) and partial ones at the right and bottom edges (a param's
// last slab of 64 rows; GPT-2 1558M's 1600 columns; 48 columns, one partial
// tile column). The fused AdamW + quantize, both dequantizes, and W^T.
TEST(CpuEngineOps, Fp8b128SlabRangesAreTheMatrixTiles) {
  auto ops = make_cpu_ops();
  const AdamWParams a1{1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 1};
  const AdamWChoice ch = adamw_choice(a1);
  const std::vector<std::pair<int64_t, int64_t>> shapes = {{256, 128}, {256, 384}, {320, 192}, {192, 1600}, {64, 48}};
  for (const auto& [rows, cols] : shapes) {
    SCOPED_TRACE(std::to_string(rows) + " x " + std::to_string(cols));
    const int64_t n = rows * cols, tc = (cols + 127) / 128, tiles = (rows + 127) / 128 * tc;
    State a = start(n, uint32_t(cols)), b = a;
    auto g = randn(n, 5, 1.0f);
    const StepControl c = step_ctl(1, 0.5f);
    std::vector<uint8_t> pay(n + 4 * tiles);
    ops->adamw_quantize(WeightFormat::Fp8b128, ScaleRounding::RCeil, a.p.data(), a.m.data(), a.v.data(), g.data(),
                        n, &c, ch, pay.data(), pay.data() + n, cols);
    std::vector<float> gs(g);
    for (auto& x : gs) x *= 0.5f;
    adamw_update(b.p.data(), b.m.data(), b.v.data(), gs.data(), n, a1);
    ASSERT_TRUE(same_bits(a.p, b.p) && same_bits(a.m, b.m) && same_bits(a.v, b.v));
    std::vector<uint8_t> codes;
    std::vector<float> scales;
    fp8ref::tiles(b.p, rows, cols, codes, scales);
    ASSERT_EQ(int64_t(scales.size()), tiles);
    EXPECT_EQ(std::memcmp(pay.data(), codes.data(), n), 0) << "codes";
    EXPECT_EQ(std::memcmp(pay.data() + n, scales.data(), 4 * tiles), 0) << "compact scales";
    std::vector<float> y(n);
    std::vector<uint16_t> y16(n);
    ops->dequantize(WeightFormat::Fp8b128, pay.data(), pay.data() + n, n, nullptr, y.data(), ComputeDType::F32, cols);
    ops->dequantize(WeightFormat::Fp8b128, pay.data(), pay.data() + n, n, nullptr, y16.data(), ComputeDType::BF16,
                    cols);
    for (int64_t i = 0; i < n; ++i) {
      const int64_t r = i / cols, k = i % cols;
      const float want = fp8ref::dequant(codes[i], scales[(r / 128) * tc + k / 128], true);
      ASSERT_EQ(fp8ref::bits(y[i]), fp8ref::bits(want)) << "at " << i;
      ASSERT_EQ(y16[i], codec::bf16_from_f32(want)) << "at " << i;
    }
    // The GEMM layout (rows of ld scales, padding 0), then W^T in it: the tiles
    // of the transposed matrix, bit for bit (nothing re-rounded).
    const int64_t ld = (tc + 3) / 4 * 4, tr = (rows + 127) / 128, ld_t = (tr + 3) / 4 * 4;
    std::vector<float> gemm(size_t(tr * ld), -1.0f), gemm_t(size_t(tc * ld_t), -1.0f);
    ops->fp8b128_scales_for_gemm(reinterpret_cast<const float*>(pay.data() + n), rows, cols, gemm.data());
    for (int64_t i = 0; i < tr; ++i)
      for (int64_t j = 0; j < ld; ++j)
        ASSERT_EQ(fp8ref::bits(gemm[size_t(i * ld + j)]), fp8ref::bits(j < tc ? scales[size_t(i * tc + j)] : 0.0f))
            << "GEMM layout at " << i << ", " << j;
    std::vector<uint8_t> codes_t(n), want_codes_t;
    std::vector<float> want_scales_t;
    ops->fp8b128_transpose_gemm(pay.data(), gemm.data(), rows, cols, codes_t.data(), gemm_t.data());
    fp8ref::tiles(fp8ref::transpose(b.p, rows, cols), cols, rows, want_codes_t, want_scales_t);
    EXPECT_EQ(codes_t, want_codes_t) << "W^T codes";
    for (int64_t j = 0; j < tc; ++j)
      for (int64_t i = 0; i < ld_t; ++i)
        ASSERT_EQ(fp8ref::bits(gemm_t[size_t(j * ld_t + i)]),
                  fp8ref::bits(i < tr ? want_scales_t[size_t(j * tr + i)] : 0.0f))
            << "W^T scales at " << j << ", " << i;
  }
  std::vector<float> x(128 * 100);
  std::vector<uint8_t> out(x.size() + 64);
  EXPECT_THROW(ops->quantize(WeightFormat::Fp8b128, ScaleRounding::RCeil, x.data(), int64_t(x.size()), nullptr,
                             out.data(), out.data() + x.size(), 100),
               Error) << "cols not a multiple of 16";
  EXPECT_THROW(ops->quantize(WeightFormat::Fp8b128, ScaleRounding::RCeil, x.data(), 64 * 128 + 16, nullptr,
                             out.data(), out.data() + x.size(), 128),
               Error) << "not whole rows";
}

// step_control against what it means, computed another way: the norm is the
// root of the sum of every partial (a long double sum here), the clip
// coefficient min(1, clip / norm), a NaN or Inf partial skips, and the count
// moves only on an applied step.
TEST(CpuEngineOps, StepControlIsNormClipAndSkip) {
  auto ops = make_cpu_ops();
  std::mt19937 rng(7);
  std::uniform_real_distribution<double> u(0.0, 3.0);
  for (double clip : {0.0, 1.0, 100.0})
    for (int rows : {1, 3}) {
      const int cols = 5, stride = cols + 1;
      std::vector<double> part(size_t(rows) * stride);
      for (double& x : part) x = u(rng);
      long double total = 0;
      for (int r = 0; r < rows; ++r)
        for (int c = 0; c < cols; ++c) total += part[size_t(r) * stride + c];
      const double norm = std::sqrt(double(total));
      StepControl ctl;
      ctl.updates = 41;
      ops->step_control(part.data(), rows, stride, cols, clip, &ctl);
      EXPECT_NEAR(ctl.grad_norm, norm, 1e-12 * norm);
      EXPECT_EQ(ctl.skip, 0);
      EXPECT_EQ(ctl.updates, 42);
      if (clip > 0 && clip < norm)
        EXPECT_NEAR(ctl.grad_scale, clip / norm, 1e-6);
      else
        EXPECT_EQ(ctl.grad_scale, 1.0f);
      // The last column (the engine's loss sums) is not part of the norm.
      part[stride - 1] = 1e300;
      StepControl again;
      ops->step_control(part.data(), rows, stride, cols, clip, &again);
      EXPECT_EQ(again.grad_norm, ctl.grad_norm);
      for (double bad : {std::nan(""), HUGE_VAL}) {
        std::vector<double> p2 = part;
        p2[size_t(rows - 1) * stride + 2] = bad;
        StepControl s;
        s.updates = 41;
        ops->step_control(p2.data(), rows, stride, cols, clip, &s);
        EXPECT_EQ(s.skip, 1) << bad;
        EXPECT_EQ(s.updates, 41) << "a skipped step applies no update";
        EXPECT_EQ(s.grad_scale, 1.0f);
      }
    }
  const std::vector<float> losses{2.5f, 1.25f, 3.0f};
  double sum = -1;
  ops->sum_into(losses.data(), 3, &sum);
  EXPECT_EQ(sum, 6.75);
}

TEST(CpuEngineOps, DequantizePiecesIsDequantizeOfEach) {
  auto ops = make_cpu_ops();
  const std::vector<int64_t> lens{7, 64, 1000};
  for (WeightFormat f : {WeightFormat::Bf16, WeightFormat::Mxfp8, WeightFormat::Nvfp4}) {
    std::vector<std::vector<uint8_t>> pay;
    std::vector<std::vector<float>> got, want;
    std::vector<float> am;
    std::vector<UnpackPiece> t;
    for (size_t i = 0; i < lens.size(); ++i) {
      auto x = randn(size_t(lens[i]), 40 + uint32_t(i), 0.1f);
      const FlatShape ps = flat_shape(f, lens[i]);
      am.push_back(amax(x.data(), lens[i]));
      pay.emplace_back(size_t(ps.shard_bytes));
      ops->quantize(f, ScaleRounding::RCeil, x.data(), lens[i], &am.back(), pay.back().data(),
                    pay.back().data() + ps.code_bytes);
      want.emplace_back(size_t(lens[i]));
      ops->dequantize(f, pay.back().data(), pay.back().data() + ps.code_bytes, lens[i], &am.back(), want.back().data(),
                      ComputeDType::F32);
      got.emplace_back(size_t(lens[i]), -1.0f);
    }
    for (size_t i = 0; i < lens.size(); ++i)
      t.push_back({pay[i].data(), pay[i].data() + flat_shape(f, lens[i]).code_bytes, &am[i], got[i].data(), lens[i]});
    ops->dequantize_pieces(f, t.data(), int(t.size()), 1000, ComputeDType::F32);
    for (size_t i = 0; i < lens.size(); ++i) EXPECT_TRUE(same_bits(got[i], want[i])) << to_string(f) << " piece " << i;
  }
}

// adamw_quantize_ranges is adamw_quantize range by range (engine_ops.h), for
// every format the engine stages in one pass (no tensor amax): row-block
// formats' ranges of many lengths with gaps between them, and fp8b128's
// matrices of many shapes, their scales piece after piece; three AdamW
// choices, over steps that apply, clip (grad_scale != 1), pick the choice's
// second scalars, and skip. Elements outside every range, and payload bytes no
// range owns, stay as they were.
TEST(CpuEngineOps, AdamWQuantizeRangesIsAdamWQuantizeOfEachRange) {
  auto ops = make_cpu_ops();
  int checked = 0;
  for (const FormatTraits& ft : all_formats()) {
    if (ft.tensor_amax) continue;
    for (ScaleRounding r : {ScaleRounding::RCeil, ScaleRounding::Floor}) {
      if (!ft.rounding_applies && r == ScaleRounding::Floor) continue;
      const std::string what = std::string(ft.name) + " " + to_string(r);
      const mxdp::testing::RangeCase rc = ft.block_rows > 1 ? mxdp::testing::slab_case(ft.id, 520, false)
                                                            : mxdp::testing::range_case(ft.id, 4, 65536 + 7);
      const int64_t n = rc.numel;
      State a = start(size_t(n), 17), b = a;
      const State before = a;
      std::vector<uint8_t> pa(size_t(rc.payload_bytes), 0xAB), pb = pa;
      const std::unique_ptr<AdamWRanges> ranges = ops->adamw_ranges(ft.id, rc.list);
      for (int t = 1; t <= 4; ++t) {
        auto g = randn(size_t(n), 300 + t, 1.0f);
        // Step 2: clipped, and the device's count is one past first_t (the
        // choices' second scalars); step 3: skipped.
        const auto choices = mxdp::testing::range_choices(t == 2 ? 1 : t);
        const StepControl c = step_ctl(t, t == 2 ? 0.37f : 1.0f, t == 3);
        ops->adamw_quantize_ranges(r, a.p.data(), a.m.data(), a.v.data(), g.data(), &c, choices, *ranges, pa.data(),
                                   pa.data() + rc.code_bytes);
        mxdp::testing::adamw_quantize_each(*ops, ft.id, r, b.p.data(), b.m.data(), b.v.data(), g.data(), &c, choices,
                                           rc.list, pb.data(), pb.data() + rc.code_bytes);
        EXPECT_TRUE(same_bits(pa, pb)) << what << " step " << t << ": payload";
      }
      EXPECT_TRUE(same_bits(a.p, b.p)) << what << ": masters";
      EXPECT_TRUE(same_bits(a.m, b.m)) << what << ": first moments";
      EXPECT_TRUE(same_bits(a.v, b.v)) << what << ": second moments";
      // The reference is trusted only as far as it moved what it should: every
      // range's elements changed, the rest did not.
      std::vector<char> in(size_t(n), 0);
      for (const AdamWRange& x : rc.list) std::fill(in.begin() + x.begin, in.begin() + x.begin + x.len, 1);
      int64_t moved = 0, stray = 0;
      for (int64_t i = 0; i < n; ++i) {
        const bool changed = a.m[size_t(i)] != before.m[size_t(i)];
        moved += in[size_t(i)] && changed;
        stray += !in[size_t(i)] && (changed || a.p[size_t(i)] != before.p[size_t(i)]);
      }
      EXPECT_EQ(moved, std::count(in.begin(), in.end(), 1)) << what;
      EXPECT_EQ(stray, 0) << what;
      ++checked;
    }
  }
  EXPECT_EQ(checked, 4) << "bf16, mxfp8 rceil and floor, fp8b128";
}

// Ranges that tile a shard at block boundaries, all with one choice, give the
// bits of one adamw_quantize over the whole shard: the engine's ranges change
// nothing but the AdamW scalars.
TEST(CpuEngineOps, AdamWQuantizeRangesTilingAShardIsOneAdamWQuantize) {
  auto ops = make_cpu_ops();
  for (WeightFormat f : {WeightFormat::Bf16, WeightFormat::Mxfp8}) {
    const int64_t n = 256 * 40;
    std::vector<AdamWRange> list;
    for (int64_t at = 0, k = 0; at < n; ++k) {
      const int64_t len = std::min(n - at, int64_t(32 * (1 + k % 7)));
      list.push_back({at, len, 0});
      at += len;
    }
    State a = start(size_t(n), 21), b = a;
    auto g = randn(size_t(n), 22, 1.0f);
    const FlatShape ps = flat_shape(f, n);
    std::vector<uint8_t> pa(size_t(ps.shard_bytes), 0), pb = pa;
    const auto choices = mxdp::testing::range_choices(3);
    const StepControl c = step_ctl(3, 0.5f);
    ops->adamw_quantize_ranges(ScaleRounding::RCeil, a.p.data(), a.m.data(), a.v.data(), g.data(), &c,
                               std::span(choices).first(1), *ops->adamw_ranges(f, list), pa.data(),
                               pa.data() + ps.code_bytes);
    ops->adamw_quantize(f, ScaleRounding::RCeil, b.p.data(), b.m.data(), b.v.data(), g.data(), n, &c, choices[0],
                        pb.data(), pb.data() + ps.code_bytes);
    EXPECT_TRUE(same_bits(a.p, b.p) && same_bits(a.m, b.m) && same_bits(a.v, b.v)) << to_string(f);
    EXPECT_TRUE(same_bits(pa, pb)) << to_string(f);
  }
}

// What a range list must be (engine_ops.h, AdamWRanges): refused otherwise,
// with the reason.
TEST(CpuEngineOps, AdamWRangesRefusesWhatOnePassCannotDo) {
  auto ops = make_cpu_ops();
  const auto refused = [&](WeightFormat f, std::vector<AdamWRange> list, const char* why) {
    const std::string msg = mxdp::testing::error_of([&] { ops->adamw_ranges(f, list); });
    EXPECT_NE(msg.find(why), std::string::npos) << why << ": " << msg;
  };
  refused(WeightFormat::Nvfp4, {{0, 64, 0}}, "tensor amax");
  refused(WeightFormat::Fp8b128, {{0, 128 * 128, 0}}, "has no cols");
  refused(WeightFormat::Fp8b128, {{0, 128 * 100, 0, 100}}, "multiple of 16");
  refused(WeightFormat::Fp8b128, {{0, 128 * 100 + 5, 0, 128}}, "whole rows");
  // Two 200 x 160 matrices: 2 x 2 tiles each, so the second's scales start at 4 or later.
  const int64_t n = 200 * 160;
  refused(WeightFormat::Fp8b128, {{0, n, 0, 160, 0}, {n, n, 0, 160, 3}}, "scales must be in order");
  EXPECT_NO_THROW(ops->adamw_ranges(WeightFormat::Fp8b128, {{0, n, 0, 160, 0}, {n, n, 1, 160, 4}}));
  refused(WeightFormat::Mxfp8, {{0, 64, 0, 64}}, "follow from its begin");
  refused(WeightFormat::Mxfp8, {{16, 64, 0}}, "inside a mxfp8 block");
  refused(WeightFormat::Mxfp8, {{0, 64, 0}, {32, 64, 0}}, "in order and disjoint");
  refused(WeightFormat::Bf16, {{100, 5, 0}, {0, 5, 0}}, "in order and disjoint");
  refused(WeightFormat::Bf16, {{0, -1, 0}}, "negative length");
  refused(WeightFormat::Bf16, {{0, 5, kMaxAdamWChoices}}, "AdamW choice");
  const auto ranges = ops->adamw_ranges(WeightFormat::Bf16, {{0, 8, 0}, {8, 8, 2}});
  EXPECT_EQ(ranges->choices_needed(), 3);
  std::vector<float> x(16);
  std::vector<uint8_t> out(32);
  const StepControl c = step_ctl(1, 1.0f);
  const auto two = mxdp::testing::range_choices(1);
  const std::string msg = mxdp::testing::error_of([&] {
    ops->adamw_quantize_ranges(ScaleRounding::RCeil, x.data(), x.data(), x.data(), x.data(), &c,
                               std::span(two).first(2), *ranges, out.data(), out.data() + 32);
  });
  EXPECT_NE(msg.find("pick among 3 AdamW choices, got 2"), std::string::npos) << msg;
}
