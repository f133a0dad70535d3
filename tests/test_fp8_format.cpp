// fp8b128 (E4M3 128x128 tiles, fp32 scales) and the 1x128 blocks of
// activations (formats/fp8_block.h) against tests/fp8_ref.h, a reference
// written from the definitions (docs/fp8.md, "Format"), and against values
// computed by hand below. Also the format row (formats/format.h).
#include <gtest/gtest.h>

#include <cfloat>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "fp8_ref.h"
#include "formats/codec.h"
#include "formats/format.h"
#include "formats/fp8_block.h"
#include "util/check.h"

namespace mxdp {
namespace {

using fp8ref::bits;

std::vector<float> random_matrix(int64_t n, uint32_t seed, float spread = 4.0f) {
  std::mt19937 g(seed);
  std::normal_distribution<float> d(0.0f, 1.0f);
  std::uniform_real_distribution<float> e(-spread, spread);
  std::vector<float> x(n);
  for (auto& v : x) v = d(g) * std::exp2(e(g));
  return x;
}

// Every E4M3 code, decoded by the codec, against the bit-field formula
// (-1)^s * 2^(e-7) * (1 + m/8), subnormals 2^-6 * m/8, NaN 0x7F/0xFF.
TEST(Fp8Codes, EveryE4M3CodeDecodesByTheFormula) {
  for (int c = 0; c < 256; ++c) {
    const int s = c >> 7, e = (c >> 3) & 15, m = c & 7;
    double want = e == 0 ? m / 8.0 * std::ldexp(1.0, -6) : (1 + m / 8.0) * std::ldexp(1.0, e - 7);
    if (s) want = -want;
    const float got = codec::e4m3_to_f32(uint8_t(c));
    if (e == 15 && m == 7) {
      EXPECT_TRUE(std::isnan(got)) << c;
      continue;
    }
    EXPECT_EQ(double(got), want) << "code " << c;
    EXPECT_EQ(std::signbit(got), bool(s)) << c;
    // Re-encoding a code's value gives the code back (the dequantizer's scale 1).
    EXPECT_EQ(codec::fp8_block_encode(got, 1.0f, Fp8Kind::E4M3), uint8_t(c)) << c;
  }
  EXPECT_EQ(double(codec::e4m3_to_f32(0x7E)), 448.0);
  EXPECT_EQ(double(codec::e4m3_to_f32(0x01)), std::ldexp(1.0, -9));
}

// The scale rule by hand: amax / 448 in fp32, Inf -> FLT_MAX, 0 -> 1.
TEST(Fp8Codes, BlockScaleRule) {
  EXPECT_EQ(codec::fp8_block_scale(896.0f, Fp8Kind::E4M3), 2.0f);
  EXPECT_EQ(codec::fp8_block_scale(1.0f, Fp8Kind::E4M3), 1.0f / 448.0f);
  EXPECT_EQ(codec::fp8_block_scale(57344.0f, Fp8Kind::E5M2), 1.0f);
  EXPECT_EQ(codec::fp8_block_scale(0.0f, Fp8Kind::E4M3), 1.0f);
  EXPECT_EQ(codec::fp8_block_scale(INFINITY, Fp8Kind::E4M3), FLT_MAX);
  EXPECT_EQ(codec::fp8_block_scale(1e-44f, Fp8Kind::E4M3), 1.0f);  // amax / 448 underflows to 0
}

// codec::fp8_pow2_scale, the 1x128 blocks' scale, against its definition: a
// power of two s (zero mantissa), amax / s <= max, and s / 2 too small
// (amax / (s / 2) > max) unless s is the floor 2^-126; 1 for amax 0, FLT_MAX's
// scale for Inf; 1 / s (fp8_pow2_reciprocal) exact, and x * (1 / s) the IEEE
// x / s bit for bit. Every positive bf16 amax and random fp32 ones, both kinds.
TEST(Fp8Codes, PowerOfTwoScaleIsTheSmallestThatFits) {
  std::mt19937 g(9);
  std::uniform_int_distribution<uint32_t> any(1, 0x7F7FFFFFu);
  std::vector<float> amaxes;
  for (uint32_t h = 1; h < 0x7F80; ++h) amaxes.push_back(codec::bf16_to_f32(uint16_t(h)));
  for (int i = 0; i < 100000; ++i) amaxes.push_back(std::bit_cast<float>(any(g)));
  for (float a : {448.0f, std::nextafter(448.0f, 0.0f), std::nextafter(448.0f, 1e9f), 57344.0f, FLT_MAX, 1e-45f})
    amaxes.push_back(a);
  std::uniform_int_distribution<uint32_t> xbits(0, 0xFFFFFFFFu);
  for (Fp8Kind k : {Fp8Kind::E4M3, Fp8Kind::E5M2}) {
    const double mx = k == Fp8Kind::E4M3 ? 448.0 : 57344.0;
    for (float a : amaxes) {
      const float s = codec::fp8_pow2_scale(a, k), r = codec::fp8_pow2_reciprocal(s);
      ASSERT_EQ(bits(s) & 0x807FFFFFu, 0u) << a << ": " << s << " is not a positive normal power of two";
      ASSERT_LE(double(a) / double(s), mx) << a;
      if (s > 0x1p-126f) {
        ASSERT_GT(double(a) / (double(s) / 2), mx) << a << ": " << s / 2 << " fits too";
      }
      ASSERT_EQ(double(s) * double(r), 1.0) << a;
      const float x = std::bit_cast<float>(xbits(g));
      if (!std::isnan(x)) {
        ASSERT_EQ(bits(x * r), bits(x / s)) << x << " / " << s;
      }
    }
    EXPECT_EQ(codec::fp8_pow2_scale(0.0f, k), 1.0f);
    EXPECT_EQ(codec::fp8_pow2_scale(INFINITY, k), codec::fp8_pow2_scale(FLT_MAX, k));
  }
  EXPECT_EQ(codec::fp8_pow2_scale(448.0f, Fp8Kind::E4M3), 1.0f);
  EXPECT_EQ(codec::fp8_pow2_scale(449.0f, Fp8Kind::E4M3), 2.0f);
  EXPECT_EQ(codec::fp8_pow2_scale(1.0f, Fp8Kind::E4M3), 0x1p-8f);
  EXPECT_EQ(codec::fp8_pow2_scale(1.0f, Fp8Kind::E5M2), 0x1p-15f);
  EXPECT_EQ(codec::fp8_pow2_scale(0x1p-140f, Fp8Kind::E4M3), 0x1p-126f);
  EXPECT_EQ(codec::fp8_pow2_scale(INFINITY, Fp8Kind::E4M3), 0x1p120f);
}

// codec::block_div, the fp8b128 weight quantizer's division by a tile scale,
// against the IEEE division it replaces: bit for bit for every bf16 x within
// 1024 s (NaN: NaN; below 2^-100 the FP8 codes of the quotient), over block
// scales of random amaxes, random fp32 scales
// across the fast range, its edges and mantissas 1.0 / all ones; scales
// outside that range take the division itself.
TEST(Fp8Codes, BlockDivisionIsTheIeeeDivision) {
  std::mt19937 g(5);
  std::vector<float> scales;
  std::uniform_int_distribution<uint32_t> mant(0, (1u << 23) - 1);
  std::uniform_int_distribution<int> ex(-80, 99), amax_ex(-71, 107);  // amax / 448 within the fast range
  for (int i = 0; i < 400; ++i)
    scales.push_back(codec::fp8_block_scale(std::ldexp(1.0f + float(mant(g)) * 0x1p-23f, amax_ex(g)), Fp8Kind::E4M3));
  for (int i = 0; i < 400; ++i) scales.push_back(std::ldexp(1.0f + float(mant(g)) * 0x1p-23f, ex(g)));
  for (int e : {-80, -79, -1, 0, 1, 99}) {
    scales.push_back(std::ldexp(1.0f, e));
    scales.push_back(std::ldexp(2.0f - 0x1p-23f, e));
  }
  scales.push_back(0x1p100f);
  int64_t checked = 0;
  for (float s : scales) {
    const codec::BlockDivisor d = codec::block_divisor(s);
    ASSERT_TRUE(d.fast && d.r != 0.0f) << s;
    for (uint32_t h = 0; h < 65536; ++h) {
      const float x = codec::bf16_to_f32(uint16_t(h));
      if (!std::isnan(x) && !(std::fabs(x) <= 1024.0f * s)) continue;
      const float want = x / s, got = codec::block_div(x, d);
      if (std::fabs(x) < 0x1p-100f) {  // a quotient below 2^-20: its codes only
        ASSERT_LT(std::fabs(want), 0x1p-20f);
        for (Fp8Kind k : {Fp8Kind::E4M3, Fp8Kind::E5M2})
          ASSERT_EQ(codec::fp8_from_f32(got, k), codec::fp8_from_f32(want, k)) << x << " / " << s;
      } else if (std::isnan(want)) {
        ASSERT_TRUE(std::isnan(got)) << x << " / " << s;
      } else {
        ASSERT_EQ(bits(got), bits(want)) << x << " / " << s << ": " << got << " vs " << want;
      }
      ++checked;
    }
  }
  EXPECT_GT(checked, int64_t(scales.size()) * 20000);
  for (float s : {0x1p-81f, 1e-40f, 0x1p101f, FLT_MAX}) {
    const codec::BlockDivisor d = codec::block_divisor(s);
    EXPECT_FALSE(d.fast) << s;
    EXPECT_EQ(d.r, 0.0f) << s;  // the kernels test r != 0 for fast (block_div_fast's comment)
    EXPECT_EQ(bits(codec::block_div(3.0f, d)), bits(3.0f / s)) << s;
  }
}

// One 128x128 tile whose amax is 896 (scale 2, exact), elements worked out by hand.
TEST(Fp8b128, HandComputedTile) {
  std::vector<float> x(128 * 128, 0.0f);
  x[0] = 896.0f;                        // 448           -> 0x7E
  x[1] = 3.0f;                          // 1.5 = 2^0 * 1.100b -> e 7, m 4 -> 0x3C
  x[2] = -1.0f;                         // -0.5 -> 0x80 | e 6 m 0 -> 0xB0
  x[3] = std::ldexp(1.0f, -8);          // 2^-9, the smallest subnormal -> 0x01
  x[4] = std::ldexp(1.0f, -9);          // 2^-10: half the smallest subnormal, a tie -> even 0x00
  x[5] = std::ldexp(3.0f, -9);          // 1.5 * 2^-9: a tie between 1 and 2 -> even 0x02
  x[6] = -std::ldexp(1.0f, -11);        // below half the smallest -> -0 (0x80)
  x[7] = 30.0f;                         // 15 = 1.111b * 2^3 -> e 10 m 7 -> 0x57
  x[8] = 31.0f;                         // 15.5: tie between 15 and 16 -> even 16 = e 11 m 0 -> 0x58
  x[128 * 128 - 1] = NAN;               // NaN is ignored by the amax and encodes to 0x7F
  std::vector<uint8_t> q(x.size());
  std::vector<float> s(1), y(x.size());
  fp8b128_quantize(x.data(), 128, 128, q.data(), s.data());
  EXPECT_EQ(s[0], 2.0f);
  const uint8_t want[] = {0x7E, 0x3C, 0xB0, 0x01, 0x00, 0x02, 0x80, 0x57, 0x58};
  for (int i = 0; i < 9; ++i) EXPECT_EQ(int(q[i]), int(want[i])) << i;
  EXPECT_EQ(q[9], 0x00);
  EXPECT_EQ(q.back(), 0x7F);
  fp8b128_dequantize(q.data(), s.data(), 128, 128, y.data());
  EXPECT_EQ(y[0], 896.0f);
  EXPECT_EQ(y[1], 3.0f);
  EXPECT_EQ(y[2], -1.0f);
  EXPECT_EQ(y[5], std::ldexp(1.0f, -7));
  EXPECT_EQ(y[8], 32.0f);
  EXPECT_EQ(bits(y[6]), 0x80000000u);
  EXPECT_EQ(bits(y.back()), 0x7FC00000u);
}

// Random matrices with partial edge tiles, a zero tile, an Inf and huge/tiny
// magnitudes: codes and scales bit for bit equal the reference, dequantized
// values equal code * scale.
TEST(Fp8b128, MatchesReferenceOnUnevenShapes) {
  const int64_t shapes[][2] = {{1, 1}, {128, 128}, {200, 300}, {256, 768}, {129, 127}, {384, 256}};
  uint32_t seed = 1;
  for (auto [rows, cols] : shapes) {
    auto x = random_matrix(rows * cols, seed++);
    if (rows >= 256 && cols >= 256)
      for (int64_t r = 128; r < 256; ++r)
        for (int64_t c = 128; c < 256; ++c) x[r * cols + c] = 0.0f;  // an all-zero tile
    if (rows * cols > 10) {
      x[7] = INFINITY;
      x[rows * cols - 1] = 3e38f;
      x[rows * cols / 2] = 1e-40f;  // fp32 subnormal
    }
    std::vector<uint8_t> want_q, q(rows * cols);
    std::vector<float> want_s, s(fp8b128_scale_count(rows, cols)), y(rows * cols);
    fp8ref::tiles(x, rows, cols, want_q, want_s);
    fp8b128_quantize(x.data(), rows, cols, q.data(), s.data());
    ASSERT_EQ(q, want_q) << rows << "x" << cols;
    for (size_t i = 0; i < s.size(); ++i) ASSERT_EQ(bits(s[i]), bits(want_s[i])) << rows << "x" << cols << " " << i;
    fp8b128_dequantize(q.data(), s.data(), rows, cols, y.data());
    const int64_t tc = (cols + 127) / 128;
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < cols; ++c)
        ASSERT_EQ(bits(y[r * cols + c]), bits(fp8ref::dequant(q[r * cols + c], s[r / 128 * tc + c / 128], true)))
            << r << "," << c;
  }
}

// Relative error of a tile's round trip: E4M3 has 3 mantissa bits, so a
// normal element is within 2^-4 of itself; the tile's max is exact to 2^-4 too.
TEST(Fp8b128, RoundTripErrorBound) {
  const auto x = random_matrix(256 * 384, 9, 1.0f);
  std::vector<uint8_t> q(x.size());
  std::vector<float> s(fp8b128_scale_count(256, 384)), y(x.size());
  fp8b128_quantize(x.data(), 256, 384, q.data(), s.data());
  fp8b128_dequantize(q.data(), s.data(), 256, 384, y.data());
  for (size_t i = 0; i < x.size(); ++i) {
    const int64_t r = i / 384, c = i % 384;
    const double sc = s[r / 128 * 3 + c / 128];
    const double q_over = std::fabs(x[i]) / sc;  // in [0, 448]
    const double bound = q_over >= std::ldexp(1.0, -6) ? std::fabs(x[i]) * 0.0625 : std::ldexp(1.0, -10) * sc;
    ASSERT_LE(std::fabs(double(y[i]) - x[i]), bound * (1 + 1e-6)) << i;
  }
}

// dequant(transpose(q)) == transpose(dequant(q)), bit for bit: codes move, the
// scale grid transposes. And transposing twice is the identity.
TEST(Fp8b128, TransposeIsExact) {
  const int64_t shapes[][2] = {{128, 128}, {256, 768}, {768, 256}, {200, 300}, {1, 130}};
  for (auto [rows, cols] : shapes) {
    const auto x = random_matrix(rows * cols, uint32_t(rows * 7 + cols));
    std::vector<uint8_t> q(rows * cols), qt(rows * cols), qtt(rows * cols);
    const int64_t ns = fp8b128_scale_count(rows, cols);
    std::vector<float> s(ns), st(ns), stt(ns), y(rows * cols), yt(rows * cols);
    fp8b128_quantize(x.data(), rows, cols, q.data(), s.data());
    fp8b128_transpose(q.data(), s.data(), rows, cols, qt.data(), st.data());
    fp8b128_dequantize(q.data(), s.data(), rows, cols, y.data());
    fp8b128_dequantize(qt.data(), st.data(), cols, rows, yt.data());
    const auto y_t = fp8ref::transpose(y, rows, cols);
    for (size_t i = 0; i < y_t.size(); ++i) ASSERT_EQ(bits(yt[i]), bits(y_t[i])) << rows << "x" << cols << " " << i;
    // Quantizing the transposed matrix gives the same tiles (each tile's amax is the same set).
    std::vector<uint8_t> q2(rows * cols);
    std::vector<float> s2(ns);
    const auto xt = fp8ref::transpose(x, rows, cols);
    fp8b128_quantize(xt.data(), cols, rows, q2.data(), s2.data());
    EXPECT_EQ(q2, qt);
    for (int64_t i = 0; i < ns; ++i) EXPECT_EQ(bits(s2[i]), bits(st[i]));
    fp8b128_transpose(qt.data(), st.data(), cols, rows, qtt.data(), stt.data());
    EXPECT_EQ(qtt, q);
    for (int64_t i = 0; i < ns; ++i) EXPECT_EQ(bits(stt[i]), bits(s[i]));
  }
}

// The GEMM layout of tile scales: rows of ceil(cols/128) scales padded to a multiple of 4 with 0.
TEST(Fp8b128, GemmScaleLayoutByHand) {
  // 256 x 768: 2 x 6 tiles; ld 8.
  std::vector<float> s(12);
  for (int i = 0; i < 12; ++i) s[i] = float(i + 1);
  ASSERT_EQ(fp8b128_gemm_scale_ld(768), 8);
  ASSERT_EQ(fp8b128_gemm_scale_count(256, 768), 16);
  std::vector<float> g(16, -1.0f);
  fp8b128_scales_for_gemm(s.data(), 256, 768, g.data());
  const float want[16] = {1, 2, 3, 4, 5, 6, 0, 0, 7, 8, 9, 10, 11, 12, 0, 0};
  for (int i = 0; i < 16; ++i) EXPECT_EQ(g[i], want[i]) << i;
  EXPECT_EQ(fp8b128_gemm_scale_ld(512), 4);
  EXPECT_EQ(fp8b128_gemm_scale_ld(3072), 24);
}

// The transpose in the GEMM layout, by hand: 256 x 768 (2 x 6 tiles, ld 8)
// gives 768 x 256 (6 x 2 tiles, ld 4), each tile scale moved, every padding 0,
// the codes those of fp8b128_transpose.
TEST(Fp8b128, TransposeInGemmLayoutByHand) {
  const int64_t rows = 256, cols = 768;
  std::vector<float> g(16, 99.0f);  // the padding's values must not travel
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 6; ++j) g[size_t(i * 8 + j)] = float(10 * i + j + 1);
  std::vector<uint8_t> q(size_t(rows * cols)), qt(q.size()), want_qt(q.size());
  for (size_t i = 0; i < q.size(); ++i) q[i] = uint8_t(i * 37 + i / 768);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) want_qt[size_t(c * rows + r)] = q[size_t(r * cols + c)];
  std::vector<float> gt(24, -1.0f);
  fp8b128_transpose_gemm(q.data(), g.data(), rows, cols, qt.data(), gt.data());
  EXPECT_EQ(qt, want_qt);
  // W^T's tile (j, i) is W's tile (i, j): rows j of 4 scales, 2 of them real.
  const float want[24] = {1, 11, 0, 0, 2, 12, 0, 0, 3, 13, 0, 0, 4, 14, 0, 0, 5, 15, 0, 0, 6, 16, 0, 0};
  for (int i = 0; i < 24; ++i) EXPECT_EQ(gt[size_t(i)], want[i]) << i;
}

