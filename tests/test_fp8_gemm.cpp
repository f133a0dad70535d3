// The CPU emulated FP8 GEMMs (models/fp8/fp8_gemm_emulated.h) against double
// products of operands dequantized by tests/fp8_ref.h (the definitions, no
// code shared with src/formats): fprop, dgrad through the transposed weight
// tiles (checked against the untransposed weight), wgrad through the
// transposed 1x128 activations, accumulating. fp32 accumulation: relative
// error per element <= 1e-5 of the row's magnitude.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "fp8_ref.h"
#include "formats/fp8_block.h"
#include "models/fp8/fp8_gemm_emulated.h"
#include "util/check.h"

namespace mxdp {
namespace {

std::vector<float> input(int64_t rows, int64_t cols, float sigma, uint32_t seed) {
  std::mt19937 g(seed);
  std::normal_distribution<float> d(0.0f, sigma);
  std::vector<float> x(rows * cols);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) x[r * cols + c] = d(g) * std::ldexp(1.0f, int(r % 3) - 1 + int(c / 128) % 2);
  return x;
}

// Dequantized by the reference: 1x128 blocks along rows / 128x128 tiles.
std::vector<float> ref_rows(const std::vector<float>& x, int64_t rows, int64_t cols) {
  std::vector<uint8_t> q;
  std::vector<float> s, y(x.size());
  fp8ref::rows_1x128(x, rows, cols, true, q, s);
  const int64_t ld = (rows + 3) / 4 * 4;
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) y[r * cols + c] = fp8ref::dequant(q[r * cols + c], s[c / 128 * ld + r], true);
  return y;
}
std::vector<float> ref_tiles(const std::vector<float>& x, int64_t rows, int64_t cols) {
  std::vector<uint8_t> q;
  std::vector<float> s, y(x.size());
  fp8ref::tiles(x, rows, cols, q, s);
  const int64_t tc = (cols + 127) / 128;
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) y[r * cols + c] = fp8ref::dequant(q[r * cols + c], s[r / 128 * tc + c / 128], true);
  return y;
}
// a[M,K] . b[N,K]^T in double.
std::vector<double> nt(const std::vector<float>& a, const std::vector<float>& b, int64_t M, int64_t N, int64_t K) {
  std::vector<double> d(M * N);
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = 0; j < N; ++j) {
      double acc = 0;
      for (int64_t k = 0; k < K; ++k) acc += double(a[i * K + k]) * b[j * K + k];
      d[i * N + j] = acc;
    }
  return d;
}
void expect_close(const std::vector<float>& got, const std::vector<double>& want, double offset, const char* what) {
  ASSERT_EQ(got.size(), want.size());
  double mx = 0;
  for (double w : want) mx = std::max(mx, std::fabs(w));
  for (size_t i = 0; i < want.size(); ++i)
    ASSERT_NEAR(double(got[i]) - offset, want[i], 1e-5 * mx) << what << " at " << i;
}

struct Layer {
  int64_t M, N, K;
  std::vector<float> x, w, dy;
};

