// W consecutive bf16 values (uint16_t bits) as floats, shared by the GPT's
// kernels (models/gpt2/cuda/gpt_kernels.cu), the fused classifier
// (classifier.cu), the column sums (column_sums.cu) and the Llama's kernels
// (models/llama/cuda/llama_kernels.cu). W = 8: one 16-byte access (the callers
// check the alignment); otherwise W 2-byte accesses. Read raw (load_raw),
// converted to floats (unpack), both at once (load), and back, rounded to bf16
// with the codec's rounding (store; 8 at once through bf16x8_rn, the same bits). The split lets a thread issue several
// loads before it waits for the first. Moved here from gpt_kernels.cu unchanged.
#pragma once

#include <cstdint>

#include "formats/codec.h"
#include "formats/cuda/bf16_pack.cuh"

namespace mxdp::cuda::device {

template <int W>
struct RawBf16 {
  uint16_t h[W];
};
template <>
struct RawBf16<8> {
  uint4 u;
};
template <int W>
__device__ __forceinline__ RawBf16<W> load_raw(const uint16_t* p) {
  RawBf16<W> r;
  if constexpr (W == 8) r.u = *reinterpret_cast<const uint4*>(p);
  else
#pragma unroll
    for (int i = 0; i < W; ++i) r.h[i] = p[i];
  return r;
}
template <int W>
__device__ __forceinline__ void unpack(const RawBf16<W>& r, float (&f)[W]) {
  const uint16_t* h;
  if constexpr (W == 8) h = reinterpret_cast<const uint16_t*>(&r.u);
  else h = r.h;
#pragma unroll
  for (int i = 0; i < W; ++i) f[i] = codec::bf16_to_f32(h[i]);
}

template <int W>
__device__ __forceinline__ void load(const uint16_t* p, float (&f)[W]) {
  unpack(load_raw<W>(p), f);
}
template <int W>
__device__ __forceinline__ void store(uint16_t* p, const float (&f)[W]) {
  if constexpr (W == 8) {
    uint4 u;  // the hardware's paired rounding, the codec's bits (bf16x8_rn)
    bf16x8_rn(f, reinterpret_cast<uint32_t*>(&u));
    *reinterpret_cast<uint4*>(p) = u;
  } else {
#pragma unroll
    for (int i = 0; i < W; ++i) p[i] = codec::bf16_from_f32(f[i]);
  }
}

}  // namespace mxdp::cuda::device
