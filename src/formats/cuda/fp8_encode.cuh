// Device FP8 element encoders, and the amax folds their block scales start
// from, shared by the quantize kernels (quant_cuda.cu) and the fused AdamW +
// stage kernels (engine_ops_cuda.cu). Integer: formats.h's
// bit-manipulation codec. Hardware: sm_89+ `cvt.rn.satfinite.{e4m3,e5m2}x2.f32`,
// bit-identical to the integer codec for all 2^32 inputs (gputest_quant).
#pragma once

#include <cuda_fp8.h>

#include <cstdint>

#include "formats/cuda/quant_cuda.h"
#include "formats/codec.h"

namespace mxdp::cuda::device {

// max over `width` lanes (a power of two <= 32) of a full warp, by xor-shuffles.
__device__ __forceinline__ float warp_max(float v, int width) {
  for (int o = width / 2; o > 0; o /= 2) v = fmaxf(v, __shfl_xor_sync(0xFFFFFFFFu, v, o));
  return v;
}
// codec::amax_fold (max(acc, |x|), a NaN x dropped) in one instruction. fmaxf
// returns the other operand when one is NaN, so a NaN |x| is dropped as there;
// the two agree whenever acc is not NaN (nor -0, where fmaxf(-0, +0) may give
// +0): true of every fold that starts at 0, since fmaxf of a non-NaN acc is
// never NaN. Every device fold starts at 0.
__device__ __forceinline__ float amax_fold(float acc, float x) { return fmaxf(acc, fabsf(x)); }
// acc folded with |x|, |y|, |z|, |w|.
__device__ __forceinline__ float fold4(float acc, float4 v) {
  return amax_fold(amax_fold(amax_fold(amax_fold(acc, v.x), v.y), v.z), v.w);
}

template <Fp8Kind K, detail::Fp8Encoder E>
__device__ __forceinline__ uint32_t encode4(float a, float b, float c, float d) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
  if constexpr (E == detail::Fp8Encoder::Hardware) {
    constexpr __nv_fp8_interpretation_t kInterp = K == Fp8Kind::E4M3 ? __NV_E4M3 : __NV_E5M2;
    const uint32_t lo = __nv_cvt_float2_to_fp8x2(make_float2(a, b), __NV_SATFINITE, kInterp);
    const uint32_t hi = __nv_cvt_float2_to_fp8x2(make_float2(c, d), __NV_SATFINITE, kInterp);
    return lo | (hi << 16);
  }
#endif
  return uint32_t(codec::fp8_from_f32(a, K)) | (uint32_t(codec::fp8_from_f32(b, K)) << 8) |
         (uint32_t(codec::fp8_from_f32(c, K)) << 16) | (uint32_t(codec::fp8_from_f32(d, K)) << 24);
}

template <Fp8Kind K, detail::Fp8Encoder E>
__device__ __forceinline__ uint8_t encode1(float a) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
  if constexpr (E == detail::Fp8Encoder::Hardware)
    return __nv_cvt_float_to_fp8(a, __NV_SATFINITE, K == Fp8Kind::E4M3 ? __NV_E4M3 : __NV_E5M2);
#endif
  return codec::fp8_from_f32(a, K);
}

// codec::block_div of n values, with the block-uniform fast test made once (the
// IEEE divisions of the other branch, scales outside [2^-80, 2^100], are rare):
// the common path carries no per-element branch.
template <int kN>
__device__ __forceinline__ void block_div_n(float* q, codec::BlockDivisor d) {
  if (d.fast) {
#pragma unroll
    for (int i = 0; i < kN; ++i) q[i] = codec::block_div_fast(q[i], d);
  } else {
#pragma unroll
    for (int i = 0; i < kN; ++i) q[i] = q[i] / d.s;
  }
}

// The encoder the public functions use (= detail::kDefaultEncoder, at compile time).
constexpr detail::Fp8Encoder kEnc = detail::Fp8Encoder::Hardware;

}  // namespace mxdp::cuda::device
