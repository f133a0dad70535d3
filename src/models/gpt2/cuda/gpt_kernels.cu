// Kernels of the GPU GPT; see gpt_kernels.h for the contract of each. One file
// because each kernel sits beside the launch that sizes it.
#include "models/gpt2/cuda/gpt_kernels.h"

#include "util/cuda_check.h"
#include "models/cuda/act_values.cuh"
#include "models/cuda/embedding.h"
#include "models/cuda/model_kernels.cuh"

namespace mxdp::cuda {

namespace {

constexpr float kLnEps = 1e-5f;

// The helpers shared with the Llama's kernels (ld, bf, warp_sum,
// residual_add8; on the host check_rows and grid_for): models/cuda/model_kernels.cuh.
using device::bf;
using device::ld;
using device::residual_add8;
using device::warp_sum;

// ---------------------------------------------------------------- encoder

__global__ void encoder_forward_kernel(uint16_t* x, const int32_t* tokens, const uint16_t* wte, const uint16_t* wpe,
                                       int B, int T, int C) {
  const int64_t n = int64_t(B) * T * C;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t m = i / C;
    const int c = int(i % C);
    const int t = int(m % T);
    x[i] = bf(ld(wte, int64_t(tokens[m]) * C + c) + ld(wpe, int64_t(t) * C + c));
  }
}

__global__ void wpe_backward_kernel(float* dwpe, const uint16_t* dx, int B, int T, int C) {
  const int64_t n = int64_t(T) * C;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    float s = 0.f;
    for (int b = 0; b < B; ++b) s += ld(dx, int64_t(b) * T * C + i);
    dwpe[i] += s;
  }
}

// ---------------------------------------------------------------- vectors

// W consecutive bf16 values as floats, and back (load, store; W = 8: one
// 16-byte access, the callers check the alignment): models/cuda/bf16_vectors.cuh.
using device::load;
using device::store;

// ---------------------------------------------------------------- LayerNorm

// One warp per row of C (a multiple of 8) values; lane l takes the 8-element
// chunks l, l+32, ... in every pass, so a lane reads back only what it wrote.
// Two-pass statistics (mean, then the mean of squared deviations); the row
// stays in L1 between passes. out null: the statistics only (FP8 compute makes
// the output's operands from them in act_quantize, with the same
// layernorm_value).
__device__ __forceinline__ void ln_row(uint16_t* out, float* mean, float* rstd, const uint16_t* x, const uint16_t* w,
                                       const uint16_t* b, int64_t m, int C, float partial_sum) {
  const int lane = threadIdx.x % 32, chunks = C / 8;
  float f[8];
  const float mu = warp_sum(partial_sum) / float(C);
  float v = 0.f;
  for (int k = lane; k < chunks; k += 32) {
    load(x + 8 * k, f);
#pragma unroll
    for (int i = 0; i < 8; ++i) v += (f[i] - mu) * (f[i] - mu);
  }
  const float r = 1.f / sqrtf(warp_sum(v) / float(C) + kLnEps);
  if (lane == 0) {
    mean[m] = mu;
    rstd[m] = r;
  }
  if (!out) return;
  for (int k = lane; k < chunks; k += 32) {
    float g[8], o[8];
    load(x + 8 * k, f);
    load(w + 8 * k, g);
    load(b + 8 * k, o);
#pragma unroll
    for (int i = 0; i < 8; ++i) o[i] = device::layernorm_value(f[i], mu, r, g[i], o[i]);
    store(out + 8 * k, o);
  }
}

__global__ void layernorm_forward_kernel(uint16_t* out, float* mean, float* rstd, const uint16_t* inp,
                                         const uint16_t* w, const uint16_t* b, int M, int C) {
  const int64_t m = blockIdx.x * int64_t(blockDim.x / 32) + threadIdx.x / 32;
  if (m >= M) return;
  const uint16_t* x = inp + m * C;
  float s = 0.f, f[8];
  for (int k = threadIdx.x % 32; k < C / 8; k += 32) {
    load(x + 8 * k, f);
#pragma unroll
    for (int i = 0; i < 8; ++i) s += f[i];
  }
  ln_row(out ? out + m * C : nullptr, mean, rstd, x, w, b, m, C, s);
}

