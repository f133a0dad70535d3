// Whole-tensor comparisons shared by the GPU tests (gputest_gpt*.cu) and the
// golden checks (gpt_golden.h): the GPU computes in bf16, so its results are
// held to the reference by the relative error of the whole tensor,
// ||got - ref|| / ||ref||, not element by element.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "formats.h"

namespace mxdp::testing {

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
