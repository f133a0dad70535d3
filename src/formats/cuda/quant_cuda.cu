// CUDA kernels of the block formats, in one file (over 500 lines) because the
// formats' kernels share their vectorized loads and lane indexing. Every value
// is computed with the codecs of formats/codec.h, in the same order of fp32 operations as the CPU reference
// (quant.cpp), so the outputs agree bit for bit. amax folds are exact and
// order-free (max of non-NaN values), so any reduction tree gives the same bits.
#include "formats/cuda/quant_cuda.h"

#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <climits>
#include <cstdint>

#include "util/check.h"
#include "formats/cuda/fp8_encode.cuh"
#include "util/cuda_check.h"
#include "util/cuda_launch.h"
#include "formats/codec.h"

namespace mxdp::cuda {

namespace detail {
// Hardware: bit-identical to the integer codec for all 2^32 inputs (gputest_quant
// checks it on the device) and 2x faster on H200: the integer encoder reaches
// 0.52x of a device copy in the row-wise quantize, the hardware one 1.02x.
const Fp8Encoder kDefaultEncoder = Fp8Encoder::Hardware;
}

namespace {

constexpr int kThreads = 256;
constexpr unsigned kFullMask = 0xFFFFFFFFu;
constexpr int64_t kMaxGrid = 1 << 16;  // grid-stride kernels: enough CTAs to fill any GPU
constexpr int kF4PerWarp = 128;        // vectorized kernels: 4 float4 per lane

int64_t grid_stride_blocks(int64_t items) {
  return std::max<int64_t>(1, grid_blocks(items, kThreads, kMaxGrid));
}
unsigned vec_blocks(int64_t n4) {
  const int64_t warps = ceil_div(n4, kF4PerWarp);
  const int64_t blocks = ceil_div(warps * 32, kThreads);
  MXDP_CHECK(blocks <= INT_MAX, "tensor too large for one launch: ", n4 * 4, " elements");
  return unsigned(blocks);
}
bool aligned(const void* p, int a) { return reinterpret_cast<uintptr_t>(p) % a == 0; }

void check_args(const char* fn, int64_t rows, int64_t cols, const void* a, const void* b,
                const void* c) {
  MXDP_CHECK(rows >= 0 && cols >= 0, fn, ": rows and cols must be >= 0, got ", rows, " x ", cols);
  const bool empty = rows == 0 || cols == 0;
  MXDP_CHECK(empty || (a && b && c), fn, ": null pointer for a ", rows, " x ", cols, " matrix");
}

// ---- FP8 encoders (cuda/fp8_encode.cuh) ------------------------------------------
using device::encode1;
using device::encode4;
using device::fold4;
using device::kEnc;
using device::warp_max;

// ---- amax ---------------------------------------------------------------------
template <bool kVec>
__global__ void __launch_bounds__(kThreads) amax_kernel(const float* __restrict__ x, int64_t n,
                                                       unsigned* __restrict__ out) {
  const int64_t stride = int64_t(gridDim.x) * blockDim.x;
  const int64_t tid = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  float am = 0.0f;
  int64_t done = 0;
  if constexpr (kVec) {
    const float4* x4 = reinterpret_cast<const float4*>(x);
    const int64_t n4 = n / 4;
    for (int64_t i = tid; i < n4; i += stride) am = fold4(am, x4[i]);
    done = n4 * 4;
  }
  for (int64_t i = done + tid; i < n; i += stride) am = codec::amax_fold(am, x[i]);
  am = warp_max(am, 32);
  __shared__ float part[kThreads / 32];
  if ((threadIdx.x & 31) == 0) part[threadIdx.x / 32] = am;
  __syncthreads();
  if (threadIdx.x < 32) {
    am = threadIdx.x < kThreads / 32 ? part[threadIdx.x] : 0.0f;
    am = warp_max(am, 32);
    // Non-negative floats order like their bits: an integer max is exact.
    if (threadIdx.x == 0 && am > 0.0f) atomicMax(out, __float_as_uint(am));
  }
}

// ---- vectorized kernels' indexing and loads ------------------------------------
// Lane l of warp w handles float4s (or code words) w*128 + j*32 + l, j = 0..3.
__device__ __forceinline__ int64_t vec_base(int lane) {
  return ((int64_t(blockIdx.x) * blockDim.x + threadIdx.x) >> 5) * kF4PerWarp + lane;
}
// The quantizers' loads: a lane's 4 float4s x[base + 32 j] (zeros past n4).
__device__ __forceinline__ void load_f4(const float4* __restrict__ x, int64_t base, int64_t n4,
                                        float4 (&v)[4]) {
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    const int64_t i = base + j * 32;
    v[j] = i < n4 ? x[i] : make_float4(0.f, 0.f, 0.f, 0.f);
  }
}

// ---- MXFP8 row-wise -------------------------------------------------------------
// Vectorized: n % 32 == 0, 16-byte aligned x. Lane l of warp w handles float4s
// w*128 + j*32 + l (j = 0..3): every load is a coalesced 512-byte warp access;
// a 32-element block is 8 float4s = 8 lanes, reduced by 3 xor-shuffles.
template <Fp8Kind K, ScaleRounding R, detail::Fp8Encoder E>
__global__ void __launch_bounds__(kThreads)
    mxfp8_quant_vec(const float4* __restrict__ x, int64_t n4, uint32_t* __restrict__ codes,
                    uint8_t* __restrict__ scales) {
  const int lane = threadIdx.x & 31;
  const int64_t base = vec_base(lane);
  float4 v[4];
  load_f4(x, base, n4, v);
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    const int64_t i = base + j * 32;
    const float am = warp_max(fold4(0.0f, v[j]), 8);
    const uint8_t s = codec::mxfp8_scale_byte(am, K, R);
    const float m = codec::e8m0_multiplier(s);
    const uint32_t q = encode4<K, E>(v[j].x * m, v[j].y * m, v[j].z * m, v[j].w * m);
    if (i < n4) {  // whole blocks are in or out: n4 % 8 == 0
      codes[i] = q;
      if ((lane & 7) == 0) scales[i >> 3] = s;
    }
  }
}

