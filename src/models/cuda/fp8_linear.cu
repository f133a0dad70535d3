// Kernels and GEMM plumbing behind fp8_linear.h.
//
// act_quantize: one CTA of 256 threads per 128x128 tile, in two phases.
// Phase 1: each thread takes 8 consecutive elements of a row (16 threads a row,
// 8 passes), applies bias and op and rounds to bf16 (the hardware pair
// conversion, the codec's bits; the norm ops also read their 8 rows'
// statistics and their 8 columns' weights, the SwiGLU the up half of its 8
// rows of gate_up, the SwiGLU's gradient its 8 rows of dact and of the gate,
// and of the up half in the gate's columns). For the rows operand the 16
// lanes of a row reduce the 8 passes' amaxes at once (max8_transposed: each
// lane ends with one pass's amax and computes that block's scale and
// reciprocal), then encode pass by pass with the reciprocal shuffled from its
// lane. For the cols operand the bf16 values go to shared memory, one 16-byte
// chunk per thread and pass. Phase 2: each
// warp takes 8 columns (one chunk column) at a time, each lane 4 consecutive
// rows of them: the 8 column amaxes reduced at once the same way, per lane 4
// codes as one 32-bit store, so a warp writes a column's 128 codes at once. The
// tile is stored with chunk k of row r at k ^ ((r >> 2) & 7): both phases'
// 16-byte accesses then hit 8 different bank groups per quarter-warp (no bank
// conflicts). The block scales are powers of two (codec::fp8_pow2_scale, read
// off the amax's bits), so x / s is x * (1 / s) exactly: one multiply an
// element, no division and no branch.
//
// Column sums (kSum, only beside kCols: they read the staged tile): after the
// barrier that ends phase 1, thread t sums 2 columns of the tile (one 32-bit
// word of a chunk) over the rows of warp sums 2 (t / 64) and 2 (t / 64) + 1;
// warp sum w adds rows w, w + 8, ... below M in order from 0, as a warp of
// column_sums.cu's colsum_kernel does, and a warp reads 128 contiguous bytes of
// a row at a time (no bank conflicts). After a second barrier the first 128
// threads add their column's 8 warp sums in warp order and write the tile's
// partial sum where colsum_kernel writes its chunk's (the tile's 128 rows are
// its chunk): so bias_backward_finish gives bias_backward's bits.
//
// N need only be a multiple of 16 (the GEMMs'): the last tile column then
// holds N % 128 columns, whole 16-byte chunks. A chunk beyond N is never loaded
// or stored; it holds zeros (amax 0), so every scale is over the elements
// present, as the CPU quantizers' partial blocks are.
#include "models/cuda/fp8_linear.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <string>

#include "formats/codec.h"
#include "formats/cuda/bf16_pack.cuh"
#include "formats/cuda/fp8_encode.cuh"
#include "models/cuda/act_values.cuh"
#include "models/cuda/column_sums.h"  // bias_backward_finish and its scratch layout
#include "models/cuda/fp8_gemm_sm90.h"
#include "models/cuda/fp8_tile_ops.cuh"
#include "models/cuda/gelu_fast.cuh"
#include "models/cuda/model_kernels.cuh"  // aligned16
#include "util/check.h"
#include "util/cuda_check.h"
#include "util/env.h"

