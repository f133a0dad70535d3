// Kernels behind fp8_block_cuda.h. Every one gives the CPU reference's bits.
//
// The engine's two per-step fp8b128 passes over every weight (the stage after
// AdamW, and W^T for the GEMMs' dgrad) have vectorized kernels: tile_quant_vec
// keeps a 128x128 tile's fp32 values in registers (16-byte loads) between its
// amax and its encode, divides by the block scale with codec::block_div_fast
// behind one test of the scale's range, encodes with the hardware conversion
// (equal to the integer codec for all 2^32 inputs: gputest_quant) and stores
// 4 codes at once; transpose_tile moves 16 codes a load and a store through a
// 128x128 shared tile (8 lanes a store instruction fill 128 bytes of a W^T
// row) and writes the tile's transposed scale in the same launch. The scalar
// kernels are the first, written for clarity: one element a thread, codec.h's
// integer encoder and an IEEE division (-prec-div=true, no fast math). They
// take any shape and alignment, so they are the fallback, and the tests
// compare both with the CPU (gputest_fp8_format).
#include "formats/cuda/fp8_block_cuda.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <climits>

#include "formats/codec.h"
#include "formats/cuda/fp8_encode.cuh"
#include "formats/cuda/fp8_tile_quant.cuh"
#include "util/check.h"
#include "util/cuda_check.h"
#include "util/cuda_launch.h"

