// One fp8b128 tile quantized by one CTA of kFp8TileThreads threads, with the
// tile's fp32 values in registers between their amax and their encode: the
// body of fp8b128_quantize's vectorized kernel (fp8_block_cuda.cu), and of the
// engine's fused AdamW + stage for fp8b128 (engine_ops_cuda.cu), whose values
// are the masters it has just updated. One body, one set of bits: the amax is
// a max (exact, order-free), the scale and the encode are codec.h's.
//
// Thread t holds columns 4 (t % 32) .. + 3 of rows t / 32 + 8 p (p < 16).
// Needs cols % 4 == 0 (then a thread's 4 columns are all inside the matrix or
// all outside) and codes 4-byte aligned at every row start (codes 4-byte
// aligned); the caller loads the values (16 bytes a piece).
#pragma once

#include <cstdint>

#include "formats/codec.h"
#include "formats/cuda/fp8_encode.cuh"
#include "formats/fp8_block.h"

namespace mxdp::cuda::device {

constexpr int kFp8TileThreads = 256;

// Which tile of its matrix a CTA quantizes: tile column tx and tile row ty of
// a grid tc tiles wide (its compact scales row-major). A grid of one matrix's
// tiles is grid_tile(); a launch over several matrices finds its own.
struct TileAt {
  int64_t tx, ty, tc;
};
__device__ __forceinline__ TileAt grid_tile() { return {blockIdx.x, blockIdx.y, gridDim.x}; }

// The tile's scale from every thread's partial amax (fmaxf is exact and
// order-free on these NaN-free folds), stored by thread 0 at the tile's place
// in the compact layout (tile row at.ty, tile column at.tx).
__device__ __forceinline__ float tile_scale(float am, float* __restrict__ scales, TileAt at) {
  __shared__ float part[kFp8TileThreads / 32];
  am = warp_max(am, 32);
  if ((threadIdx.x & 31) == 0) part[threadIdx.x / 32] = am;
  __syncthreads();
  am = part[0];
  for (int i = 1; i < kFp8TileThreads / 32; ++i) am = fmaxf(am, part[i]);
  const float s = codec::fp8_block_scale(am, Fp8Kind::E4M3);
  if (threadIdx.x == 0) scales[at.ty * at.tc + at.tx] = s;
  return s;
}

constexpr int kFp8TileRowsAPass = kFp8TileThreads / 32;
constexpr int kFp8TilePasses = kFp8Tile / kFp8TileRowsAPass;  // the thread's row pieces: 16

// Where the thread's row piece p (p < kFp8TilePasses) of tile `at` of a rows
// x cols matrix starts: the element index of its first value, or -1 when the
// piece lies outside the matrix.
__device__ __forceinline__ int64_t tile_piece(int p, int64_t rows, int64_t cols, TileAt at) {
  const int64_t r = at.ty * kFp8Tile + (threadIdx.x >> 5) + kFp8TileRowsAPass * p;
  const int64_t c = at.tx * kFp8Tile + 4 * (threadIdx.x & 31);
  return c < cols && r < rows ? r * cols + c : -1;
}

// The tile quantized from the thread's pieces v (v[p] the 4 values at
// tile_piece(p), zeros for a piece outside the matrix): the codes to
// codes[tile_piece(p)], the scale to scales (tile_scale).
__device__ __forceinline__ void tile_quant_regs(const float4 (&v)[kFp8TilePasses], int64_t rows, int64_t cols,
                                                uint8_t* __restrict__ codes, float* __restrict__ scales, TileAt at) {
  float am = 0.0f;
#pragma unroll
  for (int p = 0; p < kFp8TilePasses; ++p) am = fold4(am, v[p]);
  const float s = tile_scale(am, scales, at);
  const codec::BlockDivisor d = codec::block_divisor(s);
#pragma unroll
  for (int p = 0; p < kFp8TilePasses; ++p) {
    float q[4] = {v[p].x, v[p].y, v[p].z, v[p].w};
    block_div_n<4>(q, d);
    const int64_t i = tile_piece(p, rows, cols, at);
    if (i >= 0) *reinterpret_cast<uint32_t*>(codes + i) = encode4<Fp8Kind::E4M3, kEnc>(q[0], q[1], q[2], q[3]);
  }
}

}  // namespace mxdp::cuda::device