namespace mxdp::cuda {

namespace {

constexpr int kTile = 128;
constexpr int kThreads = 256;
constexpr int kChunks = kTile / 8;  // 16-byte chunks (8 bf16) in a tile row
constexpr int kSumWarps = 8;        // colsum_kernel's warps: the warp sums of a column's chunk
static_assert(kTile == kColsumRows, "a tile's column sums are bias_backward's partial sums of one chunk");

// Where chunk k of tile row r lives in shared memory (see the top of the file).
__device__ __forceinline__ int chunk_at(int r, int k) { return r * kChunks + (k ^ ((r >> 2) & 7)); }

using device::amax_fold;  // every fold here starts at 0 (see fp8_encode.cuh)
using device::encode4;
using device::half_of;
using device::load8;
using device::max8_transposed;
using device::reciprocal_of;
using device::round8;
using device::unpack8;

// x / s for a power-of-two s, as x * (1 / s) (exact: the same bits).
template <int kN>
__device__ __forceinline__ void scale_n(float* q, float r) {
#pragma unroll
  for (int i = 0; i < kN; ++i) q[i] *= r;
}

// Phase 2: the cols operand of the tile from its bf16 values in shared memory.
// A warp takes one chunk column (8 tile columns) at a time, each lane 4 rows of
// it; chunk columns beyond N (the last tile column's absent ones) are skipped.
__device__ __forceinline__ void cols_phase(const uint4* tile, const Fp8Slot& cols, int m0, int n0, int N, int Mp) {
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int chunks = min(kChunks, (N - n0) / 8);  // present in this tile
#pragma unroll 1
  for (int k = warp; k < chunks; k += kThreads / 32) {
    uint4 v[4];  // rows 4 lane .. 4 lane + 3, columns 8 k .. 8 k + 7
#pragma unroll
    for (int j = 0; j < 4; ++j) v[j] = tile[chunk_at(4 * lane + j, k)];
    float am[8];
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      am[i] = 0.f;
#pragma unroll
      for (int j = 0; j < 4; ++j) am[i] = amax_fold(am[i], half_of(v[j], i));
    }
    const float s = codec::fp8_pow2_scale(max8_transposed<32>(am), Fp8Kind::E4M3);  // column lane / 4's
    if ((lane & 3) == 0) cols.scales[int64_t(m0 / kTile) * N + n0 + 8 * k + lane / 4] = s;
    const float mine = codec::fp8_pow2_reciprocal(s);
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      float q[4];
#pragma unroll
      for (int j = 0; j < 4; ++j) q[j] = half_of(v[j], i);
      scale_n<4>(q, reciprocal_of<32>(mine, i));
      *reinterpret_cast<uint32_t*>(cols.codes + int64_t(n0 + 8 * k + i) * Mp + m0 + 4 * lane) = encode4(q);
    }
  }
}

// The column sums' first half (see the top of the file): the warp sums of the
// tile's `rows` rows (those below M) into ws, for its `chunks` chunk columns.
__device__ __forceinline__ void warp_sums_phase(const uint4* tile, float (*ws)[kTile], int rows, int chunks) {
  const int p = threadIdx.x & 63, k = p >> 2;  // columns 2 p, 2 p + 1: word p & 3 of chunk column k
  if (k >= chunks) return;
  static_assert(kThreads / 64 * 2 == kSumWarps, "4 groups of 64 threads, 2 warp sums each");
#pragma unroll
  for (int j = 0; j < 2; ++j) {
    const int w = 2 * (threadIdx.x >> 6) + j;
    float lo = 0.f, hi = 0.f;
#pragma unroll 4
    for (int r = w; r < rows; r += kSumWarps) {
      const uint32_t v = reinterpret_cast<const uint32_t*>(tile + chunk_at(r, k))[p & 3];
      lo += device::bf16_lo(v);
      hi += device::bf16_hi(v);
    }
    ws[w][2 * p] = lo;
    ws[w][2 * p + 1] = hi;
  }
}
// The second half: column c's partial sum, its warp sums added in warp order.
__device__ __forceinline__ void write_tile_sums(float (*ws)[kTile], float* partial, int n0, int N) {
  const int c = threadIdx.x;
  if (c >= kTile || n0 + c >= N) return;
  float t = 0.f;
  for (int w = 0; w < kSumWarps; ++w) t += ws[w][c];
  partial[int64_t(blockIdx.y) * N + n0 + c] = t;
}

constexpr int kPasses = kTile * 16 / kThreads;  // phase 1: the tile rows a thread visits (16 threads a row)
static_assert(kPasses == 8, "the rows operand reduces 8 passes' amaxes at once");
// The tile row of a thread's pass: 16 threads a row, kThreads / 16 rows a pass.
// (The loads and the rows operand keep their sum m0 + pass * (kThreads / 16) +
// (threadIdx.x >> 4) in that order: grouped as m0 + pass_row, ptxas schedules
// them differently.)
__device__ __forceinline__ int pass_row(int pass) { return pass * (kThreads / 16) + (threadIdx.x >> 4); }