// The vectorized dequants' loads (MXFP8 and NVFP4): a lane's 4 code words
// codes[base + 32 j] (0 past n4) and their block scales scales[i >> kScaleShift]
// (a scale per 8 words for MXFP8, per 4 for NVFP4), all issued before any decode.
template <int kScaleShift, class Code>
__device__ __forceinline__ void load_codes_scales(const Code* __restrict__ codes,
                                                  const uint8_t* __restrict__ scales, int64_t base,
                                                  int64_t n4, uint32_t (&q)[4], uint8_t (&s)[4]) {
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    const int64_t i = base + j * 32;
    q[j] = i < n4 ? codes[i] : 0u;
    s[j] = i < n4 ? scales[i >> kScaleShift] : uint8_t(0);
  }
}

template <Fp8Kind K>
__global__ void __launch_bounds__(kThreads)
    mxfp8_dequant_vec(const uint32_t* __restrict__ codes, const uint8_t* __restrict__ scales,
                      int64_t n4, float4* __restrict__ y) {
  const int lane = threadIdx.x & 31;
  const int64_t base = vec_base(lane);
  uint32_t q[4];
  uint8_t s[4];
  load_codes_scales<3>(codes, scales, base, n4, q, s);
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    const int64_t i = base + j * 32;
    float4 o;
    o.x = codec::mxfp8_dequant(uint8_t(q[j]), s[j], K);
    o.y = codec::mxfp8_dequant(uint8_t(q[j] >> 8), s[j], K);
    o.z = codec::mxfp8_dequant(uint8_t(q[j] >> 16), s[j], K);
    o.w = codec::mxfp8_dequant(uint8_t(q[j] >> 24), s[j], K);
    if (i < n4) y[i] = o;
  }
}

// General shapes: one warp per 32-element block (lane = element).
template <Fp8Kind K, ScaleRounding R>
__global__ void __launch_bounds__(kThreads)
    mxfp8_quant_rowwise_any(const float* __restrict__ x, int64_t rows, int64_t cols,
                            uint8_t* __restrict__ codes, uint8_t* __restrict__ scales) {
  const int lane = threadIdx.x & 31;
  const int64_t nb = ceil_div(cols, kMxfp8Block), total = rows * nb;
  const int64_t nwarps = int64_t(gridDim.x) * blockDim.x / 32;
  for (int64_t b = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) / 32; b < total; b += nwarps) {
    const int64_t r = b / nb, c = (b % nb) * kMxfp8Block + lane;
    const bool present = c < cols;
    const float v = present ? x[r * cols + c] : 0.0f;
    const float am = warp_max(codec::amax_fold(0.0f, v), 32);
    const uint8_t s = codec::mxfp8_scale_byte(am, K, R);
    if (present) codes[r * cols + c] = encode1<K, kEnc>(v * codec::e8m0_multiplier(s));
    if (lane == 0) scales[b] = s;
  }
}

