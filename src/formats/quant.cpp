// CPU reference of the block formats (see quant.h for layouts, docs/formats.md for
// the exact rules). Every output byte depends only on its own block, so the
// OpenMP loops (static schedule) give the same bits for any thread count.
#include "formats/quant.h"

#include <algorithm>

#include "util/check.h"
#include "formats/codec.h"

namespace mxdp {
namespace {

// Below this many elements a parallel region costs more than it saves.
constexpr int64_t kParallelMin = int64_t(1) << 15;

void check_shape(const char* fn, int64_t rows, int64_t cols) {
  MXDP_CHECK(rows >= 0 && cols >= 0, fn, ": rows and cols must be >= 0, got ", rows, " x ", cols);
}
void check_ptr(const char* fn, const void* p, const char* name, int64_t rows, int64_t cols) {
  MXDP_CHECK(p != nullptr || rows == 0 || cols == 0, fn, ": ", name, " is null for a ", rows, " x ",
             cols, " matrix");
}

// Encode n elements of one block with multiplier m.
inline void encode_fp8_block(const float* x, int64_t n, float m, Fp8Kind k, uint8_t* out) {
  if (k == Fp8Kind::E4M3)
    for (int64_t i = 0; i < n; ++i) out[i] = codec::e4m3_from_f32(x[i] * m);
  else
    for (int64_t i = 0; i < n; ++i) out[i] = codec::e5m2_from_f32(x[i] * m);
}

}  // namespace

float amax(const float* x, int64_t n) {
  MXDP_CHECK(n >= 0, "amax: n must be >= 0, got ", n);
  MXDP_CHECK(x != nullptr || n == 0, "amax: x is null for n = ", n);
  float result = 0.0f;
#pragma omp parallel if (n >= kParallelMin)
  {
    float local = 0.0f;
#pragma omp for schedule(static) nowait
    for (int64_t i = 0; i < n; ++i) local = codec::amax_fold(local, x[i]);
    // max of non-NaN values is exact and order-free: any combine order is the same bits.
#pragma omp critical(mxdp_amax)
    result = std::max(result, local);
  }
  return result;
}

Nvfp4TensorScale nvfp4_tensor_scale(float tensor_amax) {
  MXDP_CHECK(!codec::f32_isnan(tensor_amax) && tensor_amax >= 0.0f,
             "nvfp4_tensor_scale: tensor amax must be >= 0 and not NaN, got ", tensor_amax);
  return codec::nvfp4_tensor_scale_of(tensor_amax);
}

// ---- MXFP8 -----------------------------------------------------------------
void mxfp8_quantize_rowwise(const float* x, int64_t rows, int64_t cols, Mxfp8Config cfg,
                            uint8_t* codes, uint8_t* scales) {
  const char* fn = "mxfp8_quantize_rowwise";
  check_shape(fn, rows, cols);
  check_ptr(fn, x, "x", rows, cols);
  check_ptr(fn, codes, "codes", rows, cols);
  check_ptr(fn, scales, "scales", rows, cols);
  const int64_t nb = ceil_div(cols, kMxfp8Block);
  const int64_t total = rows * nb;
#pragma omp parallel for schedule(static) if (rows * cols >= kParallelMin)
  for (int64_t b = 0; b < total; ++b) {
    const int64_t r = b / nb, j = b % nb;
    const int64_t c0 = j * kMxfp8Block;
    const int64_t n = std::min<int64_t>(kMxfp8Block, cols - c0);
    const float* xb = x + r * cols + c0;
    float am = 0.0f;
    for (int64_t i = 0; i < n; ++i) am = codec::amax_fold(am, xb[i]);
    const uint8_t s = codec::mxfp8_scale_byte(am, cfg.elem, cfg.rounding);
    scales[b] = s;
    encode_fp8_block(xb, n, codec::e8m0_multiplier(s), cfg.elem, codes + r * cols + c0);
  }
}

void mxfp8_dequantize_rowwise(const uint8_t* codes, const uint8_t* scales, int64_t rows,
                              int64_t cols, Fp8Kind elem, float* y) {
  const char* fn = "mxfp8_dequantize_rowwise";
  check_shape(fn, rows, cols);
  check_ptr(fn, codes, "codes", rows, cols);
  check_ptr(fn, scales, "scales", rows, cols);
  check_ptr(fn, y, "y", rows, cols);
  const int64_t nb = ceil_div(cols, kMxfp8Block);
  const int64_t total = rows * nb;
#pragma omp parallel for schedule(static) if (rows * cols >= kParallelMin)
  for (int64_t b = 0; b < total; ++b) {
    const int64_t r = b / nb, c0 = (b % nb) * kMxfp8Block;
    const int64_t n = std::min<int64_t>(kMxfp8Block, cols - c0);
    const uint8_t s = scales[b];
    const uint8_t* cb = codes + r * cols + c0;
    float* yb = y + r * cols + c0;
    for (int64_t i = 0; i < n; ++i) yb[i] = codec::mxfp8_dequant(cb[i], s, elem);
  }
}

void mxfp8_quantize_colwise(const float* x, int64_t rows, int64_t cols, Mxfp8Config cfg,
                            uint8_t* codes, uint8_t* scales) {
  const char* fn = "mxfp8_quantize_colwise";
  check_shape(fn, rows, cols);
  check_ptr(fn, x, "x", rows, cols);
  check_ptr(fn, codes, "codes", rows, cols);
  check_ptr(fn, scales, "scales", rows, cols);
  const int64_t nrb = ceil_div(rows, kMxfp8Block);
  constexpr int64_t kChunk = 256;  // columns per task: contiguous, vectorizable rows
  const int64_t nchunks = ceil_div(cols, kChunk);
#pragma omp parallel for schedule(static) if (rows * cols >= kParallelMin)
  for (int64_t t = 0; t < nrb * nchunks; ++t) {
    const int64_t rb = t / nchunks, c0 = (t % nchunks) * kChunk;
    const int64_t nc = std::min(kChunk, cols - c0);
    const int64_t r0 = rb * kMxfp8Block, nr = std::min<int64_t>(kMxfp8Block, rows - r0);
    float am[kChunk];
    float mul[kChunk];
    for (int64_t c = 0; c < nc; ++c) am[c] = 0.0f;
    for (int64_t i = 0; i < nr; ++i) {
      const float* xr = x + (r0 + i) * cols + c0;
      for (int64_t c = 0; c < nc; ++c) am[c] = codec::amax_fold(am[c], xr[c]);
    }
    for (int64_t c = 0; c < nc; ++c) {
      const uint8_t s = codec::mxfp8_scale_byte(am[c], cfg.elem, cfg.rounding);
      scales[rb * cols + c0 + c] = s;
      mul[c] = codec::e8m0_multiplier(s);
    }
    for (int64_t i = 0; i < nr; ++i) {
      const float* xr = x + (r0 + i) * cols + c0;
      uint8_t* cr = codes + (r0 + i) * cols + c0;
      if (cfg.elem == Fp8Kind::E4M3)
        for (int64_t c = 0; c < nc; ++c) cr[c] = codec::e4m3_from_f32(xr[c] * mul[c]);
      else
        for (int64_t c = 0; c < nc; ++c) cr[c] = codec::e5m2_from_f32(xr[c] * mul[c]);
    }
  }
}

void mxfp8_dequantize_colwise(const uint8_t* codes, const uint8_t* scales, int64_t rows,
                              int64_t cols, Fp8Kind elem, float* y) {
  const char* fn = "mxfp8_dequantize_colwise";
  check_shape(fn, rows, cols);
  check_ptr(fn, codes, "codes", rows, cols);
  check_ptr(fn, scales, "scales", rows, cols);
  check_ptr(fn, y, "y", rows, cols);
#pragma omp parallel for schedule(static) if (rows * cols >= kParallelMin)
  for (int64_t r = 0; r < rows; ++r) {
    const uint8_t* sr = scales + (r / kMxfp8Block) * cols;
    for (int64_t c = 0; c < cols; ++c)
      y[r * cols + c] = codec::mxfp8_dequant(codes[r * cols + c], sr[c], elem);
  }
}

// ---- NVFP4 -----------------------------------------------------------------
void nvfp4_quantize_rowwise(const float* x, int64_t rows, int64_t cols, float tensor_amax,
                            uint8_t* codes, uint8_t* scales) {
  const char* fn = "nvfp4_quantize_rowwise";
  check_shape(fn, rows, cols);
  check_ptr(fn, x, "x", rows, cols);
  check_ptr(fn, codes, "codes", rows, cols);
  check_ptr(fn, scales, "scales", rows, cols);
  const Nvfp4TensorScale ts = nvfp4_tensor_scale(tensor_amax);
  const int64_t nb = ceil_div(cols, kNvfp4Block);
  const int64_t row_bytes = ceil_div(cols, 2);
  const int64_t total = rows * nb;
#pragma omp parallel for schedule(static) if (rows * cols >= kParallelMin)
  for (int64_t b = 0; b < total; ++b) {
    const int64_t r = b / nb, c0 = (b % nb) * kNvfp4Block;
    const int64_t n = std::min<int64_t>(kNvfp4Block, cols - c0);
    const float* xb = x + r * cols + c0;
    float am = 0.0f;
    for (int64_t i = 0; i < n; ++i) am = codec::amax_fold(am, xb[i]);
    const uint8_t sb = codec::nvfp4_block_scale(am, ts.s_enc);
    scales[b] = sb;
    const float m = codec::nvfp4_block_multiplier(sb, ts.s_dec);
    uint8_t* cb = codes + r * row_bytes + c0 / 2;  // blocks start at even columns
    for (int64_t i = 0; i < n; i += 2) {
      const uint8_t lo = codec::e2m1_from_f32(xb[i] * m);
      const uint8_t hi = i + 1 < n ? codec::e2m1_from_f32(xb[i + 1] * m) : 0;  // row padding nibble: 0
      cb[i / 2] = uint8_t(lo | (hi << 4));
    }
  }
}

void nvfp4_dequantize_rowwise(const uint8_t* codes, const uint8_t* scales, float s_dec,
                              int64_t rows, int64_t cols, float* y) {
  const char* fn = "nvfp4_dequantize_rowwise";
  check_shape(fn, rows, cols);
  check_ptr(fn, codes, "codes", rows, cols);
  check_ptr(fn, scales, "scales", rows, cols);
  check_ptr(fn, y, "y", rows, cols);
  const int64_t nb = ceil_div(cols, kNvfp4Block);
  const int64_t row_bytes = ceil_div(cols, 2);
#pragma omp parallel for schedule(static) if (rows * cols >= kParallelMin)
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) {
      const uint8_t byte = codes[r * row_bytes + c / 2];
      const uint8_t nib = (c & 1) ? uint8_t(byte >> 4) : uint8_t(byte & 0xF);
      y[r * cols + c] = codec::nvfp4_dequant(nib, scales[r * nb + c / kNvfp4Block], s_dec);
    }
  }
}

}  // namespace mxdp
