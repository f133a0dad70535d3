// The lifecycle oracle (oracle.h) on its own: the values it expects are the
// format reference's, written out here from docs/formats.md's definitions on inputs
// whose results are known by hand; its comparison is bitwise (sizes first, +0
// and -0 apart, one ulp seen); it follows the compute dtype.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <limits>

#include "oracle.h"

using namespace mxdp;
using namespace mxdp::testing;

namespace {

std::vector<uint8_t> f32_bytes(const std::vector<float>& v) {
  std::vector<uint8_t> b(v.size() * 4);
  if (!v.empty()) std::memcpy(b.data(), v.data(), b.size());
  return b;
}

ParamSpec matrix(int64_t rows, int64_t cols) { return {"w", {rows, cols}, 0, true}; }

}  // namespace

TEST(Oracle, FormatRuleOfTheDesign) {
  // 2-D with rows of whole 32-element blocks: the chosen format; else BF16.
  EXPECT_EQ(oracle_format(matrix(3, 64), WeightFormat::Nvfp4), WeightFormat::Nvfp4);
  EXPECT_EQ(oracle_format(matrix(64, 3), WeightFormat::Mxfp8), WeightFormat::Bf16);
  EXPECT_EQ(oracle_format(matrix(2, 48), WeightFormat::Mxfp8), WeightFormat::Bf16);
  EXPECT_EQ(oracle_format({"b", {64}, 0, false}, WeightFormat::Mxfp8), WeightFormat::Bf16);
  // fp8b128: any rows, cols a multiple of 16 (partial edge tiles).
  EXPECT_EQ(oracle_format(matrix(4800, 1600), WeightFormat::Fp8b128), WeightFormat::Fp8b128);
  EXPECT_EQ(oracle_format(matrix(3, 48), WeightFormat::Fp8b128), WeightFormat::Fp8b128);
  EXPECT_EQ(oracle_format(matrix(128, 40), WeightFormat::Fp8b128), WeightFormat::Bf16);
  // Embedding tables: bf16 under fp8b128, the chosen format under the others.
  ParamSpec table = matrix(50304, 768);
  table.embedding = true;
  EXPECT_EQ(oracle_format(table, WeightFormat::Fp8b128), WeightFormat::Bf16);
  EXPECT_EQ(oracle_format(table, WeightFormat::Mxfp8), WeightFormat::Mxfp8);
  EXPECT_EQ(oracle_format(table, WeightFormat::Nvfp4), WeightFormat::Nvfp4);
}

TEST(Oracle, Bf16IsRoundToNearestEven) {
  // 1 + 2^-8 is halfway between bf16 neighbours 1 and 1 + 2^-7: ties to even (1).
  // 1 + 3*2^-8 is halfway between 1 + 2^-7 and 1 + 2^-6: ties to even (1 + 2^-6).
  const ParamSpec b{"b", {4}, 0, false};
  const std::vector<float> m = {1.0f + 0x1p-8f, 1.0f + 3 * 0x1p-8f, -0.0f, 1.0f + 0x1p-8f + 0x1p-20f};
  const auto q = oracle_dequantized(b, m, WeightFormat::Mxfp8, ScaleRounding::RCeil);
  EXPECT_EQ(std::bit_cast<uint32_t>(q[0]), std::bit_cast<uint32_t>(1.0f));
  EXPECT_EQ(std::bit_cast<uint32_t>(q[1]), std::bit_cast<uint32_t>(1.0f + 0x1p-6f));
  EXPECT_EQ(std::bit_cast<uint32_t>(q[2]), 0x80000000u) << "-0 stays -0";
  EXPECT_EQ(std::bit_cast<uint32_t>(q[3]), std::bit_cast<uint32_t>(1.0f + 0x1p-7f)) << "above the tie: up";
}

TEST(Oracle, Mxfp8BlockByHand) {
  // One block of 32, amax 1: rceil scale = ceil(log2(1 * fl(1/448))) = -8, so
  // elements are e4m3(x * 2^8) * 2^-8. 1 -> 256 exactly; 0.3 * 256 = 76.8 -> 80
  // (e4m3 step 8 in [64, 128)) -> 0.3125; 0.001 * 256 = 0.256 -> 0.25 (step
  // 2^-5 in [0.25, 0.5)) -> 2^-10.
  std::vector<float> m(32, 0.0f);
  m[0] = 1.0f;
  m[1] = 0.3f;
  m[2] = 0.001f;
  m[3] = -1.0f;
  const auto q = oracle_dequantized(matrix(1, 32), m, WeightFormat::Mxfp8, ScaleRounding::RCeil);
  EXPECT_EQ(q[0], 1.0f);
  EXPECT_EQ(q[1], 0.3125f);
  EXPECT_EQ(q[2], 0x1p-10f);
  EXPECT_EQ(q[3], -1.0f);
  EXPECT_EQ(std::bit_cast<uint32_t>(q[4]), 0u);
  // amax 500: rceil scale ceil(log2(500/448)) = 1, 500 / 2 = 250 -> 256 (step
  // 16 in [128, 256), 250 nearer 256) -> 512; floor (OCP) scale
  // floor(log2 500) - 8 = 0, 500 saturates to 448.
  std::vector<float> big(32, 0.0f);
  big[0] = 500.0f;
  big[1] = 1.0f;
  const auto r = oracle_dequantized(matrix(1, 32), big, WeightFormat::Mxfp8, ScaleRounding::RCeil);
  const auto f = oracle_dequantized(matrix(1, 32), big, WeightFormat::Mxfp8, ScaleRounding::Floor);
  EXPECT_EQ(r[0], 512.0f);
  EXPECT_EQ(f[0], 448.0f);
  EXPECT_EQ(r[1], 1.0f);
  EXPECT_EQ(f[1], 1.0f);
}