template <Fp8Kind K>
__global__ void __launch_bounds__(kThreads)
    mxfp8_dequant_rowwise_any(const uint8_t* __restrict__ codes, const uint8_t* __restrict__ scales,
                              int64_t rows, int64_t cols, float* __restrict__ y) {
  const int64_t nb = ceil_div(cols, kMxfp8Block), n = rows * cols;
  const int64_t stride = int64_t(gridDim.x) * blockDim.x;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    const int64_t r = i / cols, c = i % cols;
    y[i] = codec::mxfp8_dequant(codes[i], scales[r * nb + c / kMxfp8Block], K);
  }
}

// ---- MXFP8 column-wise ------------------------------------------------------------
// One thread per 32x1 block, adjacent threads on adjacent columns (coalesced rows).
template <Fp8Kind K, ScaleRounding R>
__global__ void __launch_bounds__(kThreads)
    mxfp8_quant_colwise_any(const float* __restrict__ x, int64_t rows, int64_t cols,
                            uint8_t* __restrict__ codes, uint8_t* __restrict__ scales) {
  const int64_t total = ceil_div(rows, kMxfp8Block) * cols;
  const int64_t stride = int64_t(gridDim.x) * blockDim.x;
  for (int64_t t = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; t < total; t += stride) {
    const int64_t rb = t / cols, c = t % cols, r0 = rb * kMxfp8Block;
    const int64_t nr = rows - r0 < kMxfp8Block ? rows - r0 : kMxfp8Block;
    float v[kMxfp8Block];
    float am = 0.0f;
#pragma unroll
    for (int i = 0; i < kMxfp8Block; ++i) {
      v[i] = i < nr ? x[(r0 + i) * cols + c] : 0.0f;
      am = codec::amax_fold(am, v[i]);
    }
    const uint8_t s = codec::mxfp8_scale_byte(am, K, R);
    scales[t] = s;  // t == rb * cols + c
    const float m = codec::e8m0_multiplier(s);
#pragma unroll
    for (int i = 0; i < kMxfp8Block; ++i)
      if (i < nr) codes[(r0 + i) * cols + c] = encode1<K, kEnc>(v[i] * m);
  }
}

template <Fp8Kind K>
__global__ void __launch_bounds__(kThreads)
    mxfp8_dequant_colwise_any(const uint8_t* __restrict__ codes, const uint8_t* __restrict__ scales,
                              int64_t rows, int64_t cols, float* __restrict__ y) {
  const int64_t n = rows * cols, stride = int64_t(gridDim.x) * blockDim.x;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    const int64_t r = i / cols, c = i % cols;
    y[i] = codec::mxfp8_dequant(codes[i], scales[(r / kMxfp8Block) * cols + c], K);
  }
}

// ---- NVFP4 --------------------------------------------------------------------------
__device__ __forceinline__ Nvfp4TensorScale load_tensor_scale(const float* d_amax, float amax) {
  return codec::nvfp4_tensor_scale_of(d_amax ? *d_amax : amax);
}

// Vectorized: n % 16 == 0, 16-byte aligned x. A 16-element block is 4 float4s = 4 lanes.
__global__ void __launch_bounds__(kThreads)
    nvfp4_quant_vec(const float4* __restrict__ x, int64_t n4, const float* __restrict__ d_amax,
                    float h_amax, uint16_t* __restrict__ codes, uint8_t* __restrict__ scales) {
  const int lane = threadIdx.x & 31;
  const int64_t base = vec_base(lane);
  const Nvfp4TensorScale ts = load_tensor_scale(d_amax, h_amax);
  float4 v[4];
  load_f4(x, base, n4, v);
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    const int64_t i = base + j * 32;
    const float am = warp_max(fold4(0.0f, v[j]), 4);
    const uint8_t sb = codec::nvfp4_block_scale(am, ts.s_enc);
    const float m = codec::nvfp4_block_multiplier(sb, ts.s_dec);
    const uint32_t q = uint32_t(codec::e2m1_from_f32(v[j].x * m)) |
                       (uint32_t(codec::e2m1_from_f32(v[j].y * m)) << 4) |
                       (uint32_t(codec::e2m1_from_f32(v[j].z * m)) << 8) |
                       (uint32_t(codec::e2m1_from_f32(v[j].w * m)) << 12);
    if (i < n4) {  // n4 % 4 == 0: whole blocks
      codes[i] = uint16_t(q);
      if ((lane & 3) == 0) scales[i >> 2] = sb;
    }
  }
}

