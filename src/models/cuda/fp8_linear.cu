// Kernels and GEMM plumbing behind fp8_linear.h.
//
// act_quantize: one CTA of 256 threads per 128x128 tile. Phase 1: each thread
// takes 8 consecutive elements of a row (16 threads a row, 8 passes), applies
// bias and op, and for the rows operand folds the 128-element amax across its
// 16 lanes and writes 8 codes at once. For the cols operand the bf16 values go
// to shared memory (row stride 130 halves: the column reads of phase 2 hit 32
// different banks); phase 2 gives each warp 16 columns, each column's 128
// values 4 per lane, one warp amax, and 32 consecutive code bytes a store.
#include "models/cuda/fp8_linear.h"

#include <cuda_runtime.h>

#include <algorithm>

#include "formats/codec.h"
#include "formats/cuda/fp8_encode.cuh"
#include "util/check.h"
#include "util/cuda_check.h"

namespace mxdp::cuda {

namespace {

constexpr int kTile = 128;
constexpr int kThreads = 256;
constexpr int kStride = kTile + 2;  // halves per shared row

__device__ __forceinline__ float gelu_tanh(float x) {
  constexpr float kS = 0.7978845608028654f;  // sqrt(2 / pi), as gelu_forward
  return 0.5f * x * (1.f + tanhf(kS * (x + 0.044715f * x * x * x)));
}
// d gelu_tanh / dx, the CPU model's gelu_backward formula.
__device__ __forceinline__ float gelu_grad(float x) {
  constexpr float kS = 0.7978845608028654f;
  const float th = tanhf(kS * (x + 0.044715f * x * x * x));
  return 0.5f * (1.f + th) + 0.5f * x * (1.f - th * th) * kS * (1.f + 3.f * 0.044715f * x * x);
}
__device__ __forceinline__ float round_bf16(float x) { return codec::bf16_to_f32(codec::bf16_from_f32(x)); }

__device__ __forceinline__ void unpack8(uint4 v, float* f) {
  const uint32_t w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    f[2 * i] = codec::bf16_to_f32(uint16_t(w[i] & 0xffffu));
    f[2 * i + 1] = codec::bf16_to_f32(uint16_t(w[i] >> 16));
  }
}
__device__ __forceinline__ void load8(const uint16_t* p, float* f) { unpack8(*reinterpret_cast<const uint4*>(p), f); }
__device__ __forceinline__ uint4 pack8(const float* f) {
  uint32_t w[4];
#pragma unroll
  for (int i = 0; i < 4; ++i)
    w[i] = uint32_t(codec::bf16_from_f32(f[2 * i])) | (uint32_t(codec::bf16_from_f32(f[2 * i + 1])) << 16);
  return make_uint4(w[0], w[1], w[2], w[3]);
}

template <ActOp kOp, bool kBias, bool kRows, bool kCols>
__global__ void __launch_bounds__(kThreads) act_quantize_kernel(ActQuant q, int M, int N, int Mp) {
  constexpr int kPasses = kTile * 16 / kThreads;  // rows of the tile a thread visits
  __shared__ uint16_t tile[kCols ? kTile * kStride : 1];
  const int n0 = blockIdx.x * kTile, m0 = blockIdx.y * kTile;
  const int seg = threadIdx.x & 15, c = seg * 8;  // the thread's 8 columns, the same in every pass
  // Every load first (x, and the pre-activation for the GELU gradient), so that
  // a thread has all its 16-byte reads in flight at once.
  uint4 raw[kPasses], raw_aux[kOp == ActOp::GeluGrad ? kPasses : 1];
#pragma unroll
  for (int pass = 0; pass < kPasses; ++pass) {
    const int m = m0 + pass * (kThreads / 16) + (threadIdx.x >> 4);
    const int64_t at = int64_t(m) * N + n0 + c;
    raw[pass] = m < M ? *reinterpret_cast<const uint4*>(q.x + at) : make_uint4(0, 0, 0, 0);
    if constexpr (kOp == ActOp::GeluGrad)
      raw_aux[pass] = m < M ? *reinterpret_cast<const uint4*>(q.aux + at) : make_uint4(0, 0, 0, 0);
  }
  float b[8];
  if constexpr (kBias) load8(q.bias + n0 + c, b);
#pragma unroll
  for (int pass = 0; pass < kPasses; ++pass) {
    const int r = pass * (kThreads / 16) + (threadIdx.x >> 4);
    const int m = m0 + r;
    const int64_t at = int64_t(m) * N + n0 + c;
    float v[8];
    unpack8(raw[pass], v);
    if (m < M) {
      if constexpr (kBias) {
#pragma unroll
        for (int i = 0; i < 8; ++i) v[i] = round_bf16(v[i] + b[i]);
        if (q.biased) *reinterpret_cast<uint4*>(q.biased + at) = pack8(v);
      }
      if constexpr (kOp == ActOp::Gelu) {
#pragma unroll
        for (int i = 0; i < 8; ++i) v[i] = round_bf16(gelu_tanh(v[i]));
      } else if constexpr (kOp == ActOp::GeluGrad) {
        float a[8];
        unpack8(raw_aux[pass], a);
#pragma unroll
        for (int i = 0; i < 8; ++i) v[i] = round_bf16(v[i] * gelu_grad(a[i]));
      }
      if (kOp != ActOp::Identity && q.out) *reinterpret_cast<uint4*>(q.out + at) = pack8(v);
    }
    if constexpr (kRows) {
      float am = 0.f;
#pragma unroll
      for (int i = 0; i < 8; ++i) am = codec::amax_fold(am, v[i]);
      am = device::warp_max(am, 16);
      const float s = codec::fp8_block_scale(am, Fp8Kind::E4M3);
      const uint32_t lo = device::encode4<Fp8Kind::E4M3, device::kEnc>(v[0] / s, v[1] / s, v[2] / s, v[3] / s);
      const uint32_t hi = device::encode4<Fp8Kind::E4M3, device::kEnc>(v[4] / s, v[5] / s, v[6] / s, v[7] / s);
      *reinterpret_cast<uint2*>(q.rows.codes + int64_t(m) * N + n0 + c) = make_uint2(lo, hi);
      if (seg == 0) q.rows.scales[int64_t(blockIdx.x) * Mp + m] = s;
    }
    if constexpr (kCols) {
      uint32_t* t = reinterpret_cast<uint32_t*>(tile + r * kStride + c);
#pragma unroll
      for (int i = 0; i < 4; ++i)
        t[i] = uint32_t(codec::bf16_from_f32(v[2 * i])) | (uint32_t(codec::bf16_from_f32(v[2 * i + 1])) << 16);
    }
  }
  if constexpr (kCols) {
    __syncthreads();
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
#pragma unroll 1
    for (int k = 0; k < kTile / (kThreads / 32); ++k) {
      const int c = warp * (kTile / (kThreads / 32)) + k;
      float v[4];
      float am = 0.f;
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        v[j] = codec::bf16_to_f32(tile[(lane + 32 * j) * kStride + c]);
        am = codec::amax_fold(am, v[j]);
      }
      am = device::warp_max(am, 32);
      const float s = codec::fp8_block_scale(am, Fp8Kind::E4M3);
      uint8_t* row = q.cols.codes + int64_t(n0 + c) * Mp + m0;
#pragma unroll
      for (int j = 0; j < 4; ++j) row[lane + 32 * j] = device::encode1<Fp8Kind::E4M3, device::kEnc>(v[j] / s);
      if (lane == 0) q.cols.scales[int64_t(blockIdx.y) * N + n0 + c] = s;
    }
  }
}