// 1x128 blocks: reference codes and the GEMM scale layout (kb * ld + r, ld =
// rows rounded to 4, padding 0), E4M3 and E5M2, fp32 and bf16 inputs, and the
// transposed quantizer equal to quantizing the explicit transpose.
TEST(Fp8Rows1x128, MatchesReference) {
  const int64_t shapes[][2] = {{1, 1}, {3, 128}, {5, 300}, {64, 768}, {130, 256}};
  for (auto [rows, cols] : shapes)
    for (Fp8Kind k : {Fp8Kind::E4M3, Fp8Kind::E5M2}) {
      const bool e4 = k == Fp8Kind::E4M3;
      auto x = random_matrix(rows * cols, uint32_t(rows + cols), 6.0f);
      // Make every value exactly bf16 so the bf16 path has the same input.
      for (auto& v : x) v = std::bit_cast<float>(std::bit_cast<uint32_t>(v) & 0xFFFF0000u);
      std::vector<uint16_t> xb(x.size());
      for (size_t i = 0; i < x.size(); ++i) xb[i] = uint16_t(std::bit_cast<uint32_t>(x[i]) >> 16);
      std::vector<uint8_t> want_q, q(rows * cols), qb(rows * cols);
      std::vector<float> want_s, s(fp8_1x128_scale_count(rows, cols), -1.0f), sb(s.size(), -1.0f);
      fp8ref::rows_1x128(x, rows, cols, e4, want_q, want_s);
      fp8_quantize_1x128(x.data(), rows, cols, k, q.data(), s.data());
      fp8_quantize_1x128(xb.data(), rows, cols, k, qb.data(), sb.data());
      ASSERT_EQ(s.size(), want_s.size());
      EXPECT_EQ(q, want_q) << rows << "x" << cols << " " << e4;
      EXPECT_EQ(qb, want_q);
      for (size_t i = 0; i < s.size(); ++i) {
        ASSERT_EQ(bits(s[i]), bits(want_s[i])) << rows << "x" << cols << " " << i;
        ASSERT_EQ(bits(sb[i]), bits(want_s[i]));
      }
      std::vector<float> y(rows * cols);
      fp8_dequantize_1x128(q.data(), s.data(), rows, cols, k, y.data());
      const int64_t ld = (rows + 3) / 4 * 4;
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t c = 0; c < cols; ++c)
          ASSERT_EQ(bits(y[r * cols + c]), bits(fp8ref::dequant(q[r * cols + c], s[c / 128 * ld + r], e4)));
      // Transposed: the 1x128 operand of x^T.
      const auto xt = fp8ref::transpose(x, rows, cols);
      fp8ref::rows_1x128(xt, cols, rows, e4, want_q, want_s);
      std::vector<uint8_t> qt(rows * cols), qtb(rows * cols);
      std::vector<float> st(fp8_1x128_scale_count(cols, rows), -1.0f), stb(st.size(), -1.0f);
      fp8_quantize_1x128_transposed(x.data(), rows, cols, k, qt.data(), st.data());
      fp8_quantize_1x128_transposed(xb.data(), rows, cols, k, qtb.data(), stb.data());
      EXPECT_EQ(qt, want_q);
      EXPECT_EQ(qtb, want_q);
      ASSERT_EQ(st.size(), want_s.size());
      for (size_t i = 0; i < st.size(); ++i) {
        ASSERT_EQ(bits(st[i]), bits(want_s[i])) << i;
        ASSERT_EQ(bits(stb[i]), bits(want_s[i])) << i;
      }
    }
}

