// CUDA kernels of the block formats: the same functions as quant.h, on DEVICE
// pointers, enqueued on `stream` (asynchronous; nothing here synchronizes).
// They compute the same bits as the CPU reference for every input (both call
// the codecs of formats.h); tests/gputest_quant.cu checks that bit for bit.
// Layouts: see quant.h. Errors (bad sizes, null pointers, failed launches)
// throw mxdp::Error with file:line.
//
// Fast paths: row-wise MXFP8 with cols % 32 == 0 (NVFP4: cols % 16 == 0) and
// 16-byte aligned fp32 pointers run vectorized kernels (one coalesced float4
// per lane, one warp-shuffle amax per block); any other shape or alignment runs
// a general kernel with identical results.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "formats/quant.h"

namespace mxdp::cuda {

// *d_amax = max |x| over n elements, NaN ignored (0 for n == 0). Exact and
// deterministic (integer atomicMax on the bits of non-negative floats).
void amax(const float* x, int64_t n, float* d_amax, cudaStream_t stream);
// *d_amax = max(*d_amax, max |x|): the same fold without the reset (the
// engine folds the pieces of one tensor into one value).
void amax_fold_into(const float* x, int64_t n, float* d_amax, cudaStream_t stream);

// ---- MXFP8 -----------------------------------------------------------------
void mxfp8_quantize_rowwise(const float* x, int64_t rows, int64_t cols, Mxfp8Config cfg,
                            uint8_t* codes, uint8_t* scales, cudaStream_t stream);
void mxfp8_dequantize_rowwise(const uint8_t* codes, const uint8_t* scales, int64_t rows,
                              int64_t cols, Fp8Kind elem, float* y, cudaStream_t stream);
void mxfp8_quantize_colwise(const float* x, int64_t rows, int64_t cols, Mxfp8Config cfg,
                            uint8_t* codes, uint8_t* scales, cudaStream_t stream);
void mxfp8_dequantize_colwise(const uint8_t* codes, const uint8_t* scales, int64_t rows,
                              int64_t cols, Fp8Kind elem, float* y, cudaStream_t stream);

// ---- NVFP4 -----------------------------------------------------------------
// tensor_amax: host value (see quant.h). S_enc / S_dec are derived from it with
// the same function as on the CPU (codec::nvfp4_tensor_scale_of).
void nvfp4_quantize_rowwise(const float* x, int64_t rows, int64_t cols, float tensor_amax,
                            uint8_t* codes, uint8_t* scales, cudaStream_t stream);
// Same, with the tensor amax read from device memory (e.g. the output of
// amax() after an all-reduce), so the host never waits for it.
void nvfp4_quantize_rowwise_device_amax(const float* x, int64_t rows, int64_t cols,
                                        const float* d_tensor_amax, uint8_t* codes,
                                        uint8_t* scales, cudaStream_t stream);
// Writes the Nvfp4TensorScale {s_enc, s_dec} for *d_tensor_amax to *d_scale.
void nvfp4_tensor_scale(const float* d_tensor_amax, Nvfp4TensorScale* d_scale, cudaStream_t stream);

void nvfp4_dequantize_rowwise(const uint8_t* codes, const uint8_t* scales, float s_dec,
                              int64_t rows, int64_t cols, float* y, cudaStream_t stream);
// Same, with S_dec read from device memory.
void nvfp4_dequantize_rowwise_device_sdec(const uint8_t* codes, const uint8_t* scales,
                                          const float* d_s_dec, int64_t rows, int64_t cols,
                                          float* y, cudaStream_t stream);

namespace detail {
// The FP8 element encoder of the MXFP8 quantize kernels. Integer: formats.h's
// bit-manipulation codec. Hardware: sm_89+ `cvt.rn.satfinite.{e4m3,e5m2}x2.f32`,
// proven equal to the integer codec for all 2^32 inputs by gputest_quant and
// twice as fast on H200. kDefaultEncoder (Hardware) is what the public
// functions use; this entry point lets tests and benchmarks pick either.
enum class Fp8Encoder : uint8_t { Integer, Hardware };
extern const Fp8Encoder kDefaultEncoder;
void mxfp8_quantize_rowwise(const float* x, int64_t rows, int64_t cols, Mxfp8Config cfg,
                            uint8_t* codes, uint8_t* scales, Fp8Encoder enc, cudaStream_t stream);
}  // namespace detail

}  // namespace mxdp::cuda
