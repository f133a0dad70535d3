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
// The two fp32 values of a packed pair (exact).
__device__ __forceinline__ float bf16_lo(uint32_t w) { return __uint_as_float(w << 16); }
__device__ __forceinline__ float bf16_hi(uint32_t w) { return __uint_as_float(w & 0xFFFF0000u); }

}  // namespace mxdp::cuda::device
