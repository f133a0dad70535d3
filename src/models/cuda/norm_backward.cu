// Kernels behind norm_backward.h: one for the input gradient and the
// parameters' per-CTA partial sums, then column_sums_finish.
//
// A CTA of 256 threads takes kNormRows rows; thread t holds the 8-column
// chunks t, t + 256, ... (kChunks of them: C <= 2048 one, <= 4096 two, <=
// 8192 four) of every row, and the weight's in registers. Rows go 4 at a time
// (2 with four chunks): their inputs and output gradients loaded, each thread's part of a
// row's two sums (LayerNorm: sum w d and sum w d n; RMSNorm: the second)
// summed over the warp by butterfly, then over the 8 warps in warp order
// through shared memory (double-buffered, one barrier a batch); the input
// gradient stored; the thread's columns of dw, db and the new dinp's sums
// added row by row. At the end each thread writes its columns' three sums as
// the CTA's partial sums (set j, CTA k: scratch[kColsumCounters + (j * CTAs +
// k) * C + column]), which column_sums_finish adds over the CTAs in a fixed
// order. Every sum's order depends on M and C only.
#include "models/cuda/norm_backward.h"

#include "models/cuda/bf16_vectors.cuh"
#include "models/cuda/model_kernels.cuh"  // warp_sum, check_rows
#include "util/check.h"
#include "util/cuda_check.h"

