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
//
// Variants (detail::act_quantize_variant; the same bits, they differ in how a
// CTA keeps memory busy; act_quantize uses detail::kActQuantizeDefault):
//   V0  the above as first written: a thread loads its 8 chunks (16 with the
//       GELU gradient's pre-activation) into registers before any work; up to
//       110 registers, so 2 CTAs an SM for the GELU gradient.
//   V1  V0 with one pass ahead in registers (2 chunks, 4 with aux) and
//       __launch_bounds__(256, 4): at most 64 registers, 4 CTAs an SM.
//   V2  the tile (and the pre-activation's) copied to shared memory by
//       cp.async, one commit group a pass; phase 1 works on each pass as it
//       lands and writes the post-op chunk back in place for phase 2. No
//       register holds a load; 32 KB (64 KB with aux) a CTA, 5 (3) CTAs an SM.
//   V3  V2 in persistent CTAs (as many as fit at once) looping over tiles,
//       with the next tile's copies in flight during this tile's cols phase
//       (or, rows only, during its phase 1): 64-128 KB a CTA.
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

// cp.async (sm_80+): 16 bytes global -> shared without a register, zeros
// where `full` is false (src-size 0: nothing is read). One commit group per
// pass of a thread; wait_group<n> leaves the n most recent groups in flight.
// A thread sees its own copies after the wait; others' only after a barrier.
__device__ __forceinline__ void cp_async16(uint4* dst, const void* src, bool full) {
  const unsigned d = static_cast<unsigned>(__cvta_generic_to_shared(dst));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(d), "l"(src), "r"(full ? 16 : 0) : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
template <int kInFlight>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kInFlight) : "memory");
}
// wait_group takes an immediate: n must fold to a constant (an unrolled loop's), at most kMax.
template <int kMax>
__device__ __forceinline__ void cp_async_wait(int n) {
  if (n >= kMax) cp_async_wait<kMax>();
  else if constexpr (kMax > 0) cp_async_wait<kMax - 1>(n);
}

constexpr int kPasses = kTile * 16 / kThreads;  // rows of the tile a thread visits
constexpr int kTileBytes = kTile * kTile * 2;   // one bf16 tile in shared memory

// Tile row of a thread in pass `pass` (16 threads a row; the column chunk is threadIdx.x & 15).
__device__ __forceinline__ int row_of(int pass) { return pass * (kThreads / 16) + (threadIdx.x >> 4); }

// Phase 1 on one chunk: the 8 bf16 values v (columns n0 + c .. of row m) get the
// bias and the op (aux: the pre-activation chunk), are written to `biased` /
// `out`, and become 8 rows codes. Rows m >= M (v and aux zero) give zero codes
// and scale 1 and write no values. v holds the post-op values on return.
template <ActOp kOp, bool kBias, bool kRows>
__device__ __forceinline__ void row_chunk(const ActQuant& q, float (&v)[8], const uint4& raw_aux, const float (&b)[8],
                                          int m, int M, int N, int Mp, int n0, int bx) {
  const int seg = threadIdx.x & 15, c = seg * 8;
  const int64_t at = int64_t(m) * N + n0 + c;
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
      unpack8(raw_aux, a);
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
    if (seg == 0) q.rows.scales[int64_t(bx) * Mp + m] = s;
  }
}

// Whether phase 1 changes the values (else the cols phase reads the loaded ones).
template <ActOp kOp, bool kBias>
constexpr bool kChanges = kOp != ActOp::Identity || kBias;

// The 16-byte load of the thread's chunk of x (or aux) in pass `pass`: zeros past M.
__device__ __forceinline__ uint4 load_chunk(const uint16_t* p, int m0, int pass, int M, int N, int n0) {
  const int m = m0 + row_of(pass);
  return m < M ? *reinterpret_cast<const uint4*>(p + int64_t(m) * N + n0 + (threadIdx.x & 15) * 8)
               : make_uint4(0, 0, 0, 0);
}

