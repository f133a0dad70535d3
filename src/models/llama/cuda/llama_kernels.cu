// Kernels of the GPU Llama; see llama_kernels.h for the contract of each.
#include "models/llama/cuda/llama_kernels.h"

#include <algorithm>

#include "models/cuda/act_values.cuh"
#include "models/cuda/model_kernels.cuh"
#include "models/cuda/norm_backward.h"
#include "util/check.h"
#include "util/cuda_check.h"

namespace mxdp::cuda::llama {

namespace {

// The helpers shared with GPT-2's kernels (ld, bf, warp_sum, residual_add8;
// on the host aligned16, check_rows and grid_for): models/cuda/model_kernels.cuh.
using device::bf;
using device::ld;
using device::residual_add8;
using device::warp_sum;

// 8 consecutive bf16 values in one 16-byte access (load<8>, store<8>; the
// callers check the alignment): models/cuda/bf16_vectors.cuh.
using device::load;
using device::store;

// ---------------------------------------------------------------- embedding

__global__ void embedding_forward_kernel(uint16_t* x, const int32_t* tokens, const uint16_t* embed, int M, int C) {
  const int c8 = C / 8;
  const int64_t n = int64_t(M) * c8;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t m = i / c8;
    const int k = int(i % c8);
    *reinterpret_cast<uint4*>(x + m * C + 8 * k) =
        *reinterpret_cast<const uint4*>(embed + int64_t(tokens[m]) * C + 8 * k);
  }
}

// ---------------------------------------------------------------- RMSNorm

// One warp per row; lane l takes the 8-value chunks l, l+32, ... in every
// pass, so a lane reads back only what it wrote. ss: the lane's partial sum of
// squares. out null: only rstd is written (FP8 compute, whose act_quantize
// makes the operands of the output from x and rstd: act_values.cuh).
__device__ __forceinline__ void rms_row(uint16_t* out, float* rstd, const uint16_t* x, const uint16_t* w, int64_t m,
                                        int C, float eps, float ss) {
  const int lane = threadIdx.x % 32, chunks = C / 8;
  const float r = 1.f / sqrtf(warp_sum(ss) / float(C) + eps);
  if (lane == 0) rstd[m] = r;
  if (!out) return;
  for (int k = lane; k < chunks; k += 32) {
    float f[8], g[8];
    load(x + 8 * k, f);
    load(w + 8 * k, g);
#pragma unroll
    for (int i = 0; i < 8; ++i) f[i] = device::rmsnorm_value(f[i], r, g[i]);
    store(out + m * C + 8 * k, f);
  }
}

__global__ void rmsnorm_forward_kernel(uint16_t* out, float* rstd, const uint16_t* inp, const uint16_t* w, int M,
                                       int C, float eps) {
  const int64_t m = blockIdx.x * int64_t(blockDim.x / 32) + threadIdx.x / 32;
  if (m >= M) return;
  const uint16_t* x = inp + m * C;
  float ss = 0.f;
  for (int k = threadIdx.x % 32; k < C / 8; k += 32) {
    float f[8];
    load(x + 8 * k, f);
#pragma unroll
    for (int i = 0; i < 8; ++i) ss += f[i] * f[i];
  }
  rms_row(out, rstd, x, w, m, C, eps, ss);
}

__global__ void residual_rmsnorm_forward_kernel(uint16_t* res, uint16_t* out, float* rstd, const uint16_t* a,
                                                const uint16_t* b, const uint16_t* w, int M, int C, float eps) {
  const int64_t m = blockIdx.x * int64_t(blockDim.x / 32) + threadIdx.x / 32;
  if (m >= M) return;
  float ss = 0.f;
  for (int k = threadIdx.x % 32; k < C / 8; k += 32) {
    float f[8];
    residual_add8(res + m * C + 8 * k, a + m * C + 8 * k, b + m * C + 8 * k, f);
#pragma unroll
    for (int i = 0; i < 8; ++i) ss += f[i] * f[i];
  }
  rms_row(out, rstd, res + m * C, w, m, C, eps, ss);
}

// ---------------------------------------------------------------- RoPE

// One block per row (grid-stride); its threads take the row's rotated pairs
// j = (head h of the NH + KV q and k heads) * hd/2 + i, consecutive j reading
// consecutive values. 32-bit index arithmetic inside a row.
__global__ void rope_kernel(uint16_t* qkv, const float* cs, const float* sn, int T, int M, int NH, int KV, int hd,
                            bool inverse) {
  const int half = hd / 2, pairs = (NH + KV) * half;
  const int64_t S = int64_t(NH + 2 * KV) * hd;
  for (int m = blockIdx.x; m < M; m += gridDim.x) {
    const int t = m % T;
    const float* c = cs + int64_t(t) * half;
    const float* sr = sn + int64_t(t) * half;
    uint16_t* row = qkv + int64_t(m) * S;
    for (int j = threadIdx.x; j < pairs; j += blockDim.x) {
      const int h = j / half, i = j - h * half;
      const float s = inverse ? -sr[i] : sr[i];
      uint16_t* x = row + h * hd;
      const float x1 = ld(x, i), x2 = ld(x, i + half);
      x[i] = bf(x1 * c[i] - x2 * s);
      x[i + half] = bf(x2 * c[i] + x1 * s);
    }
  }
}

// The same rotation, 8 consecutive pairs a thread (head_dim a multiple of 16):
// two 16-byte accesses of x, two of cos and two of sin, consecutive threads
// taking consecutive groups of a row (the scalar kernel's 2-byte accesses ran
// at half the memory bandwidth).
__global__ void rope8_kernel(uint16_t* qkv, const float* cs, const float* sn, int T, int M, int NH, int KV, int hd,
                             bool inverse) {
  const int half = hd / 2, groups = (NH + KV) * (half / 8);
  const int64_t S = int64_t(NH + 2 * KV) * hd, n = int64_t(M) * groups;
  for (int64_t g = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; g < n; g += int64_t(gridDim.x) * blockDim.x) {
    const int64_t m = g / groups;
    const int j = int(g - m * groups), h = j / (half / 8), i = (j - h * (half / 8)) * 8;
    const int64_t t = m % T;
    uint16_t* x = qkv + m * S + int64_t(h) * hd;
    float x1[8], x2[8], c[8], sr[8];
    load(x + i, x1);
    load(x + i + half, x2);
    *reinterpret_cast<float4*>(c) = *reinterpret_cast<const float4*>(cs + t * half + i);
    *reinterpret_cast<float4*>(c + 4) = *reinterpret_cast<const float4*>(cs + t * half + i + 4);
    *reinterpret_cast<float4*>(sr) = *reinterpret_cast<const float4*>(sn + t * half + i);
    *reinterpret_cast<float4*>(sr + 4) = *reinterpret_cast<const float4*>(sn + t * half + i + 4);
    float o1[8], o2[8];
#pragma unroll
    for (int e = 0; e < 8; ++e) {
      const float s = inverse ? -sr[e] : sr[e];
      o1[e] = x1[e] * c[e] - x2[e] * s;
      o2[e] = x2[e] * c[e] + x1[e] * s;
    }
    store(x + i, o1);
    store(x + i + half, o2);
  }
}

// ---------------------------------------------------------------- SwiGLU

// 8 outputs per thread.
__global__ void swiglu_forward_kernel(uint16_t* out, const uint16_t* gu, int64_t M, int F) {
  const int f8 = F / 8;
  const int64_t n = M * f8;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t m = i / f8;
    const int k = int(i % f8);
    float g[8], u[8];
    load(gu + m * 2 * F + 8 * k, g);
    load(gu + m * 2 * F + F + 8 * k, u);
#pragma unroll
    for (int e = 0; e < 8; ++e) g[e] = device::swiglu_value(g[e], u[e]);  // act_quantize's SwiGLU op: the same
    store(out + m * F + 8 * k, g);
  }
}

