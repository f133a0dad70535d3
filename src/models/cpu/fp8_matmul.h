// The CPU models' FP8 linear layers (compute_dtype fp8, docs/fp8.md; GPT-2's
// and Llama's block linears): the same contracts as matmul.h's matmul_forward
// / matmul_backward, with the weight read as the engine's FP8 W (forward) and
// W^T (backward), {N, K} and {K, N}.
#pragma once

#include <cstdint>
#include <vector>

#include "models/model.h"

namespace mxdp::cpu {

// Quantized operands of the layer at hand, reused between calls.
struct Fp8Scratch {
  std::vector<uint8_t> a_codes, b_codes;
  std::vector<float> a_scales, b_scales;
};

// out[M,N] = q(inp)[M,K] . W^T + bias (1x128 blocks and tiles at the edges may be partial).
void fp8_matmul_forward(float* out, const float* inp, const Fp8Weight& w, const float* bias, int M, int N, int K,
                        Fp8Scratch& s);
// dinp = q(dout) . W (overwritten; wt is W^T {K, N}); dW += q(dout^T) . q(inp^T)^T;
// dbias += the column sums of dout (if non-null).
void fp8_matmul_backward(float* dinp, float* dW, float* dbias, const float* dout, const float* inp,
                         const Fp8Weight& wt, int M, int N, int K, Fp8Scratch& s);

// A block linear layer of a CPU model (GPT-2's and Llama's), weight param wp: with `fp8` (the
// layer computes in FP8) the functions above on the engine's W / W^T from the hooks, else
// matmul.h's fp32 matmul on its weights w (wt: matmul_forward's scratch). The backward
// accumulates into hooks.grad(wp) and dbias (if non-null).
void block_linear_forward(bool fp8, float* out, const float* inp, int wp, const float* w, const float* bias, int M,
                          int N, int K, ModelHooks& hooks, std::vector<float>& wt, Fp8Scratch& s);
void block_linear_backward(bool fp8, float* dinp, float* dbias, const float* dout, const float* inp, int wp,
                           const float* w, int M, int N, int K, ModelHooks& hooks, Fp8Scratch& s);

}  // namespace mxdp::cpu
