// Scalar number-format codecs, defined once for host and device code.
//
// Everything here is bit-exact per docs/formats.md ("Element and scale formats") and written with
// integer bit manipulation plus IEEE fp32 multiplies/divides whose results are
// correctly rounded on every target (no fast-math, no flush-to-zero: fp32
// subnormals are values here, e.g. the E8M0 multiplier 2^-127 = 0x00400000).
// The CPU reference (quant.cpp) and the CUDA kernels (cuda/quant_cuda.cu) both
// call these functions, which is how they agree bit for bit.
//
//   FP8 E4M3 ("fn"): bias 7, max 448, no Inf, NaN = 0x7F/0xFF.
//   FP8 E5M2       : bias 15, max 57344, IEEE-like Inf/NaN.
//   FP4 E2M1       : bias 1, values {0, .5, 1, 1.5, 2, 3, 4, 6}, sign in bit 3.
//   Encoders       : round-to-nearest-even, saturate to the largest finite value
//                    (Inf too), NaN -> 0x7F (FP8) / 0x7 (FP4), i.e. positive;
//                    a value that rounds to zero keeps its sign (-tiny -> 0x80).
//   E8M0           : 2^(byte - 127); 0x00 = 2^-127, 0xFE = 2^127, 0xFF = NaN.
//   BF16           : upper half of fp32, RNE; NaN stays NaN (made quiet).
#pragma once

#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstring>

#include "formats/quant.h"  // Fp8Kind, ScaleRounding, Nvfp4TensorScale

#if defined(__CUDACC__)
#define MXDP_HD __host__ __device__ inline
#else
#define MXDP_HD inline
#endif

namespace mxdp::codec {

static_assert(sizeof(float) == 4 && sizeof(uint32_t) == 4, "fp32 must be 32 bits");
static_assert(FLT_MANT_DIG == 24 && FLT_MAX_EXP == 128, "fp32 must be IEEE binary32");

// ---- fp32 bits -------------------------------------------------------------
MXDP_HD uint32_t f32_bits(float x) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(x);
#else
  uint32_t u;
  std::memcpy(&u, &x, 4);
  return u;
#endif
}
MXDP_HD float f32_from_bits(uint32_t u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  float x;
  std::memcpy(&x, &u, 4);
  return x;
#endif
}
MXDP_HD bool f32_isnan(float x) { return (f32_bits(x) & 0x7FFFFFFFu) > 0x7F800000u; }
MXDP_HD bool f32_isinf(float x) { return (f32_bits(x) & 0x7FFFFFFFu) == 0x7F800000u; }
MXDP_HD float f32_abs(float x) { return f32_from_bits(f32_bits(x) & 0x7FFFFFFFu); }
// max(acc, |x|) with NaN ignored: the amax fold of docs/formats.md. Exact, order-free.
MXDP_HD float amax_fold(float acc, float x) {
  const float a = f32_abs(x);
  return a > acc ? a : acc;  // a NaN compares false and is dropped
}

