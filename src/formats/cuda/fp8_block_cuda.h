// CUDA kernels of FP8 with fp32 block scales: the functions of
// formats/fp8_block.h on DEVICE pointers, enqueued on `stream` (nothing here
// synchronizes). Same layouts, same bits as the CPU reference for every input
// (both call codec.h's fp8_block_* functions; tests/gputest_fp8_format.cu
// checks that bit for bit). Errors throw mxdp::Error.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "formats/fp8_block.h"

namespace mxdp::cuda {

// ---- fp8b128 tiles ---------------------------------------------------------
void fp8b128_quantize(const float* x, int64_t rows, int64_t cols, uint8_t* codes, float* scales,
                      cudaStream_t stream);
void fp8b128_dequantize(const uint8_t* codes, const float* scales, int64_t rows, int64_t cols, float* y,
                        cudaStream_t stream);
void fp8b128_transpose(const uint8_t* codes, const float* scales, int64_t rows, int64_t cols, uint8_t* codes_t,
                       float* scales_t, cudaStream_t stream);
void fp8b128_scales_for_gemm(const float* scales, int64_t rows, int64_t cols, float* gemm_scales,
                             cudaStream_t stream);
void fp8b128_transpose_gemm(const uint8_t* codes, const float* gemm_scales, int64_t rows, int64_t cols,
                            uint8_t* codes_t, float* gemm_scales_t, cudaStream_t stream);
// The same two over `count` matrices (jobs: device memory), one launch each,
// the bits of the calls one by one. max, from the host's copy of the list:
// the largest of the jobs' fp8b128_gemm_scale_count (scales_for_gemm) or
// fp8b128_scale_count (its tiles: transpose_gemm). The transposes take the
// vectorized kernel only: fp8b128_transpose_many_ok of every job, checked by
// the caller on its host copy.
void fp8b128_scales_for_gemm_many(const Fp8b128Job* jobs, int count, int64_t max, cudaStream_t stream);
void fp8b128_transpose_gemm_many(const Fp8b128Job* jobs, int count, int64_t max, cudaStream_t stream);
bool fp8b128_transpose_many_ok(const Fp8b128Job& job);

// ---- 1x128 blocks (x fp32, or bf16 bits) -----------------------------------
void fp8_quantize_1x128(const float* x, int64_t rows, int64_t cols, Fp8Kind k, uint8_t* codes, float* scales,
                        cudaStream_t stream);
void fp8_quantize_1x128(const uint16_t* x, int64_t rows, int64_t cols, Fp8Kind k, uint8_t* codes, float* scales,
                        cudaStream_t stream);
void fp8_quantize_1x128_transposed(const float* x, int64_t rows, int64_t cols, Fp8Kind k, uint8_t* codes_t,
                                   float* scales, cudaStream_t stream);
void fp8_quantize_1x128_transposed(const uint16_t* x, int64_t rows, int64_t cols, Fp8Kind k, uint8_t* codes_t,
                                   float* scales, cudaStream_t stream);
void fp8_dequantize_1x128(const uint8_t* codes, const float* scales, int64_t rows, int64_t cols, Fp8Kind k,
                          float* y, cudaStream_t stream);

namespace detail {
// The kernel behind fp8b128_quantize and the two transposes. Vectorized (what
// the public functions take wherever it applies): 16-byte loads, a tile's
// values kept in registers between its amax and its encode, 4 codes a store;
// the transpose in 128x128 tiles, 16 codes a load and a store, the scales in
// the same launch. It needs cols a multiple of 4 and x 16-byte, codes 4-byte
// aligned (quantize), rows and cols multiples of 16 and both code pointers
// 16-byte aligned (transpose).
// Scalar: one element a thread, any shape and alignment (the fallback, and
// the first kernels, kept for the tests and benchmarks to compare against).
enum class Fp8b128Kernel : uint8_t { Vectorized, Scalar };
void fp8b128_quantize(const float* x, int64_t rows, int64_t cols, uint8_t* codes, float* scales, Fp8b128Kernel kernel,
                      cudaStream_t stream);
void fp8b128_transpose(const uint8_t* codes, const float* scales, int64_t rows, int64_t cols, uint8_t* codes_t,
                       float* scales_t, Fp8b128Kernel kernel, cudaStream_t stream);
void fp8b128_transpose_gemm(const uint8_t* codes, const float* gemm_scales, int64_t rows, int64_t cols,
                            uint8_t* codes_t, float* gemm_scales_t, Fp8b128Kernel kernel, cudaStream_t stream);
}  // namespace detail

}  // namespace mxdp::cuda
