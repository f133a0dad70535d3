// What the GPU models' own kernels share (GPT-2's, models/gpt2/cuda/
// gpt_kernels.cu, the Llama's, models/llama/cuda/llama_kernels.cu, and the
// embedding backward both call, embedding.cu; ld and aligned16 also serve the
// classifier, the column sums and act_quantize): on the device, single bf16
// values as floats and back (ld, bf), the butterfly sum of the row kernels'
// statistics (warp_sum) and the residual add that opens their fused residual +
// norm kernels (residual_add8); on the host, the checks and the grid size of
// their launches. Each was written out in both files and moved here with the
// same expressions in the same order, so no kernel's arithmetic or launch
// shape changed (residual_add8 stores the rounded sums before the caller adds
// them into its statistic, in the same order as before).
#pragma once

#include <cstdint>
#include <initializer_list>

#include "formats/codec.h"
#include "models/cuda/bf16_vectors.cuh"
#include "util/check.h"
#include "util/cuda_launch.h"

namespace mxdp::cuda {

namespace device {

// Element i of the bf16 array p as a float; x rounded to bf16 (the codec's rounding).
__device__ __forceinline__ float ld(const uint16_t* p, int64_t i) { return codec::bf16_to_f32(p[i]); }
__device__ __forceinline__ uint16_t bf(float x) { return codec::bf16_from_f32(x); }

// Butterfly sum: every lane ends with the same bits, in the same order every run.
__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o /= 2) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// The residual add of 8 consecutive values of a row: res = bf16(a + b), and f
// the stored (rounded) values, which the norm's statistics then see. a, b and
// res 16-byte aligned (load<8>, store<8>).
__device__ __forceinline__ void residual_add8(uint16_t* res, const uint16_t* a, const uint16_t* b, float (&f)[8]) {
  float g[8];
  load(a, f);
  load(b, g);
#pragma unroll
  for (int i = 0; i < 8; ++i) f[i] = codec::bf16_to_f32(bf(f[i] + g[i]));
  store(res, f);
}

}  // namespace device

inline bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15) == 0; }

// The row kernels read and write 8 bf16 at a time: rows of C values, C % 8 ==
// 0, every row 16-byte aligned. `what` names the launch in the refusal.
inline void check_rows(const char* what, int C, std::initializer_list<const void*> ptrs) {
  MXDP_CHECK(C % 8 == 0, what, " needs rows of a multiple of 8 values, got ", C);
  for (const void* p : ptrs) MXDP_CHECK(aligned16(p), what, " needs 16-byte aligned rows");
}

// Blocks of a grid-stride launch over n items, at most 2^20 (the models'
// elementwise kernels give the same bits for any grid).
inline int grid_for(int64_t n, int threads) { return int(grid_blocks(n, threads, 1 << 20)); }

}  // namespace mxdp::cuda
