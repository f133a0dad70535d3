// The CUDA EngineOps in one file (over 500 lines): its kernels share the launch
// helpers, the scratch and the per-format codec dispatch, and must be compiled
// together with -fmad=false.
// Compiled with -fmad=false (src/CMakeLists.txt): adamw_element must round every
// multiply and add on its own to give the host's bits.
#include "engine/cuda/engine_ops_cuda.h"

#include <algorithm>
#include <array>
#include <climits>
#include <cstring>
#include <type_traits>

#include "util/check.h"
#include "formats/cuda/bf16_pack.cuh"
#include "formats/cuda/fp8_encode.cuh"
#include "formats/cuda/bf16_cuda.h"
#include "formats/cuda/quant_cuda.h"
#include "formats/cuda/fp8_block_cuda.h"
#include "formats/cuda/fp8_tile_quant.cuh"
#include "util/cuda_check.h"
#include "util/cuda_launch.h"
#include "formats/codec.h"
#include "engine/optimizer.h"

namespace mxdp::cuda {

namespace {

constexpr int kThreads = 256;
// sum_squares: a fixed grid, so the reduction tree depends on n only.
constexpr int kSumBlocks = 264;

constexpr int64_t kMaxBlocks = 65535 * 16;
int blocks_for(int64_t n) { return int(grid_blocks(n, kThreads, kMaxBlocks)); }

__global__ void scale_kernel(float* x, int64_t n, float c) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    x[i] = x[i] * c;
}
__global__ void adamw_kernel(float* p, float* m, float* v, const float* g, int64_t n, AdamWScalars s) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    adamw_element(p[i], m[i], v[i], g[i], s);
}
// ---- fused AdamW + stage --------------------------------------------------------
// One pass over (g, m, v, p): every element's AdamW (adamw_element, the host's
// bits under -fmad=false) on the gradient g * ctl->grad_scale (nothing when
// ctl->skip), then p quantized in registers. The scalars come from device
// memory: the host never waits for the grad norm. Vectorized kernels: lane l of warp w handles float4s
// w*32U + j*32 + l (j < U), so every load is a coalesced 512-byte warp access and
// each thread has 4U independent 16-byte loads in flight; an MXFP8 block (32
// elements = 8 float4s = 8 lanes) reduces its amax with 3 xor-shuffles. A
// general kernel (one warp per 32 elements, lane = element) takes what the
// vectorized one cannot: a partial last block, unaligned pointers.

using device::fold4;
using device::warp_max;
__device__ __forceinline__ void adamw4(float4& p, float4& m, float4& v, float4 g, float gs, const AdamWScalars& s) {
  adamw_element(p.x, m.x, v.x, g.x * gs, s);
  adamw_element(p.y, m.y, v.y, g.y * gs, s);
  adamw_element(p.z, m.z, v.z, g.z * gs, s);
  adamw_element(p.w, m.w, v.w, g.w * gs, s);
}
// Two values rounded to bf16, packed (codec::bf16_from_f32's bits, by the hardware pair conversion).
using device::bf16x2_rn;

enum class FusedOut : uint8_t { Bf16, Mxfp8, Amax };

// The vectorized kernel's work for one warp: float4s base + j * 32 (j < U) of
// n4, base = (the warp's first float4) + lane. Mxfp8: n4 % 8 == 0 (whole
// blocks) and the warp's first float4 a multiple of 8. Bf16 codes: uint2 per
// float4; Mxfp8 codes: uint32 per float4, one scale per 8 float4s; Amax: folded
// into am_all. Every lane of the warp calls it (the Mxfp8 block amax shuffles).
template <FusedOut O, ScaleRounding R, int U>
__device__ __forceinline__ void fused_vec_warp(float4* __restrict__ p, float4* __restrict__ m, float4* __restrict__ v,
                                               const float4* __restrict__ g, int64_t n4, int64_t base, bool update,
                                               float gs, const AdamWScalars& s, void* __restrict__ codes,
                                               uint8_t* __restrict__ scales, float& am_all) {
  const int lane = threadIdx.x & 31;
  float4 pp[U], mm[U], vv[U], gg[U];
  const float4 z = make_float4(0.f, 0.f, 0.f, 0.f);
#pragma unroll
  for (int j = 0; j < U; ++j) {
    const int64_t i = base + j * 32;
    const bool in = i < n4;
    gg[j] = in ? g[i] : z;
    mm[j] = in ? m[i] : z;
    vv[j] = in ? v[i] : z;
    pp[j] = in ? p[i] : z;
  }
#pragma unroll
  for (int j = 0; j < U; ++j) {
    const int64_t i = base + j * 32;
    const bool in = i < n4;
    if (update) adamw4(pp[j], mm[j], vv[j], gg[j], gs, s);
    if (in && update) {
      p[i] = pp[j];
      m[i] = mm[j];
      v[i] = vv[j];
    }
    if constexpr (O == FusedOut::Bf16) {
      if (in)
        static_cast<uint2*>(codes)[i] = make_uint2(bf16x2_rn(pp[j].x, pp[j].y), bf16x2_rn(pp[j].z, pp[j].w));
    } else if constexpr (O == FusedOut::Mxfp8) {
      const float am = warp_max(fold4(0.0f, pp[j]), 8);
      const uint8_t sb = codec::mxfp8_scale_byte(am, Fp8Kind::E4M3, R);
      const float mul = codec::e8m0_multiplier(sb);
      const uint32_t q = device::encode4<Fp8Kind::E4M3, device::kEnc>(pp[j].x * mul, pp[j].y * mul, pp[j].z * mul,
                                                                      pp[j].w * mul);
      if (in) {  // whole blocks are in or out: n4 % 8 == 0
        static_cast<uint32_t*>(codes)[i] = q;
        if ((lane & 7) == 0) scales[i >> 3] = sb;
      }
    } else {
      if (in) am_all = fold4(am_all, pp[j]);
    }
  }
}

// The general kernel's work for one warp: the 32 elements b * 32 + lane of n
// (any n, any alignment; those past n absent). Every lane of the warp calls it
// (the Mxfp8 block amax shuffles).
template <FusedOut O, ScaleRounding R>
__device__ __forceinline__ void fused_any_group(float* __restrict__ p, float* __restrict__ m, float* __restrict__ v,
                                                const float* __restrict__ g, int64_t n, int64_t b, bool update,
                                                float gs, const AdamWScalars& s, void* __restrict__ codes,
                                                uint8_t* __restrict__ scales, float& am_all) {
  const int lane = threadIdx.x & 31;
  const int64_t i = b * 32 + lane;
  const bool in = i < n;
  float pi = 0.0f, mi = 0.0f, vi = 0.0f;
  if (in) {
    pi = p[i];
    mi = m[i];
    vi = v[i];
    if (update) {
      adamw_element(pi, mi, vi, g[i] * gs, s);
      p[i] = pi;
      m[i] = mi;
      v[i] = vi;
    }
  }
  if constexpr (O == FusedOut::Bf16) {
    if (in) static_cast<uint16_t*>(codes)[i] = codec::bf16_from_f32(pi);
  } else if constexpr (O == FusedOut::Mxfp8) {
    const float am = warp_max(codec::amax_fold(0.0f, pi), 32);  // absent lanes fold 0: the amax of those present
    const uint8_t sb = codec::mxfp8_scale_byte(am, Fp8Kind::E4M3, R);
    if (in) static_cast<uint8_t*>(codes)[i] = device::encode1<Fp8Kind::E4M3, device::kEnc>(pi * codec::e8m0_multiplier(sb));
    if (lane == 0) scales[b] = sb;
  } else {
    am_all = codec::amax_fold(am_all, pi);
  }
}