__global__ void __launch_bounds__(kThreads)
    nvfp4_dequant_vec(const uint16_t* __restrict__ codes, const uint8_t* __restrict__ scales,
                      const float* __restrict__ d_sdec, float h_sdec, int64_t n4,
                      float4* __restrict__ y) {
  const int lane = threadIdx.x & 31;
  const int64_t base = vec_base(lane);
  const float s_dec = d_sdec ? *d_sdec : h_sdec;
  uint32_t q[4];
  uint8_t s[4];
  load_codes_scales<2>(codes, scales, base, n4, q, s);
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    const int64_t i = base + j * 32;
    float4 o;
    o.x = codec::nvfp4_dequant(uint8_t(q[j] & 0xF), s[j], s_dec);
    o.y = codec::nvfp4_dequant(uint8_t((q[j] >> 4) & 0xF), s[j], s_dec);
    o.z = codec::nvfp4_dequant(uint8_t((q[j] >> 8) & 0xF), s[j], s_dec);
    o.w = codec::nvfp4_dequant(uint8_t((q[j] >> 12) & 0xF), s[j], s_dec);
    if (i < n4) y[i] = o;
  }
}

// General shapes: one half-warp per 16-element block; even lanes write a byte
// holding their element (low nibble) and the next one (high nibble, 0 past the row end).
__global__ void __launch_bounds__(kThreads)
    nvfp4_quant_any(const float* __restrict__ x, int64_t rows, int64_t cols,
                    const float* __restrict__ d_amax, float h_amax, uint8_t* __restrict__ codes,
                    uint8_t* __restrict__ scales) {
  const int lane = threadIdx.x & 31, hl = lane & 15;
  const int64_t nb = ceil_div(cols, kNvfp4Block), total = rows * nb, row_bytes = ceil_div(cols, 2);
  const int64_t nwarps = int64_t(gridDim.x) * blockDim.x / 32;
  const Nvfp4TensorScale ts = load_tensor_scale(d_amax, h_amax);
  for (int64_t w = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) / 32; 2 * w < total; w += nwarps) {
    const int64_t b = 2 * w + (lane >> 4);
    const bool valid = b < total;
    const int64_t r = b / nb, c = (b % nb) * kNvfp4Block + hl;
    const bool present = valid && c < cols;
    const float v = present ? x[r * cols + c] : 0.0f;
    const float am = warp_max(codec::amax_fold(0.0f, v), 16);
    const uint8_t sb = codec::nvfp4_block_scale(am, ts.s_enc);
    const float m = codec::nvfp4_block_multiplier(sb, ts.s_dec);
    const uint32_t q = present ? codec::e2m1_from_f32(v * m) : 0u;
    const uint32_t next = __shfl_down_sync(kFullMask, q, 1);
    if (present && (hl & 1) == 0) codes[r * row_bytes + c / 2] = uint8_t(q | (next << 4));
    if (valid && hl == 0) scales[b] = sb;
  }
}

__global__ void __launch_bounds__(kThreads)
    nvfp4_dequant_any(const uint8_t* __restrict__ codes, const uint8_t* __restrict__ scales,
                      const float* __restrict__ d_sdec, float h_sdec, int64_t rows, int64_t cols,
                      float* __restrict__ y) {
  const int64_t nb = ceil_div(cols, kNvfp4Block), row_bytes = ceil_div(cols, 2), n = rows * cols;
  const int64_t stride = int64_t(gridDim.x) * blockDim.x;
  const float s_dec = d_sdec ? *d_sdec : h_sdec;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    const int64_t r = i / cols, c = i % cols;
    const uint8_t byte = codes[r * row_bytes + c / 2];
    const uint8_t nib = (c & 1) ? uint8_t(byte >> 4) : uint8_t(byte & 0xF);
    y[i] = codec::nvfp4_dequant(nib, scales[r * nb + c / kNvfp4Block], s_dec);
  }
}

