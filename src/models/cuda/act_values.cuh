// The elementwise values that act_quantize's ops (fp8_linear.cu) share with
// the models' own kernels, so that an op makes the FP8 operands of exactly the
// bf16 output that kernel would have written (before its rounding to bf16):
//   layernorm_value  the GPT's LayerNorm kernels (gpt_kernels.cu's ln_row);
//   rmsnorm_value    the Llama's RMSNorm kernels (llama_kernels.cu's rms_row);
//   swiglu_value     the Llama's SwiGLU forward (llama_kernels.cu);
//   swiglu_grad_value  its backward (llama_kernels.cu's swiglu_backward).
// Each spells out the order and the rounding of every step (the _rn
// intrinsics are never contracted into an FMA), so neither caller's bits depend
// on its file's -fmad setting.
#pragma once

namespace mxdp::cuda::device {

// x - mean rounded, times rstd rounded, then one fused multiply-add with the
// weight and bias: what nvcc's default contraction (-fmad=true) made of the
// GPT kernel's former `(x - mean) * rstd * w + b` (its PTX: sub.f32, mul.f32,
// fma.rn.f32), so the LayerNorm's bits did not change when it moved here.
__device__ __forceinline__ float layernorm_value(float x, float mean, float rstd, float w, float b) {
  return __fmaf_rn(__fmul_rn(__fsub_rn(x, mean), rstd), w, b);
}

// w (x r), r = 1 / sqrt(mean(x^2) + eps) the row's rstd: two rounded products
// (the CPU model's llama::rmsnorm_forward computes the same two in fp32).
__device__ __forceinline__ float rmsnorm_value(float x, float rstd, float w) {
  return __fmul_rn(w, __fmul_rn(x, rstd));
}

// sigma(g) = 1 / (1 + exp(-g)) with the accurate expf and an IEEE division.
__device__ __forceinline__ float sigmoid_value(float g) { return __fdiv_rn(1.f, __fadd_rn(1.f, expf(-g))); }

// silu(g) u = (g sigma(g)) u (the CPU model's llama::swiglu_forward computes
// the same expression in fp32; its expf may differ in the last ulp).
__device__ __forceinline__ float swiglu_value(float g, float u) {
  return __fmul_rn(__fmul_rn(g, sigmoid_value(g)), u);
}

// The SwiGLU's gradient from d = dL/d(silu(g) u), with s = sigma(g) and
// silu = g s rounded: the gate's (gate true) (d u) (s + silu (1 - s)), every
// product and sum rounded in that order, or the up half's d silu. The CPU
// model's llama::swiglu_backward computes the same expressions in fp32 (its expf
// may differ in the last ulp). A caller that wants both values calls twice
// with the same d, g, u: the inlined sigma and silu are computed once.
__device__ __forceinline__ float swiglu_grad_value(float d, float g, float u, bool gate) {
  const float s = sigmoid_value(g), silu = __fmul_rn(g, s);
  if (!gate) return __fmul_rn(d, silu);
  return __fmul_rn(__fmul_rn(d, u), __fadd_rn(s, __fmul_rn(silu, __fsub_rn(1.f, s))));
}

}  // namespace mxdp::cuda::device