// A thread's registers in phase 1: its passes' chunks of x (then their bf16
// results), the second input of the GELU gradient (the pre-activation), of
// the SwiGLU (the up half of gate_up) or of its gradient (the gate), the
// SwiGLU gradient's third (the up half; zeros in the up half's columns), the
// norm's row statistics, and its 8 columns' bias and norm weight and bias. An
// array the op does not read has one element and is never touched.
template <ActOp kOp>
struct PassInputs {
  static constexpr bool kAux = kOp == ActOp::GeluGrad || kOp == ActOp::SwiGlu || kOp == ActOp::SwiGluGrad;
  static constexpr bool kAux2 = kOp == ActOp::SwiGluGrad;
  static constexpr bool kLn = kOp == ActOp::LayerNorm, kNorm = kLn || kOp == ActOp::RmsNorm;
  uint4 raw[kPasses], aux[kAux ? kPasses : 1], aux2[kAux2 ? kPasses : 1];
  float mean[kLn ? kPasses : 1], rstd[kNorm ? kPasses : 1];
  float b[8], lw[8], lb[8];  // an absent chunk's (column beyond N) are loaded from column n0 and unused
};
// The SwiGLU gradient's output column n of N = 2F reads dact and the gate at
// column n mod F: n in the gate half (n < F), n - F in the up half. F is a
// multiple of 8 (N of 16), so a thread's chunk lies in one half.
__device__ __forceinline__ int swiglu_grad_col(int n, int N) { return n < N / 2 ? n : n - N / 2; }

// Where row m's chunk at column n of x starts: x is [M, N], for the SwiGLU
// gate_up [M, 2N] (the gate at n, the up half at N + n), for its gradient dact
// [M, N / 2].
template <ActOp kOp>
__device__ __forceinline__ int64_t x_at(int m, int n, int N) {
  if constexpr (kOp == ActOp::SwiGluGrad) return int64_t(m) * (N / 2) + swiglu_grad_col(n, N);
  return (kOp == ActOp::SwiGlu ? 2 * int64_t(m) * N : int64_t(m) * N) + n;
}

// Phase 1's loads, all issued before any is used (a thread has its reads in
// flight at once): every pass's chunks and row statistics, then the columns'.
template <ActOp kOp, bool kBias>
__device__ __forceinline__ void load_tile_inputs(PassInputs<kOp>& in, const ActQuant& q, int M, int N, int m0, int n0,
                                                 int c, bool present) {
  constexpr bool kLn = PassInputs<kOp>::kLn, kNorm = PassInputs<kOp>::kNorm;
#pragma unroll
  for (int pass = 0; pass < kPasses; ++pass) {
    const int m = m0 + pass * (kThreads / 16) + (threadIdx.x >> 4);
    const int64_t at = x_at<kOp>(m, n0 + c, N);
    const bool inside = present && m < M;
    in.raw[pass] = inside ? *reinterpret_cast<const uint4*>(q.x + at) : make_uint4(0, 0, 0, 0);
    if constexpr (kOp == ActOp::GeluGrad)
      in.aux[pass] = inside ? *reinterpret_cast<const uint4*>(q.aux + at) : make_uint4(0, 0, 0, 0);
    if constexpr (kOp == ActOp::SwiGlu)
      in.aux[pass] = inside ? *reinterpret_cast<const uint4*>(q.x + at + N) : make_uint4(0, 0, 0, 0);
    if constexpr (kOp == ActOp::SwiGluGrad) {  // aux: gate_up [M, N], the gate, and up F = N / 2 further (gate half)
      const bool gate = n0 + c < N / 2;
      const int64_t g = int64_t(m) * N + swiglu_grad_col(n0 + c, N);
      in.aux[pass] = inside ? *reinterpret_cast<const uint4*>(q.aux + g) : make_uint4(0, 0, 0, 0);
      in.aux2[pass] = inside && gate ? *reinterpret_cast<const uint4*>(q.aux + g + N / 2) : make_uint4(0, 0, 0, 0);
    }
    if constexpr (kLn) in.mean[pass] = inside ? q.norm.mean[m] : 0.f;
    if constexpr (kNorm) in.rstd[pass] = inside ? q.norm.rstd[m] : 0.f;
  }
  if constexpr (kBias) load8(q.bias + n0 + (present ? c : 0), in.b);
  if constexpr (kNorm) load8(q.norm.w + n0 + (present ? c : 0), in.lw);
  if constexpr (kLn) load8(q.norm.b + n0 + (present ? c : 0), in.lb);
}