namespace mxdp::cuda {

namespace {

constexpr int kThreads = device::kFp8TileThreads;  // every kernel here; a tile kernel needs exactly this
constexpr int64_t kMaxGrid = 1 << 16;

__device__ __forceinline__ float load(const float* x, int64_t i) { return x[i]; }
__device__ __forceinline__ float load(const uint16_t* x, int64_t i) { return codec::bf16_to_f32(x[i]); }

void check_args(int64_t rows, int64_t cols, const void* a, const void* b, const void* c, const char* what) {
  MXDP_CHECK(rows >= 0 && cols >= 0, what, ": rows and cols must be >= 0, got ", rows, " x ", cols);
  MXDP_CHECK(rows * cols == 0 || (a && b && c), what, ": null pointer");
  MXDP_CHECK(rows <= INT_MAX && cols <= INT_MAX, what, ": ", rows, " x ", cols, " is too large");
}
int grid_for(int64_t n) { return int(std::max<int64_t>(1, grid_blocks(n, kThreads, kMaxGrid))); }

// ---- fp8b128 ----------------------------------------------------------------
// One CTA per tile (blockIdx.x: tile column, blockIdx.y: tile row).

__global__ void __launch_bounds__(kThreads)
    tile_quant(const float* __restrict__ x, int64_t rows, int64_t cols, uint8_t* __restrict__ codes,
               float* __restrict__ scales) {
  const int64_t r0 = int64_t(blockIdx.y) * kFp8Tile, c0 = int64_t(blockIdx.x) * kFp8Tile;
  const int64_t hr = rows - r0, wc = cols - c0;
  const int h = hr < kFp8Tile ? int(hr) : kFp8Tile, w = wc < kFp8Tile ? int(wc) : kFp8Tile;
  float am = 0.0f;
  for (int i = threadIdx.x; i < kFp8TileElems; i += kThreads) {
    const int r = i / kFp8Tile, c = i % kFp8Tile;
    if (r < h && c < w) am = codec::amax_fold(am, x[(r0 + r) * cols + c0 + c]);
  }
  const float s = device::tile_scale(am, scales, device::grid_tile());
  for (int i = threadIdx.x; i < kFp8TileElems; i += kThreads) {
    const int r = i / kFp8Tile, c = i % kFp8Tile;
    if (r < h && c < w) {
      const int64_t j = (r0 + r) * cols + c0 + c;
      codes[j] = codec::fp8_block_encode(x[j], s, Fp8Kind::E4M3);
    }
  }
}

// The same tile, its values in registers (fp8_tile_quant.cuh): needs cols % 4
// == 0, x 16-byte and codes 4-byte aligned.
__global__ void __launch_bounds__(kThreads)
    tile_quant_vec(const float* __restrict__ x, int64_t rows, int64_t cols, uint8_t* __restrict__ codes,
                   float* __restrict__ scales) {
  const device::TileAt at = device::grid_tile();
  float4 v[device::kFp8TilePasses];
#pragma unroll
  for (int p = 0; p < device::kFp8TilePasses; ++p) {
    const int64_t i = device::tile_piece(p, rows, cols, at);
    v[p] = i >= 0 ? *reinterpret_cast<const float4*>(x + i) : make_float4(0, 0, 0, 0);
  }
  device::tile_quant_regs(v, rows, cols, codes, scales, at);
}

__global__ void tile_dequant(const uint8_t* __restrict__ codes, const float* __restrict__ scales, int64_t rows,
                             int64_t cols, int64_t tc, float* __restrict__ y) {
  const int64_t n = rows * cols, stride = int64_t(gridDim.x) * blockDim.x;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    const int64_t r = i / cols, c = i % cols;
    y[i] = codec::fp8_block_dequant(codes[i], scales[r / kFp8Tile * tc + c / kFp8Tile], Fp8Kind::E4M3);
  }
}

// out (cols x rows) = in (rows x cols)^T, bytes, through a 32x33 shared tile.
__global__ void transpose_bytes(const uint8_t* __restrict__ in, int64_t rows, int64_t cols,
                                uint8_t* __restrict__ out) {
  __shared__ uint8_t t[32][33];
  const int64_t c0 = int64_t(blockIdx.x) * 32, r0 = int64_t(blockIdx.y) * 32;
  for (int k = threadIdx.y; k < 32; k += blockDim.y) {
    const int64_t r = r0 + k, c = c0 + threadIdx.x;
    if (r < rows && c < cols) t[k][threadIdx.x] = in[r * cols + c];
  }
  __syncthreads();
  for (int k = threadIdx.y; k < 32; k += blockDim.y) {
    const int64_t c = c0 + k, r = r0 + threadIdx.x;
    if (r < rows && c < cols) out[c * rows + r] = t[threadIdx.x][k];
  }
}

// out (cols x rows) = in (rows x cols)^T, bytes, one 128x128 tile a CTA of
// 256 threads; thread 0 also puts the tile's scale at its place in W^T's
// scales (s: gridDim.y x gridDim.x tiles, st: gridDim.x x gridDim.y). Needs
// rows and cols multiples of 16 and both code pointers 16-byte aligned: every
// 16-byte chunk of a row is then inside or outside the matrix.
// Shared tile: word column wc (input columns 4 wc .. 4 wc + 3) of tile row r
// sits at t[r][wc ^ sw(r)], sw(r) = tile_swizzle(r) = 4 ((r / 16) % 8): an XOR
// of whole 16-byte chunks, so each row still holds its 8 chunks, permuted.
// Load: thread t takes chunk t % 8 of rows t / 8 + 32 p (p < 4), one 16-byte
// load each (a warp reads 4 whole 128-byte lines); a quarter-warp's 16-byte
// shared stores are one row's 8 chunks, so they cover the 32 banks once.
// Store: warp w, lane l = 4 h + k (h < 8, k < 4) takes word column
// wc = 4 w + k of input rows 16 h .. 16 h + 15: 16 word loads, 4x4 byte
// transposes, and one 16-byte store to each of output rows 4 wc .. 4 wc + 3,
// at bytes 16 h .. 16 h + 15 of the tile's 128. So in each store instruction
// the 8 lanes of one k write 128 consecutive bytes of one output row (whole
// 32-byte sectors when rows % 32 == 0, one whole line when rows % 128 == 0),
// 4 rows a warp. Shared reads: rows 16 h .. 16 h + 15 have sw = 4 h, so lane
// (h, k) reads word (4 w + k) ^ 4 h = 4 (w ^ h) + k: the warp covers the 32
// banks once.
// (The first version had lane l write output rows 4 l .. 4 l + 3 at 16 input
// rows a warp: each 16-byte store half of a different sector, the other half
// written by another warp; 0.37 of copy bandwidth on an H200.)
// 8 CTAs an SM (2048 threads, 128 KB of shared tiles) need 32 registers, which
// ptxas reaches without spills when asked; left alone it takes 40 (6 CTAs).
// The body takes the tile (tile column tx, tile row ty of tr tile rows), so a
// launch over several matrices runs the same code (transpose_tile_many).
__device__ __forceinline__ int tile_swizzle(int r) { return (r >> 2) & 28; }
__device__ __forceinline__ void transpose_tile_at(const uint8_t* __restrict__ in, const float* __restrict__ s,
                                                  int64_t s_ld, int64_t rows, int64_t cols, uint8_t* __restrict__ out,
                                                  float* __restrict__ st, int64_t st_ld, int64_t tx, int64_t ty,
                                                  int64_t tr) {
  constexpr int kWords = kFp8Tile / 4;
  __shared__ uint32_t t[kFp8Tile][kWords];
  if (threadIdx.x == 0) {  // the tile's scale; the last tile of a W^T scale row also writes the row's padding
    float* row = st + tx * st_ld;
    row[ty] = s[ty * s_ld + tx];
    if (ty == tr - 1)
      for (int64_t k = tr; k < st_ld; ++k) row[k] = 0.0f;
  }
  const int64_t r0 = ty * kFp8Tile, c0 = tx * kFp8Tile;
  const int chunk = threadIdx.x & 7;
#pragma unroll
  for (int p = 0; p < kFp8Tile / (kThreads / 8); ++p) {
    const int r = int(threadIdx.x >> 3) + (kThreads / 8) * p;
    uint4 v = make_uint4(0, 0, 0, 0);
    if (r0 + r < rows && c0 + 16 * chunk < cols)
      v = *reinterpret_cast<const uint4*>(in + (r0 + r) * cols + c0 + 16 * chunk);
    *reinterpret_cast<uint4*>(&t[r][(4 * chunk) ^ tile_swizzle(r)]) = v;
  }
  __syncthreads();
  const int lane = threadIdx.x & 31, h = lane >> 2, wc = 4 * int(threadIdx.x >> 5) + (lane & 3), rb = 16 * h;
  if (c0 + 4 * wc >= cols || r0 + rb >= rows) return;
  const int pc = wc ^ tile_swizzle(rb);  // where rows rb .. rb + 15 keep word column wc
  uint32_t o[4][4];                      // o[j][g]: output row 4 wc + j, input rows rb + 4 g .. + 3
#pragma unroll
  for (int g = 0; g < 4; ++g) {
    const uint32_t a = t[rb + 4 * g][pc], b = t[rb + 4 * g + 1][pc], c = t[rb + 4 * g + 2][pc],
                   d = t[rb + 4 * g + 3][pc];
    // Byte j of a, b, c, d (input column 4 wc + j of four rows) into word j.
    const uint32_t ab_lo = __byte_perm(a, b, 0x5140), ab_hi = __byte_perm(a, b, 0x7362);  // a0 b0 a1 b1 / a2 b2 a3 b3
    const uint32_t cd_lo = __byte_perm(c, d, 0x5140), cd_hi = __byte_perm(c, d, 0x7362);
    o[0][g] = __byte_perm(ab_lo, cd_lo, 0x5410);  // a0 b0 c0 d0
    o[1][g] = __byte_perm(ab_lo, cd_lo, 0x7632);  // a1 b1 c1 d1
    o[2][g] = __byte_perm(ab_hi, cd_hi, 0x5410);
    o[3][g] = __byte_perm(ab_hi, cd_hi, 0x7632);
  }
#pragma unroll
  for (int j = 0; j < 4; ++j)
    *reinterpret_cast<uint4*>(out + (c0 + 4 * wc + j) * rows + r0 + rb) =
        make_uint4(o[j][0], o[j][1], o[j][2], o[j][3]);
}

__global__ void __launch_bounds__(kThreads, 8)
    transpose_tile(const uint8_t* __restrict__ in, const float* __restrict__ s, int64_t s_ld, int64_t rows,
                   int64_t cols, uint8_t* __restrict__ out, float* __restrict__ st, int64_t st_ld) {
  transpose_tile_at(in, s, s_ld, rows, cols, out, st, st_ld, blockIdx.x, blockIdx.y, gridDim.y);
}

// Job blockIdx.y's tile blockIdx.x (row-major over its tile grid; CTAs past
// its tiles leave at once): transpose_gemm's tiles, job by job.
__global__ void __launch_bounds__(kThreads, 8) transpose_tile_many(const Fp8b128Job* __restrict__ jobs) {
  const Fp8b128Job j = jobs[blockIdx.y];
  const int64_t tr = fp8b128_scale_rows(j.rows), tc = fp8b128_scale_cols(j.cols);
  if (int64_t(blockIdx.x) >= tr * tc) return;
  transpose_tile_at(j.codes, j.scales, fp8b128_gemm_scale_ld(j.cols), j.rows, j.cols, j.codes_t, j.out_scales,
                    fp8b128_gemm_scale_ld(j.rows), blockIdx.x % tc, blockIdx.x / tc, tr);
}

// The tr x tc scale grid s (rows s_ld apart) transposed into st (tc rows of
// st_ld, the columns past tr 0).
__global__ void transpose_scales(const float* __restrict__ s, int64_t tr, int64_t tc, int64_t s_ld,
                                 float* __restrict__ st, int64_t st_ld) {
  const int64_t n = tc * st_ld, stride = int64_t(gridDim.x) * blockDim.x;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    const int64_t j = i / st_ld, k = i % st_ld;
    st[i] = k < tr ? s[k * s_ld + j] : 0.0f;
  }
}

