// The backward of a row norm over bf16 [M, C] rows, with its parameter
// gradients in the same pass, for both GPU models: GPT-2's LayerNorm
// (y = (x - mean) rstd w + b) and the Llama's RMSNorm (y = x rstd w), mean and
// rstd the forward's, per row. One kernel reads a row's input and output
// gradient once: each CTA takes kNormRows rows, every thread the same 8-column
// chunks of each (the weight in registers); a row's two statistics are summed
// across the CTA; the input gradient is written (or added into, bf16); and the
// thread's columns of dw (and db, and the column sums of the new dinp) are
// summed over the CTA's rows in order into a partial sum per CTA, which a
// second launch adds in a fixed order (column_sums.h's column_sums_finish).
// No floating-point atomics: the bits depend on M and C only.
//
//   LayerNorm: g = (w d - mean(w d) - n mean(w d n)) rstd, n = (x - mean) rstd;
//              dw += sum d n, db += sum d.
//   RMSNorm:   g = (w d - n mean(w d n)) rstd, n = x rstd; dw += sum d n.
// dinp = g (accumulate false) or bf16(dinp + g); dinp_sum.dst (if set) gets
// the column sums of the new dinp, as stored (written or added, its
// `accumulate`): the bias gradient of the layer whose output fed the residual
// stream that dinp continues.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "models/cuda/column_sums.h"  // ColumnSum, kColsumCounters

namespace mxdp::cuda {

enum class NormKind { LayerNorm, RmsNorm };

// Rows a CTA of norm_backward sums its parameters' gradients over.
constexpr int kNormRows = 32;
// The widest row norm_backward takes (8 columns a thread, 4 chunks each).
constexpr int kNormMaxCols = 8192;

struct NormBackward {
  NormKind kind = NormKind::LayerNorm;
  uint16_t* dinp = nullptr;   // [M, C], written (or added into: accumulate)
  bool accumulate = false;
  float* dw = nullptr;        // [C], added into
  float* db = nullptr;        // [C], added into (LayerNorm; null for RMSNorm)
  ColumnSum dinp_sum;         // the column sums of the new dinp (dst null: none)
  float* scratch = nullptr;   // norm_backward_scratch_floats(M, C) floats (nothing to zero)
  const uint16_t* dout = nullptr;  // [M, C], the output's gradient
  const uint16_t* inp = nullptr;   // [M, C], the forward's input
  const uint16_t* w = nullptr;     // [C]
  const float* mean = nullptr;     // [M] (LayerNorm; null for RMSNorm)
  const float* rstd = nullptr;     // [M]
};

// Floats of scratch norm_backward needs for M rows of C: the counters' place
// (untouched) and three partial sums per column and CTA.
int64_t norm_backward_scratch_floats(int64_t M, int64_t C);

// Refuses (mxdp::Error, before any launch) a C that is not a multiple of 8
// or above kNormMaxCols, rows that are not 16-byte aligned, a LayerNorm
// without its mean or db, an RMSNorm with a db.
void norm_backward(const NormBackward& a, int M, int C, cudaStream_t s);

}  // namespace mxdp::cuda