// n4 float4s, one fused_vec_warp per warp; Mxfp8: n4 % 8 == 0 (whole blocks).
template <FusedOut O, ScaleRounding R, int U>
__global__ void __launch_bounds__(kThreads)
    adamw_fused_vec(float4* __restrict__ p, float4* __restrict__ m, float4* __restrict__ v,
                    const float4* __restrict__ g, int64_t n4, const StepControl* __restrict__ ctl, AdamWChoice c,
                    void* __restrict__ codes, uint8_t* __restrict__ scales, unsigned* __restrict__ amax) {
  const int lane = threadIdx.x & 31;
  const bool update = !ctl->skip;
  const float gs = ctl->grad_scale;
  const AdamWScalars s = adamw_pick(c, ctl->updates);
  const int64_t base = ((int64_t(blockIdx.x) * blockDim.x + threadIdx.x) >> 5) * (32 * U) + lane;
  float am_all = 0.0f;
  fused_vec_warp<O, R, U>(p, m, v, g, n4, base, update, gs, s, codes, scales, am_all);
  if constexpr (O == FusedOut::Amax) {
    am_all = warp_max(am_all, 32);
    __shared__ float part[kThreads / 32];
    if (lane == 0) part[threadIdx.x / 32] = am_all;
    __syncthreads();
    if (threadIdx.x < 32) {
      am_all = threadIdx.x < kThreads / 32 ? part[threadIdx.x] : 0.0f;
      am_all = warp_max(am_all, 32);
      // Non-negative floats order like their bits: an integer max is exact and order-free.
      if (threadIdx.x == 0 && am_all > 0.0f) atomicMax(amax, __float_as_uint(am_all));
    }
  }
}

// Any n, any alignment: one warp per 32 consecutive elements, lane = element.
template <FusedOut O, ScaleRounding R>
__global__ void __launch_bounds__(kThreads)
    adamw_fused_any(float* __restrict__ p, float* __restrict__ m, float* __restrict__ v, const float* __restrict__ g,
                    int64_t n, const StepControl* __restrict__ ctl, AdamWChoice c, void* __restrict__ codes,
                    uint8_t* __restrict__ scales, unsigned* __restrict__ amax) {
  const int lane = threadIdx.x & 31;
  const bool update = !ctl->skip;
  const float gs = ctl->grad_scale;
  const AdamWScalars s = adamw_pick(c, ctl->updates);
  const int64_t nb = (n + 31) / 32, nwarps = int64_t(gridDim.x) * blockDim.x / 32;
  float am_all = 0.0f;
  for (int64_t b = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) / 32; b < nb; b += nwarps)
    fused_any_group<O, R>(p, m, v, g, n, b, update, gs, s, codes, scales, am_all);
  if constexpr (O == FusedOut::Amax) {
    am_all = warp_max(am_all, 32);
    if (lane == 0 && am_all > 0.0f) atomicMax(amax, __float_as_uint(am_all));
  }
}

// ---- fused AdamW + stage for fp8b128 ----------------------------------------------
// One CTA a 128x128 tile of a slab piece (rows x cols): each of the thread's 16
// float4s gets its AdamW update (adamw4, as in the fused pass above), is
// written back and stays in registers for the tile quantizer
// (formats/cuda/fp8_tile_quant.cuh). The bits of adamw_amax, then
// fp8b128_quantize of the updated masters, without reading them again. Needs
// cols % 4 == 0, p, m, v and g 16-byte aligned, codes 4-byte aligned. The
// loads go 4 pieces at a time (16 loads in flight a thread) beside the 16
// updated pieces the thread keeps. kMinBlocks: CTAs an SM (2: at most 128
// registers a thread).
__device__ __forceinline__ void adamw_tile(float* __restrict__ p, float* __restrict__ m, float* __restrict__ v,
                                           const float* __restrict__ g, int64_t rows, int64_t cols,
                                           const StepControl* __restrict__ ctl, const AdamWChoice& c,
                                           uint8_t* __restrict__ codes, float* __restrict__ scales,
                                           device::TileAt at) {
  constexpr int kBatch = 4;
  const bool update = !ctl->skip;
  const float gs = ctl->grad_scale;
  const AdamWScalars s = adamw_pick(c, ctl->updates);
  float4 pp[device::kFp8TilePasses];
  const float4 z = make_float4(0.f, 0.f, 0.f, 0.f);
#pragma unroll
  for (int b = 0; b < device::kFp8TilePasses; b += kBatch) {
    float4 mm[kBatch], vv[kBatch], gg[kBatch];
#pragma unroll
    for (int j = 0; j < kBatch; ++j) {
      const int64_t i = device::tile_piece(b + j, rows, cols, at);
      pp[b + j] = i >= 0 ? *reinterpret_cast<const float4*>(p + i) : z;
      if (update) {
        mm[j] = i >= 0 ? *reinterpret_cast<const float4*>(m + i) : z;
        vv[j] = i >= 0 ? *reinterpret_cast<const float4*>(v + i) : z;
        gg[j] = i >= 0 ? *reinterpret_cast<const float4*>(g + i) : z;
      }
    }
    if (!update) continue;
#pragma unroll
    for (int j = 0; j < kBatch; ++j) {
      const int64_t i = device::tile_piece(b + j, rows, cols, at);
      if (i < 0) continue;  // stays zero: the quantizer folds zeros for pieces outside the matrix
      adamw4(pp[b + j], mm[j], vv[j], gg[j], gs, s);
      *reinterpret_cast<float4*>(p + i) = pp[b + j];
      *reinterpret_cast<float4*>(m + i) = mm[j];
      *reinterpret_cast<float4*>(v + i) = vv[j];
    }
  }
  device::tile_quant_regs(pp, rows, cols, codes, scales, at);
}

template <int kMinBlocks>
__global__ void __launch_bounds__(device::kFp8TileThreads, kMinBlocks)
    adamw_tile_quant_kernel(float* __restrict__ p, float* __restrict__ m, float* __restrict__ v,
                            const float* __restrict__ g, int64_t rows, int64_t cols, const StepControl* __restrict__ ctl,
                            AdamWChoice c, uint8_t* __restrict__ codes, float* __restrict__ scales) {
  adamw_tile(p, m, v, g, rows, cols, ctl, c, codes, scales, device::grid_tile());
}

__global__ void step_control_kernel(const double* partials, int rows, int stride, int cols, double clip,
                                    StepControl* ctl) {
  step_control_of(partials, rows, stride, cols, clip, *ctl);
}
__global__ void sum_into_kernel(const float* x, int64_t n, double* out) {
  double s = 0;
  for (int64_t i = 0; i < n; ++i) s += double(x[i]);
  *out = s;
}