// The compact scales s of a rows x cols matrix into the GEMM layout g (tile
// rows fp8b128_gemm_scale_ld apart, the padding 0); grid-stride over x.
__device__ void pad_gemm_scales_at(const float* __restrict__ s, int64_t rows, int64_t cols, float* __restrict__ g) {
  const int64_t tc = fp8b128_scale_cols(cols), ld = fp8b128_gemm_scale_ld(cols);
  const int64_t n = fp8b128_scale_rows(rows) * ld, stride = int64_t(gridDim.x) * blockDim.x;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    const int64_t r = i / ld, c = i % ld;
    g[i] = c < tc ? s[r * tc + c] : 0.0f;
  }
}

__global__ void pad_gemm_scales(const float* __restrict__ s, int64_t rows, int64_t cols, float* __restrict__ g) {
  pad_gemm_scales_at(s, rows, cols, g);
}

// pad_gemm_scales of job blockIdx.y.
__global__ void pad_gemm_scales_many(const Fp8b128Job* __restrict__ jobs) {
  const Fp8b128Job j = jobs[blockIdx.y];
  pad_gemm_scales_at(j.scales, j.rows, j.cols, j.out_scales);
}

// ---- 1x128 ------------------------------------------------------------------
// One warp per block (r, b) of the rows x cols operand; lane l holds elements
// c0 + l + 32 j (coalesced). at(r, c) reads the operand (x, or x^T).
template <class T, bool kTransposed>
__global__ void __launch_bounds__(kThreads)
    quant_1x128(const T* __restrict__ x, int64_t rows, int64_t cols, Fp8Kind k, uint8_t* __restrict__ codes,
                float* __restrict__ scales) {
  const int64_t nb = ceil_div(cols, kFp8Tile), ld = fp8_1x128_scale_ld(rows);
  const int64_t warp = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) >> 5;
  const int lane = threadIdx.x & 31;
  if (warp >= rows * nb) return;  // whole warps leave together
  const int64_t r = warp / nb, b = warp % nb, c0 = b * kFp8Tile;
  // Operand (r, c) is x[r * cols + c], or for x^T (x is cols x rows) x[c * rows + r].
  auto at = [&](int64_t c) { return kTransposed ? load(x, c * rows + r) : load(x, r * cols + c); };
  float v[4];
  float am = 0.0f;
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    const int64_t c = c0 + lane + 32 * j;
    v[j] = c < cols ? at(c) : 0.0f;
    am = codec::amax_fold(am, v[j]);
  }
  am = device::warp_max(am, 32);
  const float s = codec::fp8_pow2_scale(am, k);
  if (lane == 0) scales[b * ld + r] = s;
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    const int64_t c = c0 + lane + 32 * j;
    if (c < cols) codes[r * cols + c] = codec::fp8_block_encode(v[j], s, k);
  }
}

