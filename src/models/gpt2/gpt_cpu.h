// The CPU GPT's layer loops (gpt.cpp), exposed as the references the GPU
// kernels are tested against (tests/gputest_gpt.cu). fp32, row-major; see
// gpt.cpp for the summation order of each.
#pragma once

#include <cstdint>
#include <vector>

namespace mxdp::cpu {

// Loops with less work than this run on one thread: on a busy machine every
// OpenMP barrier can cost a scheduler slice, which dwarfs a small loop. Which
// thread computes an output never changes its value, so this only affects speed.
constexpr int64_t kParallelMinWork = int64_t(1) << 13;  // elements (elementwise, per-row loops)
constexpr int64_t kParallelMinMacs = int64_t(1) << 17;  // multiply-adds (GEMM, attention)

// out[M,N] = inp[M,K] @ W^T + bias, W = {N, K}; wt: scratch.
void matmul_forward(float* out, const float* inp, const float* W, const float* bias, int M, int N, int K,
                    std::vector<float>& wt);
// dinp = dout @ W (overwritten, if non-null); dW, dbias (if non-null) accumulate.
void matmul_backward(float* dinp, float* dW, float* dbias, const float* dout, const float* inp, const float* W, int M,
                     int N, int K);
void layernorm_forward(float* out, float* mean, float* rstd, const float* inp, const float* w, const float* b, int M,
                       int C);
// dinp, dw, db accumulate.
void layernorm_backward(float* dinp, float* dw, float* db, const float* dout, const float* inp, const float* w,
                        const float* mean, const float* rstd, int M, int C);
// qkv [B,T,3C] -> out [B,T,C]; att [B,NH,T,T] the softmax.
void attention_forward(float* out, float* att, const float* qkv, int B, int T, int C, int NH);
// dqkv overwritten.
void attention_backward(float* dqkv, const float* dout, const float* qkv, const float* att, int B, int T, int C,
                        int NH);
void gelu_forward(float* out, float* th, const float* inp, int64_t n);
void gelu_backward(float* dinp, const float* inp, const float* th, const float* dout, int64_t n);
// out = gelu(inp) from th, the tanh gelu_forward kept (the forward's output recomputed).
void gelu_from_tanh(float* out, const float* th, const float* inp, int64_t n);
// out = a + b.
void residual_add(float* out, const float* a, const float* b, int64_t n);
// dst[n] += sum over m of src[m*N + n].
void colsum_accumulate(float* dst, const float* src, int M, int N);

}  // namespace mxdp::cpu