__global__ void swiglu_backward_kernel(uint16_t* dgu, const uint16_t* dout, const uint16_t* gu, int64_t M, int F) {
  const int f8 = F / 8;
  const int64_t n = M * f8;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t m = i / f8;
    const int k = int(i % f8);
    float g[8], u[8], d[8], dg[8], du[8];
    load(gu + m * 2 * F + 8 * k, g);
    load(gu + m * 2 * F + F + 8 * k, u);
    load(dout + m * F + 8 * k, d);
#pragma unroll
    for (int e = 0; e < 8; ++e) {  // act_quantize's SwiGLU-gradient op: the same
      dg[e] = device::swiglu_grad_value(d[e], g[e], u[e], /*gate=*/true);
      du[e] = device::swiglu_grad_value(d[e], g[e], u[e], /*gate=*/false);
    }
    store(dgu + m * 2 * F + 8 * k, dg);
    store(dgu + m * 2 * F + F + 8 * k, du);
  }
}

}  // namespace

void embedding_forward(uint16_t* x, const int32_t* tokens, const uint16_t* embed, int M, int C, cudaStream_t s) {
  check_rows("embedding_forward", C, {x, embed});
  embedding_forward_kernel<<<grid_for(int64_t(M) * C / 8, 256), 256, 0, s>>>(x, tokens, embed, M, C);
  MXDP_CUDA_CHECK_LAUNCH();
}