__global__ void nvfp4_tensor_scale_kernel(const float* d_amax, Nvfp4TensorScale* out) {
  *out = codec::nvfp4_tensor_scale_of(*d_amax);
}

// ---- dispatch helpers ---------------------------------------------------------------
void nvfp4_quantize_impl(const float* x, int64_t rows, int64_t cols, const float* d_amax,
                         float h_amax, uint8_t* codes, uint8_t* scales, cudaStream_t stream) {
  const int64_t n = rows * cols;
  if (n == 0) return;
  if (cols % kNvfp4Block == 0 && aligned(x, 16) && aligned(codes, 2)) {
    const int64_t n4 = n / 4;
    nvfp4_quant_vec<<<vec_blocks(n4), kThreads, 0, stream>>>(
        reinterpret_cast<const float4*>(x), n4, d_amax, h_amax, reinterpret_cast<uint16_t*>(codes), scales);
  } else {
    const int64_t warps = ceil_div(rows * ceil_div(cols, kNvfp4Block), 2);
    nvfp4_quant_any<<<grid_stride_blocks(warps * 32), kThreads, 0, stream>>>(x, rows, cols, d_amax, h_amax,
                                                                             codes, scales);
  }
  MXDP_CUDA_CHECK_LAUNCH();
}

void nvfp4_dequantize_impl(const uint8_t* codes, const uint8_t* scales, const float* d_sdec,
                           float h_sdec, int64_t rows, int64_t cols, float* y, cudaStream_t stream) {
  const int64_t n = rows * cols;
  if (n == 0) return;
  if (cols % kNvfp4Block == 0 && aligned(y, 16) && aligned(codes, 2)) {
    const int64_t n4 = n / 4;
    nvfp4_dequant_vec<<<vec_blocks(n4), kThreads, 0, stream>>>(
        reinterpret_cast<const uint16_t*>(codes), scales, d_sdec, h_sdec, n4, reinterpret_cast<float4*>(y));
  } else {
    nvfp4_dequant_any<<<grid_stride_blocks(n), kThreads, 0, stream>>>(codes, scales, d_sdec, h_sdec, rows,
                                                                      cols, y);
  }
  MXDP_CUDA_CHECK_LAUNCH();
}

}  // namespace

// ---- public API ---------------------------------------------------------------------
void amax(const float* x, int64_t n, float* d_amax, cudaStream_t stream) {
  MXDP_CHECK(d_amax != nullptr, "cuda::amax: null pointer");
  MXDP_CUDA_CHECK(cudaMemsetAsync(d_amax, 0, sizeof(float), stream));
  amax_fold_into(x, n, d_amax, stream);
}

void amax_fold_into(const float* x, int64_t n, float* d_amax, cudaStream_t stream) {
  MXDP_CHECK(n >= 0, "cuda::amax: n must be >= 0, got ", n);
  MXDP_CHECK(d_amax != nullptr && (x != nullptr || n == 0), "cuda::amax: null pointer");
  if (n == 0) return;
  unsigned* out = reinterpret_cast<unsigned*>(d_amax);
  if (aligned(x, 16))
    amax_kernel<true><<<grid_stride_blocks(ceil_div(n, 4)), kThreads, 0, stream>>>(x, n, out);
  else
    amax_kernel<false><<<grid_stride_blocks(n), kThreads, 0, stream>>>(x, n, out);
  MXDP_CUDA_CHECK_LAUNCH();
}