// ---- small float encode (E4M3, E5M2, E2M1) ----------------------------------
// Generic RNE + saturating encoder for a sign/kExp/kMan format with bias kBias,
// largest finite code kMaxCode (magnitude) and NaN code kNanCode. Returns the
// code with the sign in bit (kExp + kMan).
template <int kExp, int kMan, int kBias, uint32_t kMaxCode, uint32_t kNanCode>
MXDP_HD uint32_t encode_small(float x) {
  static_assert(kExp >= 2 && kMan >= 1 && kExp + kMan <= 7, "format out of range");
  constexpr int kShift = 23 - kMan;                       // fp32 mantissa bits dropped
  constexpr uint32_t kMinNormalExp = 127 - kBias + 1;     // fp32 biased exponent of 2^(1-bias)
  constexpr uint32_t kRebias = uint32_t(127 - kBias) << kMan;
  const uint32_t u = f32_bits(x);
  const uint32_t sign = (u >> 31) << (kExp + kMan);
  const uint32_t a = u & 0x7FFFFFFFu;
  if (a > 0x7F800000u) return kNanCode;
  uint32_t code;
  if (a >= (kMinNormalExp << 23)) {
    // Normal in the target: round the fp32 pattern at bit kShift (a carry into
    // the exponent is the correct result), re-bias, saturate (Inf included).
    const uint32_t r = (a + ((1u << (kShift - 1)) - 1u) + ((a >> kShift) & 1u)) >> kShift;
    code = r - kRebias;
    code = code < kMaxCode ? code : kMaxCode;
  } else {
    // Subnormal or zero in the target: integer multiple of 2^(1-bias-kMan).
    // value = mant * 2^(max(e,1) - 150); quotient = mant >> s, RNE.
    const uint32_t e = a >> 23;
    const uint32_t mant = (a & 0x7FFFFFu) | (e ? 0x800000u : 0u);
    uint32_t s = uint32_t(kShift) + kMinNormalExp - (e ? e : 1u);  // >= kShift + 1
    s = s < 25u ? s : 25u;  // mant < 2^24: any s >= 25 rounds to 0 (ties included)
    code = (mant + ((1u << (s - 1)) - 1u) + ((mant >> s) & 1u)) >> s;  // may be min normal
  }
  return sign | code;
}

MXDP_HD uint8_t e4m3_from_f32(float x) { return uint8_t(encode_small<4, 3, 7, 0x7Eu, 0x7Fu>(x)); }
MXDP_HD uint8_t e5m2_from_f32(float x) { return uint8_t(encode_small<5, 2, 15, 0x7Bu, 0x7Fu>(x)); }
// E2M1 has 8 magnitudes, so its RNE is 7 threshold compares (fewer instructions
// than the generic path; same results, see test_formats and gputest_quant).
// Midpoints between codes k and k+1 go to the even code: '>' when k is even, '>='
// when k is odd. A NaN fails every compare and is sent to 0x7 explicitly.
MXDP_HD uint8_t e2m1_from_f32(float x) {
  const uint32_t u = f32_bits(x);
  const float a = f32_from_bits(u & 0x7FFFFFFFu);
  const uint32_t c = uint32_t(a > 0.25f) + uint32_t(a >= 0.75f) + uint32_t(a > 1.25f) + uint32_t(a >= 1.75f) +
                     uint32_t(a > 2.5f) + uint32_t(a >= 3.5f) + uint32_t(a > 5.0f);
  return (u & 0x7FFFFFFFu) > 0x7F800000u ? uint8_t(0x7) : uint8_t(((u >> 28) & 0x8u) | c);
}
// The generic encoder instantiated for E2M1 (kept as a cross-check in tests).
MXDP_HD uint8_t e2m1_from_f32_generic(float x) { return uint8_t(encode_small<2, 1, 1, 0x7u, 0x7u>(x)); }
MXDP_HD uint8_t fp8_from_f32(float x, Fp8Kind k) {
  return k == Fp8Kind::E4M3 ? e4m3_from_f32(x) : e5m2_from_f32(x);
}

