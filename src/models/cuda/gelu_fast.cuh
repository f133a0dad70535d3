// The GELU (tanh form) of the FP8 path's fused kernels: act_quantize
// (fp8_linear.cu) and the own GEMM's fused fc epilogue (fp8_gemm_sm90.cu) use
// these same functions, so the two give the same bits.
#pragma once

namespace mxdp::cuda::device {

// GELU, tanh form, through the logistic function: 0.5 (1 + tanh(u)) = sigma(2u),
// so gelu(x) = x sigma(2u) and gelu'(x) = sigma + 2 x sigma (1 - sigma) u'(x)
// with u = sqrt(2/pi) (x + 0.044715 x^3): an exp2 and a reciprocal (two MUFU
// operations, a few ulp) instead of tanhf's longer sequence, and no
// cancellation in 1 + tanh for large negative x. The values differ from the
// tanhf formula (the CPU model's) by a few fp32 ulp before the bf16 rounding.
// The constants are folded (-2u log2(e) = x (kA + kB x^2)), and ex2 flushes
// a subnormal result to 0, which 1 + 2^t absorbs anyway: 7 instructions a GELU
// where __expf's range fix-ups took 12, which counts in act_quantize (its
// passes are bound by the instructions they issue: fp8.md, "act_quantize,
// bound by its instructions").
__device__ __forceinline__ float ex2_ftz(float t) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(t));
  return y;
}
__device__ __forceinline__ float gelu_sigmoid(float x) {  // sigma(2u(x))
  constexpr float kA = -2.f * 0.7978845608028654f * 1.4426950408889634f;  // -2 sqrt(2 / pi) log2(e)
  constexpr float kB = kA * 0.044715f;
  return __fdividef(1.f, 1.f + ex2_ftz(x * fmaf(kB, x * x, kA)));
}
__device__ __forceinline__ float gelu_tanh(float x) { return x * gelu_sigmoid(x); }
__device__ __forceinline__ float gelu_grad(float x) {  // sigma + x sigma (1 - sigma) 2 u'(x)
  constexpr float kC = 2.f * 0.7978845608028654f, kD = kC * 3.f * 0.044715f;  // 2 u'(x) = kC + kD x^2
  const float sg = gelu_sigmoid(x);
  return fmaf(x * fmaf(-sg, sg, sg), fmaf(kD, x * x, kC), sg);
}

}  // namespace mxdp::cuda::device
