// Kernels and GEMM plumbing behind fp8_linear.h.
//
// act_quantize: one CTA of 256 threads per 128x128 tile, in two phases.
// Phase 1: each thread takes 8 consecutive elements of a row (16 threads a
// row, 8 passes), applies bias and op, and for the rows operand folds the
// 128-element amax across its 16 lanes and writes 8 codes at once. For the
// cols operand the bf16 values go to shared memory, one 16-byte chunk per
// thread and pass. Phase 2: each warp takes 8 columns (one chunk column) at a
// time, each lane 4 consecutive rows of them: one warp amax per column and, per
// lane, 4 codes as one 32-bit store, so a warp writes a column's 128 codes at
// once. The tile is stored with chunk k of row r at k ^ ((r >> 2) & 7): both
// phases' 16-byte accesses then hit 8 different bank groups per quarter-warp
// (no bank conflicts). Divisions by a block scale are codec::block_div (one
// division per block, then a product and two FMAs per element).
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
constexpr int kChunks = kTile / 8;  // 16-byte chunks (8 bf16) in a tile row

// Where chunk k of tile row r lives in shared memory (see the top of the file).
__device__ __forceinline__ int chunk_at(int r, int k) { return r * kChunks + (k ^ ((r >> 2) & 7)); }

// GELU, tanh form, through the logistic function: 0.5 (1 + tanh(u)) = sigma(2u),
// so gelu(x) = x sigma(2u) and gelu'(x) = sigma + 2 x sigma (1 - sigma) u'(x)
// with u = sqrt(2/pi) (x + 0.044715 x^3): an exp and a reciprocal (two MUFU
// operations, a few ulp) instead of tanhf's longer sequence, and no
// cancellation in 1 + tanh for large negative x. The values differ from the
// tanhf formula (the CPU model's) by a few fp32 ulp before the bf16 rounding.
__device__ __forceinline__ float gelu_sigmoid(float x) {  // sigma(2u(x))
  constexpr float kS2 = 2.f * 0.7978845608028654f;         // 2 sqrt(2 / pi)
  return __fdividef(1.f, 1.f + __expf(-kS2 * (x + 0.044715f * x * x * x)));
}
__device__ __forceinline__ float gelu_tanh(float x) { return x * gelu_sigmoid(x); }
__device__ __forceinline__ float gelu_grad(float x) {
  constexpr float kS = 0.7978845608028654f;
  const float sg = gelu_sigmoid(x);
  return sg + 2.f * x * (sg - sg * sg) * kS * (1.f + 3.f * 0.044715f * x * x);
}
__device__ __forceinline__ float round_bf16(float x) { return codec::bf16_to_f32(codec::bf16_from_f32(x)); }
using device::amax_fold;  // every fold here starts at 0 (see fp8_encode.cuh)

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
// Element i (0-7) of a chunk of 8 bf16.
__device__ __forceinline__ float half_of(const uint4& v, int i) {
  const uint32_t w = i < 2 ? v.x : i < 4 ? v.y : i < 6 ? v.z : v.w;
  return codec::bf16_to_f32(uint16_t(i & 1 ? w >> 16 : w & 0xffffu));
}
__device__ __forceinline__ uint32_t encode4_scaled(float a, float b, float c, float d, codec::BlockDivisor q) {
  return device::encode4<Fp8Kind::E4M3, device::kEnc>(codec::block_div(a, q), codec::block_div(b, q),
                                                       codec::block_div(c, q), codec::block_div(d, q));
}

// Phase 2: the cols operand of the tile from its bf16 values in shared memory.
__device__ __forceinline__ void cols_phase(const uint4* tile, const Fp8Slot& cols, int m0, int n0, int N, int Mp) {
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
#pragma unroll 1
  for (int k = warp; k < kChunks; k += kThreads / 32) {
    uint4 v[4];  // rows 4 lane .. 4 lane + 3, columns 8 k .. 8 k + 7
#pragma unroll
    for (int j = 0; j < 4; ++j) v[j] = tile[chunk_at(4 * lane + j, k)];
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      float f[4], am = 0.f;
#pragma unroll
      for (int j = 0; j < 4; ++j) am = amax_fold(am, f[j] = half_of(v[j], i));
      am = device::warp_max(am, 32);
      const float s = codec::fp8_block_scale(am, Fp8Kind::E4M3);
      const int n = n0 + 8 * k + i;
      *reinterpret_cast<uint32_t*>(cols.codes + int64_t(n) * Mp + m0 + 4 * lane) =
          encode4_scaled(f[0], f[1], f[2], f[3], codec::block_divisor(s));
      if (lane == 0) cols.scales[int64_t(m0 / kTile) * N + n] = s;
    }
  }
}

template <ActOp kOp, bool kBias, bool kRows, bool kCols>
__global__ void __launch_bounds__(kThreads) act_quantize_kernel(ActQuant q, int M, int N, int Mp) {
  constexpr int kPasses = kTile * 16 / kThreads;  // rows of the tile a thread visits
  __shared__ uint4 tile[kCols ? kTile * kChunks : 1];
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
      for (int i = 0; i < 8; ++i) am = amax_fold(am, v[i]);
      am = device::warp_max(am, 16);
      const float s = codec::fp8_block_scale(am, Fp8Kind::E4M3);
      const codec::BlockDivisor d = codec::block_divisor(s);
      *reinterpret_cast<uint2*>(q.rows.codes + int64_t(m) * N + n0 + c) =
          make_uint2(encode4_scaled(v[0], v[1], v[2], v[3], d), encode4_scaled(v[4], v[5], v[6], v[7], d));
      if (seg == 0) q.rows.scales[int64_t(blockIdx.x) * Mp + m] = s;
    }
    if constexpr (kCols) tile[chunk_at(r, seg)] = kOp == ActOp::Identity && !kBias ? raw[pass] : pack8(v);
  }
  if constexpr (kCols) {
    __syncthreads();
    cols_phase(tile, q.cols, m0, n0, N, Mp);
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