void detail::mxfp8_quantize_rowwise(const float* x, int64_t rows, int64_t cols, Mxfp8Config cfg,
                                    uint8_t* codes, uint8_t* scales, Fp8Encoder enc,
                                    cudaStream_t stream) {
  check_args("cuda::mxfp8_quantize_rowwise", rows, cols, x, codes, scales);
  const int64_t n = rows * cols;
  if (n == 0) return;
  const bool vec = cols % kMxfp8Block == 0 && aligned(x, 16) && aligned(codes, 4);
  auto launch = [&]<Fp8Kind K, ScaleRounding R>() {
    if (vec) {
      const int64_t n4 = n / 4;
      auto* xx = reinterpret_cast<const float4*>(x);
      auto* cc = reinterpret_cast<uint32_t*>(codes);
      if (enc == Fp8Encoder::Hardware)
        mxfp8_quant_vec<K, R, Fp8Encoder::Hardware><<<vec_blocks(n4), kThreads, 0, stream>>>(xx, n4, cc, scales);
      else
        mxfp8_quant_vec<K, R, Fp8Encoder::Integer><<<vec_blocks(n4), kThreads, 0, stream>>>(xx, n4, cc, scales);
    } else {
      const int64_t blocks = rows * ceil_div(cols, kMxfp8Block);
      mxfp8_quant_rowwise_any<K, R><<<grid_stride_blocks(blocks * 32), kThreads, 0, stream>>>(x, rows, cols,
                                                                                             codes, scales);
    }
  };
  const bool e4 = cfg.elem == Fp8Kind::E4M3, rc = cfg.rounding == ScaleRounding::RCeil;
  if (e4 && rc) launch.template operator()<Fp8Kind::E4M3, ScaleRounding::RCeil>();
  else if (e4) launch.template operator()<Fp8Kind::E4M3, ScaleRounding::Floor>();
  else if (rc) launch.template operator()<Fp8Kind::E5M2, ScaleRounding::RCeil>();
  else launch.template operator()<Fp8Kind::E5M2, ScaleRounding::Floor>();
  MXDP_CUDA_CHECK_LAUNCH();
}

void mxfp8_quantize_rowwise(const float* x, int64_t rows, int64_t cols, Mxfp8Config cfg,
                            uint8_t* codes, uint8_t* scales, cudaStream_t stream) {
  detail::mxfp8_quantize_rowwise(x, rows, cols, cfg, codes, scales, detail::kDefaultEncoder, stream);
}

void mxfp8_dequantize_rowwise(const uint8_t* codes, const uint8_t* scales, int64_t rows,
                              int64_t cols, Fp8Kind elem, float* y, cudaStream_t stream) {
  check_args("cuda::mxfp8_dequantize_rowwise", rows, cols, codes, scales, y);
  const int64_t n = rows * cols;
  if (n == 0) return;
  if (cols % kMxfp8Block == 0 && aligned(y, 16) && aligned(codes, 4)) {
    const int64_t n4 = n / 4;
    auto* cc = reinterpret_cast<const uint32_t*>(codes);
    auto* yy = reinterpret_cast<float4*>(y);
    if (elem == Fp8Kind::E4M3)
      mxfp8_dequant_vec<Fp8Kind::E4M3><<<vec_blocks(n4), kThreads, 0, stream>>>(cc, scales, n4, yy);
    else
      mxfp8_dequant_vec<Fp8Kind::E5M2><<<vec_blocks(n4), kThreads, 0, stream>>>(cc, scales, n4, yy);
  } else if (elem == Fp8Kind::E4M3) {
    mxfp8_dequant_rowwise_any<Fp8Kind::E4M3><<<grid_stride_blocks(n), kThreads, 0, stream>>>(codes, scales, rows,
                                                                                            cols, y);
  } else {
    mxfp8_dequant_rowwise_any<Fp8Kind::E5M2><<<grid_stride_blocks(n), kThreads, 0, stream>>>(codes, scales, rows,
                                                                                            cols, y);
  }
  MXDP_CUDA_CHECK_LAUNCH();
}

void mxfp8_quantize_colwise(const float* x, int64_t rows, int64_t cols, Mxfp8Config cfg,
                            uint8_t* codes, uint8_t* scales, cudaStream_t stream) {
  check_args("cuda::mxfp8_quantize_colwise", rows, cols, x, codes, scales);
  if (rows == 0 || cols == 0) return;
  const int64_t g = grid_stride_blocks(ceil_div(rows, kMxfp8Block) * cols);
  const bool e4 = cfg.elem == Fp8Kind::E4M3, rc = cfg.rounding == ScaleRounding::RCeil;
  if (e4 && rc)
    mxfp8_quant_colwise_any<Fp8Kind::E4M3, ScaleRounding::RCeil><<<g, kThreads, 0, stream>>>(x, rows, cols, codes, scales);
  else if (e4)
    mxfp8_quant_colwise_any<Fp8Kind::E4M3, ScaleRounding::Floor><<<g, kThreads, 0, stream>>>(x, rows, cols, codes, scales);
  else if (rc)
    mxfp8_quant_colwise_any<Fp8Kind::E5M2, ScaleRounding::RCeil><<<g, kThreads, 0, stream>>>(x, rows, cols, codes, scales);
  else
    mxfp8_quant_colwise_any<Fp8Kind::E5M2, ScaleRounding::Floor><<<g, kThreads, 0, stream>>>(x, rows, cols, codes, scales);
  MXDP_CUDA_CHECK_LAUNCH();
}

