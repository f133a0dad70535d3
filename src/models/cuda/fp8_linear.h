// The FP8 linear layers of the GPU models (compute_dtype fp8, docs/fp8.md):
// the block-scaled GEMMs of cuda::Fp8Gemm plus the kernel that turns bf16
// activations and gradients into their 1x128 E4M3 operands.
//
// act_quantize is the one producer of activation operands. It reads a bf16
// [M, N] matrix and, in one pass over 128x128 tiles,
//   1. optionally adds a bias [N] (rounded to bf16; written back to `biased`),
//   2. applies an elementwise op: identity, GELU (tanh form, the CPU model's
//      gelu_forward in models/gpt2/gpt_cpu.h, here through the logistic
//      function: fp8_linear.cu's gelu_tanh), the GELU gradient
//      (x * gelu'(aux), aux the pre-activation), a LayerNorm or an RMSNorm
//      from its input x and the statistics its forward kernel wrote, the
//      Llama's SwiGLU from its gate_up rows, or the SwiGLU's gradient from
//      dact and gate_up (the output that kernel would have written, bit for
//      bit: act_values.cuh), rounded to bf16 and optionally written to `out`,
//   3. quantizes that bf16 value into up to two operands: `rows`, 1x128 blocks
//      along N (the a operand of fprop and dgrad, rows x N), and `cols`, 1x128
//      blocks along M of the transpose (the operands of wgrad, N x rows).
// The operands have Mp = M rounded up to 128 rows (zero codes beyond M), so
// any batch shape runs; the GEMMs below handle the padding on their side.
// The codes and scales are those of formats/fp8_block.h's fp8_quantize_1x128
// and fp8_quantize_1x128_transposed of the bf16 value, bit for bit
// (gputest_gpt checks it). N must be a multiple of 16 (the GEMMs'); when it is
// not one of 128 the last 1x128 block of each row is partial, scaled over the
// columns present, as the CPU quantizers' are.
//
// Optionally (`sums`: the output gradients of the GPT's fc and qkv and of the Qwen2 qkv) it also adds
// the column sums of that bf16 value into an fp32 [N]: the bias gradient of
// the linear layer whose output gradient it is, without reading the [M, N]
// matrix again and without writing it (`out`) for a bias_backward to read.
// The bits are those of column_sums.h's bias_backward over the bf16 value:
// each tile sums its 128 rows in bias_backward's order into the same scratch
// layout, and a small second kernel (bias_backward_finish) adds the tiles'
// partial sums in its order.
//
// Fp8Linear holds the GEMMs, two scratch operands (kRows, kCols: an input's
// rows for fprop, an output gradient's rows and cols for dgrad and wgrad; the
// wgrad operands of the inputs, X^T, are the model's, made in its forward and
// kept for backward) and the padded output the GEMMs write when M is not a
// multiple of 128 (M's padding; N and K need only be multiples of 16).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "models/cuda/fp8_gemm.h"
#include "models/model.h"

namespace mxdp::cuda {

enum class ActOp : uint8_t { Identity, Gelu, GeluGrad, LayerNorm, RmsNorm, SwiGlu, SwiGluGrad };

// Codes and 1x128 scales of one operand (VEC128_32F layout, formats/fp8_block.h).
struct Fp8Slot {
  uint8_t* codes = nullptr;
  float* scales = nullptr;
  Fp8Operand operand() const { return {codes, scales, Fp8Kind::E4M3, Fp8Scaling::Rows1x128}; }
};

// The norm ops' inputs besides x (the norm's input, e.g. the residual stream).
// LayerNorm: row m's value at column n is layernorm_value(x, mean[m], rstd[m],
// w[n], b[n]) (models/cuda/act_values.cuh), the element gpt_kernels.h's
// layernorm_forward computes before its rounding to bf16, from the mean and
// rstd it wrote. RmsNorm: rmsnorm_value(x, rstd[m], w[n]), llama_kernels.h's
// rmsnorm_forward's element (mean and b unused). So the operands are those of
// the kernel's bf16 output, which it then need not write (it takes a null out).
struct NormArgs {
  const float* mean = nullptr;   // [M]
  const float* rstd = nullptr;   // [M]
  const uint16_t* w = nullptr;   // [N] bf16, the norm's weight
  const uint16_t* b = nullptr;   // [N] bf16, its bias (LayerNorm)
};

// Where act_quantize adds the column sums: dst[n] += sum over the M rows of
// the op's bf16 value (the one quantized), bit for bit bias_backward(dst,
// scratch, that value, M, N). scratch is bias_backward's (column_sums.h's
// colsum_scratch_floats(M, N) floats, 16-byte aligned; its partial sums are
// overwritten, its counters not used). Built only for the calls the models make:
// op Identity or GeluGrad, no bias, both operands (rows and cols).
struct ColumnSums {
  float* dst = nullptr;      // [N] fp32, accumulated into (null: no sums)
  float* scratch = nullptr;  // bias_backward's scratch
};

// SwiGluGrad: the gradient of gate_up = [gate | up] [M, 2F] through the
// SwiGLU, from its output gradient dact [M, F] (x) and gate_up (aux), N = 2F:
// column n < F is swiglu_grad_value(d, g, u, gate) of d = dact[m, n], g =
// gate_up[m, n], u = gate_up[m, F + n] (act_values.cuh), column F + n the up
// half's, from d = dact[m, n] and g. The bits of llama::swiglu_backward's
// dgate_up, which then need not be written.
struct ActQuant {
  const uint16_t* x = nullptr;     // [M, N] bf16 (SwiGlu: gate_up [M, 2N], rows [gate | up]; SwiGluGrad: dact
                                   // [M, N / 2])
  const uint16_t* bias = nullptr;  // [N]: x + bias first (may be null)
  uint16_t* biased = nullptr;      // where x + bias goes (may be x itself; null: nowhere)
  ActOp op = ActOp::Identity;
  const uint16_t* aux = nullptr;   // GeluGrad: the pre-activation [M, N]; SwiGluGrad: gate_up [M, N]
  NormArgs norm;                   // LayerNorm, RmsNorm: statistics and weights (these ops, SwiGlu and
                                   // SwiGluGrad make rows and cols, with no bias and no sums)
  uint16_t* out = nullptr;         // op's bf16 result (may be x, not for SwiGlu or SwiGluGrad; null: not written)
  Fp8Slot rows;                    // [Mp, N], 1x128 along N (codes null: not made)
  Fp8Slot cols;                    // [N, Mp], 1x128 along M (codes null: not made)
  ColumnSums sums;                 // dst += the op's column sums (dst null: none)
};
void act_quantize(const ActQuant& q, int M, int N, cudaStream_t s);

inline int64_t fp8_rows_padded(int64_t M) { return (M + 127) / 128 * 128; }

class Fp8Linear {
 public:
  enum Slot { kRows, kCols, kSlots };
  explicit Fp8Linear(cudaStream_t stream);
  ~Fp8Linear();
  Fp8Linear(const Fp8Linear&) = delete;
  Fp8Linear& operator=(const Fp8Linear&) = delete;