__global__ void dequant_1x128(const uint8_t* __restrict__ codes, const float* __restrict__ scales, int64_t rows,
                              int64_t cols, Fp8Kind k, float* __restrict__ y) {
  const int64_t n = rows * cols, stride = int64_t(gridDim.x) * blockDim.x, ld = fp8_1x128_scale_ld(rows);
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    const int64_t r = i / cols, c = i % cols;
    y[i] = codec::fp8_block_dequant(codes[i], scales[c / kFp8Tile * ld + r], k);
  }
}

// The operand is rows x cols (for the transposed quantizer: x is cols x rows).
template <bool kTransposed, class T>
void launch_1x128(const T* x, int64_t rows, int64_t cols, Fp8Kind k, uint8_t* codes, float* scales,
                  cudaStream_t stream) {
  if (rows * cols == 0) return;
  MXDP_CUDA_CHECK(cudaMemsetAsync(scales, 0, size_t(fp8_1x128_scale_count(rows, cols)) * sizeof(float), stream));
  const int64_t warps = rows * ceil_div(cols, kFp8Tile);
  const int64_t blocks = ceil_div(warps * 32, kThreads);
  MXDP_CHECK(blocks <= INT_MAX, "fp8_quantize_1x128: ", rows, " x ", cols, " is too large for one launch");
  quant_1x128<T, kTransposed><<<int(blocks), kThreads, 0, stream>>>(x, rows, cols, k, codes, scales);
  MXDP_CUDA_CHECK_LAUNCH();
}