void mxfp8_dequantize_colwise(const uint8_t* codes, const uint8_t* scales, int64_t rows,
                              int64_t cols, Fp8Kind elem, float* y, cudaStream_t stream) {
  check_args("cuda::mxfp8_dequantize_colwise", rows, cols, codes, scales, y);
  const int64_t n = rows * cols;
  if (n == 0) return;
  if (elem == Fp8Kind::E4M3)
    mxfp8_dequant_colwise_any<Fp8Kind::E4M3><<<grid_stride_blocks(n), kThreads, 0, stream>>>(codes, scales, rows, cols, y);
  else
    mxfp8_dequant_colwise_any<Fp8Kind::E5M2><<<grid_stride_blocks(n), kThreads, 0, stream>>>(codes, scales, rows, cols, y);
  MXDP_CUDA_CHECK_LAUNCH();
}

void nvfp4_quantize_rowwise(const float* x, int64_t rows, int64_t cols, float tensor_amax,
                            uint8_t* codes, uint8_t* scales, cudaStream_t stream) {
  check_args("cuda::nvfp4_quantize_rowwise", rows, cols, x, codes, scales);
  MXDP_CHECK(!codec::f32_isnan(tensor_amax) && tensor_amax >= 0.0f,
             "cuda::nvfp4_quantize_rowwise: tensor amax must be >= 0 and not NaN, got ", tensor_amax);
  nvfp4_quantize_impl(x, rows, cols, nullptr, tensor_amax, codes, scales, stream);
}

void nvfp4_quantize_rowwise_device_amax(const float* x, int64_t rows, int64_t cols,
                                        const float* d_tensor_amax, uint8_t* codes,
                                        uint8_t* scales, cudaStream_t stream) {
  check_args("cuda::nvfp4_quantize_rowwise_device_amax", rows, cols, x, codes, scales);
  MXDP_CHECK(d_tensor_amax != nullptr, "cuda::nvfp4_quantize_rowwise_device_amax: null amax pointer");
  nvfp4_quantize_impl(x, rows, cols, d_tensor_amax, 0.0f, codes, scales, stream);
}

void nvfp4_tensor_scale(const float* d_tensor_amax, Nvfp4TensorScale* d_scale, cudaStream_t stream) {
  MXDP_CHECK(d_tensor_amax != nullptr && d_scale != nullptr, "cuda::nvfp4_tensor_scale: null pointer");
  nvfp4_tensor_scale_kernel<<<1, 1, 0, stream>>>(d_tensor_amax, d_scale);
  MXDP_CUDA_CHECK_LAUNCH();
}

void nvfp4_dequantize_rowwise(const uint8_t* codes, const uint8_t* scales, float s_dec,
                              int64_t rows, int64_t cols, float* y, cudaStream_t stream) {
  check_args("cuda::nvfp4_dequantize_rowwise", rows, cols, codes, scales, y);
  nvfp4_dequantize_impl(codes, scales, nullptr, s_dec, rows, cols, y, stream);
}

void nvfp4_dequantize_rowwise_device_sdec(const uint8_t* codes, const uint8_t* scales,
                                          const float* d_s_dec, int64_t rows, int64_t cols,
                                          float* y, cudaStream_t stream) {
  check_args("cuda::nvfp4_dequantize_rowwise_device_sdec", rows, cols, codes, scales, y);
  MXDP_CHECK(d_s_dec != nullptr, "cuda::nvfp4_dequantize_rowwise_device_sdec: null s_dec pointer");
  nvfp4_dequantize_impl(codes, scales, d_s_dec, 0.0f, rows, cols, y, stream);
}

}  // namespace mxdp::cuda
