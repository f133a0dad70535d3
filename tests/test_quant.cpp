// CPU block quantizers (quant.h) against a slow per-element reference written
// here from docs/formats.md's formulas: amax and log2 in double, element rounding by
// exact midpoint comparison in double, fp32 only where docs/formats.md defines an fp32
// operation (amax * fl(1/448), the NVFP4 scale chain). No code under test is
// used to produce expected values.
#include <gtest/gtest.h>

#include <bit>
#include <omp.h>

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "util/check.h"
#include "formats/quant.h"

namespace {

using namespace mxdp;


// ---- reference element formats -------------------------------------------------
struct RefFormat {
  std::vector<double> values;  // magnitudes of codes 0..max_code, increasing
  int sign_bit, nan_code;
  double (*decode_nan)(int);
};
RefFormat make_format(int exp_bits, int man_bits, int bias, int max_code, int nan_code) {
  RefFormat f;
  for (int k = 0; k <= max_code; ++k) {
    const int e = k >> man_bits, m = k & ((1 << man_bits) - 1);
    f.values.push_back(e == 0 ? std::ldexp(double(m), 1 - bias - man_bits)
                              : std::ldexp(1.0 + std::ldexp(double(m), -man_bits), e - bias));
  }
  f.sign_bit = 1 << (exp_bits + man_bits);
  f.nan_code = nan_code;
  return f;
}
const RefFormat& ref_e4m3() { static RefFormat f = make_format(4, 3, 7, 0x7E, 0x7F); return f; }
const RefFormat& ref_e5m2() { static RefFormat f = make_format(5, 2, 15, 0x7B, 0x7F); return f; }
const RefFormat& ref_e2m1() { static RefFormat f = make_format(2, 1, 1, 0x7, 0x7); return f; }
const RefFormat& ref_fp8(Fp8Kind k) { return k == Fp8Kind::E4M3 ? ref_e4m3() : ref_e5m2(); }

// Round-to-nearest-even with saturation (x exact in double).
int ref_encode(const RefFormat& f, double x) {
  if (std::isnan(x)) return f.nan_code;
  const int sign = std::signbit(x) ? f.sign_bit : 0;
  const double a = std::fabs(x);
  const auto& v = f.values;
  if (a >= v.back()) return sign | int(v.size() - 1);
  const int lo = int(std::upper_bound(v.begin(), v.end(), a) - v.begin()) - 1;  // v[lo] <= a < v[lo+1]
  const double mid = 0.5 * (v[lo] + v[lo + 1]);
  const int k = a < mid ? lo : a > mid ? lo + 1 : (lo % 2 == 0 ? lo : lo + 1);
  return sign | k;
}
double ref_decode(const RefFormat& f, int code, bool e5m2 = false) {
  const int mag = code & (f.sign_bit - 1);
  const double s = (code & f.sign_bit) ? -1.0 : 1.0;
  if (e5m2 && mag >= 0x7C) return mag == 0x7C ? s * INFINITY : NAN;
  if (mag > int(f.values.size()) - 1) return NAN;
  return s * f.values[mag];
}

double ref_amax(const float* x, int64_t n, int64_t stride = 1) {
  double m = 0;
  for (int64_t i = 0; i < n; ++i)
    if (!std::isnan(x[i * stride])) m = std::max(m, std::fabs(double(x[i * stride])));
  return m;
}

int ref_scale_byte(double amax, Fp8Kind k, ScaleRounding r) {
  if (std::isinf(amax)) return 0xFE;
  if (r == ScaleRounding::RCeil) {
    const float inv = k == Fp8Kind::E4M3 ? 1.0f / 448.0f : 1.0f / 57344.0f;
    const float v = float(amax) * inv;  // the fp32 product docs/formats.md specifies
    if (v == 0) return 0;
    if (std::isinf(v)) return 0xFE;
    // log2 is exact at powers of two; an fp32 v above 2^k is at least
    // 2^k (1 + 2^-23), whose log2 exceeds k by far more than double's rounding.
    const int c = int(std::ceil(std::log2(double(v))));
    return std::clamp(c + 127, 0, 254);
  }
  if (amax == 0) return 0;
  const int emax = k == Fp8Kind::E4M3 ? 8 : 15;
  return std::clamp(int(std::floor(std::log2(amax))) - emax + 127, 0, 254);
}

// ---- inputs -------------------------------------------------------------------
// Random blocks with per-block magnitude spread, plus specials.
std::vector<float> make_input(int64_t rows, int64_t cols, uint32_t seed, bool specials = true) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> x(size_t(rows * cols));
  for (int64_t r = 0; r < rows; ++r) {
    int e = int(rng() % 41) - 20;
    for (int64_t c = 0; c < cols; ++c) {
      if (c % 16 == 0) e = int(rng() % 41) - 20;
      x[r * cols + c] = std::ldexp(nd(rng), e);
    }
  }
  if (specials && !x.empty()) {
    const float sp[] = {NAN, -NAN, INFINITY, -INFINITY, -0.0f, std::bit_cast<float>(1), std::bit_cast<float>(0x807FFFFFu),
                        FLT_MAX, -FLT_MAX, FLT_MIN, 448.0f, 464.0f, 57344.0f, 1.75f, std::bit_cast<float>(0x3FE00001u)};
    for (int i = 0; i < int(x.size() / 50) + 2; ++i) x[rng() % x.size()] = sp[rng() % std::size(sp)];
  }
  return x;
}