bool aligned(const void* p, uintptr_t to) { return (reinterpret_cast<uintptr_t>(p) & (to - 1)) == 0; }

// Whether transpose_tile (and transpose_tile_many) can transpose this matrix:
// its rows and columns whole 16-byte words of aligned codes, its tile rows one
// grid dimension.
bool transpose_tile_ok(const uint8_t* codes, const uint8_t* codes_t, int64_t rows, int64_t cols) {
  return rows % 16 == 0 && cols % 16 == 0 && aligned(codes, 16) && aligned(codes_t, 16) &&
         fp8b128_scale_rows(rows) <= 65535;
}

}  // namespace

namespace detail {

void fp8b128_quantize(const float* x, int64_t rows, int64_t cols, uint8_t* codes, float* scales, Fp8b128Kernel kernel,
                      cudaStream_t stream) {
  check_args(rows, cols, x, codes, scales, "fp8b128_quantize");
  if (rows * cols == 0) return;
  const int64_t tr = fp8b128_scale_rows(rows), tc = fp8b128_scale_cols(cols);
  MXDP_CHECK(tr <= 65535, "fp8b128_quantize: ", rows, " rows is too many for one launch");
  const dim3 grid{unsigned(tc), unsigned(tr)};
  if (kernel == Fp8b128Kernel::Vectorized && cols % 4 == 0 && aligned(x, 16) && aligned(codes, 4))
    tile_quant_vec<<<grid, kThreads, 0, stream>>>(x, rows, cols, codes, scales);
  else
    tile_quant<<<grid, kThreads, 0, stream>>>(x, rows, cols, codes, scales);
  MXDP_CUDA_CHECK_LAUNCH();
}

namespace {

// Both transposes: the scale grids' rows s_ld and st_ld apart (compact: the
// tile counts; GEMM layout: fp8b128_gemm_scale_ld, the padding written 0).
void transpose(const uint8_t* codes, const float* scales, int64_t s_ld, int64_t rows, int64_t cols,
               uint8_t* codes_t, float* scales_t, int64_t st_ld, Fp8b128Kernel kernel, const char* what,
               cudaStream_t stream) {
  check_args(rows, cols, codes, scales, codes_t, what);
  MXDP_CHECK(rows * cols == 0 || scales_t, what, ": null pointer");
  if (rows * cols == 0) return;
  const int64_t tr = fp8b128_scale_rows(rows), tc = fp8b128_scale_cols(cols);
  if (kernel == Fp8b128Kernel::Vectorized && transpose_tile_ok(codes, codes_t, rows, cols)) {
    // One CTA a tile: the codes and the tile's scale in one launch.
    transpose_tile<<<dim3(unsigned(tc), unsigned(tr)), kThreads, 0, stream>>>(codes, scales, s_ld, rows, cols,
                                                                              codes_t, scales_t, st_ld);
    MXDP_CUDA_CHECK_LAUNCH();
    return;
  }
  const int64_t gy = ceil_div(rows, 32);
  MXDP_CHECK(gy <= 65535, what, ": ", rows, " rows is too many for one launch");
  transpose_bytes<<<dim3(unsigned(ceil_div(cols, 32)), unsigned(gy)), dim3(32, 8), 0, stream>>>(codes, rows, cols,
                                                                                                  codes_t);
  MXDP_CUDA_CHECK_LAUNCH();
  transpose_scales<<<grid_for(tc * st_ld), kThreads, 0, stream>>>(scales, tr, tc, s_ld, scales_t, st_ld);
  MXDP_CUDA_CHECK_LAUNCH();
}

}  // namespace

void fp8b128_transpose(const uint8_t* codes, const float* scales, int64_t rows, int64_t cols, uint8_t* codes_t,
                       float* scales_t, Fp8b128Kernel kernel, cudaStream_t stream) {
  transpose(codes, scales, fp8b128_scale_cols(cols), rows, cols, codes_t, scales_t, fp8b128_scale_rows(rows), kernel,
            "fp8b128_transpose", stream);
}

void fp8b128_transpose_gemm(const uint8_t* codes, const float* gemm_scales, int64_t rows, int64_t cols,
                            uint8_t* codes_t, float* gemm_scales_t, Fp8b128Kernel kernel, cudaStream_t stream) {
  transpose(codes, gemm_scales, fp8b128_gemm_scale_ld(cols), rows, cols, codes_t, gemm_scales_t,
            fp8b128_gemm_scale_ld(rows), kernel, "fp8b128_transpose_gemm", stream);
}

}  // namespace detail

