// An independent reference for FP8 with fp32 block scales (docs/fp8.md,
// "Format"), written from the definitions and sharing no code with
// src/formats: E4M3/E5M2 values from the bit-field formula, round-to-nearest-
// even by exact midpoint comparison in double; the fp8b128 tiles' scale as one
// fp32 division, the 1x128 blocks' as a power of two found by search.
#pragma once

#include <algorithm>
#include <bit>
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

namespace fp8ref {

// Value of an FP8 code from its fields (NaN for E4M3's 0x7F/0xFF; E5M2's Inf/NaN).
inline double decode(int code, bool e4m3) {
  const int man_bits = e4m3 ? 3 : 2, exp_bits = e4m3 ? 4 : 5, bias = e4m3 ? 7 : 15;
  const int sign = (code >> 7) & 1, e = (code >> man_bits) & ((1 << exp_bits) - 1), m = code & ((1 << man_bits) - 1);
  if (e4m3 && e == 15 && m == 7) return NAN;
  if (!e4m3 && e == 31) return m == 0 ? (sign ? -INFINITY : INFINITY) : NAN;
  const double mag = e == 0 ? std::ldexp(double(m), 1 - bias - man_bits)
                            : std::ldexp(1.0 + std::ldexp(double(m), -man_bits), e - bias);
  return sign ? -mag : mag;
}

// RNE, saturating to the largest finite value, NaN -> 0x7F, -0 and values
// that round to 0 keep their sign.
inline uint8_t encode(double x, bool e4m3) {
  const int max_code = e4m3 ? 0x7E : 0x7B;
  if (std::isnan(x)) return 0x7F;
  const int sign = std::signbit(x) ? 0x80 : 0;
  const double a = std::fabs(x);
  if (a >= decode(max_code, e4m3)) return uint8_t(sign | max_code);
  int lo = 0;
  while (decode(lo + 1, e4m3) <= a) ++lo;
  const double mid = 0.5 * (decode(lo, e4m3) + decode(lo + 1, e4m3));
  const int k = a < mid ? lo : a > mid ? lo + 1 : (lo % 2 == 0 ? lo : lo + 1);
  return uint8_t(sign | k);
}

inline float scale_of(float amax, bool e4m3) {
  float s = amax / (e4m3 ? 448.0f : 57344.0f);
  if (std::isinf(s)) s = FLT_MAX;
  if (s == 0.0f) s = 1.0f;
  return s;
}
// The 1x128 blocks' power-of-two scale: the smallest 2^e, e >= -126, with
// amax / 2^e <= max, searched upwards in double; an Inf amax is taken as
// FLT_MAX, a zero one gives 1.
inline float pow2_scale_of(float amax, bool e4m3) {
  if (amax == 0.0f) return 1.0f;
  const double a = std::isinf(amax) ? double(FLT_MAX) : double(amax), mx = e4m3 ? 448.0 : 57344.0;
  int e = -126;
  while (a / std::ldexp(1.0, e) > mx) ++e;
  return float(std::ldexp(1.0, e));
}
inline float block_amax(const std::vector<float>& v) {
  float a = 0.0f;
  for (float x : v)
    if (!std::isnan(x)) a = std::max(a, std::fabs(x));
  return a;
}
inline float dequant(uint8_t c, float s, bool e4m3) {
  const float v = float(decode(c, e4m3)) * s;
  return std::isnan(v) ? std::bit_cast<float>(0x7FC00000u) : v;
}

// fp8b128 of a rows x cols matrix: codes and compact scales.
inline void tiles(const std::vector<float>& x, int64_t rows, int64_t cols, std::vector<uint8_t>& codes,
                  std::vector<float>& scales) {
  const int64_t tr = (rows + 127) / 128, tc = (cols + 127) / 128;
  codes.assign(rows * cols, 0);
  scales.assign(tr * tc, 0.0f);
  for (int64_t i = 0; i < tr; ++i)
    for (int64_t j = 0; j < tc; ++j) {
      std::vector<float> blk;
      for (int64_t r = i * 128; r < std::min(rows, i * 128 + 128); ++r)
        for (int64_t c = j * 128; c < std::min(cols, j * 128 + 128); ++c) blk.push_back(x[r * cols + c]);
      const float s = scale_of(block_amax(blk), true);
      scales[i * tc + j] = s;
      for (int64_t r = i * 128; r < std::min(rows, i * 128 + 128); ++r)
        for (int64_t c = j * 128; c < std::min(cols, j * 128 + 128); ++c)
          codes[r * cols + c] = encode(double(x[r * cols + c] / s), true);
    }
}

// 1x128 blocks along rows, power-of-two scales at kb * ld + r, ld = rows rounded up to 4, padding 0.
inline void rows_1x128(const std::vector<float>& x, int64_t rows, int64_t cols, bool e4m3,
                       std::vector<uint8_t>& codes, std::vector<float>& scales) {
  const int64_t ld = (rows + 3) / 4 * 4, nb = (cols + 127) / 128;
  codes.assign(rows * cols, 0);
  scales.assign(nb * ld, 0.0f);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t b = 0; b < nb; ++b) {
      const int64_t c1 = std::min(cols, b * 128 + 128);
      std::vector<float> blk(x.begin() + r * cols + b * 128, x.begin() + r * cols + c1);
      const float s = pow2_scale_of(block_amax(blk), e4m3);
      scales[b * ld + r] = s;
      for (int64_t c = b * 128; c < c1; ++c) codes[r * cols + c] = encode(double(x[r * cols + c] / s), e4m3);
    }
}

inline std::vector<float> transpose(const std::vector<float>& x, int64_t rows, int64_t cols) {
  std::vector<float> t(x.size());
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) t[c * rows + r] = x[r * cols + c];
  return t;
}

inline uint32_t bits(float f) { return std::bit_cast<uint32_t>(f); }

}  // namespace fp8ref