__host__ __device__ __forceinline__ bool aligned(const void* q, int a) {
  return reinterpret_cast<uintptr_t>(q) % a == 0;
}

// The part of a range of n elements the vectorized code takes: the longest
// prefix of whole float4s (MXFP8: whole 32-element blocks) when every pointer
// allows 16-byte loads and the codes their vector stores, else none; the
// general code does the rest. Host (launch_fused) and device (the ranged
// kernel) split a range alike.
template <FusedOut O>
__host__ __device__ __forceinline__ int64_t vec_prefix(const float* p, const float* m, const float* v, const float* g,
                                                       const void* codes, int64_t n) {
  const int64_t quantum = O == FusedOut::Mxfp8 ? 32 : 4;
  const int code_align = O == FusedOut::Bf16 ? 8 : (O == FusedOut::Mxfp8 ? 4 : 1);
  const bool vec = aligned(p, 16) && aligned(m, 16) && aligned(v, 16) && aligned(g, 16) &&
                   (O == FusedOut::Amax || aligned(codes, code_align));
  return vec ? n / quantum * quantum : 0;
}

template <FusedOut O, ScaleRounding R>
void launch_fused(float* p, float* m, float* v, const float* g, int64_t n, const StepControl* ctl,
                  const AdamWChoice& ch, void* codes, uint8_t* scales, unsigned* amax, int unroll, cudaStream_t st) {
  // The vectorized kernel on the vector prefix, the general kernel on the rest.
  const int64_t nv = vec_prefix<O>(p, m, v, g, codes, n);
  if (nv > 0) {
    const int64_t n4 = nv / 4;
    auto go = [&]<int U>() {
      const int64_t blocks = ((n4 + 32 * U - 1) / (32 * U) * 32 + kThreads - 1) / kThreads;
      MXDP_CHECK(blocks <= INT_MAX, "fused AdamW: too many elements for one launch: ", n);
      adamw_fused_vec<O, R, U><<<unsigned(blocks), kThreads, 0, st>>>(
          reinterpret_cast<float4*>(p), reinterpret_cast<float4*>(m), reinterpret_cast<float4*>(v),
          reinterpret_cast<const float4*>(g), n4, ctl, ch, codes, scales, amax);
    };
    switch (unroll) {
      case 1: go.template operator()<1>(); break;
      case 4: go.template operator()<4>(); break;
      default: go.template operator()<2>(); break;
    }
    MXDP_CUDA_CHECK_LAUNCH();
  }
  if (nv < n) {
    const int64_t rest = n - nv, warps = (rest + 31) / 32;
    const int blocks = int(std::min<int64_t>((warps * 32 + kThreads - 1) / kThreads, 65535 * 16));
    void* c = nullptr;
    uint8_t* sc = nullptr;
    if constexpr (O == FusedOut::Bf16) c = static_cast<uint16_t*>(codes) + nv;
    if constexpr (O == FusedOut::Mxfp8) {
      c = static_cast<uint8_t*>(codes) + nv;
      sc = scales + nv / 32;
    }
    adamw_fused_any<O, R><<<blocks, kThreads, 0, st>>>(p + nv, m + nv, v + nv, g + nv, rest, ctl, ch, c, sc, amax);
    MXDP_CUDA_CHECK_LAUNCH();
  }
}

// ---- fused AdamW + stage over the ranges of a shard, one launch -----------------
// Each CTA takes one tile of kRangeTile elements of one range: its warps'
// fused_vec_warp chunks over the range's vector prefix, fused_any_group over
// the rest, both with the range's own pointers, so every element and MXFP8
// block gets what launch_fused of that range alone gives it. The table
// (AdamWRanges made by these ops) says where each range's tiles start; a CTA
// finds its range by binary search over it.

// A range as the ranged kernel reads it (no empty ones: each holds >= 1 tile).
struct RangeTiles {
  int64_t begin = 0, len = 0;
  int64_t first_tile = 0;  // CTAs first_tile .. first_tile + ceil(len / kRangeTile) - 1 are its
  int32_t choice = 0;
};
constexpr int kRangeUnroll = detail::kFusedUnroll;
constexpr int64_t kRangeTile = int64_t(kThreads) * 4 * kRangeUnroll;  // 8 warps x 32 * U float4s

// The step's AdamW choices, passed by value to the kernel.
struct RangeChoices {
  AdamWChoice c[kMaxAdamWChoices];
};
// Choice k, picked without a run-time index into parameter space (adamw_pick's note).
__device__ __forceinline__ AdamWChoice choice_at(const RangeChoices& ch, int k) {
  AdamWChoice c = ch.c[0];
#pragma unroll
  for (int i = 1; i < kMaxAdamWChoices; ++i)
    if (i == k) c = ch.c[i];
  return c;
}

// The range CTA `tile` works on: the last row whose first tile is <= tile.
template <class Row>
__device__ __forceinline__ Row range_of(const Row* __restrict__ t, int count, int64_t tile) {
  int lo = 0, hi = count - 1;
  while (lo < hi) {
    const int mid = lo + (hi - lo + 1) / 2;
    if (t[mid].first_tile <= tile)
      lo = mid;
    else
      hi = mid - 1;
  }
  return t[lo];
}

template <FusedOut O, ScaleRounding R>
__global__ void __launch_bounds__(kThreads)
    adamw_fused_ranges(float* __restrict__ p, float* __restrict__ m, float* __restrict__ v,
                       const float* __restrict__ g, const RangeTiles* __restrict__ ranges, int count,
                       const StepControl* __restrict__ ctl, RangeChoices ch, void* __restrict__ codes,
                       uint8_t* __restrict__ scales) {
  static_assert(O != FusedOut::Amax, "the ranged pass quantizes: formats without a tensor amax");
  constexpr int U = kRangeUnroll;
  const RangeTiles rg = range_of(ranges, count, blockIdx.x);
  const bool update = !ctl->skip;
  const float gs = ctl->grad_scale;
  const AdamWScalars s = adamw_pick(choice_at(ch, rg.choice), ctl->updates);
  // The range's own arrays: what adamw_quantize of the range alone would get.
  float* rp = p + rg.begin;
  float* rm = m + rg.begin;
  float* rv = v + rg.begin;
  const float* rgrad = g + rg.begin;
  const auto codes_at = [&](int64_t i) -> void* {
    if constexpr (O == FusedOut::Bf16)
      return static_cast<uint16_t*>(codes) + rg.begin + i;
    else
      return static_cast<uint8_t*>(codes) + rg.begin + i;
  };
  const auto scales_at = [&](int64_t i) -> uint8_t* {
    if constexpr (O == FusedOut::Mxfp8)
      return scales + (rg.begin + i) / kMxfp8Block;  // begin and i: whole blocks
    else
      return nullptr;
  };
  // This CTA's tile [lo, hi) of the range, split as launch_fused splits the range.
  const int64_t lo = (int64_t(blockIdx.x) - rg.first_tile) * kRangeTile;
  const int64_t hi = lo + kRangeTile < rg.len ? lo + kRangeTile : rg.len;
  const int64_t nv = vec_prefix<O>(rp, rm, rv, rgrad, codes_at(0), rg.len);
  const int warp = threadIdx.x / 32, lane = threadIdx.x & 31;
  float unused = 0.0f;
  if (lo < nv)  // the tile's float4s below nv / 4: warp w's chunk starts at lo / 4 + w * 32 * U
    fused_vec_warp<O, R, U>(reinterpret_cast<float4*>(rp), reinterpret_cast<float4*>(rm),
                            reinterpret_cast<float4*>(rv), reinterpret_cast<const float4*>(rgrad), nv / 4,
                            lo / 4 + warp * (32 * U) + lane, update, gs, s, codes_at(0), scales_at(0), unused);
  const int64_t at = lo > nv ? lo : nv;  // a multiple of 32: groups are the range's MXFP8 blocks
  for (int64_t b = warp; at + b * 32 < hi; b += kThreads / 32)
    fused_any_group<O, R>(rp + at, rm + at, rv + at, rgrad + at, hi - at, b, update, gs, s, codes_at(at),
                          scales_at(at), unused);
}

