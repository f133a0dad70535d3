// The CUDA kernels of FP8 with fp32 block scales (formats/cuda/fp8_block_cuda.h)
// against the CPU reference (formats/fp8_block.h, itself checked against the
// definitions in test_fp8_format), bit for bit: tiles, their transpose and GEMM
// scale layout, 1x128 blocks of fp32 and bf16, transposed and not. Skips
// without a GPU.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "fp8_ref.h"
#include "formats/cuda/fp8_block_cuda.h"
#include "formats/fp8_block.h"
#include "gpu_arrays.h"
#include "gpu_test_util.h"
#include "util/cuda_check.h"

namespace mxdp {
namespace {

// Device arrays filled with 0xA5 (a valid E4M3 code, a finite float): garbage the kernels must overwrite.
template <class T>
using Dev = gputest::Dev<T, 0xA5>;

std::vector<float> matrix(int64_t n, uint32_t seed) {
  std::mt19937 g(seed);
  std::normal_distribution<float> d(0.0f, 1.0f);
  std::uniform_real_distribution<float> e(-8.0f, 8.0f);
  std::vector<float> x(n);
  for (auto& v : x) v = d(g) * std::exp2(e(g));
  if (n > 10) {
    x[3] = NAN;
    x[5] = -INFINITY;
    x[n / 2] = 1e-41f;
    x[n - 2] = -0.0f;
  }
  return x;
}

void expect_bits(const std::vector<float>& a, const std::vector<float>& b, const char* what) {
  ASSERT_EQ(a.size(), b.size()) << what;
  for (size_t i = 0; i < a.size(); ++i) ASSERT_EQ(fp8ref::bits(a[i]), fp8ref::bits(b[i])) << what << " at " << i;
}

// Whole and partial tiles; {320, 1600} is 12.5 tiles wide (gpt2-1558m's
// d_model) and {1600, 320} 12.5 tiles tall (13 tile rows), {144, 208} ends
// mid-tile both ways in multiples of 16 (rows % 32 == 16: W^T's rows start
// mid-sector), {16, 16} and {112, 48} are one partial tile (in the vectorized
// transpose 4 lanes of one warp store, and 3 warps with 7 of 8 16-row blocks),
// {384, 176} 3 tile rows.
const int64_t kShapes[][2] = {{1, 1},     {128, 128}, {200, 300}, {256, 768}, {768, 3072}, {129, 1},  {3, 4000},
                              {320, 1600}, {1600, 320}, {144, 208}, {16, 16},   {112, 48},   {384, 176}};

TEST(GpuFp8b128, QuantizeDequantizeTransposeMatchTheCpu) {
  if (!gputest::have_gpu()) GTEST_SKIP() << "no CUDA device";
  uint32_t seed = 3;
  for (auto [rows, cols] : kShapes) {
    SCOPED_TRACE(testing::Message() << rows << " x " << cols);
    const auto x = matrix(rows * cols, seed++);
    const int64_t ns = fp8b128_scale_count(rows, cols), ng = fp8b128_gemm_scale_count(rows, cols);
    std::vector<uint8_t> q(rows * cols), qt(rows * cols);
    std::vector<float> s(ns), st(ns), y(rows * cols), yt(rows * cols), g(ng);
    fp8b128_quantize(x.data(), rows, cols, q.data(), s.data());
    fp8b128_dequantize(q.data(), s.data(), rows, cols, y.data());
    fp8b128_transpose(q.data(), s.data(), rows, cols, qt.data(), st.data());
    fp8b128_dequantize(qt.data(), st.data(), cols, rows, yt.data());
    fp8b128_scales_for_gemm(s.data(), rows, cols, g.data());
    // The transpose in the GEMM layout: the compact transpose's scales, padded.
    std::vector<float> gt(size_t(fp8b128_gemm_scale_count(cols, rows)));
    fp8b128_scales_for_gemm(st.data(), cols, rows, gt.data());

    // Both kernels (the vectorized one takes every shape here whose cols are a
    // multiple of 4, and for the transpose of 16; the others fall back to the scalar one).
    for (auto kernel : {cuda::detail::Fp8b128Kernel::Vectorized, cuda::detail::Fp8b128Kernel::Scalar}) {
      SCOPED_TRACE(kernel == cuda::detail::Fp8b128Kernel::Vectorized ? "vectorized" : "scalar");
      Dev<float> dx(x), ds(ns), dst(ns), dy(rows * cols), dyt(rows * cols), dg(ng);
      Dev<uint8_t> dq(rows * cols), dqt(rows * cols);
      cuda::detail::fp8b128_quantize(dx.p, rows, cols, dq.p, ds.p, kernel, 0);
      cuda::fp8b128_dequantize(dq.p, ds.p, rows, cols, dy.p, 0);
      cuda::detail::fp8b128_transpose(dq.p, ds.p, rows, cols, dqt.p, dst.p, kernel, 0);
      cuda::fp8b128_dequantize(dqt.p, dst.p, cols, rows, dyt.p, 0);
      cuda::fp8b128_scales_for_gemm(ds.p, rows, cols, dg.p, 0);
      EXPECT_EQ(dq.get(), q);
      expect_bits(ds.get(), s, "scales");
      expect_bits(dy.get(), y, "dequantized");
      EXPECT_EQ(dqt.get(), qt);
      expect_bits(dst.get(), st, "transposed scales");
      expect_bits(dg.get(), g, "gemm scales");
      Dev<uint8_t> dqt2(rows * cols);
      Dev<float> dgt(std::vector<float>(gt.size(), -1.0f));  // the padding must be written
      cuda::detail::fp8b128_transpose_gemm(dq.p, dg.p, rows, cols, dqt2.p, dgt.p, kernel, 0);
      EXPECT_EQ(dqt2.get(), qt);
      expect_bits(dgt.get(), gt, "transposed gemm scales");
      // On the device too: dequant(transpose(q)) == transpose(dequant(q)).
      expect_bits(dyt.get(), fp8ref::transpose(dy.get(), rows, cols), "dequant of the transpose");
    }
  }
}

TEST(GpuFp8Rows1x128, QuantizeMatchesTheCpu) {
  if (!gputest::have_gpu()) GTEST_SKIP() << "no CUDA device";
  uint32_t seed = 40;
  for (auto [rows, cols] : kShapes)
    for (Fp8Kind k : {Fp8Kind::E4M3, Fp8Kind::E5M2}) {
      SCOPED_TRACE(testing::Message() << rows << " x " << cols << (k == Fp8Kind::E4M3 ? " e4m3" : " e5m2"));
      const auto x = matrix(rows * cols, seed++);
      std::vector<uint16_t> xb(x.size());
      for (size_t i = 0; i < x.size(); ++i) xb[i] = uint16_t(fp8ref::bits(x[i]) >> 16);  // any bits: bf16 inputs
      const int64_t ns = fp8_1x128_scale_count(rows, cols), nst = fp8_1x128_scale_count(cols, rows);
      std::vector<uint8_t> q(rows * cols), qb(rows * cols), qt(rows * cols), qtb(rows * cols);
      std::vector<float> s(ns), sb(ns), st(nst), stb(nst), y(rows * cols);
      fp8_quantize_1x128(x.data(), rows, cols, k, q.data(), s.data());
      fp8_quantize_1x128(xb.data(), rows, cols, k, qb.data(), sb.data());
      fp8_quantize_1x128_transposed(x.data(), rows, cols, k, qt.data(), st.data());
      fp8_quantize_1x128_transposed(xb.data(), rows, cols, k, qtb.data(), stb.data());
      fp8_dequantize_1x128(q.data(), s.data(), rows, cols, k, y.data());

      Dev<float> dx(x), ds(ns), dsb(ns), dst(nst), dstb(nst), dy(rows * cols);
      Dev<uint16_t> dxb(xb);
      Dev<uint8_t> dq(rows * cols), dqb(rows * cols), dqt(rows * cols), dqtb(rows * cols);
      cuda::fp8_quantize_1x128(dx.p, rows, cols, k, dq.p, ds.p, 0);
      cuda::fp8_quantize_1x128(dxb.p, rows, cols, k, dqb.p, dsb.p, 0);
      cuda::fp8_quantize_1x128_transposed(dx.p, rows, cols, k, dqt.p, dst.p, 0);
      cuda::fp8_quantize_1x128_transposed(dxb.p, rows, cols, k, dqtb.p, dstb.p, 0);
      cuda::fp8_dequantize_1x128(dq.p, ds.p, rows, cols, k, dy.p, 0);
      EXPECT_EQ(dq.get(), q);
      EXPECT_EQ(dqb.get(), qb);
      EXPECT_EQ(dqt.get(), qt);
      EXPECT_EQ(dqtb.get(), qtb);
      expect_bits(ds.get(), s, "scales");
      expect_bits(dsb.get(), sb, "bf16 scales");
      expect_bits(dst.get(), st, "transposed scales");
      expect_bits(dstb.get(), stb, "bf16 transposed scales");
      expect_bits(dy.get(), y, "dequantized");
    }
}

TEST(GpuFp8b128, BadArgumentsAreErrors) {
  if (!gputest::have_gpu()) GTEST_SKIP() << "no CUDA device";
  EXPECT_THROW(cuda::fp8b128_quantize(nullptr, 128, 128, nullptr, nullptr, 0), Error);
  EXPECT_THROW(cuda::fp8_quantize_1x128(static_cast<const float*>(nullptr), 4, 128, Fp8Kind::E4M3, nullptr, nullptr, 0),
               Error);
}

}  // namespace
}  // namespace mxdp