// One pass of phase 1: bias and op on the thread's chunk, rounded to bf16 (the
// bits back in in.raw[pass], stored to biased and out where asked); returns
// the amax of its 8 values.
template <ActOp kOp, bool kBias>
__device__ __forceinline__ float op_and_amax(PassInputs<kOp>& in, const ActQuant& q, int pass, int M, int N, int m0,
                                             int n0, int c, bool present) {
  const int m = m0 + pass_row(pass);
  const int64_t at = int64_t(m) * N + n0 + c;
  float v[8];
  unpack8(in.raw[pass], v);
  if (present && m < M) {
    if constexpr (kBias) {
#pragma unroll
      for (int i = 0; i < 8; ++i) v[i] += in.b[i];
      in.raw[pass] = round8(v);
      if (q.biased) *reinterpret_cast<uint4*>(q.biased + at) = in.raw[pass];
    }
    if constexpr (kOp == ActOp::Gelu) {
#pragma unroll
      for (int i = 0; i < 8; ++i) v[i] = device::gelu_tanh(v[i]);
      in.raw[pass] = round8(v);
    } else if constexpr (kOp == ActOp::GeluGrad) {
      float a[8];
      unpack8(in.aux[pass], a);
#pragma unroll
      for (int i = 0; i < 8; ++i) v[i] *= device::gelu_grad(a[i]);
      in.raw[pass] = round8(v);
    } else if constexpr (kOp == ActOp::LayerNorm) {
      // The LayerNorm kernel's element (the same function), and its rounding:
      // round8 gives codec::bf16_from_f32's bits, as its store does.
#pragma unroll
      for (int i = 0; i < 8; ++i)
        v[i] = device::layernorm_value(v[i], in.mean[pass], in.rstd[pass], in.lw[i], in.lb[i]);
      in.raw[pass] = round8(v);
    } else if constexpr (kOp == ActOp::RmsNorm) {
#pragma unroll
      for (int i = 0; i < 8; ++i) v[i] = device::rmsnorm_value(v[i], in.rstd[pass], in.lw[i]);
      in.raw[pass] = round8(v);
    } else if constexpr (kOp == ActOp::SwiGlu) {
      float u[8];
      unpack8(in.aux[pass], u);
#pragma unroll
      for (int i = 0; i < 8; ++i) v[i] = device::swiglu_value(v[i], u[i]);
      in.raw[pass] = round8(v);
    } else if constexpr (kOp == ActOp::SwiGluGrad) {
      // swiglu_backward's element (the same function) and rounding, v = dact.
      float g[8], u[8];
      unpack8(in.aux[pass], g);
      unpack8(in.aux2[pass], u);
      const bool gate = n0 + c < N / 2;
#pragma unroll
      for (int i = 0; i < 8; ++i) v[i] = device::swiglu_grad_value(v[i], g[i], u[i], gate);
      in.raw[pass] = round8(v);
    }
    if (kOp != ActOp::Identity && q.out) *reinterpret_cast<uint4*>(q.out + at) = in.raw[pass];
  }
  float am = 0.f;
#pragma unroll
  for (int i = 0; i < 8; ++i) am = amax_fold(am, v[i]);
  return am;
}

