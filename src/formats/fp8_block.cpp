#include "formats/fp8_block.h"

#include <algorithm>
#include <vector>

#include "formats/codec.h"
#include "util/check.h"

namespace mxdp {

namespace {

void check_shape(int64_t rows, int64_t cols, const void* a, const void* b, const void* c, const char* what) {
  MXDP_CHECK(rows >= 0 && cols >= 0, what, ": rows and cols must be >= 0, got ", rows, " x ", cols);
  MXDP_CHECK(rows * cols == 0 || (a && b && c), what, ": null pointer");
}

float elem(const float* x, int64_t i) { return x[i]; }
float elem(const uint16_t* x, int64_t i) { return codec::bf16_to_f32(x[i]); }

// 1x128 blocks of the rows x cols matrix x read through `at(r, c)`.
template <class At>
void quantize_1x128(At at, int64_t rows, int64_t cols, Fp8Kind k, uint8_t* codes, float* scales) {
  const int64_t ld = fp8_1x128_scale_ld(rows), nb = ceil_div(cols, kFp8Tile);
  std::fill(scales, scales + nb * ld, 0.0f);
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t b = 0; b < nb; ++b) {
      const int64_t c0 = b * kFp8Tile, c1 = std::min(cols, c0 + kFp8Tile);
      float a = 0.0f;
      for (int64_t c = c0; c < c1; ++c) a = codec::amax_fold(a, at(r, c));
      const float s = codec::fp8_pow2_scale(a, k);
      scales[b * ld + r] = s;
      for (int64_t c = c0; c < c1; ++c) codes[r * cols + c] = codec::fp8_block_encode(at(r, c), s, k);
    }
}

}  // namespace

void fp8b128_quantize(const float* x, int64_t rows, int64_t cols, uint8_t* codes, float* scales) {
  check_shape(rows, cols, x, codes, scales, "fp8b128_quantize");
  const int64_t tr = fp8b128_scale_rows(rows), tc = fp8b128_scale_cols(cols);
#pragma omp parallel for schedule(static)
  for (int64_t t = 0; t < tr * tc; ++t) {
    const int64_t r0 = t / tc * kFp8Tile, c0 = t % tc * kFp8Tile;
    const int64_t r1 = std::min(rows, r0 + kFp8Tile), c1 = std::min(cols, c0 + kFp8Tile);
    float a = 0.0f;
    for (int64_t r = r0; r < r1; ++r)
      for (int64_t c = c0; c < c1; ++c) a = codec::amax_fold(a, x[r * cols + c]);
    const float s = codec::fp8_block_scale(a, Fp8Kind::E4M3);
    scales[t] = s;
    for (int64_t r = r0; r < r1; ++r)
      for (int64_t c = c0; c < c1; ++c) codes[r * cols + c] = codec::fp8_block_encode(x[r * cols + c], s, Fp8Kind::E4M3);
  }
}

void fp8b128_dequantize(const uint8_t* codes, const float* scales, int64_t rows, int64_t cols, float* y) {
  check_shape(rows, cols, codes, scales, y, "fp8b128_dequantize");
  const int64_t tc = fp8b128_scale_cols(cols);
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c)
      y[r * cols + c] =
          codec::fp8_block_dequant(codes[r * cols + c], scales[r / kFp8Tile * tc + c / kFp8Tile], Fp8Kind::E4M3);
}

namespace {

// Both transposes: the scale grids' rows s_ld and st_ld apart (compact: the
// tile counts; GEMM layout: fp8b128_gemm_scale_ld, the padding written 0).
void transpose(const uint8_t* codes, const float* scales, int64_t s_ld, int64_t rows, int64_t cols,
               uint8_t* codes_t, float* scales_t, int64_t st_ld, const char* what) {
  check_shape(rows, cols, codes, scales, codes_t, what);
  MXDP_CHECK(rows * cols == 0 || scales_t, what, ": null pointer");
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) codes_t[c * rows + r] = codes[r * cols + c];
  const int64_t tr = fp8b128_scale_rows(rows), tc = fp8b128_scale_cols(cols);
  for (int64_t j = 0; j < tc; ++j)
    for (int64_t i = 0; i < st_ld; ++i) scales_t[j * st_ld + i] = i < tr ? scales[i * s_ld + j] : 0.0f;
}

}  // namespace