// ---- MXFP8 reference checks -----------------------------------------------------
void check_mxfp8_rowwise(const std::vector<float>& x, int64_t rows, int64_t cols, Mxfp8Config cfg) {
  const int64_t nb = ceil_div(cols, 32);
  std::vector<uint8_t> codes(size_t(rows * cols), 0xAA), scales(size_t(rows * nb), 0xAA);
  mxfp8_quantize_rowwise(x.data(), rows, cols, cfg, codes.data(), scales.data());
  const RefFormat& f = ref_fp8(cfg.elem);
  int64_t bad_s = 0, bad_c = 0, bad_d = 0;
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t j = 0; j < nb; ++j) {
      const int64_t c0 = j * 32, n = std::min<int64_t>(32, cols - c0);
      const int s = ref_scale_byte(ref_amax(&x[r * cols + c0], n), cfg.elem, cfg.rounding);
      bad_s += scales[r * nb + j] != s;
      for (int64_t i = 0; i < n; ++i)
        bad_c += codes[r * cols + c0 + i] != ref_encode(f, std::ldexp(double(x[r * cols + c0 + i]), 127 - s));
    }
  EXPECT_EQ(bad_s, 0) << "scale mismatches, " << rows << "x" << cols;
  EXPECT_EQ(bad_c, 0) << "code mismatches, " << rows << "x" << cols;
  // Dequantize: code value * 2^(s - 127), compared bitwise.
  std::vector<float> y(size_t(rows * cols));
  mxfp8_dequantize_rowwise(codes.data(), scales.data(), rows, cols, cfg.elem, y.data());
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) {
      const double v = ref_decode(f, codes[r * cols + c], cfg.elem == Fp8Kind::E5M2);
      const float want = float(std::ldexp(v, scales[r * nb + c / 32] - 127));
      const float got = y[r * cols + c];
      bad_d += std::isnan(want) ? !std::isnan(got) : std::bit_cast<uint32_t>(got) != std::bit_cast<uint32_t>(want);
    }
  EXPECT_EQ(bad_d, 0) << "dequant mismatches, " << rows << "x" << cols;
}

void check_mxfp8_colwise(const std::vector<float>& x, int64_t rows, int64_t cols, Mxfp8Config cfg) {
  const int64_t nrb = ceil_div(rows, 32);
  std::vector<uint8_t> codes(size_t(rows * cols), 0xAA), scales(size_t(nrb * cols), 0xAA);
  mxfp8_quantize_colwise(x.data(), rows, cols, cfg, codes.data(), scales.data());
  const RefFormat& f = ref_fp8(cfg.elem);
  int64_t bad_s = 0, bad_c = 0, bad_d = 0;
  for (int64_t rb = 0; rb < nrb; ++rb)
    for (int64_t c = 0; c < cols; ++c) {
      const int64_t r0 = rb * 32, n = std::min<int64_t>(32, rows - r0);
      const int s = ref_scale_byte(ref_amax(&x[r0 * cols + c], n, cols), cfg.elem, cfg.rounding);
      bad_s += scales[rb * cols + c] != s;
      for (int64_t i = 0; i < n; ++i)
        bad_c += codes[(r0 + i) * cols + c] != ref_encode(f, std::ldexp(double(x[(r0 + i) * cols + c]), 127 - s));
    }
  EXPECT_EQ(bad_s, 0) << "colwise scale mismatches, " << rows << "x" << cols;
  EXPECT_EQ(bad_c, 0) << "colwise code mismatches, " << rows << "x" << cols;
  std::vector<float> y(size_t(rows * cols));
  mxfp8_dequantize_colwise(codes.data(), scales.data(), rows, cols, cfg.elem, y.data());
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) {
      const double v = ref_decode(f, codes[r * cols + c], cfg.elem == Fp8Kind::E5M2);
      const float want = float(std::ldexp(v, scales[(r / 32) * cols + c] - 127));
      const float got = y[r * cols + c];
      bad_d += std::isnan(want) ? !std::isnan(got) : std::bit_cast<uint32_t>(got) != std::bit_cast<uint32_t>(want);
    }
  EXPECT_EQ(bad_d, 0) << "colwise dequant mismatches, " << rows << "x" << cols;
}