  // Scratch for M rows and operand widths up to max_n (synchronizes when it grows).
  void reserve(int M, int max_n);
  Fp8Slot slot(Slot s) const { return slots_[s]; }

  // Y = X W^T (+ bias[N]) with W {N, K}: y[M, N] bf16 (overwritten) from x
  // (rows of [Mp, K]). The bias goes in the GEMM's epilogue where cuBLASLt
  // has one for the shape, else in an act_quantize pass (decided once a shape).
  void fprop(uint16_t* y, const Fp8Slot& x, const Fp8Weight& w, const uint16_t* bias, int M, int N, int K);
  // fc's forward: pre[M, N] = X W^T + bias, kept for the GELU gradient, and
  // GELU(pre)'s operands: rows ([Mp, N]) and cols ([N, Mp]). pre is
  // bf16(sum + bias), the bias added in fp32 before the one rounding, by the
  // GEMM's bias epilogue (then act_quantize makes GELU's operands from pre:
  // {.x = pre, .op = Gelu, .rows, .cols}, one read of pre and no write), or
  // in the own GEMM's fused epilogue (fp8_gemm_gelu_quant_sm90, the same bits)
  // when MXDP_FP8_GEMM is own or fused and M is a multiple of 128. Where
  // cuBLASLt has no bias epilogue for the shape, act_quantize adds the bias to
  // the GEMM's bf16 output and writes pre back (bf16(bf16(X W^T) + bias)).
  // rows must not be x's slot (the fused GEMM writes it while other tiles
  // still read x).
  void fprop_gelu(uint16_t* pre, const Fp8Slot& x, const Fp8Weight& w, const uint16_t* bias, int M, int N, int K,
                  const Fp8Slot& rows, const Fp8Slot& cols);
  // dX = dY W: dx[M, K] bf16 (overwritten) from dy (rows of [Mp, N]) and W^T {K, N}.
  void dgrad(uint16_t* dx, const Fp8Slot& dy, const Fp8Weight& wt, int M, int N, int K);
  // dW += dY^T X: dw[N, K] fp32 from dy (cols, [N, Mp]) and x (cols, [K, Mp]).
  void wgrad(float* dw, const Fp8Slot& dy, const Fp8Slot& x, int M, int N, int K);

  const void* workspace_key() const { return pad_; }  // changes when the scratch is reallocated

 private:
  // W (or W^T) as the GEMMs' b operand (128x128 tiles), after checking that it
  // is rows x cols and that the scratch holds an output of `out` elements.
  Fp8Operand weight_operand(const Fp8Weight& w, int rows, int cols, const char* what, int64_t out) const;
  // fprop's GEMM into y, the bias by the GEMM's epilogue where it has one:
  // whether it added the bias (false without one).
  bool fprop_gemm(uint16_t* y, const Fp8Slot& x, const Fp8Weight& w, const uint16_t* bias, int M, int N, int K);
  void write_rows(uint16_t* dst, int M, int N);
  cudaStream_t s_;
  Fp8Gemm gemm_;
  // MXDP_FP8_GEMM (fp8_gemm_sm90.h's GEMM runs only on compute capability 9.0):
  //   cublaslt (unset, empty): every GEMM through cuBLASLt;
  //   own: fprop and dgrad through mxdp's own sm_90a GEMM, fc's forward fused;
  //   fused: cuBLASLt, except fc's forward through the own GEMM's fused epilogue.
  // Any other value is an error. The switch of an experiment while the own GEMM
  // is slower than cuBLASLt (docs/fp8.md, "Our own FP8 GEMM"); every route
  // gives the same bits.
  bool own_gemm_ = false, fused_gelu_ = false;
  Fp8Slot slots_[kSlots];
  uint16_t* pad_ = nullptr;  // [Mp, max_n] bf16 when M % 128 != 0
  int64_t cap_codes_ = 0, cap_scales_ = 0, cap_m_ = 0;
};

}  // namespace mxdp::cuda