TEST(Oracle, Nvfp4TensorScaleFromTheWholeTensor) {
  // Tensor amax 5.25 (in the first block): S_enc = 2688 / 5.25 = 512, S_dec =
  // 2^-9, both exact. Block 1: s_b = e4m3(5.25 * 512 / 6 = 448) = 448, so an
  // element dequantizes to e2m1(x * 8/7) * 0.875: 5.25 -> 6 -> 5.25; 1.2 ->
  // 1.371 -> 1.5 -> 1.3125; -2.6 -> -2.971 -> -3 -> -2.625. Block 2 (amax
  // 0.75): s_b = e4m3(64) = 64, x * 8 -> e2m1 -> * 0.125: 0.75 -> 6 -> 0.75,
  // 0.3 -> 2.4 -> 2 -> 0.25. The second block alone would have had S_enc 3584.
  std::vector<float> m(32, 0.0f);
  m[0] = 5.25f;
  m[1] = 1.2f;
  m[2] = -2.6f;
  m[16] = 0.75f;
  m[17] = 0.3f;
  const auto q = oracle_dequantized(matrix(1, 32), m, WeightFormat::Nvfp4, ScaleRounding::RCeil);
  EXPECT_EQ(q[0], 5.25f);
  EXPECT_EQ(q[1], 1.3125f);
  EXPECT_EQ(q[2], -2.625f);
  EXPECT_EQ(q[16], 0.75f);
  EXPECT_EQ(q[17], 0.25f);
}

TEST(Oracle, ComparisonIsBitwiseSizesFirst) {
  const std::vector<float> a = {1.0f, 0.0f, 2.0f};
  EXPECT_EQ(bit_mismatch(f32_bytes(a), f32_bytes(a), ComputeDType::F32), "");
  std::vector<float> neg0 = a;
  neg0[1] = -0.0f;
  ASSERT_TRUE(neg0[1] == a[1]) << "float == cannot tell them apart";
  EXPECT_NE(bit_mismatch(f32_bytes(neg0), f32_bytes(a), ComputeDType::F32).find("first at [1]"), std::string::npos);
  std::vector<float> ulp = a;
  ulp[2] = std::nextafter(2.0f, 3.0f);
  EXPECT_NE(bit_mismatch(f32_bytes(ulp), f32_bytes(a), ComputeDType::F32).find("1 of 3 elements differ"),
            std::string::npos);
  const std::vector<float> shorter = {1.0f, 0.0f};
  EXPECT_NE(bit_mismatch(f32_bytes(shorter), f32_bytes(a), ComputeDType::F32).find("holds 2 elements, expected 3"),
            std::string::npos);
  EXPECT_FALSE(same_bits(0.0, -0.0));
  EXPECT_TRUE(same_bits(std::numeric_limits<double>::quiet_NaN(), std::numeric_limits<double>::quiet_NaN()));
  EXPECT_FALSE(same_bits(std::vector<float>{0.0f}, std::vector<float>{-0.0f}));
  EXPECT_FALSE(same_bits(std::vector<float>{}, std::vector<float>{0.0f}));
}

TEST(Oracle, Bf16ComputeWeightsAreTheRoundedDequantizedValues) {
  // An NVFP4 value that bf16 cannot hold: amax 7 gives S_dec = 7/2688 and
  // 6 * s_b * S_dec is not a short binary fraction; a bf16 model must hold it
  // rounded to nearest even, an fp32 model exactly.
  std::vector<float> m(16, 0.0f);
  m[0] = 7.0f;
  m[1] = 1.0f;
  const ParamSpec s = {"w", {1, 32}, 0, true};
  std::vector<float> m32(32, 0.0f);
  std::copy(m.begin(), m.end(), m32.begin());
  const auto f = oracle_dequantized(s, m32, WeightFormat::Nvfp4, ScaleRounding::RCeil);
  const auto b16 = oracle_compute_bytes(s, m32, WeightFormat::Nvfp4, ScaleRounding::RCeil, ComputeDType::BF16);
  const auto b32 = oracle_compute_bytes(s, m32, WeightFormat::Nvfp4, ScaleRounding::RCeil, ComputeDType::F32);
  ASSERT_EQ(b16.size(), 64u);
  ASSERT_EQ(b32.size(), 128u);
  EXPECT_EQ(bit_mismatch(b32, f32_bytes(f), ComputeDType::F32), "");
  int differ = 0;
  for (int i = 0; i < 32; ++i) {
    uint16_t h;
    std::memcpy(&h, b16.data() + 2 * i, 2);
    // Round to nearest even, by hand on the bits.
    const uint32_t u = std::bit_cast<uint32_t>(f[i]);
    const uint32_t rounded = (u + 0x7FFFu + ((u >> 16) & 1u)) >> 16;
    EXPECT_EQ(h, uint16_t(rounded)) << i;
    differ += (uint32_t(h) << 16) != u;
  }
  EXPECT_GT(differ, 0) << "the test needs a value bf16 cannot hold";
}
