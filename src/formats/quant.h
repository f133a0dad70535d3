// Block formats: MXFP8 (E4M3 or E5M2 elements, 32-element blocks, E8M0 scales)
// and NVFP4 (E2M1 elements, 16-element blocks, E4M3 block scales, one fp32
// tensor scale). These are the CPU reference implementations; the CUDA kernels
// in cuda/quant_cuda.h compute the same bits. Exact semantics: docs/formats.md, "Element and scale formats".
//
// Layouts (also the layout of `mxdp quantize` output files):
//   rowwise  : blocks of B consecutive elements along each row of a row-major
//              rows x cols matrix; any cols, a partial last block takes its amax
//              over the elements present. Scales: rows x ceil(cols/B), row-major.
//   colwise  : (MXFP8 only) blocks of 32 consecutive elements down each column;
//              codes stay row-major rows x cols; scales: ceil(rows/32) x cols.
//   flat     : a flat range of n elements is the rowwise 1 x n case.
//   MXFP8 codes: one byte per element.
//   NVFP4 codes: two per byte along each row, the lower-index element in the low
//              nibble; each row padded to a whole byte: rows x ceil(cols/2) bytes.
#pragma once

#include <cstdint>
#include <string>

namespace mxdp {

enum class Fp8Kind : uint8_t { E4M3, E5M2 };
enum class ScaleRounding : uint8_t { RCeil, Floor };

inline constexpr int kMxfp8Block = 32;
inline constexpr int kNvfp4Block = 16;

struct Mxfp8Config {
  Fp8Kind elem = Fp8Kind::E4M3;
  ScaleRounding rounding = ScaleRounding::RCeil;
};

// Per-tensor NVFP4 scales derived from the tensor amax (docs/formats.md, NVFP4).
struct Nvfp4TensorScale {
  float s_enc;  // encode scale: 2688 / amax, FLT_MAX on overflow, 1 for amax 0
  float s_dec;  // decode scale: 1 / s_enc
};

// ---- sizes -----------------------------------------------------------------
// constexpr, so that kernels built with --expt-relaxed-constexpr (mxdp_objs) call it too.
constexpr int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }
inline int64_t mxfp8_code_bytes(int64_t rows, int64_t cols) { return rows * cols; }
inline int64_t mxfp8_scale_bytes_rowwise(int64_t rows, int64_t cols) { return rows * ceil_div(cols, kMxfp8Block); }
inline int64_t mxfp8_scale_bytes_colwise(int64_t rows, int64_t cols) { return ceil_div(rows, kMxfp8Block) * cols; }
inline int64_t nvfp4_code_bytes(int64_t rows, int64_t cols) { return rows * ceil_div(cols, 2); }
inline int64_t nvfp4_scale_bytes(int64_t rows, int64_t cols) { return rows * ceil_div(cols, kNvfp4Block); }

// ---- helpers ---------------------------------------------------------------
// max |x| folded from 0, NaN ignored (an all-NaN range gives 0; Inf gives Inf).
float amax(const float* x, int64_t n);
Nvfp4TensorScale nvfp4_tensor_scale(float tensor_amax);

// ---- MXFP8 -----------------------------------------------------------------
void mxfp8_quantize_rowwise(const float* x, int64_t rows, int64_t cols, Mxfp8Config cfg,
                            uint8_t* codes, uint8_t* scales);
void mxfp8_dequantize_rowwise(const uint8_t* codes, const uint8_t* scales, int64_t rows,
                              int64_t cols, Fp8Kind elem, float* y);
void mxfp8_quantize_colwise(const float* x, int64_t rows, int64_t cols, Mxfp8Config cfg,
                            uint8_t* codes, uint8_t* scales);
void mxfp8_dequantize_colwise(const uint8_t* codes, const uint8_t* scales, int64_t rows,
                              int64_t cols, Fp8Kind elem, float* y);

// ---- NVFP4 -----------------------------------------------------------------
// tensor_amax: the amax of the whole tensor, which may be larger than this
// range's (a tensor sharded over ranks passes the all-reduced max).
void nvfp4_quantize_rowwise(const float* x, int64_t rows, int64_t cols, float tensor_amax,
                            uint8_t* codes, uint8_t* scales);
void nvfp4_dequantize_rowwise(const uint8_t* codes, const uint8_t* scales, float s_dec,
                              int64_t rows, int64_t cols, float* y);

}  // namespace mxdp
