// The CPU Llama's own layer loops (llama_cpu.cpp: RMSNorm, RoPE, SwiGLU,
// forward and backward, fp32) and its view of the shared causal attention
// (models/cpu/attention.h); the linear layers are models/cpu/matmul.h's. The
// determinism contract of models/cpu/parallel.h: every output element is
// written by one sequential loop in a fixed order; OpenMP only splits the
// outputs between threads, so results are bitwise the same for any thread
// count. Exposed as the references the GPU kernels are tested against
// (tests/gputest_llama.cu).
#pragma once

#include <cstdint>

#include "models/cpu/attention.h"

namespace mxdp::cpu::llama {

// out[m] = inp[m] * rsqrt(mean(inp[m]^2) + eps) * w; rstd[m] kept.
void rmsnorm_forward(float* out, float* rstd, const float* inp, const float* w, int M, int C, float eps);
// dinp ACCUMULATES (the residual stream's gradient); dw accumulates.
void rmsnorm_backward(float* dinp, float* dw, const float* dout, const float* inp, const float* w, const float* rstd,
                      int M, int C);

// In place on the q and k heads of qkv [B*T, (NH + 2*KV)*hd] (v untouched):
// x[i] <- x[i] cos(t f_i) - x[i+hd/2] sin(t f_i), x[i+hd/2] <- x[i+hd/2] cos + x[i] sin,
// t the position in the sequence, f = inv_freq (hd/2 values). `inverse`
// rotates by -t f: the backward of the forward rotation (its transpose).
void rope(float* qkv, const float* inv_freq, int B, int T, int NH, int KV, int hd, bool inverse);

// Causal GQA over qkv [B*T, (NH+2KV)*hd] (q, k after RoPE) -> out [B*T, NH*hd];
// att [B, NH, T, T] keeps the softmax. The shared attention, under the name
// the GPU tests know it by.
inline void attention_forward(float* out, float* att, const float* qkv, int B, int T, int NH, int KV, int hd) {
  causal_attention_forward(out, att, qkv, B, T, NH, KV, hd);
}
// dqkv [B*T, (NH+2KV)*hd] OVERWRITTEN.
inline void attention_backward(float* dqkv, const float* dout, const float* qkv, const float* att, int B, int T,
                               int NH, int KV, int hd) {
  causal_attention_backward(dqkv, dout, qkv, att, B, T, NH, KV, hd);
}

// gate_up [M, 2F] (rows [gate | up]) -> out [M, F] = silu(gate) * up.
void swiglu_forward(float* out, const float* gate_up, int M, int F);
// dgate_up [M, 2F] OVERWRITTEN from dout [M, F].
void swiglu_backward(float* dgate_up, const float* dout, const float* gate_up, int M, int F);

}  // namespace mxdp::cpu::llama