void rmsnorm_forward(uint16_t* out, float* rstd, const uint16_t* inp, const uint16_t* w, int M, int C, float eps,
                     cudaStream_t s) {
  check_rows("rmsnorm_forward", C, {out, inp, w});
  rmsnorm_forward_kernel<<<(M + 7) / 8, 256, 0, s>>>(out, rstd, inp, w, M, C, eps);
  MXDP_CUDA_CHECK_LAUNCH();
}

void residual_rmsnorm_forward(uint16_t* res, uint16_t* out, float* rstd, const uint16_t* a, const uint16_t* b,
                              const uint16_t* w, int M, int C, float eps, cudaStream_t s) {
  check_rows("residual_rmsnorm_forward", C, {res, out, a, b, w});
  residual_rmsnorm_forward_kernel<<<(M + 7) / 8, 256, 0, s>>>(res, out, rstd, a, b, w, M, C, eps);
  MXDP_CUDA_CHECK_LAUNCH();
}

void rmsnorm_backward(uint16_t* dinp, bool accumulate, float* dw, float* scratch, const uint16_t* dout,
                      const uint16_t* inp, const uint16_t* w, const float* rstd, int M, int C, cudaStream_t s) {
  norm_backward({.kind = NormKind::RmsNorm,
                 .dinp = dinp,
                 .accumulate = accumulate,
                 .dw = dw,
                 .scratch = scratch,
                 .dout = dout,
                 .inp = inp,
                 .w = w,
                 .rstd = rstd},
                M, C, s);
}

void rope(uint16_t* qkv, const float* cs, const float* sn, int B, int T, int NH, int KV, int hd, bool inverse,
          cudaStream_t s) {
  MXDP_CHECK(hd % 2 == 0, "rope needs an even head dimension, got ", hd);
  const int64_t M = int64_t(B) * T;
  MXDP_CHECK(M < (int64_t(1) << 31), "rope: ", M, " rows are more than it indexes");
  if (hd % 16 == 0 && aligned16(qkv) && aligned16(cs) && aligned16(sn)) {
    const int64_t groups = M * (NH + KV) * (hd / 16);
    rope8_kernel<<<grid_for(groups, 256), 256, 0, s>>>(qkv, cs, sn, T, int(M), NH, KV, hd, inverse);
  } else {
    const int threads = std::min(256, ((NH + KV) * (hd / 2) + 31) / 32 * 32);
    rope_kernel<<<int(std::min<int64_t>(M, 1 << 16)), threads, 0, s>>>(qkv, cs, sn, T, int(M), NH, KV, hd, inverse);
  }
  MXDP_CUDA_CHECK_LAUNCH();
}

void swiglu_forward(uint16_t* out, const uint16_t* gate_up, int M, int F, cudaStream_t s) {
  check_rows("swiglu_forward", F, {out, gate_up});
  swiglu_forward_kernel<<<grid_for(int64_t(M) * F / 8, 256), 256, 0, s>>>(out, gate_up, M, F);
  MXDP_CUDA_CHECK_LAUNCH();
}

void swiglu_backward(uint16_t* dgate_up, const uint16_t* dout, const uint16_t* gate_up, int M, int F,
                     cudaStream_t s) {
  check_rows("swiglu_backward", F, {dgate_up, dout, gate_up});
  swiglu_backward_kernel<<<grid_for(int64_t(M) * F / 8, 256), 256, 0, s>>>(dgate_up, dout, gate_up, M, F);
  MXDP_CUDA_CHECK_LAUNCH();
}

}  // namespace mxdp::cuda::llama