// The rows operand: the 16 lanes of a tile row hold its 8 passes' partial
// amaxes; lane seg ends with pass seg / 2's and computes its scale and reciprocal
// once, then every pass's chunk is scaled and encoded, 8 codes a thread.
__device__ __forceinline__ void rows_phase(const uint4 (&raw)[kPasses], const float (&am)[kPasses], const Fp8Slot& rows,
                                           int m0, int n0, int c, int seg, int N, int Mp, bool present) {
  const float s = codec::fp8_pow2_scale(max8_transposed<16>(am), Fp8Kind::E4M3);
  if ((seg & 1) == 0) rows.scales[int64_t(blockIdx.x) * Mp + m0 + (seg / 2) * (kThreads / 16) + (threadIdx.x >> 4)] = s;
  const float mine = codec::fp8_pow2_reciprocal(s);
#pragma unroll
  for (int pass = 0; pass < kPasses; ++pass) {
    const int m = m0 + pass * (kThreads / 16) + (threadIdx.x >> 4);
    float v[8];
    unpack8(raw[pass], v);
    scale_n<8>(v, reciprocal_of<16>(mine, pass));  // every lane: the shuffle needs the whole group
    if (present)
      *reinterpret_cast<uint2*>(rows.codes + int64_t(m) * N + n0 + c) = make_uint2(encode4(v), encode4(v + 4));
  }
}

// The algorithm of the top of the file: phase 1 (loads, then bias, op and amax
// pass by pass, the bf16 chunks staged for the cols operand), the rows operand,
// then phase 2 (the cols operand, and the column sums beside it).
template <ActOp kOp, bool kBias, bool kRows, bool kCols, bool kSum>
__global__ void __launch_bounds__(kThreads) act_quantize_kernel(ActQuant q, int M, int N, int Mp) {
  static_assert(!kSum || kCols, "the column sums read the tile the cols operand stages");
  __shared__ uint4 tile[kCols ? kTile * kChunks : 1];
  __shared__ float ws[kSum ? kSumWarps : 1][kTile];
  const int n0 = blockIdx.x * kTile, m0 = blockIdx.y * kTile;
  const int seg = threadIdx.x & 15, c = seg * 8;  // the thread's 8 columns, the same in every pass
  const bool present = n0 + c < N;                // its chunk is inside the matrix (N % 8 == 0)
  PassInputs<kOp> in;
  load_tile_inputs<kOp, kBias>(in, q, M, N, m0, n0, c, present);  // phase 1: every read in flight first
  float am[kPasses];                                               // each pass's amax over the thread's 8
#pragma unroll
  for (int pass = 0; pass < kPasses; ++pass) {
    am[pass] = op_and_amax<kOp, kBias>(in, q, pass, M, N, m0, n0, c, present);  // bias, op, bf16 rounding
    if constexpr (kCols) tile[chunk_at(pass_row(pass), seg)] = in.raw[pass];     // staged for phase 2
  }
  if constexpr (kRows) rows_phase(in.raw, am, q.rows, m0, n0, c, seg, N, Mp, present);  // the rows operand
  if constexpr (kCols) {
    __syncthreads();
    // The column sums' warp sums, then phase 2: the cols operand, both from the staged tile.
    if constexpr (kSum) warp_sums_phase(tile, ws, min(kTile, M - m0), min(kChunks, (N - n0) / 8));
    cols_phase(tile, q.cols, m0, n0, N, Mp);
  }
  if constexpr (kSum) {
    __syncthreads();
    write_tile_sums(ws, q.sums.scratch + kColsumCounters, n0, N);  // the tile's partial column sums
  }
}

template <ActOp kOp, bool kBias, bool kRows, bool kCols, bool kSum = false>
void launch_one(const ActQuant& q, int M, int N, int Mp, cudaStream_t s) {
  const dim3 grid(unsigned((N + kTile - 1) / kTile), unsigned(Mp / kTile));
  act_quantize_kernel<kOp, kBias, kRows, kCols, kSum><<<grid, kThreads, 0, s>>>(q, M, N, Mp);
  MXDP_CUDA_CHECK_LAUNCH();
}

template <ActOp kOp, bool kBias>
void launch(const ActQuant& q, int M, int N, int Mp, cudaStream_t s) {
  const bool rows = q.rows.codes != nullptr, cols = q.cols.codes != nullptr;
  if (rows && cols) launch_one<kOp, kBias, true, true>(q, M, N, Mp, s);
  else if (rows) launch_one<kOp, kBias, true, false>(q, M, N, Mp, s);
  else if (cols) launch_one<kOp, kBias, false, true>(q, M, N, Mp, s);
  else launch_one<kOp, kBias, false, false>(q, M, N, Mp, s);
}

