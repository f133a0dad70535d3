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

// The last phase of the column sums, by the 256 threads of the block of
// column range blockIdx.x: out += the chunks' partial sums in `partial`
// ([3][chunks][N], one set per sum), spread over the block as phase one spread
// the rows: warp w adds chunks w, w+8, ... in order (lane: 8 columns, two
// 16-byte reads per chunk), then each column adds the 8 warp sums in warp
// order. The warp sums meet in sa (sb, sc: for out.b and out.c, and may be
// null without them). colsum_kernel's last block runs it, and
// chunk_sums_kernel alone over partial sums act_quantize wrote: one order,
// so one set of bits.
__device__ void add_chunk_partials(const ColsumOut& out, const float* partial, int chunks, int N,
                                   float (*sa)[kColsumCols], float (*sb)[kColsumCols], float (*sc)[kColsumCols]) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int n0 = blockIdx.x * kColsumCols + lane * 8;
  const auto add_chunk = [&](float* acc, int set, int k) {  // acc += partial sums of set `set`, chunk k
    const float4* p = reinterpret_cast<const float4*>(partial + (int64_t(set) * chunks + k) * N + n0);
    const float4 v0 = __ldcg(p), v1 = __ldcg(p + 1);
    acc[0] += v0.x, acc[1] += v0.y, acc[2] += v0.z, acc[3] += v0.w;
    acc[4] += v1.x, acc[5] += v1.y, acc[6] += v1.z, acc[7] += v1.w;
  };
  float a[8] = {}, b[8] = {}, e[8] = {};
  if (n0 < N) {
#pragma unroll 4
    for (int k = warp; k < chunks; k += 8) {
      add_chunk(a, 0, k);
      if (out.b) add_chunk(b, 1, k);
      if (out.c.dst) add_chunk(e, 2, k);
    }
  }
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    sa[warp][lane * 8 + i] = a[i];
    if (out.b) sb[warp][lane * 8 + i] = b[i];
    if (out.c.dst) sc[warp][lane * 8 + i] = e[i];
  }
  __syncthreads();
  const int c = threadIdx.x, n = blockIdx.x * kColsumCols + c;  // one column per thread
  if (n < N) {
    float ta = 0.f, tb = 0.f, tc = 0.f;
    for (int w = 0; w < 8; ++w) {
      ta += sa[w][c];
      if (out.b) tb += sb[w][c];
      if (out.c.dst) tc += sc[w][c];
    }
    out.a[n] += ta;
    if (out.b) out.b[n] += tb;
    if (out.c.dst) out.c.dst[n] = out.c.accumulate ? out.c.dst[n] + tc : tc;
  }
}

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
  add_chunk_partials({dbias, nullptr, {}}, partial, chunks, N, sa, nullptr, nullptr);
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
__global__ void chunk_sums_kernel(ColsumOut out, const float* partial, int chunks, int N) {
  __shared__ float sa[8][kColsumCols], sb[8][kColsumCols], sc[8][kColsumCols];
  add_chunk_partials(out, partial, chunks, N, sa, sb, sc);
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
  chunk_sums_kernel<<<colsum_blocks(N), 256, 0, s>>>({a, b, c}, scratch + kColsumCounters, chunks, N);
  MXDP_CUDA_CHECK_LAUNCH();
}

}  // namespace mxdp::cuda
