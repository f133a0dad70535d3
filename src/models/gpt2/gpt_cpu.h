// GPT-2's own CPU layer loops (gpt_cpu.cpp: LayerNorm, GELU) and its view of
// the shared ones (models/cpu/: the linear layers, causal attention), as the
// CPU model (gpt.cpp) calls them and the GPU kernels are tested against them
// (tests/gputest_gpt.cu). fp32, row-major, the determinism contract of
// models/cpu/parallel.h.
#pragma once

#include <cstdint>

#include "models/cpu/attention.h"
#include "models/cpu/matmul.h"  // matmul_forward, matmul_backward, colsum_accumulate

namespace mxdp::cpu {

void layernorm_forward(float* out, float* mean, float* rstd, const float* inp, const float* w, const float* b, int M,
                       int C);
// dinp, dw, db accumulate.
void layernorm_backward(float* dinp, float* dw, float* db, const float* dout, const float* inp, const float* w,
                        const float* mean, const float* rstd, int M, int C);

// GPT-2's attention: qkv [B,T,3C] rows q | k | v, head h at h*C/NH of each
// -> out [B,T,C]; att [B,NH,T,T] the softmax. The shared causal attention
// with as many key/value heads as query heads.
inline void attention_forward(float* out, float* att, const float* qkv, int B, int T, int C, int NH) {
  causal_attention_forward(out, att, qkv, B, T, NH, NH, C / NH);
}
// dqkv overwritten.
inline void attention_backward(float* dqkv, const float* dout, const float* qkv, const float* att, int B, int T,
                               int C, int NH) {
  causal_attention_backward(dqkv, dout, qkv, att, B, T, NH, NH, C / NH);
}

void gelu_forward(float* out, float* th, const float* inp, int64_t n);
void gelu_backward(float* dinp, const float* inp, const float* th, const float* dout, int64_t n);
// out = gelu(inp) from th, the tanh gelu_forward kept (the forward's output recomputed).
void gelu_from_tanh(float* out, const float* th, const float* inp, int64_t n);

}  // namespace mxdp::cpu
