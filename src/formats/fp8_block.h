// FP8 with fp32 block scales, the operands of cuBLASLt's block-scaled FP8
// GEMMs on Hopper (docs/fp8.md): the CPU reference. The CUDA kernels in
// cuda/fp8_block_cuda.h compute the same bits (both call codec.h's
// fp8_block_scale or fp8_pow2_scale, fp8_block_encode, fp8_block_dequant).
//
// fp8b128 (weights, a row of formats/format.h): E4M3 codes of a rows x cols
// row-major matrix, one fp32 scale per 128x128 tile (partial tiles at the
// right and bottom edges take their amax over the elements present).
//   codes  : rows x cols bytes, row-major.
//   scales : "compact" ceil(rows/128) x ceil(cols/128) fp32, row-major: the
//            payload layout. The GEMM layout (cuBLASLt BLK128x128_32F) pads
//            each tile row to a multiple of 4 scales: fp8b128_scales_for_gemm.
//   transpose: the tiles of x^T are the transposed tiles of x, so the
//            transpose of a quantized matrix is exact: codes move, the scale
//            grid transposes, nothing is re-rounded.
//
// 1x128 blocks (activations and gradients): 128 consecutive elements along a
// row of a rows x cols row-major matrix (K = cols, the contraction dimension
// of the GEMM that reads it), E4M3 or E5M2 codes, one fp32 scale per block:
// a power of two, codec::fp8_pow2_scale (the smallest with amax / s <= the
// kind's max), so that encoding is exact scaling.
//   codes  : rows x cols bytes, row-major.
//   scales : the GEMM layout (cuBLASLt VEC128_32F): ceil(cols/128) x ld fp32
//            with ld = rows rounded up to 4, row-major, i.e. scale(r, kb) at
//            kb * ld + r ("outer-dimension major"); the padding holds 0.
// The `transposed` quantizer writes the 1x128 operand of x^T (cols x rows
// codes, blocks of 128 down each column of x): what wgrad reads, whose
// contraction runs over the tokens.
#pragma once

#include <cstdint>

#include "formats/quant.h"  // Fp8Kind, ceil_div

namespace mxdp {

inline constexpr int kFp8Tile = 128;                       // tile side, 1x128 block length
inline constexpr int kFp8TileElems = kFp8Tile * kFp8Tile;  // elements per fp8b128 scale

// ---- sizes -----------------------------------------------------------------
// constexpr: the kernels (formats/cuda/, built with --expt-relaxed-constexpr) use them too.
constexpr int64_t fp8b128_scale_rows(int64_t rows) { return ceil_div(rows, kFp8Tile); }
constexpr int64_t fp8b128_scale_cols(int64_t cols) { return ceil_div(cols, kFp8Tile); }
constexpr int64_t fp8b128_scale_count(int64_t rows, int64_t cols) {
  return fp8b128_scale_rows(rows) * fp8b128_scale_cols(cols);
}
constexpr int64_t fp8b128_gemm_scale_ld(int64_t cols) { return ceil_div(fp8b128_scale_cols(cols), 4) * 4; }
constexpr int64_t fp8b128_gemm_scale_count(int64_t rows, int64_t cols) {
  return fp8b128_scale_rows(rows) * fp8b128_gemm_scale_ld(cols);
}
constexpr int64_t fp8_1x128_scale_ld(int64_t rows) { return ceil_div(rows, 4) * 4; }
constexpr int64_t fp8_1x128_scale_count(int64_t rows, int64_t cols) {
  return ceil_div(cols, kFp8Tile) * fp8_1x128_scale_ld(rows);
}

// ---- fp8b128 tiles (E4M3) --------------------------------------------------
void fp8b128_quantize(const float* x, int64_t rows, int64_t cols, uint8_t* codes, float* scales);
void fp8b128_dequantize(const uint8_t* codes, const float* scales, int64_t rows, int64_t cols, float* y);
// codes_t (cols x rows) and scales_t (compact, of the cols x rows matrix).
void fp8b128_transpose(const uint8_t* codes, const float* scales, int64_t rows, int64_t cols, uint8_t* codes_t,
                       float* scales_t);
// Compact scales -> the GEMM layout (fp8b128_gemm_scale_count floats, padding 0).
void fp8b128_scales_for_gemm(const float* scales, int64_t rows, int64_t cols, float* gemm_scales);
// The transpose with both scale grids in the GEMM layout: gemm_scales of the
// rows x cols matrix in, codes_t and gemm_scales_t (of the cols x rows matrix,
// padding 0) out. The same codes and scale values as fp8b128_transpose.
void fp8b128_transpose_gemm(const uint8_t* codes, const float* gemm_scales, int64_t rows, int64_t cols,
                            uint8_t* codes_t, float* gemm_scales_t);

// One matrix of a batch of the two GEMM-layout ops (a bucket's weights, one
// launch on a GPU: cuda/fp8_block_cuda.h's *_many, the engine ops'
// fp8b128_*_many). scales_for_gemm reads `scales` (compact) and writes
// out_scales; transpose_gemm reads codes and `scales` (GEMM layout) and writes
// codes_t and out_scales (W^T's GEMM layout).
struct Fp8b128Job {
  const uint8_t* codes = nullptr;
  const float* scales = nullptr;
  uint8_t* codes_t = nullptr;
  float* out_scales = nullptr;
  int64_t rows = 0, cols = 0;
};

// ---- 1x128 blocks ----------------------------------------------------------
// x: fp32, or bf16 bits (uint16_t) as the GPU model's activations are.
void fp8_quantize_1x128(const float* x, int64_t rows, int64_t cols, Fp8Kind k, uint8_t* codes, float* scales);
void fp8_quantize_1x128(const uint16_t* x, int64_t rows, int64_t cols, Fp8Kind k, uint8_t* codes, float* scales);
// The 1x128 operand of x^T: codes_t cols x rows; scales fp8_1x128_scale_count(cols, rows).
void fp8_quantize_1x128_transposed(const float* x, int64_t rows, int64_t cols, Fp8Kind k, uint8_t* codes_t,
                                   float* scales);
void fp8_quantize_1x128_transposed(const uint16_t* x, int64_t rows, int64_t cols, Fp8Kind k, uint8_t* codes_t,
                                   float* scales);
void fp8_dequantize_1x128(const uint8_t* codes, const float* scales, int64_t rows, int64_t cols, Fp8Kind k,
                          float* y);

}  // namespace mxdp