// ---- small float decode (exact) --------------------------------------------
// Placing exponent|mantissa at the top of an fp32 with exponent offset 0 gives
// the value times 2^(bias - 127), subnormals included; one exact multiply by
// 2^(127 - bias) finishes. The multiply never rounds (the result is an fp32
// normal with at most 4 significant bits).
MXDP_HD float e4m3_to_f32(uint8_t c) {
  const uint32_t m = c & 0x7Fu;
  if (m == 0x7Fu) return f32_from_bits(0x7FC00000u);
  const float v = f32_from_bits(m << 20) * f32_from_bits(uint32_t(127 + 120) << 23);  // 2^120
  return f32_from_bits(f32_bits(v) | (uint32_t(c & 0x80u) << 24));
}
MXDP_HD float e5m2_to_f32(uint8_t c) {
  const uint32_t m = c & 0x7Fu;
  const uint32_t sign = uint32_t(c & 0x80u) << 24;
  if (m >= 0x7Cu) return f32_from_bits(m == 0x7Cu ? (sign | 0x7F800000u) : 0x7FC00000u);
  const float v = f32_from_bits(m << 21) * f32_from_bits(uint32_t(127 + 112) << 23);  // 2^112
  return f32_from_bits(f32_bits(v) | sign);
}
MXDP_HD float e2m1_to_f32(uint8_t c) {
  const uint32_t m = c & 0x7u;
  const float v = f32_from_bits(m << 22) * f32_from_bits(uint32_t(127 + 126) << 23);  // 2^126
  return f32_from_bits(f32_bits(v) | (uint32_t(c & 0x8u) << 28));
}
MXDP_HD float fp8_to_f32(uint8_t c, Fp8Kind k) {
  return k == Fp8Kind::E4M3 ? e4m3_to_f32(c) : e5m2_to_f32(c);
}

// NaN results of the dequantizers are made canonical (0x7FC00000): hardware
// multiplies differ in which NaN they return (x86 keeps the operand's payload,
// NVIDIA GPUs return 0x7FFFFFFF), and the CPU and GPU must agree bit for bit.
MXDP_HD float canonical_nan(float v) { return f32_isnan(v) ? f32_from_bits(0x7FC00000u) : v; }