void fp8b128_quantize(const float* x, int64_t rows, int64_t cols, uint8_t* codes, float* scales,
                      cudaStream_t stream) {
  detail::fp8b128_quantize(x, rows, cols, codes, scales, detail::Fp8b128Kernel::Vectorized, stream);
}

void fp8b128_dequantize(const uint8_t* codes, const float* scales, int64_t rows, int64_t cols, float* y,
                        cudaStream_t stream) {
  check_args(rows, cols, codes, scales, y, "fp8b128_dequantize");
  if (rows * cols == 0) return;
  tile_dequant<<<grid_for(rows * cols), kThreads, 0, stream>>>(codes, scales, rows, cols, fp8b128_scale_cols(cols), y);
  MXDP_CUDA_CHECK_LAUNCH();
}

void fp8b128_transpose(const uint8_t* codes, const float* scales, int64_t rows, int64_t cols, uint8_t* codes_t,
                       float* scales_t, cudaStream_t stream) {
  detail::fp8b128_transpose(codes, scales, rows, cols, codes_t, scales_t, detail::Fp8b128Kernel::Vectorized, stream);
}

void fp8b128_transpose_gemm(const uint8_t* codes, const float* gemm_scales, int64_t rows, int64_t cols,
                            uint8_t* codes_t, float* gemm_scales_t, cudaStream_t stream) {
  detail::fp8b128_transpose_gemm(codes, gemm_scales, rows, cols, codes_t, gemm_scales_t,
                                 detail::Fp8b128Kernel::Vectorized, stream);
}