// What CudaOps::adamw_ranges makes: the list, and its rows (a range each, the
// CTAs it takes) in device memory for the ranged kernels' binary search.
template <class Row>
class CudaTiledRanges : public AdamWRanges {
 public:
  const Row* dev() const { return dev_.data(); }
  int count() const { return count_; }
  int64_t tiles() const { return tiles_; }

 protected:
  CudaTiledRanges(WeightFormat f, std::vector<AdamWRange> list) : AdamWRanges(f, std::move(list)) {}
  // The rows made (`tiles` CTAs in all) go to device memory once.
  void upload(EngineOps& ops, const std::vector<Row>& rows, int64_t tiles) {
    MXDP_CHECK(tiles <= INT_MAX, "adamw_ranges: too many tiles for one launch (", tiles, ")");
    tiles_ = tiles;
    count_ = int(rows.size());
    dev_ = DeviceArray<Row>(ops, rows.size());
    ops.copy_from_host(dev_.data(), rows.data(), dev_.bytes());
  }

 private:
  DeviceArray<Row> dev_;
  int count_ = 0;
  int64_t tiles_ = 0;
};

// A row-block format's: kRangeTile elements a CTA.
class CudaRanges final : public CudaTiledRanges<RangeTiles> {
 public:
  CudaRanges(EngineOps& ops, WeightFormat f, std::vector<AdamWRange> list) : CudaTiledRanges(f, std::move(list)) {
    std::vector<RangeTiles> rows;
    int64_t tiles = 0;
    for (const AdamWRange& a : this->list()) {
      if (a.len == 0) continue;  // no work, and no CTA
      rows.push_back({a.begin, a.len, tiles, a.choice});
      tiles += (a.len + kRangeTile - 1) / kRangeTile;
    }
    upload(ops, rows, tiles);
  }
};

template <FusedOut O, ScaleRounding R>
void launch_fused_ranges(float* p, float* m, float* v, const float* g, const CudaRanges& t, const StepControl* ctl,
                         const RangeChoices& ch, uint8_t* codes, uint8_t* scales, cudaStream_t st) {
  adamw_fused_ranges<O, R><<<unsigned(t.tiles()), kThreads, 0, st>>>(p, m, v, g, t.dev(), t.count(), ctl, ch, codes,
                                                                      scales);
  MXDP_CUDA_CHECK_LAUNCH();
}

// ---- fp8b128's fused AdamW + stage over the pieces of a shard, one launch ----------
// A slab format's ranges are matrices (AdamWRange::cols), one CTA a 128x128
// tile of one of them: adamw_tile with the range's pointers and the tile's
// place in the range's own grid, so every tile gets the bits
// adamw_tile_quant_kernel of that range alone gives it, and the launch has
// one tail, not one a piece (GPT-2 1558M's attn.proj is 169 tiles, under one
// wave).
struct SlabTiles {
  int64_t begin = 0, rows = 0, cols = 0;
  int64_t tc = 0;          // tiles a tile row
  int64_t first_tile = 0;  // CTAs first_tile .. first_tile + tiles - 1 are this range's
  int64_t scale_pos = 0;   // its first tile's scale in the shard's scales
  int32_t choice = 0;
};

__global__ void __launch_bounds__(device::kFp8TileThreads, 2)
    adamw_tile_quant_ranges(float* __restrict__ p, float* __restrict__ m, float* __restrict__ v,
                            const float* __restrict__ g, const SlabTiles* __restrict__ ranges, int count,
                            const StepControl* __restrict__ ctl, RangeChoices ch, uint8_t* __restrict__ codes,
                            float* __restrict__ scales) {
  const SlabTiles rg = range_of(ranges, count, blockIdx.x);
  const int64_t local = int64_t(blockIdx.x) - rg.first_tile;
  const device::TileAt at{local % rg.tc, local / rg.tc, rg.tc};
  adamw_tile(p + rg.begin, m + rg.begin, v + rg.begin, g + rg.begin, rg.rows, rg.cols, ctl,
             choice_at(ch, rg.choice), codes + rg.begin, scales + rg.scale_pos, at);
}

// A slab format's: a 128x128 tile of a piece a CTA; vec() when every range
// allows the one-pass kernel given aligned base pointers (cols and begin
// multiples of 4).
class CudaSlabRanges final : public CudaTiledRanges<SlabTiles> {
 public:
  CudaSlabRanges(EngineOps& ops, WeightFormat f, std::vector<AdamWRange> list) : CudaTiledRanges(f, std::move(list)) {
    std::vector<SlabTiles> rows;
    int64_t tiles = 0;
    for (const AdamWRange& a : this->list()) {
      if (a.len == 0) continue;  // no work, and no CTA
      const int64_t r = a.len / a.cols, tc = fp8b128_scale_cols(a.cols);
      rows.push_back({a.begin, r, a.cols, tc, tiles, a.scale_pos, a.choice});
      tiles += fp8b128_scale_rows(r) * tc;
      vec_ = vec_ && a.cols % 4 == 0 && a.begin % 4 == 0;
    }
    upload(ops, rows, tiles);
  }
  bool vec() const { return vec_; }

 private:
  bool vec_ = true;
};

// The one format -> (FusedOut, ScaleRounding) dispatch of the fused AdamW +
// quantize passes (the whole tensor's and the ranged one): the null-pointer
// check ("<op>: null pointer"), then launch.template operator()<O, R>(scales)
// for a format with a fused quantizing pass (Bf16 gets no scales), other(f)
// for any other format.
template <class Launch, class Other>
void dispatch_fused_quantize(const char* op, WeightFormat f, ScaleRounding r, const float* p, const float* m,
                             const float* v, const float* g, const StepControl* ctl, const uint8_t* codes,
                             uint8_t* scales, const Launch& launch, const Other& other) {
  MXDP_CHECK(p && m && v && g && ctl && codes && (f == WeightFormat::Bf16 || scales), op, ": null pointer");
  switch (f) {
    case WeightFormat::Bf16:
      launch.template operator()<FusedOut::Bf16, ScaleRounding::RCeil>(nullptr);
      break;
    case WeightFormat::Mxfp8:
      if (r == ScaleRounding::RCeil)
        launch.template operator()<FusedOut::Mxfp8, ScaleRounding::RCeil>(scales);
      else
        launch.template operator()<FusedOut::Mxfp8, ScaleRounding::Floor>(scales);
      break;
    default:
      other(f);
  }
}