// The variants act_quantize compiles, one launcher each: the elementwise ops
// without column sums (with or without a bias, any operands); the norm ops,
// the SwiGLU and its gradient (the operands of the GPT's ln1 and ln2 and of the
// Llama's two RMSNorms, its SwiGLU and gate_up's output gradient: both
// operands, no bias, no sums); the column sums
// (the models' output gradients of fc and qkv: identity or GELU gradient, no
// bias, both operands). Each checks what its variant needs.
template <bool kBias>
void launch_op(const ActQuant& q, int M, int N, int Mp, cudaStream_t s) {
  switch (q.op) {
    case ActOp::Identity: return launch<ActOp::Identity, kBias>(q, M, N, Mp, s);
    case ActOp::Gelu: return launch<ActOp::Gelu, kBias>(q, M, N, Mp, s);
    case ActOp::GeluGrad: return launch<ActOp::GeluGrad, kBias>(q, M, N, Mp, s);
    case ActOp::LayerNorm:
    case ActOp::RmsNorm:
    case ActOp::SwiGlu:
    case ActOp::SwiGluGrad: break;  // launch_producer_op
  }
  MXDP_CHECK(false, "internal: act_quantize's op ", int(q.op), " has no variant without column sums");
}

// The ops that stand in for a kernel's output (the norms, the SwiGLU and its gradient).
void launch_producer_op(const ActQuant& q, int M, int N, int Mp, cudaStream_t s) {
  const char* name = q.op == ActOp::LayerNorm ? "LayerNorm"
                     : q.op == ActOp::RmsNorm ? "RMSNorm"
                     : q.op == ActOp::SwiGlu  ? "SwiGLU"
                                              : "SwiGLU-gradient";
  MXDP_CHECK(!q.bias && q.rows.codes && q.cols.codes && !q.sums.dst, "act_quantize: the ", name,
             " op is built only to make both operands (rows and cols), without a bias or column sums");
  if (q.op == ActOp::SwiGlu) return launch_one<ActOp::SwiGlu, false, true, true>(q, M, N, Mp, s);
  if (q.op == ActOp::SwiGluGrad) {
    // N = 2F is even (act_quantize checked N % 16 == 0: F is a multiple of 8,
    // so no thread's chunk straddles the gate and up halves).
    MXDP_CHECK(q.aux && aligned16(q.aux), "act_quantize: the SwiGLU-gradient op needs aux, gate_up [M, N] (N = 2F, ",
               "x its output gradient [M, F]), 16-byte aligned");
    MXDP_CHECK(q.out != q.x && q.out != q.aux, "act_quantize: the SwiGLU-gradient op cannot write its values (out) ",
               "over its inputs (other tiles still read them)");
    return launch_one<ActOp::SwiGluGrad, false, true, true>(q, M, N, Mp, s);
  }
  const bool ln = q.op == ActOp::LayerNorm;
  MXDP_CHECK(q.norm.rstd && (!ln || q.norm.mean), "act_quantize: the ", name, " op needs the ",
             ln ? "mean and rstd" : "rstd", " its forward kernel wrote for each row");
  MXDP_CHECK(q.norm.w && aligned16(q.norm.w) && (!ln || (q.norm.b && aligned16(q.norm.b))), "act_quantize: the ",
             name, " op needs the norm's weight", ln ? " and bias" : "", ", 16-byte aligned");
  if (ln) launch_one<ActOp::LayerNorm, false, true, true>(q, M, N, Mp, s);
  else launch_one<ActOp::RmsNorm, false, true, true>(q, M, N, Mp, s);
}