const int64_t kShapes[][2] = {{1, 16}, {1, 1}, {65, 80}, {993, 512}, {3, 33}, {31, 1},
                              {1, 33}, {7, 1000}, {64, 64}, {40, 96}, {0, 5}, {5, 0}};

TEST(Mxfp8, RowwiseMatchesReferenceAllShapes) {
  uint32_t seed = 1;
  for (auto [rows, cols] : kShapes)
    for (Fp8Kind k : {Fp8Kind::E4M3, Fp8Kind::E5M2})
      for (ScaleRounding r : {ScaleRounding::RCeil, ScaleRounding::Floor}) {
        SCOPED_TRACE(testing::Message() << rows << "x" << cols << " e5m2=" << (k == Fp8Kind::E5M2)
                                        << " floor=" << (r == ScaleRounding::Floor));
        check_mxfp8_rowwise(make_input(rows, cols, seed++), rows, cols, {k, r});
      }
}

TEST(Mxfp8, ColwiseMatchesReferenceAllShapes) {
  uint32_t seed = 100;
  for (auto [rows, cols] : kShapes)
    for (Fp8Kind k : {Fp8Kind::E4M3, Fp8Kind::E5M2})
      for (ScaleRounding r : {ScaleRounding::RCeil, ScaleRounding::Floor}) {
        SCOPED_TRACE(testing::Message() << rows << "x" << cols);
        check_mxfp8_colwise(make_input(rows, cols, seed++), rows, cols, {k, r});
      }
}

TEST(Mxfp8, ZeroNaNAndInfBlocks) {
  std::vector<float> x(4 * 32, 0.0f);
  for (int i = 32; i < 64; ++i) x[i] = NAN;          // block 1: all NaN
  for (int i = 64; i < 96; ++i) x[i] = 1.0f;         // block 2: Inf among ones
  x[70] = -INFINITY;
  for (int i = 96; i < 128; ++i) x[i] = (i % 2) ? NAN : 3.0f;  // block 3: NaN ignored in amax
  std::vector<uint8_t> codes(128), scales(4);
  mxfp8_quantize_rowwise(x.data(), 1, 128, {}, codes.data(), scales.data());
  EXPECT_EQ(scales[0], 0x00);
  for (int i = 0; i < 32; ++i) EXPECT_EQ(codes[i], 0x00);
  EXPECT_EQ(scales[1], 0x00);  // all-NaN block has amax 0
  for (int i = 32; i < 64; ++i) EXPECT_EQ(codes[i], 0x7F);
  EXPECT_EQ(scales[2], 0xFE);  // Inf amax saturates the scale
  EXPECT_EQ(codes[70], 0xFE);  // -Inf * 2^-127 saturates to -448
  EXPECT_EQ(codes[64], 0x00);  // 1 * 2^-127 rounds to 0
  // amax 3: ceil(log2(3/448)) = -7 -> byte 120; 3 * 2^7 = 384 = E4M3 0x7C.
  EXPECT_EQ(scales[3], 120);
  EXPECT_EQ(codes[96], 0x7C);
  EXPECT_EQ(codes[97], 0x7F);
  std::vector<float> y(128);
  mxfp8_dequantize_rowwise(codes.data(), scales.data(), 1, 128, Fp8Kind::E4M3, y.data());
  EXPECT_EQ(y[96], 3.0f);
  EXPECT_TRUE(std::isnan(y[97]));
  EXPECT_EQ(y[0], 0.0f);
}