// Dequantize straight into bf16 compute weights: bf16_rne(fp32 dequantized
// value), element by element the CPU's to_bf16(dequantize(x)).
// cols: fp8b128 only, the range is a (n / cols) x cols matrix of 128x128 tiles
// (ceil(cols / 128) a tile row: the last tile column may be partial).
template <WeightFormat F>
__device__ __forceinline__ float dequant_at(const uint8_t* codes, const uint8_t* scales, int64_t i, float s_dec,
                                            int64_t cols) {
  if constexpr (F == WeightFormat::Bf16) {
    return codec::bf16_to_f32(reinterpret_cast<const uint16_t*>(codes)[i]);
  } else if constexpr (F == WeightFormat::Mxfp8) {
    return codec::mxfp8_dequant(codes[i], scales[i / kMxfp8Block], Fp8Kind::E4M3);
  } else if constexpr (F == WeightFormat::Fp8b128) {
    const int64_t r = i / cols, c = i - r * cols;
    const int64_t tile_cols = (cols + kFp8Tile - 1) / kFp8Tile;
    const float s = reinterpret_cast<const float*>(scales)[(r / kFp8Tile) * tile_cols + c / kFp8Tile];
    return codec::fp8_block_dequant(codes[i], s, Fp8Kind::E4M3);
  } else {
    const uint8_t nib = (codes[i / 2] >> ((i & 1) * 4)) & 0xF;
    return codec::nvfp4_dequant(nib, scales[i / kNvfp4Block], s_dec);
  }
}
// Elements of one range, 8 consecutive ones per thread (`thread` of `threads`
// striding over it), dequantized into y as bf16_rne or fp32 of the value: one
// 16-byte store per 8 bf16 (two for fp32) when y is 16-byte aligned.
template <WeightFormat F, class Out>
__device__ __forceinline__ void dequant_range(const uint8_t* codes, const uint8_t* scales, int64_t n, float s_dec,
                                              int64_t cols, Out* y, int64_t thread, int64_t threads) {
  constexpr bool kBf16 = std::is_same_v<Out, uint16_t>;
  const auto put = [](float v) {
    if constexpr (kBf16) return codec::bf16_from_f32(v);
    else return v;
  };
  const bool vec = reinterpret_cast<uintptr_t>(y) % 16 == 0;
  for (int64_t i0 = 8 * thread; i0 < n; i0 += 8 * threads) {
    if (vec && i0 + 8 <= n) {
      Out v[8];
#pragma unroll
      for (int j = 0; j < 8; ++j) v[j] = put(dequant_at<F>(codes, scales, i0 + j, s_dec, cols));
      if constexpr (kBf16) {
        uint4 o;
        o.x = v[0] | (uint32_t(v[1]) << 16);
        o.y = v[2] | (uint32_t(v[3]) << 16);
        o.z = v[4] | (uint32_t(v[5]) << 16);
        o.w = v[6] | (uint32_t(v[7]) << 16);
        *reinterpret_cast<uint4*>(y + i0) = o;
      } else {
        reinterpret_cast<float4*>(y + i0)[0] = make_float4(v[0], v[1], v[2], v[3]);
        reinterpret_cast<float4*>(y + i0)[1] = make_float4(v[4], v[5], v[6], v[7]);
      }
    } else {
      for (int64_t i = i0; i < n && i < i0 + 8; ++i) y[i] = put(dequant_at<F>(codes, scales, i, s_dec, cols));
    }
  }
}
template <WeightFormat F>
__global__ void dequant_bf16_kernel(const uint8_t* codes, const uint8_t* scales, int64_t n, float s_dec,
                                    const float* d_amax, int64_t cols, uint16_t* y) {
  if (d_amax) s_dec = codec::nvfp4_tensor_scale_of(*d_amax).s_dec;  // NVFP4, tensor amax in device memory
  dequant_range<F>(codes, scales, n, s_dec, cols, y, blockIdx.x * int64_t(blockDim.x) + threadIdx.x,
                   int64_t(gridDim.x) * blockDim.x);
}
template <WeightFormat F>
void launch_dequant_bf16(const uint8_t* codes, const uint8_t* scales, int64_t n, float s_dec, uint16_t* y,
                         cudaStream_t st, const float* d_amax = nullptr, int64_t cols = 0) {
  const int blocks = int(std::min<int64_t>((n + 8 * kThreads - 1) / (8 * kThreads), 65535 * 16));
  dequant_bf16_kernel<F><<<blocks, kThreads, 0, st>>>(codes, scales, n, s_dec, d_amax, cols, y);
  MXDP_CUDA_CHECK_LAUNCH();
}

// Every piece of an unpack in one launch: blockIdx.y is the piece, the blocks
// in x stride over its elements. Element by element what dequantize gives.
template <WeightFormat F, class Out>
__global__ void dequant_pieces_kernel(const UnpackPiece* pieces) {
  const UnpackPiece pc = pieces[blockIdx.y];
  float s_dec = 0.0f;
  if constexpr (F == WeightFormat::Nvfp4) s_dec = codec::nvfp4_tensor_scale_of(*pc.amax).s_dec;
  dequant_range<F>(pc.codes, pc.scales, pc.len, s_dec, pc.cols, static_cast<Out*>(pc.dst),
                   blockIdx.x * int64_t(blockDim.x) + threadIdx.x, int64_t(gridDim.x) * blockDim.x);
}

// Pass 1: each block sums a fixed strided subset in fp64 and reduces it in a
// fixed tree; pass 2: one thread adds the block sums in order.
__global__ void sum_squares_blocks(const float* x, int64_t n, double* partial) {
  __shared__ double sh[kThreads];
  double acc = 0;
  for (int64_t i = blockIdx.x * int64_t(kThreads) + threadIdx.x; i < n; i += int64_t(kSumBlocks) * kThreads)
    acc += double(x[i]) * double(x[i]);
  sh[threadIdx.x] = acc;
  __syncthreads();
  for (int w = kThreads / 2; w > 0; w /= 2) {
    if (int(threadIdx.x) < w) sh[threadIdx.x] += sh[threadIdx.x + w];
    __syncthreads();
  }
  if (threadIdx.x == 0) partial[blockIdx.x] = sh[0];
}
__global__ void sum_partials(const double* partial, double* out) {
  double s = 0;
  for (int i = 0; i < kSumBlocks; ++i) s += partial[i];
  *out = s;
}

class CudaOps final : public EngineOps {
 public:
  explicit CudaOps(cudaStream_t s) : stream_(s) {
    if (!stream_) {
      MXDP_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
      own_stream_ = true;
    }
    MXDP_CUDA_CHECK(cudaMalloc(&scratch_, (kSumBlocks + 1) * sizeof(double) + 4 * sizeof(float)));
  }
  ~CudaOps() override {
    cudaStreamSynchronize(stream_);
    for (cudaEvent_t e : events_)
      if (e) cudaEventDestroy(e);
    cudaFree(scratch_);
    if (own_stream_) cudaStreamDestroy(stream_);
  }
  bool device_memory() const override { return true; }
  void* stream() override { return stream_; }

