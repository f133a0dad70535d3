// The CPU models' linear layers (declared in matmul.h), after llm.c's
// train_gpt2.c with parallel.h's determinism rule: 6x8 register tiles of
// four-float lanes, tiles split between threads, each output one sum in order.
#include "models/cpu/matmul.h"

#include <algorithm>
#include <cstring>

#include "models/cpu/parallel.h"

namespace mxdp::cpu {

namespace {

// Four floats in an SSE register (GCC vector extensions; a scalar operand is
// broadcast). Lane arithmetic is plain IEEE fp32, the same as scalar code.
typedef float v4 __attribute__((vector_size(16)));
inline v4 load4(const float* p) {
  v4 r;
  std::memcpy(&r, p, sizeof r);
  return r;
}
inline void store4(float* p, v4 x) { std::memcpy(p, &x, sizeof x); }

// out[m,n] = bias[n] + sum_k A(m,k) * B(k,n)    (accumulate: out[m,n] += sum_k ...)
// with A(m,k) = A[m*K + k], or A[k*M + m] when kAT, and B(k,n) = B[k*N + n].
// Each element's sum runs over k = 0..K-1 in order from 0, then the bias (or
// the old value) is added. 6x8 register tiles, tiles split between threads.
template <bool kAT>
void gemm(float* out, const float* A, const float* B, const float* bias, int M, int N, int K,
          bool accumulate) {
  constexpr int MR = 6, NR = 8;
  const int mt = (M + MR - 1) / MR, nt = (N + NR - 1) / NR;
  auto a_at = [&](int m, int k) {
    return kAT ? A[int64_t(k) * M + m] : A[int64_t(m) * K + k];
  };
#pragma omp parallel for collapse(2) schedule(static) if(int64_t(M) * N * K >= kParallelMinMacs)
  for (int tm = 0; tm < mt; ++tm) {
    for (int tn = 0; tn < nt; ++tn) {
      const int m0 = tm * MR, n0 = tn * NR;
      float acc[MR][NR] = {};
      if (m0 + MR <= M && n0 + NR <= N) {
        v4 c[MR][2] = {};
        for (int k = 0; k < K; ++k) {
          const v4 b0 = load4(B + int64_t(k) * N + n0), b1 = load4(B + int64_t(k) * N + n0 + 4);
          for (int i = 0; i < MR; ++i) {
            const float a = a_at(m0 + i, k);
            c[i][0] += a * b0;
            c[i][1] += a * b1;
          }
        }
        for (int i = 0; i < MR; ++i) {
          store4(acc[i], c[i][0]);
          store4(acc[i] + 4, c[i][1]);
        }
      } else {  // edge tile: the same per-element order
        for (int k = 0; k < K; ++k)
          for (int i = 0; i < MR && m0 + i < M; ++i)
            for (int j = 0; j < NR && n0 + j < N; ++j)
              acc[i][j] += a_at(m0 + i, k) * B[int64_t(k) * N + n0 + j];
      }
      for (int i = 0; i < MR && m0 + i < M; ++i) {
        float* o = out + int64_t(m0 + i) * N + n0;
        for (int j = 0; j < NR && n0 + j < N; ++j) {
          if (accumulate) o[j] += acc[i][j];
          else o[j] = bias ? bias[n0 + j] + acc[i][j] : acc[i][j];
        }
      }
    }
  }
}

// dst[k*N + n] = src[n*K + k]: src is {N, K}.
void transpose(float* dst, const float* src, int N, int K) {
  constexpr int TB = 32;
#pragma omp parallel for collapse(2) schedule(static) if(int64_t(N) * K >= kParallelMinWork)
  for (int n0 = 0; n0 < N; n0 += TB)
    for (int k0 = 0; k0 < K; k0 += TB)
      for (int n = n0; n < std::min(N, n0 + TB); ++n)
        for (int k = k0; k < std::min(K, k0 + TB); ++k) dst[int64_t(k) * N + n] = src[int64_t(n) * K + k];
}

}  // namespace

// out[M,N] = inp[M,K] @ W^T + bias, W = {N, K}. wt: scratch of N*K floats.
void matmul_forward(float* out, const float* inp, const float* W, const float* bias, int M, int N,
                    int K, std::vector<float>& wt) {
  if (wt.size() < size_t(N) * K) wt.resize(size_t(N) * K);
  transpose(wt.data(), W, N, K);
  gemm<false>(out, inp, wt.data(), bias, M, N, K, /*accumulate=*/false);
}

void gemm_nt(float* d, const float* A, const float* B, int M, int N, int K, bool accumulate, std::vector<float>& bt) {
  if (bt.size() < size_t(N) * K) bt.resize(size_t(N) * K);
  transpose(bt.data(), B, N, K);
  gemm<false>(d, A, bt.data(), nullptr, M, N, K, accumulate);
}

// dst[n] += sum_m src[m*N + n], the sum over m in order, then added.
void colsum_accumulate(float* dst, const float* src, int M, int N) {
  constexpr int NB = 64;
  const int nb = (N + NB - 1) / NB;
#pragma omp parallel for schedule(static) if(int64_t(M) * N >= kParallelMinWork)
  for (int ib = 0; ib < nb; ++ib) {
    const int n0 = ib * NB, n1 = std::min(N, n0 + NB);
    float acc[NB] = {};
    for (int m = 0; m < M; ++m) {
      const float* s = src + int64_t(m) * N;
      for (int n = n0; n < n1; ++n) acc[n - n0] += s[n];
    }
    for (int n = n0; n < n1; ++n) dst[n] += acc[n - n0];
  }
}

// Backward of out = inp @ W^T + bias. dinp (if non-null) is OVERWRITTEN with
// dout @ W; dW and dbias (if non-null) ACCUMULATE.
void matmul_backward(float* dinp, float* dW, float* dbias, const float* dout, const float* inp,
                     const float* W, int M, int N, int K) {
  if (dinp) gemm<false>(dinp, dout, W, nullptr, M, K, N, /*accumulate=*/false);
  gemm<true>(dW, dout, inp, nullptr, N, K, M, /*accumulate=*/true);
  if (dbias) colsum_accumulate(dbias, dout, M, N);
}

}  // namespace mxdp::cpu