// rceil and floor differ exactly when the block max's significand exceeds 1.75
// (448 = 1.75 * 2^8): then amax / 448 lies above the power of two floor picks.
TEST(Mxfp8, RceilAndFloorDifferJustAbove1p75) {
  for (int e = -100; e <= 100; e += 7) {
    const float below = std::ldexp(std::nextafter(1.75f, 0.0f), e);
    const float at = std::ldexp(1.75f, e);
    const float above = std::ldexp(std::nextafter(1.75f, 2.0f), e);
    auto byte = [](float amax, ScaleRounding r) {
      std::vector<float> x(32, 0.0f);
      x[5] = amax;
      x[9] = -amax / 3;
      std::vector<uint8_t> codes(32), scales(1);
      mxfp8_quantize_rowwise(x.data(), 1, 32, {Fp8Kind::E4M3, r}, codes.data(), scales.data());
      return int(scales[0]);
    };
    EXPECT_EQ(byte(below, ScaleRounding::RCeil), byte(below, ScaleRounding::Floor)) << e;
    EXPECT_EQ(byte(at, ScaleRounding::RCeil), byte(at, ScaleRounding::Floor)) << e;
    EXPECT_EQ(byte(above, ScaleRounding::RCeil), byte(above, ScaleRounding::Floor) + 1) << e;
    EXPECT_EQ(byte(above, ScaleRounding::Floor), e - 8 + 127) << e;
    // Elsewhere in the binade: agree on [1, 1.75], differ on (1.75, 2).
    for (float m : {1.0f, 1.25f, 1.5f, 1.7f})
      EXPECT_EQ(byte(std::ldexp(m, e), ScaleRounding::RCeil), byte(std::ldexp(m, e), ScaleRounding::Floor));
    for (float m : {1.76f, 1.9f, std::nextafter(2.0f, 0.0f)})
      EXPECT_EQ(byte(std::ldexp(m, e), ScaleRounding::RCeil), byte(std::ldexp(m, e), ScaleRounding::Floor) + 1);
  }
}

TEST(Mxfp8, DequantErrorBounds) {
  const int64_t rows = 64, cols = 256;
  const auto x = make_input(rows, cols, 77, /*specials=*/false);
  for (Fp8Kind k : {Fp8Kind::E4M3, Fp8Kind::E5M2})
    for (ScaleRounding r : {ScaleRounding::RCeil, ScaleRounding::Floor}) {
      std::vector<uint8_t> codes(rows * cols), scales(rows * cols / 32);
      std::vector<float> y(rows * cols);
      mxfp8_quantize_rowwise(x.data(), rows, cols, {k, r}, codes.data(), scales.data());
      mxfp8_dequantize_rowwise(codes.data(), scales.data(), rows, cols, k, y.data());
      const int man = k == Fp8Kind::E4M3 ? 3 : 2;
      // Relative: half an ulp (2^-(man+1)); floor may saturate a block max by up to 2^-man.
      const double rel = r == ScaleRounding::RCeil ? std::ldexp(1.0, -(man + 1)) : std::ldexp(1.0, -man);
      for (int64_t i = 0; i < rows * cols; ++i) {
        const double scale = std::ldexp(1.0, scales[i / 32] - 127);
        const double sub_quantum = std::ldexp(scale, k == Fp8Kind::E4M3 ? -9 : -16);
        const double err = std::fabs(double(y[i]) - double(x[i]));
        ASSERT_LE(err, std::max(rel * std::fabs(double(x[i])), 0.5 * sub_quantum)) << i;
      }
    }
}

// ---- NVFP4 ------------------------------------------------------------------------
struct RefNvfp4 {
  float s_enc, s_dec;
};
RefNvfp4 ref_tensor_scale(float amax) {
  float s_enc = 2688.0f / amax;
  if (amax == 0.0f) s_enc = 1.0f;
  else if (std::isinf(s_enc)) s_enc = FLT_MAX;
  else if (s_enc == 0.0f) s_enc = 1.0f;
  return {s_enc, 1.0f / s_enc};
}