  void* alloc(size_t bytes) override {
    if (!bytes) return nullptr;
    void* p = nullptr;
    MXDP_CUDA_CHECK(cudaMalloc(&p, bytes));
    MXDP_CUDA_CHECK(cudaMemsetAsync(p, 0, bytes, stream_));
    return p;
  }
  void release(void* p) override {
    if (!p) return;
    sync();
    MXDP_CUDA_CHECK(cudaFree(p));
  }
  void zero(void* p, size_t bytes) override {
    if (bytes) MXDP_CUDA_CHECK(cudaMemsetAsync(p, 0, bytes, stream_));
  }
  void copy(void* dst, const void* src, size_t bytes) override {
    if (bytes) MXDP_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, stream_));
  }
  void copy_to_host(void* host, const void* src, size_t bytes) override {
    if (bytes) MXDP_CUDA_CHECK(cudaMemcpyAsync(host, src, bytes, cudaMemcpyDeviceToHost, stream_));
    sync();
  }
  void copy_from_host(void* dst, const void* host, size_t bytes) override {
    if (!bytes) return;
    MXDP_CUDA_CHECK(cudaMemcpyAsync(dst, host, bytes, cudaMemcpyHostToDevice, stream_));
    sync();  // the host buffer may go away
  }
  float amax(const float* x, int64_t n) override {
    float* d = reinterpret_cast<float*>(scratch_ + kSumBlocks + 1);
    cuda::amax(x, n, d, stream_);
    float h = 0;
    copy_to_host(&h, d, sizeof h);
    return h;
  }
  void quantize(WeightFormat f, ScaleRounding r, const float* x, int64_t n, const float* tensor_amax, uint8_t* codes,
                uint8_t* scales, int64_t cols) override {
    check_tensor_amax(f, tensor_amax, "quantize");
    check_slab_range(f, n, cols, "quantize");
    switch (f) {
      case WeightFormat::Bf16: to_bf16(x, reinterpret_cast<uint16_t*>(codes), n); break;
      case WeightFormat::Mxfp8:
        cuda::mxfp8_quantize_rowwise(x, 1, n, {Fp8Kind::E4M3, r}, codes, scales, stream_);
        break;
      case WeightFormat::Nvfp4:
        cuda::nvfp4_quantize_rowwise_device_amax(x, 1, n, tensor_amax, codes, scales, stream_);
        break;
      case WeightFormat::Fp8b128:
        if (n > 0) cuda::fp8b128_quantize(x, n / cols, cols, codes, reinterpret_cast<float*>(scales), stream_);
        break;
    }
  }
  void dequantize(WeightFormat f, const uint8_t* codes, const uint8_t* scales, int64_t n, const float* tensor_amax,
                  void* out, ComputeDType dt, int64_t cols) override {
    check_tensor_amax(f, tensor_amax, "dequantize");
    check_slab_range(f, n, cols, "dequantize");
    if (n <= 0) return;
    if (dt == ComputeDType::BF16) {
      uint16_t* y = static_cast<uint16_t*>(out);
      switch (f) {
        case WeightFormat::Bf16: copy(y, codes, size_t(n) * 2); break;
        case WeightFormat::Mxfp8: launch_dequant_bf16<WeightFormat::Mxfp8>(codes, scales, n, 0.f, y, stream_); break;
        case WeightFormat::Nvfp4:
          launch_dequant_bf16<WeightFormat::Nvfp4>(codes, scales, n, 0.f, y, stream_, tensor_amax);
          break;
        case WeightFormat::Fp8b128:
          launch_dequant_bf16<WeightFormat::Fp8b128>(codes, scales, n, 0.f, y, stream_, nullptr, cols);
          break;
      }
      return;
    }
    float* y = static_cast<float*>(out);
    switch (f) {
      case WeightFormat::Bf16: from_bf16(reinterpret_cast<const uint16_t*>(codes), y, n); break;
      case WeightFormat::Mxfp8: cuda::mxfp8_dequantize_rowwise(codes, scales, 1, n, Fp8Kind::E4M3, y, stream_); break;
      case WeightFormat::Nvfp4: {
        Nvfp4TensorScale* ts = scale_scratch();  // stream order protects it
        cuda::nvfp4_tensor_scale(tensor_amax, ts, stream_);
        cuda::nvfp4_dequantize_rowwise_device_sdec(codes, scales, &ts->s_dec, 1, n, y, stream_);
        break;
      }
      case WeightFormat::Fp8b128:
        cuda::fp8b128_dequantize(codes, reinterpret_cast<const float*>(scales), n / cols, cols, y, stream_);
        break;
    }
  }
  void dequantize_pieces(WeightFormat f, const UnpackPiece* pieces, int count, int64_t max_len,
                         ComputeDType out) override {
    if (count <= 0 || max_len <= 0) return;
    MXDP_CHECK(count <= 65535, "dequantize_pieces: at most 65535 pieces per launch, got ", count);
    const dim3 grid(unsigned(std::min<int64_t>((max_len + 8 * kThreads - 1) / (8 * kThreads), 1024)), unsigned(count));
    const auto go = [&]<WeightFormat F>() {
      if (out == ComputeDType::BF16)
        dequant_pieces_kernel<F, uint16_t><<<grid, kThreads, 0, stream_>>>(pieces);
      else
        dequant_pieces_kernel<F, float><<<grid, kThreads, 0, stream_>>>(pieces);
    };
    switch (f) {
      case WeightFormat::Bf16: go.template operator()<WeightFormat::Bf16>(); break;
      case WeightFormat::Mxfp8: go.template operator()<WeightFormat::Mxfp8>(); break;
      case WeightFormat::Nvfp4: go.template operator()<WeightFormat::Nvfp4>(); break;
      case WeightFormat::Fp8b128: go.template operator()<WeightFormat::Fp8b128>(); break;
    }
    MXDP_CUDA_CHECK_LAUNCH();
  }
  void to_bf16(const float* x, uint16_t* y, int64_t n) override {
    if (n <= 0) return;
    f32_to_bf16(x, y, n, stream_, kMaxBlocks);
    MXDP_CUDA_CHECK_LAUNCH();
  }
  void from_bf16(const uint16_t* x, float* y, int64_t n) override {
    if (n <= 0) return;
    bf16_to_f32(x, y, n, stream_, kMaxBlocks);
    MXDP_CUDA_CHECK_LAUNCH();
  }
  void scale(float* x, int64_t n, float c) override {
    if (n <= 0) return;
    scale_kernel<<<blocks_for(n), kThreads, 0, stream_>>>(x, n, c);
    MXDP_CUDA_CHECK_LAUNCH();
  }
  double sum_squares(const float* x, int64_t n) override {
    if (n <= 0) return 0;
    sum_squares_into(x, n, scratch_ + kSumBlocks);
    double h = 0;
    copy_to_host(&h, scratch_ + kSumBlocks, sizeof h);
    return h;
  }
  void sum_squares_into(const float* x, int64_t n, double* out) override {
    if (n <= 0) {
      zero(out, sizeof(double));
      return;
    }
    sum_squares_blocks<<<kSumBlocks, kThreads, 0, stream_>>>(x, n, scratch_);  // stream order protects scratch_
    MXDP_CUDA_CHECK_LAUNCH();
    sum_partials<<<1, 1, 0, stream_>>>(scratch_, out);
    MXDP_CUDA_CHECK_LAUNCH();
  }
  void adamw(float* p, float* m, float* v, const float* g, int64_t n, const AdamWParams& a) override {
    if (n <= 0) return;
    adamw_kernel<<<blocks_for(n), kThreads, 0, stream_>>>(p, m, v, g, n, adamw_scalars(a));
    MXDP_CUDA_CHECK_LAUNCH();
  }

  void step_control(const double* partials, int rows, int stride, int cols, double clip_grad,
                    StepControl* ctl) override {
    step_control_kernel<<<1, 1, 0, stream_>>>(partials, rows, stride, cols, clip_grad, ctl);
    MXDP_CUDA_CHECK_LAUNCH();
  }
  void adamw_quantize(WeightFormat f, ScaleRounding r, float* p, float* m, float* v, const float* g, int64_t n,
                      const StepControl* ctl, const AdamWChoice& a, uint8_t* codes, uint8_t* scales,
                      int64_t cols) override {
    check_slab_range(f, n, cols, "adamw_quantize");
    if (format_traits(f).block_rows > 1) {
      // A tile spans 128 rows: AdamW and the tile quantizer in one pass where
      // the vectors allow (adamw_tile_quant), else AdamW (the fused pass, its
      // amax into scratch, unread), then the tile quantizer. The same bits.
      if (detail::adamw_tile_quant(p, m, v, g, n / cols, cols, ctl, a, codes, reinterpret_cast<float*>(scales),
                                   stream_))
        return;
      float* unused_amax = reinterpret_cast<float*>(scratch_ + kSumBlocks + 1) + 1;
      detail::adamw_amax(p, m, v, g, n, ctl, a, unused_amax, stream_);
      quantize(f, r, p, n, nullptr, codes, scales, cols);
      return;
    }
    detail::adamw_quantize(f, r, p, m, v, g, n, ctl, a, codes, scales, stream_);
  }
  void adamw_quantize_ranges(ScaleRounding r, float* p, float* m, float* v, const float* g, const StepControl* ctl,
                             std::span<const AdamWChoice> choices, const AdamWRanges& ranges, uint8_t* codes,
                             uint8_t* scales) override {
    ranges.check_choices(choices);
    if (format_traits(ranges.format()).block_rows > 1)
      return adamw_quantize_slabs(r, p, m, v, g, ctl, choices, ranges, codes, scales);
    const auto* t = dynamic_cast<const CudaRanges*>(&ranges);
    MXDP_CHECK(t, "adamw_quantize_ranges: these ranges were not made by CUDA ops' adamw_ranges, so they have no "
                  "table in device memory");
    if (t->tiles() == 0) return;
    RangeChoices ch;
    std::copy(choices.begin(), choices.end(), ch.c);
    dispatch_fused_quantize(
        "adamw_quantize_ranges", ranges.format(), r, p, m, v, g, ctl, codes, scales,
        [&]<FusedOut O, ScaleRounding R>(uint8_t* sc) {
          launch_fused_ranges<O, R>(p, m, v, g, *t, ctl, ch, codes, sc, stream_);
        },
        // AdamWRanges refuses tensor-amax and slab formats; a new row-block format needs its FusedOut here
        [](WeightFormat other) { MXDP_FAIL("adamw_quantize_ranges: no fused CUDA pass for ", to_string(other)); });
  }
  // A slab format's ranges: one launch where every range and base pointer
  // allows the one-pass kernel, else adamw_quantize range by range (the
  // contract itself; the same bits).
  void adamw_quantize_slabs(ScaleRounding r, float* p, float* m, float* v, const float* g, const StepControl* ctl,
                            std::span<const AdamWChoice> choices, const AdamWRanges& ranges, uint8_t* codes,
                            uint8_t* scales) {
    const auto* t = dynamic_cast<const CudaSlabRanges*>(&ranges);
    MXDP_CHECK(t, "adamw_quantize_ranges: these ranges were not made by CUDA ops' adamw_ranges, so they have no "
                  "table in device memory");
    if (t->tiles() == 0) return;
    MXDP_CHECK(p && m && v && g && ctl && codes && scales, "adamw_quantize_ranges: null pointer");
    if (!detail::slab_ranges_in_one_launch(ranges, p, m, v, g, codes, scales))
      return adamw_quantize_each_range(r, p, m, v, g, ctl, choices, ranges, codes, scales);
    RangeChoices ch;
    std::copy(choices.begin(), choices.end(), ch.c);
    adamw_tile_quant_ranges<<<unsigned(t->tiles()), device::kFp8TileThreads, 0, stream_>>>(
        p, m, v, g, t->dev(), t->count(), ctl, ch, codes, reinterpret_cast<float*>(scales));
    MXDP_CUDA_CHECK_LAUNCH();
  }
  std::unique_ptr<AdamWRanges> adamw_ranges(WeightFormat f, std::vector<AdamWRange> list) override {
    if (format_traits(f).block_rows > 1) return std::make_unique<CudaSlabRanges>(*this, f, std::move(list));
    return std::make_unique<CudaRanges>(*this, f, std::move(list));
  }
  void fp8b128_scales_for_gemm(const float* scales, int64_t rows, int64_t cols, float* gemm_scales) override {
    if (rows > 0 && cols > 0) cuda::fp8b128_scales_for_gemm(scales, rows, cols, gemm_scales, stream_);
  }
  void fp8b128_transpose_gemm(const uint8_t* codes, const float* gemm_scales, int64_t rows, int64_t cols,
                              uint8_t* codes_t, float* gemm_scales_t) override {
    if (rows > 0 && cols > 0)
      cuda::fp8b128_transpose_gemm(codes, gemm_scales, rows, cols, codes_t, gemm_scales_t, stream_);
  }
  void fp8b128_scales_for_gemm_many(std::span<const Fp8b128Job> jobs, const Fp8b128Job* dev) override {
    int64_t max = 0;
    for (const Fp8b128Job& j : jobs) max = std::max(max, fp8b128_gemm_scale_count(j.rows, j.cols));
    MXDP_CHECK(jobs.empty() || dev, "fp8b128_scales_for_gemm_many: no device copy of the list");
    cuda::fp8b128_scales_for_gemm_many(dev, int(jobs.size()), max, stream_);
  }
  // One launch when every matrix takes the vectorized transpose (every GPT-2
  // and Llama weight), else the calls one by one.
  void fp8b128_transpose_gemm_many(std::span<const Fp8b128Job> jobs, const Fp8b128Job* dev) override {
    int64_t max = 0;
    bool one = true;
    for (const Fp8b128Job& j : jobs) {
      max = std::max(max, fp8b128_scale_count(j.rows, j.cols));
      one = one && cuda::fp8b128_transpose_many_ok(j);
    }
    if (!one) {
      for (const Fp8b128Job& j : jobs)
        fp8b128_transpose_gemm(j.codes, j.scales, j.rows, j.cols, j.codes_t, j.out_scales);
      return;
    }
    MXDP_CHECK(jobs.empty() || dev, "fp8b128_transpose_gemm_many: no device copy of the list");
    cuda::fp8b128_transpose_gemm_many(dev, int(jobs.size()), max, stream_);
  }
  void adamw_amax(float* p, float* m, float* v, const float* g, int64_t n, const StepControl* ctl,
                  const AdamWChoice& a, float* am) override {
    detail::adamw_amax(p, m, v, g, n, ctl, a, am, stream_);
  }
  void amax_into(const float* x, int64_t n, float* out) override {
    if (n > 0) cuda::amax_fold_into(x, n, out, stream_);
  }
  void sum_into(const float* x, int64_t n, double* out) override {
    sum_into_kernel<<<1, 1, 0, stream_>>>(x, n, out);
    MXDP_CUDA_CHECK_LAUNCH();
  }
  void* alloc_host(size_t bytes) override {
    if (!bytes) return nullptr;
    void* p = nullptr;
    MXDP_CUDA_CHECK(cudaMallocHost(&p, bytes));
    std::memset(p, 0, bytes);
    return p;
  }
  void release_host(void* p) override {
    if (!p) return;
    sync();  // no copy may still be landing in it
    MXDP_CUDA_CHECK(cudaFreeHost(p));
  }
  void copy_to_host_async(void* host, const void* src, size_t bytes) override {
    if (bytes) MXDP_CUDA_CHECK(cudaMemcpyAsync(host, src, bytes, cudaMemcpyDeviceToHost, stream_));
  }
  int64_t mark() override {
    const int64_t k = ++marks_;
    cudaEvent_t& e = events_[size_t(k % kMarkEvents)];
    if (!e) MXDP_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    MXDP_CUDA_CHECK(cudaEventRecord(e, stream_));
    return k;
  }
  void wait(int64_t k) override {
    MXDP_CHECK(k >= 1 && k <= marks_, "wait(", k, "): no such mark (", marks_, " made)");
    // A mark older than the ring: its event was recorded again later in the
    // stream, and waiting for that later point covers it.
    MXDP_CUDA_CHECK(cudaEventSynchronize(events_[size_t(k % kMarkEvents)]));
  }
  int64_t host_waits() const override { return waits_; }

 private:
  cudaStream_t stream_ = nullptr;
  bool own_stream_ = false;
  double* scratch_ = nullptr;  // sum_squares partials + result, then one float for amax, then an Nvfp4TensorScale
  int64_t waits_ = 0;
  static constexpr int kMarkEvents = 16;
  std::array<cudaEvent_t, kMarkEvents> events_{};
  int64_t marks_ = 0;
  void sync() {
    ++waits_;
    MXDP_CUDA_CHECK(cudaStreamSynchronize(stream_));
  }
  Nvfp4TensorScale* scale_scratch() { return reinterpret_cast<Nvfp4TensorScale*>(reinterpret_cast<float*>(scratch_ + kSumBlocks + 1) + 2); }
};

}  // namespace

