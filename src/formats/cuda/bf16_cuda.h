// fp32 <-> bf16 conversion on the device, with the one codec (formats/codec.h:
// codec::bf16_from_f32 rounds to nearest even, codec::bf16_to_f32 is exact).
// Used by the engine (grad/weight staging) and the GPU language models (weights: models/cuda/lm_cuda.h).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace mxdp::cuda {

// y[i] = bf16(x[i]) / y[i] = fp32(x[i]) for i < n; nothing when n <= 0.
// Grid-stride over 256-thread blocks, at most max_blocks of them (the result is
// the same for any grid; the cap only keeps each caller's launch as it was).
constexpr int kBf16ConvertThreads = 256;
constexpr int64_t kBf16ConvertMaxBlocks = int64_t(1) << 20;
void f32_to_bf16(const float* x, uint16_t* y, int64_t n, cudaStream_t s,
                 int64_t max_blocks = kBf16ConvertMaxBlocks);
void bf16_to_f32(const uint16_t* x, float* y, int64_t n, cudaStream_t s,
                 int64_t max_blocks = kBf16ConvertMaxBlocks);

}  // namespace mxdp::cuda