TEST(Fp8GemmEmulated, LinearLayerGemms) {
  for (const Layer& L : {Layer{256, 384, 256, {}, {}, {}}, Layer{128, 256, 384, {}, {}, {}}}) {
    const int64_t M = L.M, N = L.N, K = L.K;
    SCOPED_TRACE(testing::Message() << M << " " << N << " " << K);
    const auto x = input(M, K, 1.0f, 1), w = input(N, K, 0.02f, 2), dy = input(M, N, 1e-3f, 3);
    // The operands, quantized by the code under test.
    std::vector<uint8_t> qx(M * K), qw(N * K), qwt(N * K), qdy(M * N), qxt(M * K), qdyt(M * N);
    std::vector<float> sx(fp8_1x128_scale_count(M, K)), sdy(fp8_1x128_scale_count(M, N));
    std::vector<float> sxt(fp8_1x128_scale_count(K, M)), sdyt(fp8_1x128_scale_count(N, M));
    std::vector<float> sw(fp8b128_scale_count(N, K)), swt(sw.size());
    std::vector<float> gw(fp8b128_gemm_scale_count(N, K)), gwt(fp8b128_gemm_scale_count(K, N));
    fp8_quantize_1x128(x.data(), M, K, Fp8Kind::E4M3, qx.data(), sx.data());
    fp8_quantize_1x128(dy.data(), M, N, Fp8Kind::E4M3, qdy.data(), sdy.data());
    fp8_quantize_1x128_transposed(x.data(), M, K, Fp8Kind::E4M3, qxt.data(), sxt.data());
    fp8_quantize_1x128_transposed(dy.data(), M, N, Fp8Kind::E4M3, qdyt.data(), sdyt.data());
    fp8b128_quantize(w.data(), N, K, qw.data(), sw.data());
    fp8b128_transpose(qw.data(), sw.data(), N, K, qwt.data(), swt.data());
    fp8b128_scales_for_gemm(sw.data(), N, K, gw.data());
    fp8b128_scales_for_gemm(swt.data(), K, N, gwt.data());
    const Fp8Operand ox{qx.data(), sx.data()}, ody{qdy.data(), sdy.data()}, oxt{qxt.data(), sxt.data()},
        odyt{qdyt.data(), sdyt.data()}, ow{qw.data(), gw.data(), Fp8Kind::E4M3, Fp8Scaling::Tiles128},
        owt{qwt.data(), gwt.data(), Fp8Kind::E4M3, Fp8Scaling::Tiles128};

    // The references' operands, dequantized by fp8_ref.h.
    const auto rx = ref_rows(x, M, K), rdy = ref_rows(dy, M, N), rw = ref_tiles(w, N, K);
    const auto rxt = ref_rows(fp8ref::transpose(x, M, K), K, M), rdyt = ref_rows(fp8ref::transpose(dy, M, N), N, M);

    std::vector<float> y(M * N), dx(M * K), dw(N * K, 0.5f);
    fp8_fprop_emulated(ox, ow, M, N, K, y.data());
    expect_close(y, nt(rx, rw, M, N, K), 0.0, "fprop");
    // dX = dY W: the transposed tiles give the same as the weight's own dequantized values.
    fp8_dgrad_emulated(ody, owt, M, N, K, dx.data());
    expect_close(dx, nt(rdy, fp8ref::transpose(rw, N, K), M, K, N), 0.0, "dgrad");
    fp8_wgrad_emulated(odyt, oxt, M, N, K, dw.data());
    expect_close(dw, nt(rdyt, rxt, N, K, M), 0.5, "wgrad");  // accumulated onto 0.5
  }
}

// The emulated GEMM's fp32 bits are those of the plain loop (each output one
// sum over k in order from 0, then added to the old value), over the same codes
// dequantized here by the reference: 1x128 operands, whose power-of-two scales
// make every dequantized value exact. Edge shapes (M, N not multiples of the
// CPU GEMM's 6x8 tiles, K ending in a partial block), both accumulate modes.
// (Summing k from the top instead gives other bits here: checked.)
TEST(Fp8GemmEmulated, BitsAreThePlainLoops) {
  const int64_t M = 37, N = 29, K = 300;
  const auto x = input(M, K, 1.0f, 4), w = input(N, K, 0.05f, 5);
  std::vector<uint8_t> qx(M * K), qw(N * K);
  std::vector<float> sx(fp8_1x128_scale_count(M, K)), sw(fp8_1x128_scale_count(N, K));
  fp8_quantize_1x128(x.data(), M, K, Fp8Kind::E4M3, qx.data(), sx.data());
  fp8_quantize_1x128(w.data(), N, K, Fp8Kind::E4M3, qw.data(), sw.data());
  auto deq = [&](const std::vector<uint8_t>& q, const std::vector<float>& s, int64_t rows) {
    const int64_t ld = (rows + 3) / 4 * 4;
    std::vector<float> y(rows * K);
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < K; ++c) y[r * K + c] = fp8ref::dequant(q[r * K + c], s[c / 128 * ld + r], true);
    return y;
  };
  const std::vector<float> a = deq(qx, sx, M), b = deq(qw, sw, N);
  const std::vector<float> start = input(M, N, 1.0f, 6);
  for (bool accumulate : {false, true}) {
    std::vector<float> want = start, got = start;
    for (int64_t i = 0; i < M; ++i)
      for (int64_t j = 0; j < N; ++j) {
        float acc = 0.0f;
        for (int64_t k = 0; k < K; ++k) acc += a[i * K + k] * b[j * K + k];
        want[i * N + j] = accumulate ? want[i * N + j] + acc : acc;
      }
    fp8_gemm_nt_emulated({qx.data(), sx.data()}, {qw.data(), sw.data()}, M, N, K, got.data(), accumulate);
    for (int64_t e = 0; e < M * N; ++e)
      ASSERT_EQ(std::bit_cast<uint32_t>(got[e]), std::bit_cast<uint32_t>(want[e]))
          << "accumulate " << accumulate << ", element " << e << ": " << got[e] << " vs " << want[e];
  }
}

TEST(Fp8GemmEmulated, BadArgumentsAreErrors) {
  std::vector<float> d(4);
  const Fp8Operand none{};
  EXPECT_THROW(fp8_gemm_nt_emulated(none, none, 2, 2, 2, d.data(), false), Error);
  EXPECT_THROW(fp8_gemm_nt_emulated(none, none, 0, 2, 2, d.data(), false), Error);
}

}  // namespace
}  // namespace mxdp