void detail::adamw_quantize(WeightFormat f, ScaleRounding r, float* p, float* m, float* v, const float* g, int64_t n,
                            const StepControl* ctl, const AdamWChoice& s, uint8_t* codes, uint8_t* scales,
                            cudaStream_t st, int unroll) {
  MXDP_CHECK(n >= 0, "adamw_quantize: n must be >= 0, got ", n);
  if (n == 0) return;
  dispatch_fused_quantize(
      "adamw_quantize", f, r, p, m, v, g, ctl, codes, scales,
      [&]<FusedOut O, ScaleRounding R>(uint8_t* sc) {
        launch_fused<O, R>(p, m, v, g, n, ctl, s, codes, sc, nullptr, unroll, st);
      },
      [](WeightFormat other) {
        if (other == WeightFormat::Nvfp4)
          MXDP_FAIL("adamw_quantize: ", to_string(other), " needs the tensor amax first (adamw_amax, then quantize)");
        if (other == WeightFormat::Fp8b128)
          MXDP_FAIL("adamw_quantize: ", to_string(other),
                    " quantizes 128-row tiles: use EngineOps::adamw_quantize with cols");
        MXDP_FAIL("adamw_quantize: no fused CUDA pass for ", to_string(other));  // a format added later
      });
}

void detail::adamw_amax(float* p, float* m, float* v, const float* g, int64_t n, const StepControl* ctl,
                        const AdamWChoice& s, float* amax, cudaStream_t st, int unroll) {
  MXDP_CHECK(n >= 0, "adamw_amax: n must be >= 0, got ", n);
  if (n == 0) return;
  MXDP_CHECK(p && m && v && g && ctl && amax, "adamw_amax: null pointer");
  launch_fused<FusedOut::Amax, ScaleRounding::RCeil>(p, m, v, g, n, ctl, s, nullptr, nullptr,
                                                      reinterpret_cast<unsigned*>(amax), unroll, st);
}

