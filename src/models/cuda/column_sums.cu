// Kernels behind column_sums.h: one kernel for the column sums (colsum_kernel,
// bias_backward) and one for the second half on its own over partial sums
// another kernel wrote (chunk_sums_kernel: bias_backward_finish for
// act_quantize's, column_sums_finish for norm_backward's), which share their
// last phase (add_chunk_partials), so they share its bits.
#include "models/cuda/column_sums.h"

#include "models/cuda/bf16_vectors.cuh"
#include "models/cuda/model_kernels.cuh"  // aligned16
#include "util/check.h"
#include "util/cuda_check.h"

namespace mxdp::cuda {

namespace {

// 8 consecutive bf16 values as floats, read in one 16-byte access (load<8>; the
// callers check the alignment): models/cuda/bf16_vectors.cuh.
using device::load;

// One kernel: a block takes 256 columns (8 per lane, one 16-byte access per
// row) of one chunk of kColsumRows rows; warp w adds rows w, w+8, ... of the
// chunk in order; the 8 warp sums are added in warp order into the chunk's
// partial sum (set 0 of [3][chunks][N] after the counters in scratch). The
// last block of a column range to finish (a counter per range) adds the
// chunks' partial sums in a fixed order (add_chunk_partials) into the
// destination and resets the counter. Which block is last does not change the
// order of any addition: the bits are fixed.
// Where the sums go: a (always), b and c (column_sums_finish's second and
// third sums; null: none).
struct ColsumOut {
  float* a;
  float* b;  // nullptr: one sum
  ColumnSum c;  // c.dst nullptr: none
};

// The last phase of the column sums, by the block of column range blockIdx.x:
// out += the chunks' partial sums in `partial` ([3][chunks][N], one set per
// sum; kB, kC: out.b and out.c are there). The block is 8 groups of kLanes
// threads, each lane kLaneCols consecutive columns (kCols = kLanes * kLaneCols
// a block); group g adds chunks g, g+8, ... in order, as phase one's warp w
// added rows w, w+8, ..., then each column adds the 8 group sums in group
// order. The group sums meet in sa (sb, sc: for out.b and out.c, and may be
// null without them). Every layout gives each column the same additions in
// the same order, so the same bits: colsum_kernel's last block runs it as its
// 8 warps (<8, 32>: 256 columns), chunk_sums_kernel alone over partial sums
// another kernel wrote, in a layout of more, narrower blocks
// (kFinishLaneCols). There a group's chunks are loaded kBatch = 8 at a time
// before any is added (the order of the additions is unchanged), so a thread
// waits for memory chunks / 64 times, not once a chunk; colsum_kernel's last
// block loads one at a time and keeps its registers for its first phase.
template <int kLaneCols, int kLanes, bool kB, bool kC>
__device__ void add_chunk_partials(const ColsumOut& out, const float* partial, int chunks, int N,
                                   float (*sa)[kLaneCols * kLanes], float (*sb)[kLaneCols * kLanes],
                                   float (*sc)[kLaneCols * kLanes]) {
  static_assert(kLaneCols == 2 || kLaneCols == 8, "a lane reads its columns as a float2 or two float4s");
  constexpr int kCols = kLaneCols * kLanes, kSets = 1 + kB + kC, kBatch = kLaneCols == 2 ? 8 : 1;
  using Vec = float[kLaneCols];
  const int lane = threadIdx.x % kLanes, group = threadIdx.x / kLanes;
  const int n0 = blockIdx.x * kCols + lane * kLaneCols;
  const auto load_chunk = [&](Vec& v, int set, int k) {  // set `set`'s partial sums of chunk k (L2: another
    const float* p = partial + (int64_t(set) * chunks + k) * N + n0;  // block of this kernel may have written them)
    if constexpr (kLaneCols == 2) {
      const float2 x = __ldcg(reinterpret_cast<const float2*>(p));
      v[0] = x.x, v[1] = x.y;
    } else {
#pragma unroll
      for (int j = 0; j < kLaneCols / 4; ++j) {
        const float4 x = __ldcg(reinterpret_cast<const float4*>(p) + j);
        v[4 * j] = x.x, v[4 * j + 1] = x.y, v[4 * j + 2] = x.z, v[4 * j + 3] = x.w;
      }
    }
  };
  float acc[kSets][kLaneCols] = {};  // the sums of a, b (kB) and c (kC), in that order
  if (n0 < N) {
    for (int k0 = group; k0 < chunks; k0 += 8 * kBatch) {
      Vec v[kBatch][kSets];
#pragma unroll
      for (int j = 0; j < kBatch; ++j)
        if (k0 + 8 * j < chunks)
#pragma unroll
          for (int t = 0; t < kSets; ++t) load_chunk(v[j][t], t == 0 ? 0 : t == 1 && kB ? 1 : 2, k0 + 8 * j);
#pragma unroll
      for (int j = 0; j < kBatch; ++j)
        if (k0 + 8 * j < chunks)
#pragma unroll
          for (int t = 0; t < kSets; ++t)
#pragma unroll
            for (int i = 0; i < kLaneCols; ++i) acc[t][i] += v[j][t][i];
    }
  }
#pragma unroll
  for (int i = 0; i < kLaneCols; ++i) {
    sa[group][lane * kLaneCols + i] = acc[0][i];
    if constexpr (kB) sb[group][lane * kLaneCols + i] = acc[1][i];
    if constexpr (kC) sc[group][lane * kLaneCols + i] = acc[kSets - 1][i];
  }
  __syncthreads();
  const int c = threadIdx.x, n = blockIdx.x * kCols + c;  // one column per thread
  if (c < kCols && n < N) {
    float ta = 0.f, tb = 0.f, tc = 0.f;
    for (int w = 0; w < 8; ++w) {
      ta += sa[w][c];
      if constexpr (kB) tb += sb[w][c];
      if constexpr (kC) tc += sc[w][c];
    }
    out.a[n] += ta;
    if constexpr (kB) out.b[n] += tb;
    if constexpr (kC) out.c.dst[n] = out.c.accumulate ? out.c.dst[n] + tc : tc;
  }
}

// chunk_sums_kernel's layout: 2 columns a lane, 16 lanes a group, so 128
// threads and 32 columns a block (N / 32 blocks: 50 at N = 1600, where 256
// columns a block gave 7 blocks of 8 long chains on 132 SMs).
constexpr int kFinishLaneCols = 2, kFinishLanes = 16, kFinishCols = kFinishLaneCols * kFinishLanes;

__global__ void colsum_kernel(float* dbias, float* scratch, const uint16_t* dout, int M, int N) {
  __shared__ float sa[8][kColsumCols];
  __shared__ bool last;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int n0 = blockIdx.x * kColsumCols + lane * 8;
  const int chunk = blockIdx.y, chunks = gridDim.y;
  const int r0 = chunk * kColsumRows, r1 = min(M, r0 + kColsumRows);
  unsigned* counters = reinterpret_cast<unsigned*>(scratch);
  float* partial = scratch + kColsumCounters;
  float a[8] = {};
  if (n0 < N) {
#pragma unroll 4
    for (int m = r0 + warp; m < r1; m += 8) {
      float d[8];
      load(dout + int64_t(m) * N + n0, d);
#pragma unroll
      for (int i = 0; i < 8; ++i) a[i] += d[i];
    }
  }
#pragma unroll
  for (int i = 0; i < 8; ++i) sa[warp][lane * 8 + i] = a[i];
  __syncthreads();
  const int c = threadIdx.x, n = blockIdx.x * kColsumCols + c;  // one column per thread from here
  if (n < N) {
    float ta = 0.f;
    for (int w = 0; w < 8; ++w) ta += sa[w][c];
    partial[int64_t(chunk) * N + n] = ta;
  }
  __threadfence();  // the partial sums are visible before the counter says so
  __syncthreads();
  if (threadIdx.x == 0) last = atomicAdd(&counters[blockIdx.x], 1u) == unsigned(chunks - 1);
  __syncthreads();
  if (!last) return;
  __threadfence();
  add_chunk_partials<8, 32, false, false>({dbias, nullptr, {}}, partial, chunks, N, sa, nullptr, nullptr);
  if (threadIdx.x == 0) counters[blockIdx.x] = 0;
}

// The blocks of columns (a counter each) of column sums over N columns.
int colsum_blocks(int N) {
  check_colsum_width(N);
  return (N + kColsumCols - 1) / kColsumCols;
}
int colsum_chunks(int M) { return (M + kColsumRows - 1) / kColsumRows; }


// The last phase on its own (see add_chunk_partials): bias_backward_finish's
// one sum, column_sums_finish's up to three.
template <bool kB, bool kC>
__global__ void __launch_bounds__(8 * kFinishLanes) chunk_sums_kernel(ColsumOut out, const float* partial, int chunks,
                                                                     int N) {
  __shared__ float sa[8][kFinishCols], sb[kB ? 8 : 1][kFinishCols], sc[kC ? 8 : 1][kFinishCols];
  add_chunk_partials<kFinishLaneCols, kFinishLanes, kB, kC>(out, partial, chunks, N, sa, sb, sc);
}

}  // namespace

void check_colsum_width(int N) {
  MXDP_CHECK(N <= kColsumMaxCols, "column sums over N=", N, " columns: more than ", kColsumMaxCols,
             " are not supported");
}

void bias_backward(float* dbias, float* scratch, const uint16_t* dout, int M, int N, cudaStream_t s) {
  MXDP_CHECK(N % 8 == 0 && aligned16(dout) && aligned16(scratch),
             "column sums need N % 8 == 0 and 16-byte aligned rows and scratch, got N=", N);
  colsum_kernel<<<dim3(colsum_blocks(N), colsum_chunks(M)), 256, 0, s>>>(dbias, scratch, dout, M, N);
  MXDP_CUDA_CHECK_LAUNCH();
}

void bias_backward_finish(float* dbias, const float* scratch, int M, int N, cudaStream_t s) {
  column_sums_finish(dbias, nullptr, {}, scratch, colsum_chunks(M), N, s);
}

void column_sums_finish(float* a, float* b, ColumnSum c, const float* scratch, int chunks, int N, cudaStream_t s) {
  MXDP_CHECK(N % 8 == 0 && aligned16(scratch),
             "column_sums_finish needs N % 8 == 0 and a 16-byte aligned scratch, got N=", N);
  check_colsum_width(N);
  const ColsumOut out{a, b, c};
  const float* partial = scratch + kColsumCounters;
  const dim3 grid((N + kFinishCols - 1) / kFinishCols), block(8 * kFinishLanes);
  if (b && c.dst) chunk_sums_kernel<true, true><<<grid, block, 0, s>>>(out, partial, chunks, N);
  else if (b) chunk_sums_kernel<true, false><<<grid, block, 0, s>>>(out, partial, chunks, N);
  else if (c.dst) chunk_sums_kernel<false, true><<<grid, block, 0, s>>>(out, partial, chunks, N);
  else chunk_sums_kernel<false, false><<<grid, block, 0, s>>>(out, partial, chunks, N);
  MXDP_CUDA_CHECK_LAUNCH();
}

}  // namespace mxdp::cuda
