// The GPU Llama's own kernels (everything that is not a GEMM, attention, the
// column sums, the embedding's backward or the classifier and mean loss, which
// are shared: models/cuda/),
// each the device twin of a CPU loop in llama_cpu.h / llama.cpp, its
// reference in tests/gputest_llama.cu.
// bf16 activations (uint16_t bits), fp32 arithmetic, fp32 parameter
// gradients that ACCUMULATE (+=) into the engine's grad buffer.
//
// Determinism as GPT-2's kernels: no floating-point atomics; every sum runs in
// a fixed order (a row's statistics in a fixed warp tree, the RMSNorm weight
// gradient as per-chunk partial sums over fixed row ranges, added in chunk
// order by a second kernel).
//
// Row kernels read 8 bf16 at a time: C % 8 == 0 and 16-byte aligned rows
// (d_model, head_dim * heads and d_ff are multiples of 32; the model's arena
// aligns every array to 256 bytes). Every launch checks what it needs.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace mxdp::cuda::llama {

// x[m, :] = embed[tokens[m], :] (a bf16 copy), M rows of C. Its backward is
// the shared embedding_backward (models/cuda/embedding.h).
void embedding_forward(uint16_t* x, const int32_t* tokens, const uint16_t* embed, int M, int C, cudaStream_t s);

// out = bf16(w * (x * r)), r = 1 / sqrt(mean(x^2) + eps) in fp32, kept in rstd [M].
// out may be null: only rstd is written (FP8 compute makes the output's
// operands in act_quantize's RMSNorm op, models/cuda/fp8_linear.h).
void rmsnorm_forward(uint16_t* out, float* rstd, const uint16_t* inp, const uint16_t* w, int M, int C, float eps,
                     cudaStream_t s);
// res = bf16(a + b) (the residual add), then out = RMSNorm(res) as above (out may be null).
void residual_rmsnorm_forward(uint16_t* res, uint16_t* out, float* rstd, const uint16_t* a, const uint16_t* b,
                              const uint16_t* w, int M, int C, float eps, cudaStream_t s);
// dinp (+)= dRMSNorm/dinp (accumulate: bf16(dinp + g); else overwrite);
// dw += sum over rows of dout * (x * r). One pass over the rows
// (models/cuda/norm_backward.h, whose scratch it takes:
// norm_backward_scratch_floats(M, C) floats). C % 8 == 0, at most kNormMaxCols.
void rmsnorm_backward(uint16_t* dinp, bool accumulate, float* dw, float* scratch, const uint16_t* dout,
                      const uint16_t* inp, const uint16_t* w, const float* rstd, int M, int C, cudaStream_t s);

// RoPE in place on the q and k heads of qkv [B*T, (NH + 2 KV) hd] (v untouched),
// Hugging Face's rotate_half pairing (i with i + hd/2):
//   x[i] <- x[i] c - x[i+hd/2] s,  x[i+hd/2] <- x[i+hd/2] c + x[i] s,
// c = cs[t, i], s = sn[t, i] (fp32 tables [T, hd/2] of cos and sin of t * inv_freq[i]).
// `inverse` rotates by -t f: the backward (the transpose of the rotation).
void rope(uint16_t* qkv, const float* cs, const float* sn, int B, int T, int NH, int KV, int hd, bool inverse,
          cudaStream_t s);

// out [M, F] = bf16(silu(gate) * up), gate_up [M, 2F] rows [gate | up]
// (models/cuda/act_values.cuh's swiglu_value, which act_quantize's SwiGLU op shares).
void swiglu_forward(uint16_t* out, const uint16_t* gate_up, int M, int F, cudaStream_t s);
// dgate_up [M, 2F] OVERWRITTEN from dout [M, F] (act_values.cuh's
// swiglu_grad_value, which act_quantize's SwiGLU-gradient op shares).
void swiglu_backward(uint16_t* dgate_up, const uint16_t* dout, const uint16_t* gate_up, int M, int F,
                     cudaStream_t s);

}  // namespace mxdp::cuda::llama
