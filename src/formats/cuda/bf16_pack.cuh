// Two fp32 values rounded to bf16 and packed in one word by the hardware
// (`cvt.rn.bf16x2.f32`, one instruction), with codec::bf16_from_f32's bits for
// every input: the hardware's rounding is the codec's for all non-NaN fp32
// (GpuCodecs.AllFp32InputsMatchHardwareConversions sweeps all 2^32), but its
// NaN is the canonical 0x7FFF where the codec keeps the sign and payload, so a
// pair whose sum is NaN (a NaN, or opposite infinities) takes the codec.
#pragma once

#include <cstdint>

#include "formats/codec.h"

namespace mxdp::cuda::device {

// bf16(a) in the low half, bf16(b) in the high half: memory order a, b.
__device__ __forceinline__ uint32_t bf16x2_rn(float a, float b) {
  uint32_t w;
  asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(w) : "f"(b), "f"(a));  // d.hi = b, d.lo = a
  if (codec::f32_isnan(a + b)) w = uint32_t(codec::bf16_from_f32(a)) | (uint32_t(codec::bf16_from_f32(b)) << 16);
  return w;
}
// Eight values as four packed pairs, w[i] = bf16x2_rn(v[2i], v[2i + 1]) bit for
// bit, with one NaN test for all eight: their sum is NaN when any of them is
// (and when infinities of both signs meet, where the codec is right as well),
// and then every pair takes the codec.
__device__ __forceinline__ void bf16x8_rn(const float* v, uint32_t* w) {
#pragma unroll
  for (int i = 0; i < 4; ++i) asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(w[i]) : "f"(v[2 * i + 1]), "f"(v[2 * i]));
  if (codec::f32_isnan(((v[0] + v[1]) + (v[2] + v[3])) + ((v[4] + v[5]) + (v[6] + v[7]))))
#pragma unroll
    for (int i = 0; i < 4; ++i)
      w[i] = uint32_t(codec::bf16_from_f32(v[2 * i])) | (uint32_t(codec::bf16_from_f32(v[2 * i + 1])) << 16);
}
// The two fp32 values of a packed pair (exact).
__device__ __forceinline__ float bf16_lo(uint32_t w) { return __uint_as_float(w << 16); }
__device__ __forceinline__ float bf16_hi(uint32_t w) { return __uint_as_float(w & 0xFFFF0000u); }

}  // namespace mxdp::cuda::device