void check_nvfp4(const std::vector<float>& x, int64_t rows, int64_t cols, float tensor_amax) {
  const int64_t nb = ceil_div(cols, 16), rb = ceil_div(cols, 2);
  std::vector<uint8_t> codes(size_t(rows * rb), 0xAA), scales(size_t(rows * nb), 0xAA);
  nvfp4_quantize_rowwise(x.data(), rows, cols, tensor_amax, codes.data(), scales.data());
  const RefNvfp4 ts = ref_tensor_scale(tensor_amax);
  const Nvfp4TensorScale got_ts = nvfp4_tensor_scale(tensor_amax);
  EXPECT_EQ(std::bit_cast<uint32_t>(got_ts.s_enc), std::bit_cast<uint32_t>(ts.s_enc));
  EXPECT_EQ(std::bit_cast<uint32_t>(got_ts.s_dec), std::bit_cast<uint32_t>(ts.s_dec));
  int64_t bad_s = 0, bad_c = 0, bad_d = 0;
  std::vector<int> want_nib(size_t(rows * cols));
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t j = 0; j < nb; ++j) {
      const int64_t c0 = j * 16, n = std::min<int64_t>(16, cols - c0);
      const float bam = float(ref_amax(&x[r * cols + c0], n));
      const float prod = bam * (ts.s_enc * (1.0f / 6.0f));  // fp32 chain of docs/formats.md
      const int sb = ref_encode(ref_e4m3(), double(prod));
      bad_s += scales[r * nb + j] != sb;
      const float d = float(ref_e4m3().values[sb]) * ts.s_dec;
      float m = 1.0f / d;
      if (!(m < FLT_MAX)) m = FLT_MAX;
      for (int64_t i = 0; i < n; ++i) {
        const int q = ref_encode(ref_e2m1(), double(x[r * cols + c0 + i] * m));
        want_nib[r * cols + c0 + i] = q;
        const uint8_t byte = codes[r * rb + (c0 + i) / 2];
        const int got = ((c0 + i) & 1) ? byte >> 4 : byte & 0xF;
        bad_c += got != q;
      }
    }
  for (int64_t r = 0; r < rows && cols % 2 == 1; ++r) bad_c += (codes[r * rb + rb - 1] >> 4) != 0;  // pad
  EXPECT_EQ(bad_s, 0) << "nvfp4 scale mismatches, " << rows << "x" << cols;
  EXPECT_EQ(bad_c, 0) << "nvfp4 code mismatches, " << rows << "x" << cols;
  std::vector<float> y(size_t(rows * cols));
  nvfp4_dequantize_rowwise(codes.data(), scales.data(), ts.s_dec, rows, cols, y.data());
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) {
      const double e = ref_decode(ref_e2m1(), want_nib[r * cols + c]);
      const double sb = ref_e4m3().values[scales[r * nb + c / 16] & 0x7F];
      const float want = float(double(float(e * sb)) * double(ts.s_dec));
      bad_d += std::bit_cast<uint32_t>(y[r * cols + c]) != std::bit_cast<uint32_t>(want);
    }
  EXPECT_EQ(bad_d, 0) << "nvfp4 dequant mismatches, " << rows << "x" << cols;
}

TEST(Nvfp4, MatchesReferenceAllShapes) {
  uint32_t seed = 500;
  for (auto [rows, cols] : kShapes) {
    SCOPED_TRACE(testing::Message() << rows << "x" << cols);
    auto x = make_input(rows, cols, seed++);
    for (float& v : x)  // NVFP4 tensors with Inf are degenerate; keep finite specials
      if (std::isinf(v)) v = std::copysign(3e38f, v);
    const float am = float(ref_amax(x.data(), int64_t(x.size())));
    check_nvfp4(x, rows, cols, am);
    check_nvfp4(x, rows, cols, am * 4.0f);      // amax of a larger (sharded) tensor
    check_nvfp4(x, rows, cols, am * 0.25f);     // smaller than the data: saturation
  }
}

TEST(Nvfp4, SpecialTensors) {
  std::vector<float> zero(48, 0.0f);
  check_nvfp4(zero, 3, 16, 0.0f);
  std::vector<uint8_t> codes(24), scales(3);
  nvfp4_quantize_rowwise(zero.data(), 3, 16, 0.0f, codes.data(), scales.data());
  for (uint8_t c : codes) EXPECT_EQ(c, 0);
  for (uint8_t s : scales) EXPECT_EQ(s, 0);
  std::vector<float> x(32, NAN);
  for (int i = 16; i < 32; ++i) x[i] = float(i - 20);
  x[17] = INFINITY;
  check_nvfp4(x, 1, 32, INFINITY);  // S_enc = 2688/Inf = 0 -> 1
  nvfp4_quantize_rowwise(x.data(), 1, 32, INFINITY, codes.data(), scales.data());
  EXPECT_EQ(codes[0], 0x77);   // NaN -> 0x7 in both nibbles
  EXPECT_EQ(scales[1], 0x7E);  // Inf block amax saturates the E4M3 scale to 448
  std::vector<float> tiny(16, std::bit_cast<float>(3));
  check_nvfp4(tiny, 1, 16, std::bit_cast<float>(3));  // S_enc overflows -> FLT_MAX
}

