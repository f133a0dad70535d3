// The loss of every GPU language model (LmCuda, models/cuda/lm_cuda.h: GPT-2
// and Llama): the fused classifier, softmax cross-entropy over the logits,
// which writes the per-row losses and, in place, the dlogits; and mean_loss,
// their mean. bf16 logits (uint16_t bits), fp32 arithmetic. The device twin of
// the CPU models' cross_entropy_forward / _backward (models/cpu/lm_head.h);
// tests/gputest_gpt.cu checks it against a double-precision reference.
//
// Determinism: no atomics. One block per row; each thread visits its logits
// in a fixed order and the block combines the threads' (max, sum) pairs in a
// fixed warp/block tree. mean_loss sums in double in a fixed tree of one
// block. The order is spelled out in classifier.cu.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace mxdp::cuda {

// Cross-entropy over the first V of Vp logits per row (bf16 [M, Vp]).
// losses[m] = logsumexp(z) - z[target]. With write_grad, the logits are
// overwritten IN PLACE by dlogits = (softmax - onehot(target)) * grad_scale on
// [0, V) and 0 on the padding [V, Vp).
void classifier(uint16_t* logits, float* losses, const int32_t* targets, int M, int V, int Vp, float grad_scale,
                bool write_grad, cudaStream_t s);
// *out = float(sum / n): the sum of x[0..n) in double, in a fixed tree (one
// block), divided in double and rounded once (the CPU model's mean loss).
void mean_loss(const float* x, int n, float* out, cudaStream_t s);

}  // namespace mxdp::cuda
