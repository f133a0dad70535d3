// Scalar codecs of formats.h against (a) a slow reference written here from the
// definitions (value tables built with ldexp, nearest-even by exact midpoint
// comparison in double) and (b) CUDA's own host conversion functions
// (cuda_fp8.h, cuda_fp4.h, cuda_bf16.h), when that header is on the include path.
#include <gtest/gtest.h>

#include <bit>

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "formats/codec.h"

#if __has_include(<cuda_fp8.h>) && __has_include(<cuda_fp4.h>) && __has_include(<cuda_bf16.h>)
#include <cuda_bf16.h>
#include <cuda_fp4.h>
#include <cuda_fp8.h>
#define MXDP_TEST_HAVE_CUDA_HEADERS 1
#else
#define MXDP_TEST_HAVE_CUDA_HEADERS 0
#endif

namespace {

using namespace mxdp;


// ---- slow, independent reference -----------------------------------------------
struct SmallFormat {
  int exp_bits, man_bits, bias;
  int max_code;  // largest finite magnitude code
  int nan_code;
  bool ieee_inf;  // E5M2: exponent all-ones is Inf/NaN
  const char* name;
};
const SmallFormat kE4M3{4, 3, 7, 0x7E, 0x7F, false, "E4M3"};
const SmallFormat kE5M2{5, 2, 15, 0x7B, 0x7F, true, "E5M2"};
const SmallFormat kE2M1{2, 1, 1, 0x7, 0x7, false, "E2M1"};

// Value of magnitude code k (k <= max_code) from the definition.
double ref_value(const SmallFormat& f, int k) {
  const int e = k >> f.man_bits, m = k & ((1 << f.man_bits) - 1);
  if (e == 0) return std::ldexp(double(m), 1 - f.bias - f.man_bits);
  return std::ldexp(1.0 + std::ldexp(double(m), -f.man_bits), e - f.bias);
}
double ref_decode(const SmallFormat& f, int code) {
  const int sign_bit = 1 << (f.exp_bits + f.man_bits);
  const int mag = code & (sign_bit - 1);
  const double s = (code & sign_bit) ? -1.0 : 1.0;
  const int exp_all = ((1 << f.exp_bits) - 1) << f.man_bits;
  if (f.ieee_inf && (mag & exp_all) == exp_all)
    return (mag == exp_all) ? s * INFINITY : NAN;
  if (!f.ieee_inf && f.nan_code != f.max_code && mag == f.nan_code) return NAN;
  return s * ref_value(f, mag);
}
// Nearest-even with saturation, by exact comparison against midpoints.
int ref_encode(const SmallFormat& f, float x) {
  if (std::isnan(x)) return f.nan_code;
  const int sign = std::signbit(x) ? 1 << (f.exp_bits + f.man_bits) : 0;
  const double a = std::fabs(double(x));
  if (a >= ref_value(f, f.max_code)) return sign | f.max_code;
  int lo = 0;
  while (ref_value(f, lo + 1) <= a) ++lo;  // ref_value(lo) <= a < ref_value(lo + 1)
  const double mid = 0.5 * (ref_value(f, lo) + ref_value(f, lo + 1));  // exact in double
  int k;
  if (a < mid) k = lo;
  else if (a > mid) k = lo + 1;
  else k = (lo % 2 == 0) ? lo : lo + 1;
  return sign | k;
}
uint16_t ref_bf16(float x) {
  const uint32_t u = std::bit_cast<uint32_t>(x);
  if (std::isnan(x)) return uint16_t((u >> 16) | 0x40);
  const float lo = std::bit_cast<float>(u & 0xFFFF0000u);
  const double a = x, l = lo;
  if (std::isinf(x)) return uint16_t(u >> 16);
  // one bf16 ulp at lo: 2^(exponent - 7), subnormals share exponent -126
  const double step = std::ldexp(1.0, std::max(l == 0 ? -126 : std::ilogb(l), -126) - 7);
  const double mid = l + (std::signbit(x) ? -0.5 : 0.5) * step;
  const uint16_t t = uint16_t(u >> 16);
  if (std::fabs(a) < std::fabs(mid)) return t;
  if (std::fabs(a) > std::fabs(mid)) return uint16_t(t + 1);
  return (t & 1) ? uint16_t(t + 1) : t;
}

uint8_t enc(const SmallFormat& f, float x) {
  if (f.exp_bits == 4) return codec::e4m3_from_f32(x);
  if (f.exp_bits == 5) return codec::e5m2_from_f32(x);
  return codec::e2m1_from_f32(x);
}
float dec(const SmallFormat& f, uint8_t c) {
  if (f.exp_bits == 4) return codec::e4m3_to_f32(c);
  if (f.exp_bits == 5) return codec::e5m2_to_f32(c);
  return codec::e2m1_to_f32(c);
}

// Edge patterns: every upper half-word with lower halves that sit exactly on,
// just above and just below every rounding boundary at bit 16 and above, plus
// hand-picked specials.
std::vector<uint32_t> edge_patterns() {
  std::vector<uint32_t> v;
  const uint32_t lows[] = {0x0000u, 0x0001u, 0x7FFFu, 0x8000u, 0x8001u, 0xFFFFu};
  v.reserve(65536 * 6 + 64);
  for (uint32_t hi = 0; hi < 65536; ++hi)
    for (uint32_t lo : lows) v.push_back((hi << 16) | lo);
  const uint32_t specials[] = {0x00000000u, 0x80000000u, 0x00000001u, 0x80000001u, 0x007FFFFFu,
                               0x00400000u, 0x00800000u, 0x7F7FFFFFu, 0xFF7FFFFFu, 0x7F800000u,
                               0xFF800000u, 0x7FC00000u, 0xFFC00000u, 0x7F800001u, 0xFFFFFFFFu};
  for (uint32_t s : specials) v.push_back(s);
  return v;
}

// ---- exhaustive over the 256 / 16 codes ------------------------------------------
void check_all_codes(const SmallFormat& f) {
  const int ncodes = 1 << (1 + f.exp_bits + f.man_bits);
  for (int c = 0; c < ncodes; ++c) {
    const double want = ref_decode(f, c);
    const float got = dec(f, uint8_t(c));
    if (std::isnan(want)) {
      EXPECT_TRUE(std::isnan(got)) << f.name << " code " << c;
      EXPECT_EQ(enc(f, got), f.nan_code) << f.name << " code " << c;
      continue;
    }
    EXPECT_EQ(double(got), want) << f.name << " code " << c;
    EXPECT_EQ(std::signbit(got), std::signbit(want)) << f.name << " code " << c;
    const int mag = c & ((ncodes >> 1) - 1);
    if (std::isinf(want)) {
      EXPECT_EQ(enc(f, got), (c & (ncodes >> 1)) | f.max_code) << f.name << " Inf saturates";
    } else {
      EXPECT_LE(mag, f.max_code);
      EXPECT_EQ(enc(f, got), c) << f.name << " round trip of code " << c;
    }
  }
}

TEST(Fp8, AllE4M3CodesRoundTrip) { check_all_codes(kE4M3); }
TEST(Fp8, AllE5M2CodesRoundTrip) { check_all_codes(kE5M2); }
TEST(Fp4, AllE2M1CodesRoundTrip) { check_all_codes(kE2M1); }

TEST(Fp8, KnownValues) {
  EXPECT_EQ(codec::e4m3_to_f32(0x7E), 448.0f);
  EXPECT_EQ(codec::e4m3_to_f32(0x01), std::ldexp(1.0f, -9));
  EXPECT_EQ(codec::e4m3_to_f32(0x38), 1.0f);
  EXPECT_EQ(codec::e5m2_to_f32(0x7B), 57344.0f);
  EXPECT_EQ(codec::e5m2_to_f32(0x01), std::ldexp(1.0f, -16));
  EXPECT_EQ(codec::e5m2_to_f32(0x3C), 1.0f);
  EXPECT_TRUE(std::isinf(codec::e5m2_to_f32(0xFC)) && codec::e5m2_to_f32(0xFC) < 0);
  const float e2m1[8] = {0, 0.5f, 1, 1.5f, 2, 3, 4, 6};
  for (int i = 0; i < 8; ++i) {
    EXPECT_EQ(codec::e2m1_to_f32(uint8_t(i)), e2m1[i]);
    EXPECT_EQ(codec::e2m1_to_f32(uint8_t(i | 8)), -e2m1[i]);
  }
}

// Midpoint between neighbours goes to the even code; one fp32 ulp either side
// goes to the nearer one.
void check_ties(const SmallFormat& f) {
  for (int k = 0; k < f.max_code; ++k) {
    const float lo = float(ref_value(f, k)), hi = float(ref_value(f, k + 1));
    const float mid = float(0.5 * (double(lo) + double(hi)));
    ASSERT_EQ(double(mid), 0.5 * (double(lo) + double(hi))) << "midpoint exact in fp32";
    const int even = (k % 2 == 0) ? k : k + 1;
    EXPECT_EQ(enc(f, mid), even) << f.name << " tie between codes " << k << "," << k + 1;
    EXPECT_EQ(enc(f, -mid), even | (1 << (f.exp_bits + f.man_bits))) << f.name << " negative tie";
    EXPECT_EQ(enc(f, std::nextafter(mid, 0.0f)), k) << f.name;
    EXPECT_EQ(enc(f, std::nextafter(mid, INFINITY)), k + 1) << f.name;
  }
}
TEST(Fp8, TiesToEvenE4M3) { check_ties(kE4M3); }
TEST(Fp8, TiesToEvenE5M2) { check_ties(kE5M2); }
TEST(Fp4, TiesToEvenE2M1) { check_ties(kE2M1); }

TEST(Fp8, SaturationNaNInfNegZero) {
  for (float x : {448.0f, 449.0f, 464.0f, 479.0f, 480.0f, 1e6f, FLT_MAX, INFINITY}) {
    EXPECT_EQ(codec::e4m3_from_f32(x), 0x7E) << x;
    EXPECT_EQ(codec::e4m3_from_f32(-x), 0xFE) << x;
  }
  for (float x : {57344.0f, 61439.0f, 61440.0f, 65536.0f, FLT_MAX, INFINITY}) {
    EXPECT_EQ(codec::e5m2_from_f32(x), 0x7B) << x;
    EXPECT_EQ(codec::e5m2_from_f32(-x), 0xFB) << x;
  }
  for (float x : {6.0f, 7.0f, 100.0f, INFINITY}) {
    EXPECT_EQ(codec::e2m1_from_f32(x), 0x7) << x;
    EXPECT_EQ(codec::e2m1_from_f32(-x), 0xF) << x;
  }
  for (uint32_t nan : {0x7FC00000u, 0xFFC00000u, 0x7F800001u, 0xFFFFFFFFu}) {
    EXPECT_EQ(codec::e4m3_from_f32(std::bit_cast<float>(nan)), 0x7F);
    EXPECT_EQ(codec::e5m2_from_f32(std::bit_cast<float>(nan)), 0x7F);
    EXPECT_EQ(codec::e2m1_from_f32(std::bit_cast<float>(nan)), 0x7);
  }
  EXPECT_EQ(codec::e4m3_from_f32(-0.0f), 0x80);
  EXPECT_EQ(codec::e5m2_from_f32(-0.0f), 0x80);
  EXPECT_EQ(codec::e2m1_from_f32(-0.0f), 0x8);
  EXPECT_EQ(codec::e4m3_from_f32(0.0f), 0x00);
  EXPECT_TRUE(std::signbit(codec::e4m3_to_f32(0x80)));
}

TEST(Fp8, Fp32SubnormalInputs) {
  for (uint32_t m : {1u, 2u, 0x1234u, 0x400000u, 0x7FFFFFu}) {
    EXPECT_EQ(codec::e4m3_from_f32(std::bit_cast<float>(m)), 0x00);
    EXPECT_EQ(codec::e4m3_from_f32(std::bit_cast<float>(0x80000000u | m)), 0x80);
    EXPECT_EQ(codec::e5m2_from_f32(std::bit_cast<float>(m)), 0x00);
    EXPECT_EQ(codec::e2m1_from_f32(std::bit_cast<float>(0x80000000u | m)), 0x8);
  }
  // Smallest E4M3 subnormal 2^-9: half of it ties to 0, just above goes to 1.
  EXPECT_EQ(codec::e4m3_from_f32(std::ldexp(1.0f, -10)), 0x00);
  EXPECT_EQ(codec::e4m3_from_f32(std::nextafter(std::ldexp(1.0f, -10), 1.0f)), 0x01);
  EXPECT_EQ(codec::e4m3_from_f32(std::ldexp(3.0f, -10)), 0x02);  // 1.5 quanta ties up to 2
}

// Every edge pattern and a few million random fp32 patterns against the slow reference.
TEST(Fp8, MatchesSlowReference) {
  std::vector<uint32_t> pats = edge_patterns();
  std::mt19937 rng(12345);
  for (int i = 0; i < (1 << 19); ++i) pats.push_back(rng());
  // Random values in the interesting range of each format (|x| < 2^17).
  std::uniform_real_distribution<float> u(-70000.0f, 70000.0f);
  for (int i = 0; i < (1 << 19); ++i) pats.push_back(std::bit_cast<uint32_t>(u(rng) * std::ldexp(1.0f, -int(rng() % 24))));
  int64_t bad[4] = {0, 0, 0, 0};
  for (uint32_t p : pats) {
    const float x = std::bit_cast<float>(p);
    bad[0] += codec::e4m3_from_f32(x) != ref_encode(kE4M3, x);
    bad[1] += codec::e5m2_from_f32(x) != ref_encode(kE5M2, x);
    bad[2] += codec::e2m1_from_f32(x) != ref_encode(kE2M1, x);
    bad[2] += codec::e2m1_from_f32_generic(x) != ref_encode(kE2M1, x);
    const uint16_t b = codec::bf16_from_f32(x);
    bad[3] += std::isnan(x) ? !std::isnan(codec::bf16_to_f32(b)) : b != ref_bf16(x);
  }
  EXPECT_EQ(bad[0], 0) << "E4M3 mismatches of " << pats.size();
  EXPECT_EQ(bad[1], 0) << "E5M2 mismatches of " << pats.size();
  EXPECT_EQ(bad[2], 0) << "E2M1 mismatches of " << pats.size();
  EXPECT_EQ(bad[3], 0) << "BF16 mismatches of " << pats.size();
}

TEST(Bf16, SpecialsAndRounding) {
  EXPECT_EQ(codec::bf16_from_f32(1.0f), 0x3F80);
  EXPECT_EQ(codec::bf16_from_f32(std::bit_cast<float>(0x3F808000u)), 0x3F80);  // tie, even stays
  EXPECT_EQ(codec::bf16_from_f32(std::bit_cast<float>(0x3F818000u)), 0x3F82);  // tie, odd rounds up
  EXPECT_EQ(codec::bf16_from_f32(std::bit_cast<float>(0x3F808001u)), 0x3F81);
  EXPECT_EQ(codec::bf16_from_f32(FLT_MAX), 0x7F80);  // RNE overflows to Inf
  EXPECT_EQ(codec::bf16_from_f32(-INFINITY), 0xFF80);
  EXPECT_EQ(codec::bf16_from_f32(-0.0f), 0x8000);
  EXPECT_EQ(codec::bf16_from_f32(std::bit_cast<float>(0x7F800001u)), 0x7FC0);  // signalling NaN made quiet
  EXPECT_EQ(codec::bf16_from_f32(std::bit_cast<float>(0xFFC00000u)), 0xFFC0);
  EXPECT_EQ(codec::bf16_from_f32(std::bit_cast<float>(0x00000001u)), 0x0000);  // subnormal, no FTZ needed
  EXPECT_EQ(codec::bf16_from_f32(std::bit_cast<float>(0x00018000u)), 0x0002);
  EXPECT_EQ(codec::bf16_to_f32(0x3F80), 1.0f);
}

// ---- E8M0 and scale bytes ---------------------------------------------------------
TEST(E8M0, DecodeAndMultiplier) {
  EXPECT_EQ(std::bit_cast<uint32_t>(codec::e8m0_to_f32(0x00)), 0x00400000u);  // 2^-127 exactly
  EXPECT_EQ(codec::e8m0_to_f32(0x7F), 1.0f);
  EXPECT_EQ(codec::e8m0_to_f32(0xFE), std::ldexp(1.0f, 127));
  EXPECT_TRUE(std::isnan(codec::e8m0_to_f32(0xFF)));
  for (int b = 0; b <= 254; ++b) {
    const double want_scale = std::ldexp(1.0, b - 127);
    EXPECT_EQ(double(codec::e8m0_to_f32(uint8_t(b))), want_scale) << b;
    EXPECT_EQ(double(codec::e8m0_multiplier(uint8_t(b))), 1.0 / want_scale) << b;
  }
}

// Independent rceil: v = fl32(amax * fl32(1/max)); ceil(log2 v) from frexp.
int ref_rceil(float amax, float inv) {
  const float v = amax * inv;
  if (std::isinf(v)) return 0xFE;
  if (v == 0) return 0;
  int ex;
  const double fr = std::frexp(double(v), &ex);  // v = fr * 2^ex, fr in [0.5, 1)
  const int c = (fr == 0.5) ? ex - 1 : ex;
  return std::clamp(c + 127, 0, 254);
}
int ref_floor(float amax, int emax) {
  if (std::isinf(amax)) return 0xFE;
  if (amax == 0) return 0;
  return std::clamp(std::ilogb(double(amax)) - emax + 127, 0, 254);
}

TEST(E8M0, ScaleBytesMatchLog2Definition) {
  std::vector<float> amaxes = {0.0f, std::bit_cast<float>(1), std::bit_cast<float>(0x00400000u), std::bit_cast<float>(0x00400001u), FLT_MIN,
                               1.0f, 448.0f, 449.0f, 57344.0f, FLT_MAX, INFINITY};
  std::mt19937 rng(7);
  for (int i = 0; i < 200000; ++i) amaxes.push_back(std::bit_cast<float>(uint32_t(rng() & 0x7FFFFFFFu)));
  for (int e = 0; e < 255; ++e)
    for (uint32_t m : {0u, 1u, 0x400000u, 0x5FFFFFu, 0x600000u, 0x600001u, 0x7FFFFFu})
      amaxes.push_back(std::bit_cast<float>((uint32_t(e) << 23) | m));
  for (float a : amaxes) {
    if (std::isnan(a)) continue;
    ASSERT_EQ(codec::mxfp8_scale_byte(a, Fp8Kind::E4M3, ScaleRounding::RCeil), ref_rceil(a, 1.0f / 448.0f)) << a;
    ASSERT_EQ(codec::mxfp8_scale_byte(a, Fp8Kind::E5M2, ScaleRounding::RCeil), ref_rceil(a, 1.0f / 57344.0f)) << a;
    ASSERT_EQ(codec::mxfp8_scale_byte(a, Fp8Kind::E4M3, ScaleRounding::Floor), ref_floor(a, 8)) << a;
    ASSERT_EQ(codec::mxfp8_scale_byte(a, Fp8Kind::E5M2, ScaleRounding::Floor), ref_floor(a, 15)) << a;
  }
  EXPECT_EQ(codec::mxfp8_scale_byte(448.0f, Fp8Kind::E4M3, ScaleRounding::RCeil), 127);
  EXPECT_EQ(codec::mxfp8_scale_byte(0.0f, Fp8Kind::E4M3, ScaleRounding::RCeil), 0);
  EXPECT_EQ(codec::mxfp8_scale_byte(INFINITY, Fp8Kind::E4M3, ScaleRounding::RCeil), 0xFE);
  EXPECT_EQ(codec::mxfp8_scale_byte(FLT_MAX, Fp8Kind::E4M3, ScaleRounding::RCeil), 0xF7);  // ceil(log2(~2^128/448)) + 127 = 120 + 127
  EXPECT_EQ(codec::mxfp8_scale_byte(1.0f, Fp8Kind::E4M3, ScaleRounding::Floor), 119);
  EXPECT_EQ(codec::e8m0_rceil(FLT_MAX), 0xFE);  // saturates
}

TEST(Nvfp4, TensorScale) {
  auto t = codec::nvfp4_tensor_scale_of(0.0f);
  EXPECT_EQ(t.s_enc, 1.0f);
  EXPECT_EQ(t.s_dec, 1.0f);
  t = codec::nvfp4_tensor_scale_of(INFINITY);
  EXPECT_EQ(t.s_enc, 1.0f);
  t = codec::nvfp4_tensor_scale_of(std::bit_cast<float>(1));  // 2688 / 2^-149 overflows
  EXPECT_EQ(t.s_enc, FLT_MAX);
  EXPECT_EQ(t.s_dec, float(1.0 / double(FLT_MAX)));  // a subnormal, kept
  t = codec::nvfp4_tensor_scale_of(2688.0f);
  EXPECT_EQ(t.s_enc, 1.0f);
  t = codec::nvfp4_tensor_scale_of(3.0f);
  EXPECT_EQ(t.s_enc, 896.0f);
  EXPECT_EQ(t.s_dec, float(1.0 / 896.0));
  EXPECT_EQ(codec::nvfp4_block_multiplier(0, 1.0f), FLT_MAX);
}

// ---- against CUDA's host conversions -------------------------------------------------
#if MXDP_TEST_HAVE_CUDA_HEADERS
TEST(CudaHost, EncodersMatchCudaConversions) {
  std::vector<uint32_t> pats = edge_patterns();
  std::mt19937 rng(2024);
  const size_t n_random = size_t(1) << 22;
  for (size_t i = 0; i < n_random; ++i) pats.push_back(rng());
  for (size_t i = 0; i < n_random; ++i)  // dense near the formats' ranges
    pats.push_back((rng() & 0x80FFFFFFu) | (uint32_t(100 + rng() % 48) << 23));
  int64_t bad[4] = {0, 0, 0, 0};
  for (uint32_t p : pats) {
    const float x = std::bit_cast<float>(p);
    bad[0] += codec::e4m3_from_f32(x) != __nv_cvt_float_to_fp8(x, __NV_SATFINITE, __NV_E4M3);
    bad[1] += codec::e5m2_from_f32(x) != __nv_cvt_float_to_fp8(x, __NV_SATFINITE, __NV_E5M2);
    bad[2] += codec::e2m1_from_f32(x) != __nv_cvt_float_to_fp4(x, __NV_E2M1, cudaRoundNearest);
    const __nv_bfloat16_raw b = __nv_bfloat16_raw(__float2bfloat16_rn(x));
    const uint16_t ours = codec::bf16_from_f32(x);
    bad[3] += std::isnan(x) ? !(std::isnan(codec::bf16_to_f32(ours)) && std::isnan(codec::bf16_to_f32(b.x)))
                            : ours != b.x;
  }
  EXPECT_EQ(bad[0], 0) << "E4M3 mismatches vs __nv_cvt_float_to_fp8 of " << pats.size();
  EXPECT_EQ(bad[1], 0) << "E5M2 mismatches vs __nv_cvt_float_to_fp8 of " << pats.size();
  EXPECT_EQ(bad[2], 0) << "E2M1 mismatches vs __nv_cvt_float_to_fp4 of " << pats.size();
  EXPECT_EQ(bad[3], 0) << "BF16 mismatches vs __float2bfloat16_rn of " << pats.size();
}

TEST(CudaHost, DecodersMatchCudaConversions) {
  auto half_to_float = [](__half_raw h) { return __half2float(__half(h)); };
  for (int c = 0; c < 256; ++c) {
    const float a = half_to_float(__nv_cvt_fp8_to_halfraw(uint8_t(c), __NV_E4M3));
    const float b = half_to_float(__nv_cvt_fp8_to_halfraw(uint8_t(c), __NV_E5M2));
    const float ours_a = codec::e4m3_to_f32(uint8_t(c)), ours_b = codec::e5m2_to_f32(uint8_t(c));
    if (std::isnan(a)) EXPECT_TRUE(std::isnan(ours_a)) << c;
    else EXPECT_EQ(std::bit_cast<uint32_t>(ours_a), std::bit_cast<uint32_t>(a)) << "E4M3 code " << c;
    if (std::isnan(b)) EXPECT_TRUE(std::isnan(ours_b)) << c;
    else EXPECT_EQ(std::bit_cast<uint32_t>(ours_b), std::bit_cast<uint32_t>(b)) << "E5M2 code " << c;
  }
  for (int c = 0; c < 16; ++c) {
    const float a = half_to_float(__nv_cvt_fp4_to_halfraw(uint8_t(c), __NV_E2M1));
    EXPECT_EQ(std::bit_cast<uint32_t>(codec::e2m1_to_f32(uint8_t(c))), std::bit_cast<uint32_t>(a)) << "E2M1 code " << c;
  }
}
#else
TEST(CudaHost, EncodersMatchCudaConversions) { GTEST_SKIP() << "cuda_fp8.h not on the include path"; }
#endif

}  // namespace
