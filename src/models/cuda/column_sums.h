// Column sums of bf16 [M, N] matrices into fp32 [N] on the GPU, shared by the
// GPU models: the bias gradients (GPT-2's linear layers, Llama's qkv bias, and
// act_quantize's sums under FP8 compute, models/cuda/fp8_linear.h), and the
// last phase of the norms' parameter gradients (models/cuda/norm_backward.h).
// bf16 inputs (uint16_t bits), fp32 arithmetic, destinations that ACCUMULATE
// (+=) unless a ColumnSum says not.
//
// Determinism: no floating-point atomics. A column's sum is made of per-chunk
// partial sums over fixed ranges of kColsumRows rows, added in chunk order by
// the last block of its column range to finish (an integer counter in the
// scratch says which; the order of the additions does not depend on it), so
// the bits are fixed. The one order is spelled out in column_sums.cu.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace mxdp::cuda {

// Rows per chunk of the column sums (the bias gradients).
constexpr int kColsumRows = 128;
// Columns per block of the column sums, and the counters at the start of the
// scratch (one per block of columns), hence the widest matrix they sum.
constexpr int kColsumCols = 256;
constexpr int kColsumCounters = 1024;
constexpr int kColsumMaxCols = kColsumCols * kColsumCounters;
// Refuses (mxdp::Error) column sums over more than kColsumMaxCols columns:
// the one width check, which a kernel that writes the partial sums itself
// (act_quantize's) makes before its launch.
void check_colsum_width(int N);
// Floats of scratch the column sums of an [M, N] matrix need: the counters and
// two partial sums per column and chunk. It must be ZEROED once before its
// first use (the kernels leave the counters zero again).
inline int64_t colsum_scratch_floats(int64_t M, int64_t N) {
  return kColsumCounters + 3 * ((M + kColsumRows - 1) / kColsumRows) * N;
}

// Where a kernel that sums columns writes one more column sum: dst[n] += sum
// (accumulate) or dst[n] = sum; dst nullptr: no such sum.
struct ColumnSum {
  float* dst = nullptr;
  bool accumulate = true;
};

// dbias[n] += sum over m (fixed chunks) of dout[m, n]. N % 8 == 0, dout and
// scratch 16-byte aligned; scratch of colsum_scratch_floats(M, N) floats,
// zeroed before its first use.
void bias_backward(float* dbias, float* scratch, const uint16_t* dout, int M, int N, cudaStream_t s);
// bias_backward's second half, for a kernel that computed its first: dbias[n]
// += the chunks' partial sums already in scratch (chunk k's, the sum over rows
// [k * kColsumRows, (k + 1) * kColsumRows) of M, at scratch[kColsumCounters +
// k * N + n]), added in bias_backward's order. Partial sums made in its order
// too (act_quantize's column sums, models/cuda/fp8_linear.h) give its bits.
void bias_backward_finish(float* dbias, const float* scratch, int M, int N, cudaStream_t s);
// The last phase of up to three column sums whose per-chunk partial sums a
// kernel wrote itself (models/cuda/norm_backward.h's): set j's chunk k at
// scratch[kColsumCounters + (j * chunks + k) * N + n]. a[n] += set 0's chunks,
// b[n] += set 1's (b null: none), c.dst[n] (+)= set 2's (c.dst null: none),
// each added over the chunks in bias_backward's order. N % 8 == 0, scratch
// 16-byte aligned.
void column_sums_finish(float* a, float* b, ColumnSum c, const float* scratch, int chunks, int N, cudaStream_t s);

}  // namespace mxdp::cuda