void launch_with_sums(const ActQuant& q, int M, int N, int Mp, cudaStream_t s) {
  MXDP_CHECK(q.sums.scratch && aligned16(q.sums.scratch),
             "act_quantize: the column sums need bias_backward's scratch (colsum_scratch_floats(M, N) floats), "
             "16-byte aligned");
  check_colsum_width(N);  // before the kernel writes its partial sums
  MXDP_CHECK(!q.bias && q.rows.codes && q.cols.codes && (q.op == ActOp::Identity || q.op == ActOp::GeluGrad),
             "act_quantize: the column sums are built only with the identity or GELU-gradient op, no bias, and both "
             "operands (rows and cols), as the models' output gradients make them");
  if (q.op == ActOp::GeluGrad) launch_one<ActOp::GeluGrad, false, true, true, true>(q, M, N, Mp, s);
  else launch_one<ActOp::Identity, false, true, true, true>(q, M, N, Mp, s);
  bias_backward_finish(q.sums.dst, q.sums.scratch, M, N, s);
}

}  // namespace

void act_quantize(const ActQuant& q, int M, int N, cudaStream_t s) {
  MXDP_CHECK(M > 0 && N > 0 && N % 16 == 0, "act_quantize: M must be positive and N a multiple of 16, got ", M,
             " x ", N);
  const int64_t Mp = fp8_rows_padded(M);
  MXDP_CHECK(Mp / kTile <= 65535, "act_quantize: ", M, " rows is too many for one launch");
  MXDP_CHECK(q.x && aligned16(q.x), "act_quantize: x must be a 16-byte aligned device pointer");
  MXDP_CHECK(q.op != ActOp::GeluGrad || (q.aux && aligned16(q.aux)), "act_quantize: the GELU gradient needs aux");
  MXDP_CHECK(!q.bias || aligned16(q.bias), "act_quantize: bias must be 16-byte aligned");
  MXDP_CHECK((!q.rows.codes || q.rows.scales) && (!q.cols.codes || q.cols.scales), "act_quantize: codes without scales");
  if (q.op == ActOp::LayerNorm || q.op == ActOp::RmsNorm || q.op == ActOp::SwiGlu || q.op == ActOp::SwiGluGrad)
    launch_producer_op(q, M, N, int(Mp), s);
  else if (q.sums.dst) launch_with_sums(q, M, N, int(Mp), s);
  else if (q.bias) launch_op<true>(q, M, N, int(Mp), s);
  else launch_op<false>(q, M, N, int(Mp), s);
}

// ---- Fp8Linear ------------------------------------------------------------------

Fp8Linear::Fp8Linear(cudaStream_t stream) : s_(stream), gemm_(stream) {
  const std::string route = env_choice("MXDP_FP8_GEMM", {"cublaslt", "own", "fused"}, "cublaslt");
  own_gemm_ = route == "own";
  fused_gelu_ = route != "cublaslt";
}

Fp8Linear::~Fp8Linear() {
  cudaStreamSynchronize(s_);
  for (Fp8Slot& sl : slots_) {
    cudaFree(sl.codes);
    cudaFree(sl.scales);
  }
  cudaFree(pad_);
}

void Fp8Linear::reserve(int M, int max_n) {
  // Scales: a rows operand has ceil(N / 128) a row (a partial last block when
  // N % 128 != 0), a cols operand Mp / 128 for each of its N rows: at most the first.
  const int64_t Mp = fp8_rows_padded(M), codes = Mp * max_n, scales = Mp * ((max_n + kTile - 1) / kTile);
  if (codes <= cap_codes_ && scales <= cap_scales_ && Mp <= cap_m_) return;
  MXDP_CUDA_CHECK(cudaStreamSynchronize(s_));
  for (Fp8Slot& sl : slots_) {
    MXDP_CUDA_CHECK(cudaFree(sl.codes));
    MXDP_CUDA_CHECK(cudaFree(sl.scales));
    MXDP_CUDA_CHECK(cudaMalloc(&sl.codes, size_t(codes)));
    MXDP_CUDA_CHECK(cudaMalloc(&sl.scales, size_t(scales) * sizeof(float)));
  }
  MXDP_CUDA_CHECK(cudaFree(pad_));
  pad_ = nullptr;
  MXDP_CUDA_CHECK(cudaMalloc(&pad_, size_t(codes) * 2));
  cap_codes_ = codes;
  cap_scales_ = scales;
  cap_m_ = Mp;
}