TEST(Fp8Rows1x128, HandComputedScaleLayout) {
  // 3 rows x 256 cols: 2 blocks a row; ld = 4. Row 0's blocks have amax 448
  // (scale 1) and 896 (scale 2); row 1's 448 (scale 1) and 0 (scale 1); row 2's
  // 449 (scale 2: the next power of two) and 1 (scale 2^-8, 1 -> 256).
  std::vector<float> x(3 * 256, 0.0f);
  x[5] = -448.0f;
  x[200] = 896.0f;
  x[256 + 3] = 448.0f;
  x[512 + 7] = 449.0f;    // 224.5 -> 224 = 1.75 * 2^7: 0x76
  x[512 + 130] = 1.0f;    // 256 = 2^8: 0x78
  x[512 + 131] = -0.5f;   // -128: 0xF0
  std::vector<uint8_t> q(x.size());
  std::vector<float> s(8, -1.0f);
  fp8_quantize_1x128(x.data(), 3, 256, Fp8Kind::E4M3, q.data(), s.data());
  const float want[8] = {1.0f, 1.0f, 2.0f, 0.0f, 2.0f, 1.0f, 0x1p-8f, 0.0f};
  for (int i = 0; i < 8; ++i) EXPECT_EQ(s[i], want[i]) << i;
  EXPECT_EQ(q[5], 0xFE);
  EXPECT_EQ(q[200], 0x7E);
  EXPECT_EQ(q[256 + 3], 0x7E);
  EXPECT_EQ(q[512 + 7], 0x76);
  EXPECT_EQ(q[512 + 130], 0x78);
  EXPECT_EQ(q[512 + 131], 0xF0);
}

