// The CPU Llama's layer loops (llama.cpp): RMSNorm, RoPE, grouped-query
// attention, SwiGLU, forward and backward, fp32. The GEMMs are GPT-2's CPU
// GEMMs (models/gpt2/gpt_cpu.h). The same rule as there: every output element
// is written by one sequential loop in a fixed order; OpenMP only splits the
// outputs between threads, so results are bitwise the same for any thread count.
// Exposed as the references the GPU kernels are tested against.
#pragma once

#include <cstdint>

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
// att [B, NH, T, T] keeps the softmax.
void attention_forward(float* out, float* att, const float* qkv, int B, int T, int NH, int KV, int hd);
// dqkv [B*T, (NH+2KV)*hd] OVERWRITTEN. One (b, kv head) per task: the q heads
// of a group add into their k/v head in a fixed order.
void attention_backward(float* dqkv, const float* dout, const float* qkv, const float* att, int B, int T, int NH,
                        int KV, int hd);

// gate_up [M, 2F] (rows [gate | up]) -> out [M, F] = silu(gate) * up.
void swiglu_forward(float* out, const float* gate_up, int M, int F);
// dgate_up [M, 2F] OVERWRITTEN from dout [M, F].
void swiglu_backward(float* dgate_up, const float* dout, const float* gate_up, int M, int F);

}  // namespace mxdp::cpu::llama