bool detail::adamw_tile_quant(float* p, float* m, float* v, const float* g, int64_t rows, int64_t cols,
                              const StepControl* ctl, const AdamWChoice& a, uint8_t* codes, float* scales,
                              cudaStream_t st, int min_blocks) {
  if (rows * cols == 0) return true;
  if (cols % 4 != 0 || !aligned(p, 16) || !aligned(m, 16) || !aligned(v, 16) || !aligned(g, 16) || !aligned(codes, 4))
    return false;
  const int64_t tr = fp8b128_scale_rows(rows), tc = fp8b128_scale_cols(cols);
  MXDP_CHECK(tr <= 65535 && tc <= INT_MAX, "adamw_tile_quant: ", rows, " x ", cols, " is too large for one launch");
  const dim3 grid{unsigned(tc), unsigned(tr)};
  if (min_blocks == 1)
    adamw_tile_quant_kernel<1><<<grid, device::kFp8TileThreads, 0, st>>>(p, m, v, g, rows, cols, ctl, a, codes, scales);
  else
    adamw_tile_quant_kernel<2><<<grid, device::kFp8TileThreads, 0, st>>>(p, m, v, g, rows, cols, ctl, a, codes, scales);
  MXDP_CUDA_CHECK_LAUNCH();
  return true;
}

bool detail::slab_ranges_in_one_launch(const AdamWRanges& ranges, const float* p, const float* m, const float* v,
                                       const float* g, const uint8_t* codes, const uint8_t* scales) {
  const auto* t = dynamic_cast<const CudaSlabRanges*>(&ranges);
  return t && t->vec() && aligned(p, 16) && aligned(m, 16) && aligned(v, 16) && aligned(g, 16) && aligned(codes, 4) &&
         aligned(scales, 4);
}

std::unique_ptr<EngineOps> make_cuda_ops(cudaStream_t stream) { return std::make_unique<CudaOps>(stream); }

}  // namespace mxdp::cuda
