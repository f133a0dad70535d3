// The embedding table's gradient on the GPU, shared by the GPU models (GPT-2's
// wte, inside models/gpt2/cuda/gpt_kernels.h's encoder_backward; the Llama's
// embed): each row the sum of the output gradient over the positions that hold
// its token, in position order, from the batch's segments (BatchUpload,
// models/cuda/lm_cuda.h). No floating-point atomics: one thread a (segment,
// channel) adds that segment's positions in order.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace mxdp::cuda {

// dembed[tok, :] += sum of dx [M, C] over the positions holding tok, in
// position order: `order` lists the M positions sorted by (token, position);
// segment i covers order[seg_start[i] .. seg_start[i+1]) of token
// seg_token[i] (n_seg segments; none: no launch).
void embedding_backward(float* dembed, const uint16_t* dx, const int32_t* order, const int32_t* seg_start,
                        const int32_t* seg_token, int n_seg, int C, cudaStream_t s);

}  // namespace mxdp::cuda