TEST(Nvfp4, DequantErrorBound) {
  const int64_t rows = 32, cols = 128;
  // Block maxima within 2^8 of each other keep every E4M3 block scale normal
  // (a block far below the tensor amax gets a subnormal, coarse scale).
  std::mt19937 rng(9);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> x(rows * cols);
  for (int64_t i = 0; i < rows * cols; ++i) x[i] = std::ldexp(nd(rng), int((i / 16) % 9) - 4);
  const float am = float(ref_amax(x.data(), rows * cols));
  std::vector<uint8_t> codes(rows * cols / 2), scales(rows * cols / 16);
  std::vector<float> y(rows * cols);
  nvfp4_quantize_rowwise(x.data(), rows, cols, am, codes.data(), scales.data());
  nvfp4_dequantize_rowwise(codes.data(), scales.data(), nvfp4_tensor_scale(am).s_dec, rows, cols, y.data());
  for (int64_t b = 0; b < rows * cols / 16; ++b) {
    const double bam = ref_amax(&x[b * 16], 16);
    for (int64_t i = b * 16; i < b * 16 + 16; ++i)  // half of the widest E2M1 step (2) of block_amax/6
      ASSERT_LE(std::fabs(double(y[i]) - double(x[i])), bam / 6.0 * 1.07 + 1e-37) << i;
  }
}

// ---- API contract -------------------------------------------------------------------
TEST(QuantApi, RejectsBadArguments) {
  float x[4] = {};
  uint8_t c[4], s[4];
  EXPECT_THROW(mxfp8_quantize_rowwise(x, -1, 4, {}, c, s), Error);
  EXPECT_THROW(mxfp8_quantize_rowwise(nullptr, 1, 4, {}, c, s), Error);
  EXPECT_THROW(mxfp8_quantize_colwise(x, 1, 4, {}, c, nullptr), Error);
  EXPECT_THROW(mxfp8_dequantize_rowwise(c, s, 1, -4, Fp8Kind::E4M3, x), Error);
  EXPECT_THROW(nvfp4_quantize_rowwise(x, 1, 4, NAN, c, s), Error);
  EXPECT_THROW(nvfp4_quantize_rowwise(x, 1, 4, -1.0f, c, s), Error);
  EXPECT_THROW(nvfp4_dequantize_rowwise(nullptr, s, 1.0f, 1, 4, x), Error);
  EXPECT_THROW(amax(x, -1), Error);
  try {
    mxfp8_quantize_rowwise(x, -3, 4, {}, c, s);
  } catch (const Error& e) {
    EXPECT_NE(e.where().find("quant.cpp:"), std::string::npos) << e.where();
    EXPECT_NE(std::string(e.what()).find("-3"), std::string::npos) << e.what();
  }
  EXPECT_NO_THROW(mxfp8_quantize_rowwise(nullptr, 0, 4, {}, nullptr, nullptr));
}

TEST(QuantApi, AmaxIgnoresNaN) {
  const float x[] = {NAN, -3.0f, 2.0f, -NAN};
  EXPECT_EQ(amax(x, 4), 3.0f);
  const float n[] = {NAN, NAN};
  EXPECT_EQ(amax(n, 2), 0.0f);
  const float i[] = {1.0f, -INFINITY};
  EXPECT_EQ(amax(i, 2), INFINITY);
  EXPECT_EQ(amax(nullptr, 0), 0.0f);
}

TEST(QuantApi, SameBitsForAnyThreadCount) {
  const int64_t rows = 1025, cols = 96;  // above the parallel threshold
  const auto x = make_input(rows, cols, 31);
  auto run = [&](int threads) {
    omp_set_num_threads(threads);
    std::vector<uint8_t> out(rows * cols * 2 + rows * 8 + 64);
    mxfp8_quantize_rowwise(x.data(), rows, cols, {}, out.data(), out.data() + rows * cols);
    mxfp8_quantize_colwise(x.data(), rows, cols, {}, out.data() + rows * cols + rows * 3,
                           out.data() + 2 * rows * cols + rows * 3);
    return out;
  };
  const int def = omp_get_max_threads();
  const auto a = run(1), b = run(3);
  omp_set_num_threads(def);
  EXPECT_EQ(a, b);
}

}  // namespace