template <ActOp kOp, bool kBias>
void launch(const ActQuant& q, int M, int N, int Mp, cudaStream_t s) {
  const dim3 grid(unsigned(N / kTile), unsigned(Mp / kTile));
  const bool rows = q.rows.codes != nullptr, cols = q.cols.codes != nullptr;
  if (rows && cols) act_quantize_kernel<kOp, kBias, true, true><<<grid, kThreads, 0, s>>>(q, M, N, Mp);
  else if (rows) act_quantize_kernel<kOp, kBias, true, false><<<grid, kThreads, 0, s>>>(q, M, N, Mp);
  else if (cols) act_quantize_kernel<kOp, kBias, false, true><<<grid, kThreads, 0, s>>>(q, M, N, Mp);
  else act_quantize_kernel<kOp, kBias, false, false><<<grid, kThreads, 0, s>>>(q, M, N, Mp);
  MXDP_CUDA_CHECK_LAUNCH();
}

bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15) == 0; }

}  // namespace

void act_quantize(const ActQuant& q, int M, int N, cudaStream_t s) {
  MXDP_CHECK(M > 0 && N > 0 && N % kTile == 0, "act_quantize: M must be positive and N a multiple of 128, got ", M,
             " x ", N);
  const int64_t Mp = fp8_rows_padded(M);
  MXDP_CHECK(Mp / kTile <= 65535, "act_quantize: ", M, " rows is too many for one launch");
  MXDP_CHECK(q.x && aligned16(q.x), "act_quantize: x must be a 16-byte aligned device pointer");
  MXDP_CHECK(q.op != ActOp::GeluGrad || (q.aux && aligned16(q.aux)), "act_quantize: the GELU gradient needs aux");
  MXDP_CHECK(!q.bias || aligned16(q.bias), "act_quantize: bias must be 16-byte aligned");
  MXDP_CHECK((!q.rows.codes || q.rows.scales) && (!q.cols.codes || q.cols.scales), "act_quantize: codes without scales");
  if (q.bias) {
    switch (q.op) {
      case ActOp::Identity: launch<ActOp::Identity, true>(q, M, N, int(Mp), s); break;
      case ActOp::Gelu: launch<ActOp::Gelu, true>(q, M, N, int(Mp), s); break;
      case ActOp::GeluGrad: launch<ActOp::GeluGrad, true>(q, M, N, int(Mp), s); break;
    }
  } else {
    switch (q.op) {
      case ActOp::Identity: launch<ActOp::Identity, false>(q, M, N, int(Mp), s); break;
      case ActOp::Gelu: launch<ActOp::Gelu, false>(q, M, N, int(Mp), s); break;
      case ActOp::GeluGrad: launch<ActOp::GeluGrad, false>(q, M, N, int(Mp), s); break;
    }
  }
}

