// fp32 <-> bf16 conversion kernels (see bf16_cuda.h).
#include "formats/cuda/bf16_cuda.h"

#include "formats/codec.h"
#include "util/cuda_check.h"
#include "util/cuda_launch.h"

namespace mxdp::cuda {
namespace {

__global__ void f32_to_bf16_kernel(const float* x, uint16_t* y, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    y[i] = codec::bf16_from_f32(x[i]);
}
__global__ void bf16_to_f32_kernel(const uint16_t* x, float* y, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    y[i] = codec::bf16_to_f32(x[i]);
}

}  // namespace

void f32_to_bf16(const float* x, uint16_t* y, int64_t n, cudaStream_t s, int64_t max_blocks) {
  if (n <= 0) return;
  const int64_t blocks = grid_blocks(n, kBf16ConvertThreads, max_blocks);
  f32_to_bf16_kernel<<<unsigned(blocks), kBf16ConvertThreads, 0, s>>>(x, y, n);
  MXDP_CUDA_CHECK_LAUNCH();
}

void bf16_to_f32(const uint16_t* x, float* y, int64_t n, cudaStream_t s, int64_t max_blocks) {
  if (n <= 0) return;
  const int64_t blocks = grid_blocks(n, kBf16ConvertThreads, max_blocks);
  bf16_to_f32_kernel<<<unsigned(blocks), kBf16ConvertThreads, 0, s>>>(x, y, n);
  MXDP_CUDA_CHECK_LAUNCH();
}

}  // namespace mxdp::cuda
