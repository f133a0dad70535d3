// Device helpers of the kernels that quantize 128x128 tiles of bf16 into
// 1x128 E4M3 blocks (act_quantize, fp8_linear.cu), in a header of their own
// for any kernel that quantizes a tile it holds in shared memory. Chunks are 8
// bf16 in a uint4; the block amaxes are reduced across the lanes of a warp.
#pragma once

#include <cstdint>

#include "formats/cuda/bf16_pack.cuh"
#include "formats/cuda/fp8_encode.cuh"

namespace mxdp::cuda::device {

// 8 floats rounded to bf16 (codec::bf16_from_f32's bits, by the hardware pair
// conversion): the packed chunk, and v replaced by the rounded values.
__device__ __forceinline__ uint4 round8(float* v) {
  uint32_t w[4];
  bf16x8_rn(v, w);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    v[2 * i] = bf16_lo(w[i]);
    v[2 * i + 1] = bf16_hi(w[i]);
  }
  return make_uint4(w[0], w[1], w[2], w[3]);
}
__device__ __forceinline__ void unpack8(uint4 v, float* f) {
  const uint32_t w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    f[2 * i] = bf16_lo(w[i]);
    f[2 * i + 1] = bf16_hi(w[i]);
  }
}
__device__ __forceinline__ void load8(const uint16_t* p, float* f) { unpack8(*reinterpret_cast<const uint4*>(p), f); }
// Element i (0-7) of a chunk of 8 bf16.
__device__ __forceinline__ float half_of(const uint4& v, int i) {
  const uint32_t w = i < 2 ? v.x : i < 4 ? v.y : i < 6 ? v.z : v.w;
  return i & 1 ? bf16_hi(w) : bf16_lo(w);
}

__device__ __forceinline__ uint32_t encode4(const float* q) {
  return encode4<Fp8Kind::E4M3, kEnc>(q[0], q[1], q[2], q[3]);
}

// The amaxes of 8 blocks, each spread over the kWidth (16 or 32) lanes of an
// aligned lane group, reduced by a transposed butterfly: halving the values a
// lane keeps at each of the first three steps (4 + 2 + 1 shuffles), then the
// rest of the group (1 or 2). Lane l of the group ends with block l / (kWidth
// / 8)'s amax: 9 shuffles instead of 8 warp_max's 32-40. fmaxf is exact and
// order-free on these non-negative, NaN-free folds, so the bits are warp_max's.
template <int kWidth>
__device__ __forceinline__ float max8_transposed(const float (&a)[8]) {
  const int l = threadIdx.x & (kWidth - 1);
  float x[4], y[2];
  const bool h4 = l & (kWidth / 2), h2 = l & (kWidth / 4), h1 = l & (kWidth / 8);
#pragma unroll
  for (int t = 0; t < 4; ++t)
    x[t] = fmaxf(h4 ? a[t + 4] : a[t], __shfl_xor_sync(0xFFFFFFFFu, h4 ? a[t] : a[t + 4], kWidth / 2));
#pragma unroll
  for (int t = 0; t < 2; ++t)
    y[t] = fmaxf(h2 ? x[t + 2] : x[t], __shfl_xor_sync(0xFFFFFFFFu, h2 ? x[t] : x[t + 2], kWidth / 4));
  float z = fmaxf(h1 ? y[1] : y[0], __shfl_xor_sync(0xFFFFFFFFu, h1 ? y[0] : y[1], kWidth / 8));
#pragma unroll
  for (int o = kWidth / 16; o > 0; o /= 2) z = fmaxf(z, __shfl_xor_sync(0xFFFFFFFFu, z, o));
  return z;
}
// Block i's 1 / s, from the lane of the group that computed it (lane i * kWidth / 8).
template <int kWidth>
__device__ __forceinline__ float reciprocal_of(float mine, int i) {
  return __shfl_sync(0xFFFFFFFFu, mine, i * (kWidth / 8), kWidth);
}

}  // namespace mxdp::cuda::device