namespace mxdp::cuda {

namespace {

using device::load_raw;
using device::RawBf16;
using device::store;
using device::unpack;
using device::warp_sum;

constexpr int kThreads = 256, kWarps = kThreads / 32;
// Rows between two barriers: 4, or 2 with 4 chunks a thread (whose registers
// would spill at 4).
constexpr int batch_rows(int chunks) { return chunks >= 4 ? 2 : 4; }
constexpr int kSets = 3;  // dw, db, dinp's column sums
static_assert(kNormRows % batch_rows(1) == 0 && kNormRows % batch_rows(4) == 0);

int norm_ctas(int64_t M) { return int((M + kNormRows - 1) / kNormRows); }

template <NormKind kKind, int kChunks>
__global__ void __launch_bounds__(kThreads) norm_backward_kernel(NormBackward a, int M, int C) {
  constexpr bool kLn = kKind == NormKind::LayerNorm;
  constexpr int kBatch = batch_rows(kChunks);
  __shared__ float part[2][kWarps][kBatch][2];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, chunks = C / 8;
  const int r0 = blockIdx.x * kNormRows, r1 = min(M, r0 + kNormRows);
  const bool sum_dinp = a.dinp_sum.dst != nullptr;
  bool has[kChunks];
  float w[kChunks][8];
#pragma unroll
  for (int j = 0; j < kChunks; ++j) {
    const int k = threadIdx.x + kThreads * j;
    has[j] = k < chunks;
    if (has[j]) unpack(load_raw<8>(a.w + 8 * k), w[j]);
    else
#pragma unroll
      for (int i = 0; i < 8; ++i) w[j][i] = 0.f;
  }
  float sw[kChunks][8] = {}, sb[kChunks][8] = {}, sd[kChunks][8] = {};
  int buf = 0;
  for (int rb = r0; rb < r1; rb += kBatch, buf ^= 1) {
    RawBf16<8> rx[kBatch][kChunks], rd[kBatch][kChunks];
    float mu[kBatch], rs[kBatch];
#pragma unroll
    for (int r = 0; r < kBatch; ++r) {
      const int m = rb + r;
      const bool in = m < r1;
      mu[r] = kLn && in ? a.mean[m] : 0.f;
      rs[r] = in ? a.rstd[m] : 0.f;
#pragma unroll
      for (int j = 0; j < kChunks; ++j)
        if (in && has[j]) {
          const int64_t at = int64_t(m) * C + 8 * (threadIdx.x + kThreads * j);
          rx[r][j] = load_raw<8>(a.inp + at);
          rd[r][j] = load_raw<8>(a.dout + at);
        }
    }
    // The rows' two sums: the thread's columns, the warp's, then the CTA's.
#pragma unroll
    for (int r = 0; r < kBatch; ++r) {
      float sa = 0.f, sn = 0.f;
#pragma unroll
      for (int j = 0; j < kChunks; ++j) {
        if (!(rb + r < r1 && has[j])) continue;
        float x[8], d[8];
        unpack(rx[r][j], x);
        unpack(rd[r][j], d);
#pragma unroll
        for (int i = 0; i < 8; ++i) {
          const float dn = w[j][i] * d[i];
          if constexpr (kLn) {
            sa += dn;
            sn += dn * ((x[i] - mu[r]) * rs[r]);
          } else {
            sn += dn * (x[i] * rs[r]);
          }
        }
      }
      sa = warp_sum(sa);
      sn = warp_sum(sn);
      if (lane == 0) {
        part[buf][warp][r][0] = sa;
        part[buf][warp][r][1] = sn;
      }
    }
    __syncthreads();
#pragma unroll
    for (int r = 0; r < kBatch; ++r) {
      const int m = rb + r;
      if (m >= r1) continue;
      float ta = 0.f, tn = 0.f;
      for (int v = 0; v < kWarps; ++v) {
        ta += part[buf][v][r][0];
        tn += part[buf][v][r][1];
      }
      const float mean_dn = ta / float(C), mean_dnn = tn / float(C);
#pragma unroll
      for (int j = 0; j < kChunks; ++j) {
        if (!has[j]) continue;
        const int64_t at = int64_t(m) * C + 8 * (threadIdx.x + kThreads * j);
        float x[8], d[8], o[8];
        unpack(rx[r][j], x);
        unpack(rd[r][j], d);
        if (a.accumulate) unpack(load_raw<8>(a.dinp + at), o);
#pragma unroll
        for (int i = 0; i < 8; ++i) {
          const float n = kLn ? (x[i] - mu[r]) * rs[r] : x[i] * rs[r];
          const float g =
              kLn ? (w[j][i] * d[i] - mean_dn - n * mean_dnn) * rs[r] : (w[j][i] * d[i] - n * mean_dnn) * rs[r];
          o[i] = a.accumulate ? o[i] + g : g;
          sw[j][i] += d[i] * n;
          if constexpr (kLn) sb[j][i] += d[i];
        }
        store(a.dinp + at, o);
        if (sum_dinp)  // the values as stored (store rounds with the codec's bits)
#pragma unroll
          for (int i = 0; i < 8; ++i) sd[j][i] += codec::bf16_to_f32(codec::bf16_from_f32(o[i]));
      }
    }
  }
  // The CTA's partial sums of the thread's columns.
  float* partial = a.scratch + kColsumCounters;
  const int64_t ctas = gridDim.x;
#pragma unroll
  for (int j = 0; j < kChunks; ++j) {
    if (!has[j]) continue;
    const int64_t col = 8 * (threadIdx.x + kThreads * j);
    const auto put = [&](int set, const float (&v)[8]) {
      float4* p = reinterpret_cast<float4*>(partial + (set * ctas + blockIdx.x) * C + col);
      p[0] = make_float4(v[0], v[1], v[2], v[3]);
      p[1] = make_float4(v[4], v[5], v[6], v[7]);
    };
    put(0, sw[j]);
    if (kLn) put(1, sb[j]);
    if (sum_dinp) put(2, sd[j]);
  }
}

template <NormKind kKind>
void launch(const NormBackward& a, int M, int C, cudaStream_t s) {
  const int chunks = C / 8, ctas = norm_ctas(M);
  if (chunks <= kThreads) norm_backward_kernel<kKind, 1><<<ctas, kThreads, 0, s>>>(a, M, C);
  else if (chunks <= 2 * kThreads) norm_backward_kernel<kKind, 2><<<ctas, kThreads, 0, s>>>(a, M, C);
  else norm_backward_kernel<kKind, 4><<<ctas, kThreads, 0, s>>>(a, M, C);
  MXDP_CUDA_CHECK_LAUNCH();
}

}  // namespace

int64_t norm_backward_scratch_floats(int64_t M, int64_t C) {
  return kColsumCounters + kSets * ((M + kNormRows - 1) / kNormRows) * C;
}

void norm_backward(const NormBackward& a, int M, int C, cudaStream_t s) {
  const bool ln = a.kind == NormKind::LayerNorm;
  const char* what = ln ? "layernorm_backward" : "rmsnorm_backward";
  check_rows(what, C, {a.dinp, a.dout, a.inp, a.w, a.scratch});
  MXDP_CHECK(C > 0 && C <= kNormMaxCols, what, ": rows of ", C, " values; at most ", kNormMaxCols, " are supported");
  MXDP_CHECK(a.rstd && a.dw && (ln ? a.mean && a.db : !a.mean && !a.db), what,
             ln ? " needs mean, rstd, dw and db" : " needs rstd and dw, and takes no mean or db");
  if (M <= 0) return;
  MXDP_CHECK(M / kNormRows < (int64_t(1) << 31) / kSets, what, ": ", M, " rows is too many");
  if (ln) launch<NormKind::LayerNorm>(a, M, C, s);
  else launch<NormKind::RmsNorm>(a, M, C, s);
  column_sums_finish(a.dw, a.db, a.dinp_sum, a.scratch, norm_ctas(M), C, s);
}

}  // namespace mxdp::cuda
