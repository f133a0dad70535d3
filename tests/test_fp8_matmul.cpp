// The CPU models' FP8 linear layer (models/cpu/fp8_matmul.h) against products of
// operands quantized by the independent reference (tests/fp8_ref.h) and
// multiplied in double: fprop from 1x128 activations and the W tiles, dgrad
// from 1x128 output gradients and the W^T tiles, wgrad (accumulating) from the
// 1x128 blocks of dY^T and X^T along the tokens, and the bias gradient. M < 128
// tokens: partial 1x128 blocks along M in wgrad; N and K that are not
// multiples of 128: partial tiles and blocks along them too.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "compare_util.h"
#include "fp8_ref.h"
#include "models/cpu/fp8_matmul.h"

using namespace mxdp;
using mxdp::testing::randn;

namespace {

// Dequantized 1x128 operand (rows x cols, blocks along cols) by the reference.
std::vector<double> q_rows(const std::vector<float>& x, int64_t rows, int64_t cols) {
  std::vector<uint8_t> c;
  std::vector<float> s;
  fp8ref::rows_1x128(x, rows, cols, true, c, s);
  const int64_t ld = (rows + 3) / 4 * 4;
  std::vector<double> y(x.size());
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t k = 0; k < cols; ++k) y[r * cols + k] = fp8ref::dequant(c[r * cols + k], s[(k / 128) * ld + r], true);
  return y;
}

// A weight's tiles by the reference, handed out as the engine does (GEMM layout).
struct Tiles {
  std::vector<uint8_t> codes;
  std::vector<float> compact, gemm;
  std::vector<double> value;
  Fp8Weight w;
};
Tiles tiles(const std::vector<float>& x, int64_t rows, int64_t cols) {
  Tiles t;
  fp8ref::tiles(x, rows, cols, t.codes, t.compact);
  const int64_t tr = (rows + 127) / 128, tc = (cols + 127) / 128, ld = (tc + 3) / 4 * 4;
  t.gemm.assign(size_t(tr * ld), 0.0f);
  for (int64_t i = 0; i < tr; ++i)
    for (int64_t j = 0; j < tc; ++j) t.gemm[i * ld + j] = t.compact[i * tc + j];
  t.value.resize(x.size());
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t k = 0; k < cols; ++k)
      t.value[r * cols + k] = fp8ref::dequant(t.codes[r * cols + k], t.compact[(r / 128) * tc + k / 128], true);
  t.w = {t.codes.data(), t.gemm.data(), rows, cols};
  return t;
}

// |got - want| within fp32 accumulation of the magnitudes.
void expect_close(const std::vector<float>& got, const std::vector<double>& want, const std::vector<double>& mag,
                  const char* what) {
  ASSERT_EQ(got.size(), want.size());
  int64_t bad = 0;
  for (size_t i = 0; i < got.size(); ++i)
    if (std::fabs(double(got[i]) - want[i]) > 1e-5 * mag[i] + 1e-30) {
      if (bad++ == 0) ADD_FAILURE() << what << "[" << i << "]: " << got[i] << " vs " << want[i];
    }
  EXPECT_EQ(bad, 0) << what;
}

// out[i, j] = start + sum over k of a[i, k] b[j, k] (+ add[j]) in double, a [I, K]
// and b [J, K] row-major, and mag[i, j] the same sum of magnitudes: what
// expect_close scales its bound by.
struct Product {
  std::vector<double> value, mag;
};
Product nt_product(const std::vector<double>& a, const std::vector<double>& b, int I, int J, int K, double start,
                   const float* add = nullptr) {
  Product p{std::vector<double>(size_t(I) * J), std::vector<double>(size_t(I) * J)};
  for (int i = 0; i < I; ++i)
    for (int j = 0; j < J; ++j) {
      double acc = start, m = std::fabs(start);
      for (int k = 0; k < K; ++k) {
        acc += a[size_t(i) * K + k] * b[size_t(j) * K + k];
        m += std::fabs(a[size_t(i) * K + k] * b[size_t(j) * K + k]);
      }
      p.value[size_t(i) * J + j] = add ? acc + add[j] : acc;
      p.mag[size_t(i) * J + j] = add ? m + std::fabs(add[j]) : m;
    }
  return p;
}

// The layer at one shape, against double products of the reference's operands.
void check_linear(int M, int N, int K) {
  SCOPED_TRACE("M " + std::to_string(M) + " N " + std::to_string(N) + " K " + std::to_string(K));
  const auto x = randn(size_t(M) * K, 1, 1.0f), wf = randn(size_t(N) * K, 2, 0.02f), b = randn(N, 3, 0.1f);
  const auto dy = randn(size_t(M) * N, 4, 1e-3f);
  const Tiles W = tiles(wf, N, K), Wt = tiles(fp8ref::transpose(wf, N, K), K, N);
  cpu::Fp8Scratch s;

  std::vector<float> y(size_t(M) * N);
  cpu::fp8_matmul_forward(y.data(), x.data(), W.w, b.data(), M, N, K, s);
  const Product fprop = nt_product(q_rows(x, M, K), W.value, M, N, K, 0.0, b.data());
  expect_close(y, fprop.value, fprop.mag, "fprop");

  std::vector<float> dx(size_t(M) * K, 7.0f), dw(size_t(N) * K, 0.5f), db(N, 0.25f);
  cpu::fp8_matmul_backward(dx.data(), dw.data(), db.data(), dy.data(), x.data(), Wt.w, M, N, K, s);
  const Product dgrad = nt_product(q_rows(dy, M, N), Wt.value, M, K, N, 0.0);  // overwritten, not accumulated
  expect_close(dx, dgrad.value, dgrad.mag, "dgrad");
  const auto qdyt = q_rows(fp8ref::transpose(dy, M, N), N, M), qxt = q_rows(fp8ref::transpose(x, M, K), K, M);
  const Product wgrad = nt_product(qdyt, qxt, N, K, M, 0.5);
  expect_close(dw, wgrad.value, wgrad.mag, "wgrad (accumulated onto 0.5)");
  std::vector<double> wdb(N), mdb(N);
  for (int n = 0; n < N; ++n) {
    double acc = 0.25, a = 0.25;
    for (int m = 0; m < M; ++m) {
      acc += dy[m * N + n];
      a += std::fabs(dy[m * N + n]);
    }
    wdb[n] = acc;
    mdb[n] = a;
  }
  expect_close(db, wdb, mdb, "bias gradient (accumulated onto 0.25, unquantized dY)");
}

}  // namespace

// Whole tiles; then N and K that end in partial tiles and 1x128 blocks (a
// d_model of 192: qkv's N 576, K 192; and 48 x 160 with an odd M).
TEST(GptFp8Linear, ForwardAndBackwardAreTheQuantizedProducts) {
  check_linear(40, 256, 128);
  check_linear(33, 576, 192);
  check_linear(21, 48, 160);
}
