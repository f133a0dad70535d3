// The GPU GPT's own kernels (everything that is not a GEMM, attention, the
// column sums or the loss, which are shared: models/cuda/), each
// the device twin of a CPU loop in gpt.cpp (gpt_cpu.h), which is its reference
// in tests/gputest_gpt.cu. bf16 activations (uint16_t bits), fp32 arithmetic,
// fp32 parameter gradients that ACCUMULATE (+=) into the engine's grad buffer.
//
// Determinism: no floating-point atomics anywhere. Every sum runs in a fixed
// order: a row's statistics in a fixed warp/block tree, parameter gradients as
// per-chunk partial sums over fixed row ranges, added in chunk order by the
// last block to finish (an integer counter says which; the order of the
// additions does not depend on it): the shared column sums,
// models/cuda/column_sums.h.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "formats/cuda/bf16_cuda.h"
#include "models/cuda/column_sums.h"    // ColumnSum, bias_backward
#include "models/cuda/norm_backward.h"  // the LayerNorm backward's pass

namespace mxdp::cuda {

// x[b,t,:] = wte[tokens[b,t],:] + wpe[t,:]   (x, wte, wpe bf16; sum in fp32, one rounding)
void encoder_forward(uint16_t* x, const int32_t* tokens, const uint16_t* wte, const uint16_t* wpe, int B, int T, int C,
                     cudaStream_t s);
// dwpe[t,:] += sum over b (in order) of dx[b,t,:].
// dwte[tok,:] += sum of dx over the positions holding tok, in position order:
// `order` lists the B*T positions sorted by (token, position), and segment i
// covers order[seg_start[i] .. seg_start[i+1]) of token seg_token[i] (n_seg
// segments; built on the host by BatchUpload, models/cuda/lm_cuda.h), through
// the shared embedding_backward (models/cuda/embedding.h).
void encoder_backward(float* dwte, float* dwpe, const uint16_t* dx, const int32_t* order, const int32_t* seg_start,
                      const int32_t* seg_token, int n_seg, int B, int T, int C, cudaStream_t s);

// out = LayerNorm(inp) * w + b (eps 1e-5); mean, rstd [M] kept for backward.
// out may be null: then only mean and rstd are written (FP8 compute, where
// act_quantize's LayerNorm op makes the output's operands from them, bit for
// bit what it would make from out: models/cuda/act_values.cuh).
void layernorm_forward(uint16_t* out, float* mean, float* rstd, const uint16_t* inp, const uint16_t* w,
                       const uint16_t* b, int M, int C, cudaStream_t s);
// res = bf16(a + b) (the residual add), then out = LayerNorm(res) as above
// (out may be null; res, mean and rstd are always written).
void residual_layernorm_forward(uint16_t* res, uint16_t* out, float* mean, float* rstd, const uint16_t* a,
                                const uint16_t* b, const uint16_t* w, const uint16_t* bias, int M, int C,
                                cudaStream_t s);
// dinp (+)= d LayerNorm / d inp (accumulate: bf16(dinp + contribution), or
// overwrite); dw, db += their column sums; dinp_sum: also the column sums of
// the new dinp (the residual stream's gradient, whose column sums are the bias
// gradient of the linear layer that added into that stream). One pass over the
// rows (models/cuda/norm_backward.h, whose scratch it takes:
// norm_backward_scratch_floats(M, C) floats). C % 8 == 0, at most
// kNormMaxCols, rows 16-byte aligned.
void layernorm_backward(uint16_t* dinp, bool accumulate, float* dw, float* db, ColumnSum dinp_sum, float* scratch,
                        const uint16_t* dout, const uint16_t* inp, const uint16_t* w, const float* mean,
                        const float* rstd, int M, int C, cudaStream_t s);
// y = bf16(a + b), n elements.
void residual_add(uint16_t* y, const uint16_t* a, const uint16_t* b, int64_t n, cudaStream_t s);
// y[i] += x[i], n floats.
void add_into(float* y, const float* x, int n, cudaStream_t s);

// classifier, mean_loss (the loss): models/cuda/classifier.h.
// f32_to_bf16 / bf16_to_f32 (n elements): formats/cuda/bf16_cuda.h.

}  // namespace mxdp::cuda