void fp8b128_scales_for_gemm(const float* scales, int64_t rows, int64_t cols, float* gemm_scales,
                             cudaStream_t stream) {
  check_args(rows, cols, scales, gemm_scales, gemm_scales, "fp8b128_scales_for_gemm");
  if (rows * cols == 0) return;
  pad_gemm_scales<<<grid_for(fp8b128_gemm_scale_count(rows, cols)), kThreads, 0, stream>>>(scales, rows, cols,
                                                                                             gemm_scales);
  MXDP_CUDA_CHECK_LAUNCH();
}

bool fp8b128_transpose_many_ok(const Fp8b128Job& j) {
  return transpose_tile_ok(j.codes, j.codes_t, j.rows, j.cols) && j.scales && j.out_scales;
}

void fp8b128_scales_for_gemm_many(const Fp8b128Job* jobs, int count, int64_t max, cudaStream_t stream) {
  if (count <= 0 || max <= 0) return;
  MXDP_CHECK(count <= 65535, "fp8b128_scales_for_gemm_many: at most 65535 matrices a launch, got ", count);
  const dim3 grid(unsigned(std::min<int64_t>(ceil_div(max, kThreads), 1024)), unsigned(count));
  pad_gemm_scales_many<<<grid, kThreads, 0, stream>>>(jobs);
  MXDP_CUDA_CHECK_LAUNCH();
}

void fp8b128_transpose_gemm_many(const Fp8b128Job* jobs, int count, int64_t max, cudaStream_t stream) {
  if (count <= 0 || max <= 0) return;
  MXDP_CHECK(count <= 65535 && max <= INT_MAX, "fp8b128_transpose_gemm_many: ", count, " matrices of up to ", max,
             " tiles is too many for one launch");
  transpose_tile_many<<<dim3(unsigned(max), unsigned(count)), kThreads, 0, stream>>>(jobs);
  MXDP_CUDA_CHECK_LAUNCH();
}

void fp8_quantize_1x128(const float* x, int64_t rows, int64_t cols, Fp8Kind k, uint8_t* codes, float* scales,
                        cudaStream_t stream) {
  check_args(rows, cols, x, codes, scales, "fp8_quantize_1x128");
  launch_1x128<false>(x, rows, cols, k, codes, scales, stream);
}
void fp8_quantize_1x128(const uint16_t* x, int64_t rows, int64_t cols, Fp8Kind k, uint8_t* codes, float* scales,
                        cudaStream_t stream) {
  check_args(rows, cols, x, codes, scales, "fp8_quantize_1x128");
  launch_1x128<false>(x, rows, cols, k, codes, scales, stream);
}
void fp8_quantize_1x128_transposed(const float* x, int64_t rows, int64_t cols, Fp8Kind k, uint8_t* codes_t,
                                   float* scales, cudaStream_t stream) {
  check_args(rows, cols, x, codes_t, scales, "fp8_quantize_1x128_transposed");
  launch_1x128<true>(x, cols, rows, k, codes_t, scales, stream);
}
void fp8_quantize_1x128_transposed(const uint16_t* x, int64_t rows, int64_t cols, Fp8Kind k, uint8_t* codes_t,
                                   float* scales, cudaStream_t stream) {
  check_args(rows, cols, x, codes_t, scales, "fp8_quantize_1x128_transposed");
  launch_1x128<true>(x, cols, rows, k, codes_t, scales, stream);
}

void fp8_dequantize_1x128(const uint8_t* codes, const float* scales, int64_t rows, int64_t cols, Fp8Kind k,
                          float* y, cudaStream_t stream) {
  check_args(rows, cols, codes, scales, y, "fp8_dequantize_1x128");
  if (rows * cols == 0) return;
  dequant_1x128<<<grid_for(rows * cols), kThreads, 0, stream>>>(codes, scales, rows, cols, k, y);
  MXDP_CUDA_CHECK_LAUNCH();
}

}  // namespace mxdp::cuda