void Fp8Linear::write_rows(uint16_t* dst, int M, int N) {
  MXDP_CUDA_CHECK(cudaMemcpyAsync(dst, pad_, size_t(M) * N * 2, cudaMemcpyDeviceToDevice, s_));
}

Fp8Operand Fp8Linear::weight_operand(const Fp8Weight& w, int rows, int cols, const char* what, int64_t out) const {
  MXDP_CHECK(w.rows == rows && w.cols == cols, "internal: FP8 ", what, " of a ", w.rows, " x ", w.cols, " weight as ",
             rows, " x ", cols);
  MXDP_CHECK(out <= cap_codes_, "internal: Fp8Linear scratch too small");
  return {w.codes, w.scales, Fp8Kind::E4M3, Fp8Scaling::Tiles128};
}

bool Fp8Linear::fprop_gemm(uint16_t* y, const Fp8Slot& x, const Fp8Weight& w, const uint16_t* bias, int M, int N,
                           int K) {
  const int Mp = int(fp8_rows_padded(M));
  const Fp8Operand wo = weight_operand(w, N, K, "fprop", int64_t(Mp) * N);
  uint16_t* d = Mp == M ? y : pad_;
  bool with_bias = false;
  if (own_gemm_ && fp8_gemm_sm90_supported(Mp, N, K)) {
    fp8_gemm_nt_sm90(x.operand(), wo, Mp, N, K, bias, d, s_);
    with_bias = bias != nullptr;
  } else {
    with_bias = bias && gemm_.nt_bias(x.operand(), wo, Mp, N, K, bias, d);
    if (!with_bias) gemm_.fprop(x.operand(), wo, Mp, N, K, d);
  }
  if (Mp != M) write_rows(y, M, N);
  return with_bias;
}

void Fp8Linear::fprop(uint16_t* y, const Fp8Slot& x, const Fp8Weight& w, const uint16_t* bias, int M, int N, int K) {
  if (!fprop_gemm(y, x, w, bias, M, N, K) && bias) act_quantize({.x = y, .bias = bias, .biased = y}, M, N, s_);
}

void Fp8Linear::fprop_gelu(uint16_t* pre, const Fp8Slot& x, const Fp8Weight& w, const uint16_t* bias, int M, int N,
                           int K, const Fp8Slot& rows, const Fp8Slot& cols) {
  MXDP_CHECK(rows.codes != x.codes, "internal: fprop_gelu's rows operand in its input's slot");
  if (fused_gelu_ && M % kTile == 0 && fp8_gemm_sm90_supported(M, N, K)) {
    const Fp8Operand wo = weight_operand(w, N, K, "fprop", int64_t(M) * N);
    fp8_gemm_gelu_quant_sm90(x.operand(), wo, M, N, K, bias, {pre, rows.codes, rows.scales, cols.codes, cols.scales},
                             s_);
    return;
  }
  const bool biased = fprop_gemm(pre, x, w, bias, M, N, K);
  act_quantize({.x = pre,
                .bias = biased ? nullptr : bias,
                .biased = biased ? nullptr : pre,
                .op = ActOp::Gelu,
                .rows = rows,
                .cols = cols},
               M, N, s_);
}

void Fp8Linear::dgrad(uint16_t* dx, const Fp8Slot& dy, const Fp8Weight& wt, int M, int N, int K) {
  const int Mp = int(fp8_rows_padded(M));
  const Fp8Operand wo = weight_operand(wt, K, N, "dgrad's W^T", int64_t(Mp) * K);
  if (own_gemm_ && fp8_gemm_sm90_supported(Mp, K, N))
    fp8_gemm_nt_sm90(dy.operand(), wo, Mp, K, N, nullptr, Mp == M ? dx : pad_, s_);
  else
    gemm_.dgrad(dy.operand(), wo, Mp, N, K, Mp == M ? dx : pad_);
  if (Mp != M) write_rows(dx, M, K);
}

void Fp8Linear::wgrad(float* dw, const Fp8Slot& dy, const Fp8Slot& x, int M, int N, int K) {
  gemm_.wgrad(dy.operand(), x.operand(), int(fp8_rows_padded(M)), N, K, dw);
}

}  // namespace mxdp::cuda
