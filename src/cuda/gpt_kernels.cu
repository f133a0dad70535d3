// Kernels of the GPU GPT; see gpt_kernels.h for the contract of each.
#include "cuda/gpt_kernels.h"

#include "check.h"
#include "cuda_check.h"
#include "formats.h"

namespace mxdp::cuda {

namespace {

constexpr float kLnEps = 1e-5f;

__device__ __forceinline__ float ld(const uint16_t* p, int64_t i) { return codec::bf16_to_f32(p[i]); }
__device__ __forceinline__ uint16_t bf(float x) { return codec::bf16_from_f32(x); }

// Butterfly sum: every lane ends with the same bits, in the same order every run.
__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o /= 2) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

int grid_for(int64_t n, int threads) { return int(std::min<int64_t>((n + threads - 1) / threads, 1 << 20)); }

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

// One block per (token segment, 256 channels).
__global__ void wte_backward_kernel(float* dwte, const uint16_t* dx, const int32_t* order, const int32_t* seg_start,
                                    const int32_t* seg_token, int C) {
  const int seg = blockIdx.x;
  const int c = blockIdx.y * blockDim.x + threadIdx.x;
  if (c >= C) return;
  float s = 0.f;
  for (int j = seg_start[seg]; j < seg_start[seg + 1]; ++j) s += ld(dx, int64_t(order[j]) * C + c);
  dwte[int64_t(seg_token[seg]) * C + c] += s;
}

// ---------------------------------------------------------------- LayerNorm

// One warp per row.
__device__ __forceinline__ void ln_row(uint16_t* out, float* mean, float* rstd, const uint16_t* x, const uint16_t* w,
                                       const uint16_t* b, int64_t m, int C) {
  const int lane = threadIdx.x % 32;
  float s = 0.f;
  for (int c = lane; c < C; c += 32) s += ld(x, c);
  const float mu = warp_sum(s) / float(C);
  float v = 0.f;
  for (int c = lane; c < C; c += 32) {
    const float d = ld(x, c) - mu;
    v += d * d;
  }
  const float r = 1.f / sqrtf(warp_sum(v) / float(C) + kLnEps);
  for (int c = lane; c < C; c += 32) out[c] = bf((ld(x, c) - mu) * r * ld(w, c) + ld(b, c));
  if (lane == 0) {
    mean[m] = mu;
    rstd[m] = r;
  }
}

__global__ void layernorm_forward_kernel(uint16_t* out, float* mean, float* rstd, const uint16_t* inp,
                                         const uint16_t* w, const uint16_t* b, int M, int C) {
  const int64_t m = blockIdx.x * int64_t(blockDim.x / 32) + threadIdx.x / 32;
  if (m >= M) return;
  ln_row(out + m * C, mean, rstd, inp + m * C, w, b, m, C);
}

__global__ void residual_layernorm_forward_kernel(uint16_t* res, uint16_t* out, float* mean, float* rstd,
                                                  const uint16_t* a, const uint16_t* bb, const uint16_t* w,
                                                  const uint16_t* bias, int M, int C) {
  const int64_t m = blockIdx.x * int64_t(blockDim.x / 32) + threadIdx.x / 32;
  if (m >= M) return;
  const int lane = threadIdx.x % 32;
  for (int c = lane; c < C; c += 32) res[m * C + c] = bf(ld(a, m * C + c) + ld(bb, m * C + c));
  __syncwarp();
  ln_row(out + m * C, mean, rstd, res + m * C, w, bias, m, C);
}

__global__ void layernorm_backward_kernel(uint16_t* dinp, bool accumulate, const uint16_t* dout, const uint16_t* inp,
                                          const uint16_t* w, const float* mean, const float* rstd, int M, int C) {
  const int64_t m = blockIdx.x * int64_t(blockDim.x / 32) + threadIdx.x / 32;
  if (m >= M) return;
  const int lane = threadIdx.x % 32;
  const uint16_t* x = inp + m * C;
  const uint16_t* d = dout + m * C;
  const float mu = mean[m], r = rstd[m];
  float a = 0.f, b = 0.f;
  for (int c = lane; c < C; c += 32) {
    const float dn = ld(w, c) * ld(d, c);
    a += dn;
    b += dn * ((ld(x, c) - mu) * r);
  }
  const float dnorm_mean = warp_sum(a) / float(C), dnorm_norm_mean = warp_sum(b) / float(C);
  uint16_t* di = dinp + m * C;
  for (int c = lane; c < C; c += 32) {
    const float norm = (ld(x, c) - mu) * r;
    const float g = (ld(w, c) * ld(d, c) - dnorm_mean - norm * dnorm_norm_mean) * r;
    di[c] = bf(accumulate ? ld(di, c) + g : g);
  }
}

// ---------------------------------------------------------------- column sums

// Block = 32 columns x 8 warps over one chunk of kColsumRows rows; warp w takes
// rows w, w+8, ... of the chunk in order; the 8 warp sums are added in warp
// order. partial layout: [2][chunks][N]. With ln (mean != null): sum a = dout *
// norm(inp), sum b = dout (LayerNorm dw, db); otherwise a = dout (bias).
__global__ void colsum_partial_kernel(float* partial, const uint16_t* dout, const uint16_t* inp, const float* mean,
                                      const float* rstd, int M, int N) {
  __shared__ float sa[8][32], sb[8][32];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int n = blockIdx.x * 32 + lane;
  const int chunk = blockIdx.y, chunks = gridDim.y;
  const int r0 = chunk * kColsumRows, r1 = min(M, r0 + kColsumRows);
  float a = 0.f, b = 0.f;
  if (n < N) {
    for (int m = r0 + warp; m < r1; m += 8) {
      const float d = ld(dout, int64_t(m) * N + n);
      if (mean) {
        a += d * ((ld(inp, int64_t(m) * N + n) - mean[m]) * rstd[m]);
        b += d;
      } else {
        a += d;
      }
    }
  }
  sa[warp][lane] = a;
  sb[warp][lane] = b;
  __syncthreads();
  if (warp == 0 && n < N) {
    float ta = 0.f, tb = 0.f;
    for (int w = 0; w < 8; ++w) {
      ta += sa[w][lane];
      tb += sb[w][lane];
    }
    partial[int64_t(chunk) * N + n] = ta;
    partial[(int64_t(chunks) + chunk) * N + n] = tb;
  }
}

__global__ void colsum_finish_kernel(float* dst_a, float* dst_b, const float* partial, int chunks, int N) {
  const int n = blockIdx.x * blockDim.x + threadIdx.x;
  if (n >= N) return;
  float a = 0.f, b = 0.f;
  for (int c = 0; c < chunks; ++c) {
    a += partial[int64_t(c) * N + n];
    b += partial[(int64_t(chunks) + c) * N + n];
  }
  dst_a[n] += a;
  if (dst_b) dst_b[n] += b;
}

void colsums(float* dst_a, float* dst_b, float* scratch, const uint16_t* dout, const uint16_t* inp, const float* mean,
             const float* rstd, int M, int N, cudaStream_t s) {
  const int chunks = (M + kColsumRows - 1) / kColsumRows;
  colsum_partial_kernel<<<dim3((N + 31) / 32, chunks), 256, 0, s>>>(scratch, dout, inp, mean, rstd, M, N);
  MXDP_CUDA_CHECK_LAUNCH();
  colsum_finish_kernel<<<(N + 255) / 256, 256, 0, s>>>(dst_a, dst_b, scratch, chunks, N);
  MXDP_CUDA_CHECK_LAUNCH();
}

// ---------------------------------------------------------------- classifier

struct MaxSum {
  float m, s;
};
// Commutative (bitwise): max is symmetric and the two products are added once.
__device__ __forceinline__ MaxSum combine(MaxSum a, MaxSum b) {
  const float m = fmaxf(a.m, b.m);
  if (m == -INFINITY) return {m, 0.f};
  return {m, a.s * expf(a.m - m) + b.s * expf(b.m - m)};
}

constexpr int kClsThreads = 512;

__global__ void classifier_kernel(uint16_t* logits, float* losses, const int32_t* targets, int V, int Vp,
                                  float grad_scale, bool write_grad) {
  __shared__ MaxSum warps[kClsThreads / 32];
  __shared__ float lse_sh;
  const int64_t row = blockIdx.x;
  uint16_t* z = logits + row * Vp;
  MaxSum acc{-INFINITY, 0.f};
  for (int v = threadIdx.x; v < V; v += kClsThreads) acc = combine(acc, MaxSum{ld(z, v), 1.f});
#pragma unroll
  for (int o = 16; o > 0; o /= 2) {
    MaxSum other{__shfl_xor_sync(0xffffffffu, acc.m, o), __shfl_xor_sync(0xffffffffu, acc.s, o)};
    acc = combine(acc, other);
  }
  if (threadIdx.x % 32 == 0) warps[threadIdx.x / 32] = acc;
  __syncthreads();
  if (threadIdx.x == 0) {
    MaxSum t = warps[0];
    for (int w = 1; w < kClsThreads / 32; ++w) t = combine(t, warps[w]);
    lse_sh = t.m + logf(t.s);
    losses[row] = lse_sh - ld(z, targets[row]);
  }
  __syncthreads();
  if (!write_grad) return;
  const float lse = lse_sh;
  const int target = targets[row];
  for (int v = threadIdx.x; v < Vp; v += kClsThreads) {
    float g = 0.f;
    if (v < V) g = (expf(ld(z, v) - lse) - (v == target ? 1.f : 0.f)) * grad_scale;
    z[v] = bf(g);
  }
}

__global__ void sum_to_double_kernel(const float* x, int n, double* out) {
  __shared__ double sh[1024];
  double s = 0;
  for (int i = threadIdx.x; i < n; i += 1024) s += double(x[i]);
  sh[threadIdx.x] = s;
  __syncthreads();
  for (int w = 512; w > 0; w /= 2) {
    if (int(threadIdx.x) < w) sh[threadIdx.x] += sh[threadIdx.x + w];
    __syncthreads();
  }
  if (threadIdx.x == 0) *out = sh[0];
}

// ---------------------------------------------------------------- elementwise

__global__ void residual_add_kernel(uint16_t* y, const uint16_t* a, const uint16_t* b, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    y[i] = bf(ld(a, i) + ld(b, i));
}
__global__ void f32_to_bf16_kernel(const float* x, uint16_t* y, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    y[i] = bf(x[i]);
}
__global__ void bf16_to_f32_kernel(const uint16_t* x, float* y, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    y[i] = ld(x, i);
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
  if (n_seg > 0) {
    wte_backward_kernel<<<dim3(n_seg, (C + 255) / 256), 256, 0, s>>>(dwte, dx, order, seg_start, seg_token, C);
    MXDP_CUDA_CHECK_LAUNCH();
  }
}

void layernorm_forward(uint16_t* out, float* mean, float* rstd, const uint16_t* inp, const uint16_t* w,
                       const uint16_t* b, int M, int C, cudaStream_t s) {
  layernorm_forward_kernel<<<(M + 7) / 8, 256, 0, s>>>(out, mean, rstd, inp, w, b, M, C);
  MXDP_CUDA_CHECK_LAUNCH();
}

void residual_layernorm_forward(uint16_t* res, uint16_t* out, float* mean, float* rstd, const uint16_t* a,
                                const uint16_t* b, const uint16_t* w, const uint16_t* bias, int M, int C,
                                cudaStream_t s) {
  residual_layernorm_forward_kernel<<<(M + 7) / 8, 256, 0, s>>>(res, out, mean, rstd, a, b, w, bias, M, C);
  MXDP_CUDA_CHECK_LAUNCH();
}

void layernorm_backward(uint16_t* dinp, bool accumulate, float* dw, float* db, float* scratch, const uint16_t* dout,
                        const uint16_t* inp, const uint16_t* w, const float* mean, const float* rstd, int M, int C,
                        cudaStream_t s) {
  layernorm_backward_kernel<<<(M + 7) / 8, 256, 0, s>>>(dinp, accumulate, dout, inp, w, mean, rstd, M, C);
  MXDP_CUDA_CHECK_LAUNCH();
  colsums(dw, db, scratch, dout, inp, mean, rstd, M, C, s);
}

void residual_add(uint16_t* y, const uint16_t* a, const uint16_t* b, int64_t n, cudaStream_t s) {
  residual_add_kernel<<<grid_for(n, 256), 256, 0, s>>>(y, a, b, n);
  MXDP_CUDA_CHECK_LAUNCH();
}

void bias_backward(float* dbias, float* scratch, const uint16_t* dout, int M, int N, cudaStream_t s) {
  colsums(dbias, nullptr, scratch, dout, nullptr, nullptr, nullptr, M, N, s);
}

void classifier(uint16_t* logits, float* losses, const int32_t* targets, int M, int V, int Vp, float grad_scale,
                bool write_grad, cudaStream_t s) {
  classifier_kernel<<<M, kClsThreads, 0, s>>>(logits, losses, targets, V, Vp, grad_scale, write_grad);
  MXDP_CUDA_CHECK_LAUNCH();
}

void sum_to_double(const float* x, int n, double* out, cudaStream_t s) {
  sum_to_double_kernel<<<1, 1024, 0, s>>>(x, n, out);
  MXDP_CUDA_CHECK_LAUNCH();
}

void f32_to_bf16(const float* x, uint16_t* y, int64_t n, cudaStream_t s) {
  if (n <= 0) return;
  f32_to_bf16_kernel<<<grid_for(n, 256), 256, 0, s>>>(x, y, n);
  MXDP_CUDA_CHECK_LAUNCH();
}

void bf16_to_f32(const uint16_t* x, float* y, int64_t n, cudaStream_t s) {
  if (n <= 0) return;
  bf16_to_f32_kernel<<<grid_for(n, 256), 256, 0, s>>>(x, y, n);
  MXDP_CUDA_CHECK_LAUNCH();
}

}  // namespace mxdp::cuda