__global__ void residual_layernorm_forward_kernel(uint16_t* res, uint16_t* out, float* mean, float* rstd,
                                                  const uint16_t* a, const uint16_t* bb, const uint16_t* w,
                                                  const uint16_t* bias, int M, int C) {
  const int64_t m = blockIdx.x * int64_t(blockDim.x / 32) + threadIdx.x / 32;
  if (m >= M) return;
  float s = 0.f;
  for (int k = threadIdx.x % 32; k < C / 8; k += 32) {
    float f[8];
    residual_add8(res + m * C + 8 * k, a + m * C + 8 * k, bb + m * C + 8 * k, f);
#pragma unroll
    for (int i = 0; i < 8; ++i) s += f[i];
  }
  ln_row(out ? out + m * C : nullptr, mean, rstd, res + m * C, w, bias, m, C, s);
}

// ---------------------------------------------------------------- elementwise

__global__ void residual_add_kernel(uint16_t* y, const uint16_t* a, const uint16_t* b, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    y[i] = bf(ld(a, i) + ld(b, i));
}

}  // namespace

void encoder_forward(uint16_t* x, const int32_t* tokens, const uint16_t* wte, const uint16_t* wpe, int B, int T, int C,
                     cudaStream_t s) {
  encoder_forward_kernel<<<grid_for(int64_t(B) * T * C, 256), 256, 0, s>>>(x, tokens, wte, wpe, B, T, C);
  MXDP_CUDA_CHECK_LAUNCH();
}

void encoder_backward(float* dwte, float* dwpe, const uint16_t* dx, const int32_t* order, const int32_t* seg_start,
                      const int32_t* seg_token, int n_seg, int B, int T, int C, cudaStream_t s) {
  wpe_backward_kernel<<<grid_for(int64_t(T) * C, 256), 256, 0, s>>>(dwpe, dx, B, T, C);
  MXDP_CUDA_CHECK_LAUNCH();
  embedding_backward(dwte, dx, order, seg_start, seg_token, n_seg, C, s);
}

void layernorm_forward(uint16_t* out, float* mean, float* rstd, const uint16_t* inp, const uint16_t* w,
                       const uint16_t* b, int M, int C, cudaStream_t s) {
  check_rows("layernorm_forward", C, {out, inp, w, b});
  layernorm_forward_kernel<<<(M + 7) / 8, 256, 0, s>>>(out, mean, rstd, inp, w, b, M, C);
  MXDP_CUDA_CHECK_LAUNCH();
}

void residual_layernorm_forward(uint16_t* res, uint16_t* out, float* mean, float* rstd, const uint16_t* a,
                                const uint16_t* b, const uint16_t* w, const uint16_t* bias, int M, int C,
                                cudaStream_t s) {
  check_rows("residual_layernorm_forward", C, {res, out, a, b, w, bias});
  residual_layernorm_forward_kernel<<<(M + 7) / 8, 256, 0, s>>>(res, out, mean, rstd, a, b, w, bias, M, C);
  MXDP_CUDA_CHECK_LAUNCH();
}

void layernorm_backward(uint16_t* dinp, bool accumulate, float* dw, float* db, ColumnSum dinp_sum, float* scratch,
                        const uint16_t* dout, const uint16_t* inp, const uint16_t* w, const float* mean,
                        const float* rstd, int M, int C, cudaStream_t s) {
  norm_backward({.kind = NormKind::LayerNorm,
                 .dinp = dinp,
                 .accumulate = accumulate,
                 .dw = dw,
                 .db = db,
                 .dinp_sum = dinp_sum,
                 .scratch = scratch,
                 .dout = dout,
                 .inp = inp,
                 .w = w,
                 .mean = mean,
                 .rstd = rstd},
                M, C, s);
}

void residual_add(uint16_t* y, const uint16_t* a, const uint16_t* b, int64_t n, cudaStream_t s) {
  residual_add_kernel<<<grid_for(n, 256), 256, 0, s>>>(y, a, b, n);
  MXDP_CUDA_CHECK_LAUNCH();
}

__global__ void add_kernel(float* y, const float* x, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] += x[i];
}

void add_into(float* y, const float* x, int n, cudaStream_t s) {
  add_kernel<<<(n + 255) / 256, 256, 0, s>>>(y, x, n);
  MXDP_CUDA_CHECK_LAUNCH();
}

}  // namespace mxdp::cuda