// V0, the kernel as it was before the variants (the baseline): every load of
// the thread first, into registers (kPasses uint4s, twice for the GELU gradient).
template <ActOp kOp, bool kBias, bool kRows, bool kCols>
__device__ __forceinline__ void tile_v0(const ActQuant& q, int M, int N, int Mp) {
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

// V1: phase 1 as V0's, but a thread holds one pass ahead (two uint4 of x, two
// of aux: the next pass's loads are issued before this pass's work), so that
// 4 CTAs of 256 fit an SM's registers (__launch_bounds__ below).
template <ActOp kOp, bool kBias, bool kRows, bool kCols>
__device__ __forceinline__ void tile_v1(const ActQuant& q, int M, int N, int Mp) {
  constexpr bool kAux = kOp == ActOp::GeluGrad;
  __shared__ uint4 tile[kCols ? kTile * kChunks : 1];
  const int n0 = blockIdx.x * kTile, m0 = blockIdx.y * kTile;
  uint4 raw[2], raw_aux[kAux ? 2 : 1];
  raw[0] = load_chunk(q.x, m0, 0, M, N, n0);
  if constexpr (kAux) raw_aux[0] = load_chunk(q.aux, m0, 0, M, N, n0);
  float b[8];
  if constexpr (kBias) load8(q.bias + n0 + (threadIdx.x & 15) * 8, b);
#pragma unroll
  for (int pass = 0; pass < kPasses; ++pass) {
    const int h = pass & 1;  // this pass's slot; the next pass loads into the other
    if (pass + 1 < kPasses) {
      raw[h ^ 1] = load_chunk(q.x, m0, pass + 1, M, N, n0);
      if constexpr (kAux) raw_aux[h ^ 1] = load_chunk(q.aux, m0, pass + 1, M, N, n0);
    }
    const int r = row_of(pass);
    float v[8];
    unpack8(raw[h], v);
    row_chunk<kOp, kBias, kRows>(q, v, raw_aux[kAux ? h : 0], b, m0 + r, M, N, Mp, n0, blockIdx.x);
    if constexpr (kCols) tile[chunk_at(r, threadIdx.x & 15)] = kChanges<kOp, kBias> ? pack8(v) : raw[h];
  }
  if constexpr (kCols) {
    __syncthreads();
    cols_phase(tile, q.cols, m0, n0, N, Mp);
  }
}

// Variants 2 and 3: the loads go to shared memory by cp.async, no register holds
// them. x's tile at `xs`, the pre-activation's (GELU gradient) at `as`; a thread
// copies exactly the chunks it then reads in phase 1 (one commit group a pass).
template <ActOp kOp>
__device__ __forceinline__ void issue_tile(const ActQuant& q, uint4* xs, uint4* as, int m0, int n0, int M, int N) {
  const int seg = threadIdx.x & 15;
#pragma unroll
  for (int pass = 0; pass < kPasses; ++pass) {
    const int r = row_of(pass), m = m0 + r;
    const int64_t at = int64_t(m < M ? m : 0) * N + n0 + seg * 8;  // a valid address even where nothing is read
    cp_async16(xs + chunk_at(r, seg), q.x + at, m < M);
    if constexpr (kOp == ActOp::GeluGrad) cp_async16(as + chunk_at(r, seg), q.aux + at, m < M);
    cp_async_commit();
  }
}
// Phase 1 from shared memory: pass p waits for its own group (kLater groups
// issued after this tile's stay in flight), and the post-op chunk goes back to
// its slot for the cols phase.
template <int kLater, ActOp kOp, bool kBias, bool kRows, bool kCols>
__device__ __forceinline__ void rows_from_smem(const ActQuant& q, uint4* xs, const uint4* as, const float (&b)[8],
                                               int m0, int n0, int bx, int M, int N, int Mp) {
  const int seg = threadIdx.x & 15;
#pragma unroll
  for (int pass = 0; pass < kPasses; ++pass) {
    cp_async_wait<kPasses - 1 + kLater>(kPasses - 1 - pass + kLater);
    const int r = row_of(pass);
    uint4* slot = xs + chunk_at(r, seg);
    float v[8];
    unpack8(*slot, v);
    row_chunk<kOp, kBias, kRows>(q, v, kOp == ActOp::GeluGrad ? as[chunk_at(r, seg)] : uint4{}, b, m0 + r, M, N, Mp,
                                 n0, bx);
    if constexpr (kCols && kChanges<kOp, kBias>) *slot = pack8(v);
  }
}

// Dynamic shared memory of the staged variants: V2 one x tile (and one aux);
// V3 two x tiles (the next tile's loads land in the other), and two aux tiles
// where no cols phase separates a tile's phase 1 from the next one's loads.
template <int kV, ActOp kOp, bool kCols>
constexpr int staged_smem() {
  constexpr int aux = kOp == ActOp::GeluGrad ? 1 : 0;
  if constexpr (kV == 2) return (1 + aux) * kTileBytes;
  else if constexpr (kV == 3) return (kCols ? 2 + aux : 2 + 2 * aux) * kTileBytes;
  else return 0;
}

// V2: one CTA a tile, everything in flight at once, phase 1 starting on the first pass to land.
template <ActOp kOp, bool kBias, bool kRows, bool kCols>
__device__ __forceinline__ void tile_staged(const ActQuant& q, uint4* smem, int M, int N, int Mp) {
  const int n0 = blockIdx.x * kTile, m0 = blockIdx.y * kTile;
  uint4 *xs = smem, *as = smem + kTile * kChunks;
  issue_tile<kOp>(q, xs, as, m0, n0, M, N);
  float b[8];
  if constexpr (kBias) load8(q.bias + n0 + (threadIdx.x & 15) * 8, b);
  rows_from_smem<0, kOp, kBias, kRows, kCols>(q, xs, as, b, m0, n0, blockIdx.x, M, N, Mp);
  if constexpr (kCols) {
    __syncthreads();
    cols_phase(xs, q.cols, m0, n0, N, Mp);
  }
}

// V3: persistent CTAs over the tiles (t = blockIdx.x, + gridDim.x, ...; tile t
// is column block t % (N / 128) of row block t / (N / 128)). The next tile's
// copies are issued while this one is worked on: with a cols phase, after this
// tile's phase 1 and the barrier (the other x buffer was last read by the
// previous cols phase, which every thread has left; the aux slots are the
// thread's own), so they fly during the cols phase; without one, before this
// tile's phase 1 (both buffers doubled; the barrier at the end of a tile orders
// the reuse).
template <ActOp kOp, bool kBias, bool kRows, bool kCols>
__device__ __forceinline__ void tiles_persistent(const ActQuant& q, uint4* smem, int M, int N, int Mp) {
  constexpr int kT = kTile * kChunks;  // uint4s a tile
  const int nx = N / kTile, tiles = nx * (Mp / kTile);
  const auto x_buf = [&](int i) { return smem + i * kT; };
  const auto aux_buf = [&](int i) { return smem + (kCols ? 2 : 2 + i) * kT; };
  int t = blockIdx.x, buf = 0;
  if (t >= tiles) return;
  issue_tile<kOp>(q, x_buf(0), aux_buf(0), t / nx * kTile, t % nx * kTile, M, N);
#pragma unroll 1
  for (; t < tiles; t += gridDim.x, buf ^= 1) {
    const int bx = t % nx, n0 = bx * kTile, m0 = t / nx * kTile;
    const int next = t + int(gridDim.x), nbx = next % nx;
    const bool more = next < tiles;
    float b[8];
    if constexpr (kBias) load8(q.bias + n0 + (threadIdx.x & 15) * 8, b);
    if constexpr (!kCols) {
      if (more) issue_tile<kOp>(q, x_buf(buf ^ 1), aux_buf(buf ^ 1), next / nx * kTile, nbx * kTile, M, N);
      // wait_group counts groups, so the last tile (nothing issued after it) waits as if it had a next.
      if (!more)
        for (int p = 0; p < kPasses; ++p) cp_async_commit();  // empty groups
      rows_from_smem<kPasses, kOp, kBias, kRows, kCols>(q, x_buf(buf), aux_buf(buf), b, m0, n0, bx, M, N, Mp);
      __syncthreads();
    } else {
      rows_from_smem<0, kOp, kBias, kRows, kCols>(q, x_buf(buf), aux_buf(0), b, m0, n0, bx, M, N, Mp);
      __syncthreads();
      if (more) issue_tile<kOp>(q, x_buf(buf ^ 1), aux_buf(0), next / nx * kTile, nbx * kTile, M, N);
      cols_phase(x_buf(buf), q.cols, m0, n0, N, Mp);
    }
  }
}

// Minimum CTAs an SM for __launch_bounds__ of V1-V3 (a register budget of 64K
// / (256 x this) a thread): V1 4 (64 registers); V2 and V3 as many as their
// shared memory lets an SM hold (228 KB, 1 KB of it reserved a CTA), at most 5.
template <int kV, ActOp kOp, bool kCols>
constexpr int min_ctas() {
  static_assert(kV >= 1 && kV <= 3);
  if constexpr (kV == 1) return 4;
  else return std::min(5, 228 * 1024 / (staged_smem<kV, kOp, kCols>() + 1024));
}

template <int kV, ActOp kOp, bool kBias, bool kRows, bool kCols>
__global__ void __launch_bounds__(kThreads, min_ctas<kV, kOp, kCols>())
    act_quantize_kernel(ActQuant q, int M, int N, int Mp) {
  if constexpr (kV == 1) {
    tile_v1<kOp, kBias, kRows, kCols>(q, M, N, Mp);
  } else {
    extern __shared__ uint4 smem[];
    if constexpr (kV == 2) tile_staged<kOp, kBias, kRows, kCols>(q, smem, M, N, Mp);
    else tiles_persistent<kOp, kBias, kRows, kCols>(q, smem, M, N, Mp);
  }
}

// V0 keeps its own kernel: its code (and register count) as it was.
template <ActOp kOp, bool kBias, bool kRows, bool kCols>
__global__ void __launch_bounds__(kThreads) act_quantize_kernel_v0(ActQuant q, int M, int N, int Mp) {
  tile_v0<kOp, kBias, kRows, kCols>(q, M, N, Mp);
}

template <int kV, ActOp kOp, bool kBias, bool kRows, bool kCols>
void launch_kernel(const ActQuant& q, int M, int N, int Mp, cudaStream_t s) {
  const auto kernel = [] {
    if constexpr (kV == 0) return act_quantize_kernel_v0<kOp, kBias, kRows, kCols>;
    else return act_quantize_kernel<kV, kOp, kBias, kRows, kCols>;
  }();
  constexpr int smem = staged_smem<kV, kOp, kCols>();
  // Above 48 KB a kernel must opt in; set on every launch (a host-side call,
  // legal during graph capture) rather than once, so any current device has it.
  if constexpr (smem > 48 * 1024)
    MXDP_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  dim3 grid(unsigned(N / kTile), unsigned(Mp / kTile));
  if constexpr (kV == 3) {  // as many CTAs as are resident at once, at most one a tile
    int dev = 0, sms = 0, per_sm = 0;
    MXDP_CUDA_CHECK(cudaGetDevice(&dev));
    MXDP_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
    MXDP_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, kThreads, smem));
    grid = dim3(unsigned(std::min<int64_t>(int64_t(grid.x) * grid.y, int64_t(std::max(per_sm, 1)) * sms)));
  }
  kernel<<<grid, kThreads, smem, s>>>(q, M, N, Mp);
  MXDP_CUDA_CHECK_LAUNCH();
}

