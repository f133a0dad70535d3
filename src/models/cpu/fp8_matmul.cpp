// The CPU models' linear layers in FP8 (compute_dtype fp8, docs/fp8.md): the
// activations and output gradients quantized in 1x128 blocks (E4M3), the
// weight as the engine's fp8b128 W (fprop) and W^T (dgrad), and the emulated
// block-scaled GEMMs (models/fp8/fp8_gemm_emulated.h). Deterministic: the
// quantizers and the emulated GEMMs compute every output in one fixed loop.
#include "models/cpu/fp8_matmul.h"

#include "formats/fp8_block.h"
#include "models/cpu/matmul.h"  // colsum_accumulate, and the fp32 path of the block linears
#include "models/fp8/fp8_gemm_emulated.h"
#include "util/check.h"

namespace mxdp::cpu {

namespace {

// x (rows x cols, row-major) as a 1x128 operand along cols into (codes, scales).
Fp8Operand rows_1x128(const float* x, int64_t rows, int64_t cols, std::vector<uint8_t>& codes,
                      std::vector<float>& scales) {
  codes.resize(size_t(rows * cols));
  scales.resize(size_t(fp8_1x128_scale_count(rows, cols)));
  fp8_quantize_1x128(x, rows, cols, Fp8Kind::E4M3, codes.data(), scales.data());
  return {codes.data(), scales.data(), Fp8Kind::E4M3, Fp8Scaling::Rows1x128};
}
// The 1x128 operand of x^T (cols x rows, blocks along rows).
Fp8Operand cols_1x128(const float* x, int64_t rows, int64_t cols, std::vector<uint8_t>& codes,
                      std::vector<float>& scales) {
  codes.resize(size_t(rows * cols));
  scales.resize(size_t(fp8_1x128_scale_count(cols, rows)));
  fp8_quantize_1x128_transposed(x, rows, cols, Fp8Kind::E4M3, codes.data(), scales.data());
  return {codes.data(), scales.data(), Fp8Kind::E4M3, Fp8Scaling::Rows1x128};
}
Fp8Operand tiles(const Fp8Weight& w, int64_t rows, int64_t cols, const char* what) {
  MXDP_CHECK(w.codes && w.scales && w.rows == rows && w.cols == cols, "internal: the FP8 ", what, " is ", w.rows, " x ",
             w.cols, ", the layer needs ", rows, " x ", cols);
  return {w.codes, w.scales, Fp8Kind::E4M3, Fp8Scaling::Tiles128};
}

}  // namespace

void fp8_matmul_forward(float* out, const float* inp, const Fp8Weight& w, const float* bias, int M, int N, int K,
                        Fp8Scratch& s) {
  const Fp8Operand x = rows_1x128(inp, M, K, s.a_codes, s.a_scales);
  fp8_fprop_emulated(x, tiles(w, N, K, "weight"), M, N, K, out);
  if (bias)
    for (int64_t m = 0; m < M; ++m)
      for (int n = 0; n < N; ++n) out[m * N + n] += bias[n];
}

void fp8_matmul_backward(float* dinp, float* dW, float* dbias, const float* dout, const float* inp,
                         const Fp8Weight& wt, int M, int N, int K, Fp8Scratch& s) {
  const Fp8Operand dy = rows_1x128(dout, M, N, s.a_codes, s.a_scales);
  fp8_dgrad_emulated(dy, tiles(wt, K, N, "transposed weight"), M, N, K, dinp);
  const Fp8Operand dyt = cols_1x128(dout, M, N, s.a_codes, s.a_scales);
  const Fp8Operand xt = cols_1x128(inp, M, K, s.b_codes, s.b_scales);
  fp8_wgrad_emulated(dyt, xt, M, N, K, dW);
  if (dbias) colsum_accumulate(dbias, dout, M, N);
}

void block_linear_forward(bool fp8, float* out, const float* inp, int wp, const float* w, const float* bias, int M,
                          int N, int K, ModelHooks& hooks, std::vector<float>& wt, Fp8Scratch& s) {
  if (fp8)
    fp8_matmul_forward(out, inp, hooks.fp8_weight(wp), bias, M, N, K, s);
  else
    matmul_forward(out, inp, w, bias, M, N, K, wt);
}

void block_linear_backward(bool fp8, float* dinp, float* dbias, const float* dout, const float* inp, int wp,
                           const float* w, int M, int N, int K, ModelHooks& hooks, Fp8Scratch& s) {
  if (fp8)
    fp8_matmul_backward(dinp, hooks.grad(wp), dbias, dout, inp, hooks.fp8_weight_transposed(wp), M, N, K, s);
  else
    matmul_backward(dinp, hooks.grad(wp), dbias, dout, inp, w, M, N, K);
}

}  // namespace mxdp::cpu