// ---- Fp8Linear ------------------------------------------------------------------

Fp8Linear::Fp8Linear(cudaStream_t stream) : s_(stream), gemm_(stream) {}

Fp8Linear::~Fp8Linear() {
  cudaStreamSynchronize(s_);
  for (Fp8Slot& sl : slots_) {
    cudaFree(sl.codes);
    cudaFree(sl.scales);
  }
  cudaFree(pad_);
}

void Fp8Linear::reserve(int M, int max_n) {
  const int64_t Mp = fp8_rows_padded(M), codes = Mp * max_n;
  if (codes <= cap_codes_ && Mp <= cap_m_) return;
  MXDP_CUDA_CHECK(cudaStreamSynchronize(s_));
  for (Fp8Slot& sl : slots_) {
    MXDP_CUDA_CHECK(cudaFree(sl.codes));
    MXDP_CUDA_CHECK(cudaFree(sl.scales));
    MXDP_CUDA_CHECK(cudaMalloc(&sl.codes, size_t(codes)));
    MXDP_CUDA_CHECK(cudaMalloc(&sl.scales, size_t(codes / kTile) * sizeof(float)));
  }
  MXDP_CUDA_CHECK(cudaFree(pad_));
  pad_ = nullptr;
  MXDP_CUDA_CHECK(cudaMalloc(&pad_, size_t(codes) * 2));
  cap_codes_ = codes;
  cap_m_ = Mp;
}

void Fp8Linear::write_rows(uint16_t* dst, int M, int N) {
  MXDP_CUDA_CHECK(cudaMemcpyAsync(dst, pad_, size_t(M) * N * 2, cudaMemcpyDeviceToDevice, s_));
}

void Fp8Linear::fprop(uint16_t* y, const Fp8Slot& x, const Fp8Weight& w, const uint16_t* bias, int M, int N, int K) {
  MXDP_CHECK(w.rows == N && w.cols == K, "internal: FP8 fprop of a ", w.rows, " x ", w.cols, " weight as ", N, " x ", K);
  const int Mp = int(fp8_rows_padded(M));
  MXDP_CHECK(int64_t(Mp) * N <= cap_codes_, "internal: Fp8Linear scratch too small");
  const Fp8Operand wo{w.codes, w.scales, Fp8Kind::E4M3, Fp8Scaling::Tiles128};
  uint16_t* d = Mp == M ? y : pad_;
  const bool fused = bias && gemm_.nt_bias(x.operand(), wo, Mp, N, K, bias, d);
  if (!fused) gemm_.fprop(x.operand(), wo, Mp, N, K, d);
  if (Mp != M) write_rows(y, M, N);
  if (bias && !fused) act_quantize({.x = y, .bias = bias, .biased = y}, M, N, s_);
}

void Fp8Linear::dgrad(uint16_t* dx, const Fp8Slot& dy, const Fp8Weight& wt, int M, int N, int K) {
  MXDP_CHECK(wt.rows == K && wt.cols == N, "internal: FP8 dgrad of a ", wt.rows, " x ", wt.cols, " W^T as ", K, " x ", N);
  const int Mp = int(fp8_rows_padded(M));
  MXDP_CHECK(int64_t(Mp) * K <= cap_codes_, "internal: Fp8Linear scratch too small");
  const Fp8Operand wo{wt.codes, wt.scales, Fp8Kind::E4M3, Fp8Scaling::Tiles128};
  gemm_.dgrad(dy.operand(), wo, Mp, N, K, Mp == M ? dx : pad_);
  if (Mp != M) write_rows(dx, M, K);
}

void Fp8Linear::wgrad(float* dw, const Fp8Slot& dy, const Fp8Slot& x, int M, int N, int K) {
  gemm_.wgrad(dy.operand(), x.operand(), int(fp8_rows_padded(M)), N, K, dw);
}

}  // namespace mxdp::cuda