// ---- bf16 -------------------------------------------------------------------
MXDP_HD uint16_t bf16_from_f32(float x) {
  const uint32_t u = f32_bits(x);
  if ((u & 0x7FFFFFFFu) > 0x7F800000u) return uint16_t((u >> 16) | 0x0040u);  // quiet NaN
  return uint16_t((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);  // RNE; overflow gives Inf
}
MXDP_HD float bf16_to_f32(uint16_t b) { return f32_from_bits(uint32_t(b) << 16); }

// ---- E8M0 and the MXFP8 scale -------------------------------------------------
MXDP_HD float e8m0_to_f32(uint8_t b) {
  if (b == 0xFFu) return f32_from_bits(0x7FC00000u);
  return f32_from_bits(b == 0 ? 0x00400000u : uint32_t(b) << 23);
}
// 2^(127 - b) for b in [0, 254], exact (b = 254 gives the subnormal 2^-127).
MXDP_HD float e8m0_multiplier(uint8_t b) {
  const uint32_t e = 254u - b;
  return f32_from_bits(e == 0 ? 0x00400000u : e << 23);
}

// Largest finite element magnitude and its reciprocal as fp32 (the reciprocal
// is rounded once, at compile time: fl(1/448), fl(1/57344)).
inline constexpr float kE4M3Max = 448.0f;
inline constexpr float kE5M2Max = 57344.0f;
inline constexpr float kInvE4M3Max = 1.0f / 448.0f;
inline constexpr float kInvE5M2Max = 1.0f / 57344.0f;
inline constexpr int kE4M3Emax = 8;   // floor(log2(448))
inline constexpr int kE5M2Emax = 15;  // floor(log2(57344))

// rceil: ceil(log2(v)) + 127 on the fp32 bits of v = amax * fl(1/max),
// clamped to [0x00, 0xFE] (v = 0 -> 0x00; Inf -> 0xFE; NaN -> 0xFF).
MXDP_HD uint8_t e8m0_rceil(float v) {
  const uint32_t u = f32_bits(v) & 0x7FFFFFFFu;
  if (u > 0x7F800000u) return 0xFF;
  if (u == 0x7F800000u) return 0xFE;
  const uint32_t e = u >> 23, m = u & 0x7FFFFFu;
  if (e == 0) return m > 0x400000u ? 1 : 0;  // v <= 2^-127 -> 2^-127
  return uint8_t((m != 0 && e < 0xFEu) ? e + 1 : e);
}
// floor: floor(log2(amax)) - emax + 127 clamped to [0, 254] (Inf -> 0xFE, NaN -> 0xFF).
MXDP_HD uint8_t e8m0_floor(float amax, int emax) {
  const uint32_t u = f32_bits(amax) & 0x7FFFFFFFu;
  if (u > 0x7F800000u) return 0xFF;
  if (u == 0x7F800000u) return 0xFE;
  const int b = int(u >> 23) - emax;  // subnormal/zero amax: floor(log2) <= -127 -> 0
  return uint8_t(b < 0 ? 0 : (b > 254 ? 254 : b));
}
// Dequantized MXFP8 element: fp8 value * 2^(scale - 127) (one fp32 multiply).
MXDP_HD float mxfp8_dequant(uint8_t code, uint8_t scale, Fp8Kind k) {
  return canonical_nan(fp8_to_f32(code, k) * e8m0_to_f32(scale));
}
// The MXFP8 block scale byte for a block amax (NaN-free, >= 0).
MXDP_HD uint8_t mxfp8_scale_byte(float amax, Fp8Kind k, ScaleRounding r) {
  if (r == ScaleRounding::RCeil)
    return e8m0_rceil(amax * (k == Fp8Kind::E4M3 ? kInvE4M3Max : kInvE5M2Max));
  return e8m0_floor(amax, k == Fp8Kind::E4M3 ? kE4M3Emax : kE5M2Emax);
}

// ---- NVFP4 -----------------------------------------------------------------
inline constexpr float kE2M1Max = 6.0f;
inline constexpr float kInvE2M1Max = 1.0f / 6.0f;  // fl(1/6)
inline constexpr float kNvfp4EncNumerator = 2688.0f;  // 6 * 448

// S_enc = 2688 / amax; FLT_MAX if that overflows; 1 if amax is 0 or S_enc is 0.
MXDP_HD Nvfp4TensorScale nvfp4_tensor_scale_of(float tensor_amax) {
  float s_enc = 1.0f;
  if (tensor_amax != 0.0f) {
    s_enc = kNvfp4EncNumerator / tensor_amax;
    if (f32_isinf(s_enc)) s_enc = FLT_MAX;
    if (s_enc == 0.0f) s_enc = 1.0f;
  }
  return Nvfp4TensorScale{s_enc, 1.0f / s_enc};
}
// s_b = e4m3_rne_satfinite(block_amax * (S_enc * fl(1/6))).
MXDP_HD uint8_t nvfp4_block_scale(float block_amax, float s_enc) {
  return e4m3_from_f32(block_amax * (s_enc * kInvE2M1Max));
}
// min(1 / (float(s_b) * S_dec), FLT_MAX); a zero s_b gives FLT_MAX.
MXDP_HD float nvfp4_block_multiplier(uint8_t s_b, float s_dec) {
  const float m = 1.0f / (e4m3_to_f32(s_b) * s_dec);
  return m < FLT_MAX ? m : FLT_MAX;  // NaN (unreachable from a satfinite s_b) -> FLT_MAX
}
// Dequantized element: e2m1 * float(s_b) * S_dec, left to right.
MXDP_HD float nvfp4_dequant(uint8_t nibble, uint8_t s_b, float s_dec) {
  return canonical_nan((e2m1_to_f32(nibble) * e4m3_to_f32(s_b)) * s_dec);
}

// ---- FP8 with fp32 block scales (fp8b128 tiles; 1x128 blocks: power-of-two) ----
// docs/fp8.md, "Format". fp8b128's tiles: s = amax / max (one IEEE division; E4M3 max 448,
// E5M2 57344); an Inf amax gives FLT_MAX, and s = 0 (a zero or all-NaN block,
// or amax below 448 * 2^-150) becomes 1. code = fp8(x / s), RNE, saturating;
// value = fp8 * s (what cuBLASLt's VEC128_32F / BLK128x128_32F scales multiply).
MXDP_HD float fp8_block_scale(float amax, Fp8Kind k) {
  float s = amax / (k == Fp8Kind::E4M3 ? kE4M3Max : kE5M2Max);
  if (f32_isinf(s)) s = FLT_MAX;
  if (s == 0.0f) s = 1.0f;
  return s;
}
MXDP_HD uint8_t fp8_block_encode(float x, float s, Fp8Kind k) { return fp8_from_f32(x / s, k); }

// Power-of-two scales (the 1x128 blocks of activations and gradients, docs/fp8.md,
// "Format"): s = 2^e, the smallest power of two with amax / s <= max (E4M3
// 448 = 1.75 * 2^8, E5M2 57344 = 1.75 * 2^15), read off amax's exponent and
// mantissa bits; e is at least -126, so s and 1/s are normal fp32 numbers
// (an Inf amax gives 2^120 or 2^113), and a zero block gets 1. x / s is then
// exact scaling, RN(x * (1 / s)) bit for bit: no division per element.
MXDP_HD float fp8_pow2_scale(float amax, Fp8Kind k) {
  const uint32_t b = f32_bits(amax) & 0x7FFFFFFFu;  // amax >= 0 and not NaN (every amax fold drops NaN)
  if (b == 0) return 1.0f;
  const int e = int(b >> 23) - 127 - (k == Fp8Kind::E4M3 ? 8 : 15) + ((b & 0x7FFFFFu) > 0x600000u ? 1 : 0);
  return f32_from_bits(uint32_t((e < -126 ? -126 : e) + 127) << 23);
}
// 1 / s for a power-of-two s of fp8_pow2_scale (exact).
MXDP_HD float fp8_pow2_reciprocal(float s) { return f32_from_bits((254u << 23) - (f32_bits(s) & 0x7F800000u)); }

// x / s rounded exactly as the IEEE division above rounds it, in three fp32
// operations per element after one division per block, for the kernel that
// quantizes fp8b128 weight tiles (formats/cuda/fp8_block_cuda.cu's
// tile_quant_vec; the activations' power-of-two scales need none of this).
// Markstein's correction:
// with r = RN(1/s) and q0 = RN(x * r) (within an ulp of x / s), the residual
// e = x - q0 * s is exact in one fused multiply-add and RN(q0 + e * r) is
// RN(x / s). The sign comes from x, so -0 and -tiny stay negative. Exact
// while the residual is an fp32 number: s in [2^-80, 2^100] (other scales take
// the division), |x| <= 1024 s (a block's own elements: |x| <= amax ~ 448 s)
// and |x| >= 2^-100; a smaller x may be off in its last bits, but its quotient
// is below 2^-20, which every FP8 encoder turns into a zero of x's sign.
// tests/test_fp8_format.cpp compares it with the division for every bf16 x and
// about a thousand s.
struct BlockDivisor {
  float s, r;
  bool fast;
};
MXDP_HD BlockDivisor block_divisor(float s) {
  const bool fast = s >= 0x1p-80f && s <= 0x1p100f;
  return {s, fast ? 1.0f / s : 0.0f, fast};
}
// The fast path alone, for callers that test d.fast once per block (a scale outside
// the fast range has r = 0, so r != 0 is the same test).
MXDP_HD float block_div_fast(float x, BlockDivisor d) {
  const float q0 = x * d.r;
#if defined(__CUDA_ARCH__)
  return copysignf(__fmaf_rn(__fmaf_rn(-q0, d.s, x), d.r, q0), x);
#else
  return std::copysign(std::fma(std::fma(-q0, d.s, x), d.r, q0), x);
#endif
}
MXDP_HD float block_div(float x, BlockDivisor d) { return d.fast ? block_div_fast(x, d) : x / d.s; }
MXDP_HD float fp8_block_dequant(uint8_t code, float s, Fp8Kind k) {
  return canonical_nan(fp8_to_f32(code, k) * s);
}

}  // namespace mxdp::codec