TEST(Fp8FormatRow, TheRowAndItsLayoutRules) {
  const FormatTraits& t = format_traits(WeightFormat::Fp8b128);
  EXPECT_STREQ(t.name, "fp8b128");
  EXPECT_EQ(t.block, 128 * 128);
  EXPECT_EQ(t.block_rows, 128);
  EXPECT_EQ(t.code_bits, 8);
  EXPECT_EQ(t.scale_kind, ScaleKind::F32);
  EXPECT_FALSE(t.tensor_amax);
  EXPECT_FALSE(t.rounding_applies);
  EXPECT_TRUE(t.gathered);
  EXPECT_FALSE(t.fits_grad_buffer);  // forward reads the gathered payload (docs/fp8.md)
  // A 128-row slab of a 768-column weight: 98304 codes, 6 fp32 scales.
  EXPECT_EQ(t.slab_elems(768), 98304);
  EXPECT_EQ(t.code_bytes(98304), 98304);
  EXPECT_EQ(t.scales_bytes(98304), 6 * 4);
  EXPECT_EQ(t.scales_bytes(98304), int64_t(fp8b128_scale_count(128, 768) * sizeof(float)));
  // A 1600-column weight (GPT-2 1558M): a 128-row slab is 12.5 tiles' elements, 13 scales.
  EXPECT_EQ(t.matrix_scales(128, 1600), 13);
  EXPECT_EQ(t.matrix_scales(4800, 1600), 38 * 13);
  EXPECT_EQ(t.matrix_scales(4800, 1600), fp8b128_scale_count(4800, 1600));
  EXPECT_EQ(t.matrix_scales(3, 48), 1);
  // Eligibility: any rows, cols a multiple of 16 (the FP8 GEMMs' N and K; edge tiles partial).
  EXPECT_TRUE(t.eligible(768, 768));
  EXPECT_TRUE(t.eligible(3072, 768));
  EXPECT_TRUE(t.eligible(50304, 768));
  EXPECT_TRUE(t.eligible(50257, 768));
  EXPECT_TRUE(t.eligible(4800, 1600));
  EXPECT_TRUE(t.eligible(128, 96));
  EXPECT_TRUE(t.eligible(3, 16));
  EXPECT_FALSE(t.eligible(128, 40));
  EXPECT_FALSE(t.eligible(128, 100));
  EXPECT_FALSE(t.eligible(0, 128));
  // Row-block formats keep the engine's rule.
  EXPECT_TRUE(format_traits(WeightFormat::Mxfp8).eligible(3, 64));
  EXPECT_EQ(format_traits(WeightFormat::Mxfp8).slab_elems(768), 1);
  // A --weight-format: the last gathered row.
  EXPECT_EQ(all_formats().back().id, WeightFormat::Fp8b128);
  EXPECT_EQ(all_format_rows().size(), all_formats().size());
  EXPECT_EQ(parse_weight_format("fp8b128"), WeightFormat::Fp8b128);
}

TEST(Fp8b128, BadArgumentsAreErrors) {
  float s = 0;
  uint8_t q = 0;
  EXPECT_THROW(fp8b128_quantize(nullptr, 1, 1, &q, &s), Error);
  EXPECT_THROW(fp8b128_quantize(&s, -1, 1, &q, &s), Error);
  EXPECT_THROW(fp8_quantize_1x128(static_cast<const float*>(nullptr), 1, 1, Fp8Kind::E4M3, &q, &s), Error);
}

}  // namespace
}  // namespace mxdp