void fp8b128_transpose(const uint8_t* codes, const float* scales, int64_t rows, int64_t cols, uint8_t* codes_t,
                       float* scales_t) {
  transpose(codes, scales, fp8b128_scale_cols(cols), rows, cols, codes_t, scales_t, fp8b128_scale_rows(rows),
            "fp8b128_transpose");
}

void fp8b128_scales_for_gemm(const float* scales, int64_t rows, int64_t cols, float* gemm_scales) {
  check_shape(rows, cols, scales, gemm_scales, gemm_scales, "fp8b128_scales_for_gemm");
  const int64_t tr = fp8b128_scale_rows(rows), tc = fp8b128_scale_cols(cols), ld = fp8b128_gemm_scale_ld(cols);
  for (int64_t i = 0; i < tr; ++i)
    for (int64_t j = 0; j < ld; ++j) gemm_scales[i * ld + j] = j < tc ? scales[i * tc + j] : 0.0f;
}

void fp8b128_transpose_gemm(const uint8_t* codes, const float* gemm_scales, int64_t rows, int64_t cols,
                            uint8_t* codes_t, float* gemm_scales_t) {
  transpose(codes, gemm_scales, fp8b128_gemm_scale_ld(cols), rows, cols, codes_t, gemm_scales_t,
            fp8b128_gemm_scale_ld(rows), "fp8b128_transpose_gemm");
}

void fp8_quantize_1x128(const float* x, int64_t rows, int64_t cols, Fp8Kind k, uint8_t* codes, float* scales) {
  check_shape(rows, cols, x, codes, scales, "fp8_quantize_1x128");
  quantize_1x128([&](int64_t r, int64_t c) { return elem(x, r * cols + c); }, rows, cols, k, codes, scales);
}
void fp8_quantize_1x128(const uint16_t* x, int64_t rows, int64_t cols, Fp8Kind k, uint8_t* codes, float* scales) {
  check_shape(rows, cols, x, codes, scales, "fp8_quantize_1x128");
  quantize_1x128([&](int64_t r, int64_t c) { return elem(x, r * cols + c); }, rows, cols, k, codes, scales);
}
void fp8_quantize_1x128_transposed(const float* x, int64_t rows, int64_t cols, Fp8Kind k, uint8_t* codes_t,
                                   float* scales) {
  check_shape(rows, cols, x, codes_t, scales, "fp8_quantize_1x128_transposed");
  quantize_1x128([&](int64_t r, int64_t c) { return elem(x, c * cols + r); }, cols, rows, k, codes_t, scales);
}
void fp8_quantize_1x128_transposed(const uint16_t* x, int64_t rows, int64_t cols, Fp8Kind k, uint8_t* codes_t,
                                   float* scales) {
  check_shape(rows, cols, x, codes_t, scales, "fp8_quantize_1x128_transposed");
  quantize_1x128([&](int64_t r, int64_t c) { return elem(x, c * cols + r); }, cols, rows, k, codes_t, scales);
}

void fp8_dequantize_1x128(const uint8_t* codes, const float* scales, int64_t rows, int64_t cols, Fp8Kind k,
                          float* y) {
  check_shape(rows, cols, codes, scales, y, "fp8_dequantize_1x128");
  const int64_t ld = fp8_1x128_scale_ld(rows);
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c)
      y[r * cols + c] = codec::fp8_block_dequant(codes[r * cols + c], scales[c / kFp8Tile * ld + r], k);
}

}  // namespace mxdp
