// Comparisons shared by the tests. Bitwise equality, where the design promises
// it (the lifecycle oracle, the engine ops). Whole-tensor relative error for the
// GPU tests (gputest_gpt*.cu) and the golden checks (gpt_golden.h): the GPU
// computes in bf16, so its results are held to the reference by
// ||got - ref|| / ||ref||, not element by element.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cstdint>
#include <cstring>
#include <cmath>
#include <random>
#include <vector>

#include "formats/codec.h"

namespace mxdp::testing {

// Bitwise equality as the design promises it: sizes first, then every byte
// (so +0 and -0 differ, and a NaN equals only the same NaN).
template <class T>
bool same_bits(const std::vector<T>& a, const std::vector<T>& b) {
  return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0);
}
inline bool same_bits(double a, double b) { return std::bit_cast<uint64_t>(a) == std::bit_cast<uint64_t>(b); }
inline bool same_bits(float a, float b) { return std::bit_cast<uint32_t>(a) == std::bit_cast<uint32_t>(b); }

// n normal(0, scale) floats from std::mt19937(seed): the tests' random inputs.
inline std::vector<float> randn(size_t n, uint32_t seed, float scale) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0, scale);
  std::vector<float> v(n);
  for (auto& x : v) x = nd(rng);
  return v;
}

// x rounded to bf16 (round to nearest even) and back.
inline float bfr(float x) { return codec::bf16_to_f32(codec::bf16_from_f32(x)); }

// ||a - ref|| / ||ref|| in double; infinite when a holds a non-finite value or
// the sizes differ (a failed expectation too).
inline double rel_err(const std::vector<float>& a, const std::vector<float>& ref) {
  EXPECT_EQ(a.size(), ref.size());
  if (a.size() != ref.size()) return INFINITY;
  double num = 0, den = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    if (!std::isfinite(a[i])) return INFINITY;
    num += (double(a[i]) - ref[i]) * (double(a[i]) - ref[i]);
    den += double(ref[i]) * ref[i];
  }
  return std::sqrt(num / std::max(den, 1e-30));
}

}  // namespace mxdp::testing
