// One LayerNorm output element before its rounding to bf16, shared by the
// GPT's LayerNorm kernels (gpt_kernels.cu's ln_row) and act_quantize's
// LayerNorm op (fp8_linear.cu), which makes the FP8 operands of a LayerNorm's
// output from its input, mean and rstd instead of reading the bf16 output.
// The op must give the kernel's bits, so both compute it here, in one order
// with the rounding of each step spelled out: x - mean rounded, times rstd
// rounded (the _rn intrinsics are never contracted), then one fused
// multiply-add with the weight and bias. That is what nvcc's default contraction (-fmad=true)
// made of the kernel's former `(x - mean) * rstd * w + b` (its PTX: sub.f32,
// mul.f32, fma.rn.f32), so the LayerNorm's bits did not change; and neither
// caller's bits depend on its file's -fmad setting.
#pragma once

namespace mxdp::cuda::device {

__device__ __forceinline__ float layernorm_value(float x, float mean, float rstd, float w, float b) {
  return __fmaf_rn(__fmul_rn(__fsub_rn(x, mean), rstd), w, b);
}

}  // namespace mxdp::cuda::device