template <int kV, ActOp kOp, bool kBias>
void launch(const ActQuant& q, int M, int N, int Mp, cudaStream_t s) {
  const bool rows = q.rows.codes != nullptr, cols = q.cols.codes != nullptr;
  if (rows && cols) launch_kernel<kV, kOp, kBias, true, true>(q, M, N, Mp, s);
  else if (rows) launch_kernel<kV, kOp, kBias, true, false>(q, M, N, Mp, s);
  else if (cols) launch_kernel<kV, kOp, kBias, false, true>(q, M, N, Mp, s);
  else launch_kernel<kV, kOp, kBias, false, false>(q, M, N, Mp, s);
}

template <int kV>
void launch_variant(const ActQuant& q, int M, int N, int Mp, cudaStream_t s) {
  if (q.bias) {
    switch (q.op) {
      case ActOp::Identity: launch<kV, ActOp::Identity, true>(q, M, N, Mp, s); break;
      case ActOp::Gelu: launch<kV, ActOp::Gelu, true>(q, M, N, Mp, s); break;
      case ActOp::GeluGrad: launch<kV, ActOp::GeluGrad, true>(q, M, N, Mp, s); break;
    }
  } else {
    switch (q.op) {
      case ActOp::Identity: launch<kV, ActOp::Identity, false>(q, M, N, Mp, s); break;
      case ActOp::Gelu: launch<kV, ActOp::Gelu, false>(q, M, N, Mp, s); break;
      case ActOp::GeluGrad: launch<kV, ActOp::GeluGrad, false>(q, M, N, Mp, s); break;
    }
  }
}

bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15) == 0; }

}  // namespace

namespace detail {

void act_quantize_variant(int variant, const ActQuant& q, int M, int N, cudaStream_t s) {
  MXDP_CHECK(variant >= 0 && variant < kActQuantizeVariants, "act_quantize: no variant ", variant);
  MXDP_CHECK(M > 0 && N > 0 && N % kTile == 0, "act_quantize: M must be positive and N a multiple of 128, got ", M,
             " x ", N);
  const int64_t Mp = fp8_rows_padded(M);
  MXDP_CHECK(Mp / kTile <= 65535, "act_quantize: ", M, " rows is too many for one launch");
  MXDP_CHECK(q.x && aligned16(q.x), "act_quantize: x must be a 16-byte aligned device pointer");
  MXDP_CHECK(q.op != ActOp::GeluGrad || (q.aux && aligned16(q.aux)), "act_quantize: the GELU gradient needs aux");
  MXDP_CHECK(!q.bias || aligned16(q.bias), "act_quantize: bias must be 16-byte aligned");
  MXDP_CHECK((!q.rows.codes || q.rows.scales) && (!q.cols.codes || q.cols.scales), "act_quantize: codes without scales");
  switch (variant) {
    case 0: launch_variant<0>(q, M, N, int(Mp), s); break;
    case 1: launch_variant<1>(q, M, N, int(Mp), s); break;
    case 2: launch_variant<2>(q, M, N, int(Mp), s); break;
    case 3: launch_variant<3>(q, M, N, int(Mp), s); break;
  }
}

}  // namespace detail

void act_quantize(const ActQuant& q, int M, int N, cudaStream_t s) {
  detail::act_quantize_variant(detail::kActQuantizeDefault, q, M, N, s);
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
