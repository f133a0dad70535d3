// GPT-2's CPU kernels (declared in gpt_cpu.h): the layer loops of the CPU
// model (gpt.cpp) and the references the GPU kernels are tested against.
//
// Kernels follow llm.c's train_gpt2.c, with one rule added for determinism:
// every output element is written by one sequential loop in a fixed order, and
// OpenMP only splits the outputs between threads. Without FMA (x86-64-v2) and
// without fast-math, a vectorised lane computes exactly what the scalar loop
// would, so tiling and thread count never change a bit.
#include "models/gpt2/gpt_cpu.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numbers>

namespace mxdp {

// ---------------------------------------------------------------- kernels
// In namespace cpu (gpt_cpu.h): the references of the GPU kernels' tests.

namespace cpu {

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

// out[M,N] = inp[M,K] @ W^T + bias, W = {N, K}. wt: scratch of N*K floats.
void matmul_forward(float* out, const float* inp, const float* W, const float* bias, int M, int N,
                    int K, std::vector<float>& wt) {
  if (wt.size() < size_t(N) * K) wt.resize(size_t(N) * K);
  transpose(wt.data(), W, N, K);
  gemm<false>(out, inp, wt.data(), bias, M, N, K, /*accumulate=*/false);
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

constexpr float kLnEps = 1e-5f;

void layernorm_forward(float* out, float* mean, float* rstd, const float* inp, const float* w,
                       const float* b, int M, int C) {
#pragma omp parallel for schedule(static) if(int64_t(M) * C >= kParallelMinWork)
  for (int m = 0; m < M; ++m) {
    const float* x = inp + int64_t(m) * C;
    float s = 0.f;
    for (int i = 0; i < C; ++i) s += x[i];
    const float mu = s / C;
    float v = 0.f;
    for (int i = 0; i < C; ++i) v += (x[i] - mu) * (x[i] - mu);
    const float r = 1.f / std::sqrt(v / C + kLnEps);
    float* o = out + int64_t(m) * C;
    for (int i = 0; i < C; ++i) o[i] = (x[i] - mu) * r * w[i] + b[i];
    mean[m] = mu;
    rstd[m] = r;
  }
}

// dinp ACCUMULATES (it is the residual stream's gradient); dw, db accumulate.
void layernorm_backward(float* dinp, float* dw, float* db, const float* dout, const float* inp,
                        const float* w, const float* mean, const float* rstd, int M, int C) {
#pragma omp parallel for schedule(static) if(int64_t(M) * C >= kParallelMinWork)
  for (int m = 0; m < M; ++m) {
    const float* x = inp + int64_t(m) * C;
    const float* d = dout + int64_t(m) * C;
    const float mu = mean[m], r = rstd[m];
    float dnorm_mean = 0.f, dnorm_norm_mean = 0.f;
    for (int i = 0; i < C; ++i) {
      const float dnorm = w[i] * d[i];
      dnorm_mean += dnorm;
      dnorm_norm_mean += dnorm * ((x[i] - mu) * r);
    }
    dnorm_mean /= C;
    dnorm_norm_mean /= C;
    float* di = dinp + int64_t(m) * C;
    for (int i = 0; i < C; ++i) {
      const float norm = (x[i] - mu) * r;
      di[i] += (w[i] * d[i] - dnorm_mean - norm * dnorm_norm_mean) * r;
    }
  }
  // dw[i] += sum_m dout*norm, db[i] += sum_m dout: per column, in row order.
  constexpr int NB = 32;
  const int nb = (C + NB - 1) / NB;
#pragma omp parallel for schedule(static) if(int64_t(M) * C >= kParallelMinWork)
  for (int ib = 0; ib < nb; ++ib) {
    const int i0 = ib * NB, i1 = std::min(C, i0 + NB);
    float aw[NB] = {}, ab[NB] = {};
    for (int m = 0; m < M; ++m) {
      const float* x = inp + int64_t(m) * C;
      const float* d = dout + int64_t(m) * C;
      for (int i = i0; i < i1; ++i) {
        aw[i - i0] += d[i] * ((x[i] - mean[m]) * rstd[m]);
        ab[i - i0] += d[i];
      }
    }
    for (int i = i0; i < i1; ++i) {
      dw[i] += aw[i - i0];
      db[i] += ab[i - i0];
    }
  }
}

// Copies head h's keys (which = 1) or values (which = 2) of sequence b into
// dst[i*T + t] (head dim major), so that dot products against every position
// vectorise over positions while each one still sums over i in order.
void gather_head_transposed(float* dst, const float* qkv, int b, int h, int which, int T, int C, int hs) {
  for (int t = 0; t < T; ++t) {
    const float* src = qkv + (int64_t(b) * T + t) * 3 * C + which * C + h * hs;
    for (int i = 0; i < hs; ++i) dst[int64_t(i) * T + t] = src[i];
  }
}

// qkv [B,T,3C] -> out [B,T,C]; att [B,NH,T,T] keeps the softmax (0 above the
// diagonal). One (b, h) per task.
void attention_forward(float* out, float* att, const float* qkv, int B, int T, int C, int NH) {
  const int hs = C / NH;
  const float scale = 1.f / std::sqrt(float(hs));
#pragma omp parallel for collapse(2) schedule(static) if(int64_t(B) * NH * T * T * hs >= kParallelMinMacs)
  for (int b = 0; b < B; ++b)
    for (int h = 0; h < NH; ++h) {
      std::vector<float> kt(size_t(hs) * T);
      gather_head_transposed(kt.data(), qkv, b, h, 1, T, C, hs);
      for (int t = 0; t < T; ++t) {
        const float* q = qkv + (int64_t(b) * T + t) * 3 * C + h * hs;
        float* a = att + ((int64_t(b) * NH + h) * T + t) * T;
        // a[t2] = q . k[t2], summed over i in order.
        for (int t2 = 0; t2 <= t; ++t2) a[t2] = 0.f;
        for (int i = 0; i < hs; ++i) {
          const float qi = q[i];
          const float* k = kt.data() + int64_t(i) * T;
          for (int t2 = 0; t2 <= t; ++t2) a[t2] += qi * k[t2];
        }
        float maxv = -INFINITY;
        for (int t2 = 0; t2 <= t; ++t2) {
          a[t2] *= scale;
          maxv = std::max(maxv, a[t2]);
        }
        float sum = 0.f;
        for (int t2 = 0; t2 <= t; ++t2) {
          a[t2] = std::exp(a[t2] - maxv);
          sum += a[t2];
        }
        const float inv = 1.f / sum;
        for (int t2 = 0; t2 <= t; ++t2) a[t2] *= inv;
        for (int t2 = t + 1; t2 < T; ++t2) a[t2] = 0.f;
        float* o = out + (int64_t(b) * T + t) * C + h * hs;
        for (int i = 0; i < hs; ++i) o[i] = 0.f;
        for (int t2 = 0; t2 <= t; ++t2) {
          const float* v = qkv + (int64_t(b) * T + t2) * 3 * C + 2 * C + h * hs;
          for (int i = 0; i < hs; ++i) o[i] += a[t2] * v[i];
        }
      }
    }
}

// dqkv is OVERWRITTEN. One (b, h) per task: within it, t runs in order, so the
// contributions to dk and dv of earlier positions are added in a fixed order.
void attention_backward(float* dqkv, const float* dout, const float* qkv, const float* att, int B,
                        int T, int C, int NH) {
  const int hs = C / NH;
  const float scale = 1.f / std::sqrt(float(hs));
#pragma omp parallel for collapse(2) schedule(static) if(int64_t(B) * NH * T * T * hs >= kParallelMinMacs)
  for (int b = 0; b < B; ++b)
    for (int h = 0; h < NH; ++h) {
      for (int t = 0; t < T; ++t) {
        float* dq = dqkv + (int64_t(b) * T + t) * 3 * C + h * hs;
        for (int i = 0; i < hs; ++i) dq[i] = dq[C + i] = dq[2 * C + i] = 0.f;
      }
      std::vector<float> vt(size_t(hs) * T), datt(static_cast<size_t>(T)), dpre(static_cast<size_t>(T));
      gather_head_transposed(vt.data(), qkv, b, h, 2, T, C, hs);
      for (int t = 0; t < T; ++t) {
        const float* a = att + ((int64_t(b) * NH + h) * T + t) * T;
        const float* d = dout + (int64_t(b) * T + t) * C + h * hs;
        const float* q = qkv + (int64_t(b) * T + t) * 3 * C + h * hs;
        float* dq = dqkv + (int64_t(b) * T + t) * 3 * C + h * hs;
        // out = sum_t2 a[t2] v[t2]: datt[t2] = d . v[t2] (over i in order), dv[t2] += a[t2] d.
        for (int t2 = 0; t2 <= t; ++t2) datt[t2] = 0.f;
        for (int i = 0; i < hs; ++i) {
          const float di = d[i];
          const float* v = vt.data() + int64_t(i) * T;
          for (int t2 = 0; t2 <= t; ++t2) datt[t2] += di * v[t2];
        }
        float pd = 0.f;  // sum_t2 a[t2] * datt[t2]
        for (int t2 = 0; t2 <= t; ++t2) {
          float* dv = dqkv + (int64_t(b) * T + t2) * 3 * C + 2 * C + h * hs;
          for (int i = 0; i < hs; ++i) dv[i] += a[t2] * d[i];
          pd += a[t2] * datt[t2];
        }
        // softmax: dpre = a * (datt - sum a*datt); then the scaled dot product.
        for (int t2 = 0; t2 <= t; ++t2) dpre[t2] = a[t2] * (datt[t2] - pd) * scale;
        for (int t2 = 0; t2 <= t; ++t2) {
          const float* k = qkv + (int64_t(b) * T + t2) * 3 * C + C + h * hs;
          float* dk = dqkv + (int64_t(b) * T + t2) * 3 * C + C + h * hs;
          for (int i = 0; i < hs; ++i) {
            dq[i] += dpre[t2] * k[i];
            dk[i] += dpre[t2] * q[i];
          }
        }
      }
    }
}

const float kGeluScale = std::sqrt(2.f / std::numbers::pi_v<float>);

// GELU, tanh approximation: gelu(x) = 0.5 x (1 + tanh(s (x + 0.044715 x^3))).
// tanh is the expensive part (a third of a tiny step when computed twice), so
// the forward keeps it: `th` is an activation, and the backward and the
// recomputation of gelu(x) (gelu_from_tanh) reuse it bit for bit.
void gelu_forward(float* out, float* th, const float* inp, int64_t n) {
#pragma omp parallel for schedule(static) if(n >= kParallelMinWork)
  for (int64_t i = 0; i < n; ++i) {
    const float x = inp[i];
    th[i] = std::tanh(kGeluScale * (x + 0.044715f * x * x * x));
    out[i] = 0.5f * x * (1.f + th[i]);
  }
}

void gelu_from_tanh(float* out, const float* th, const float* inp, int64_t n) {
#pragma omp parallel for schedule(static) if(n >= kParallelMinWork)
  for (int64_t i = 0; i < n; ++i) out[i] = 0.5f * inp[i] * (1.f + th[i]);
}

// dinp is OVERWRITTEN with gelu'(inp) * dout.
void gelu_backward(float* dinp, const float* inp, const float* th, const float* dout, int64_t n) {
#pragma omp parallel for schedule(static) if(n >= kParallelMinWork)
  for (int64_t i = 0; i < n; ++i) {
    const float x = inp[i];
    const float sech2 = 1.f - th[i] * th[i];
    const float g = 0.5f * (1.f + th[i]) + 0.5f * x * sech2 * kGeluScale * (1.f + 3.f * 0.044715f * x * x);
    dinp[i] = g * dout[i];
  }
}

void residual_add(float* out, const float* a, const float* b, int64_t n) {
#pragma omp parallel for schedule(static) if(n >= kParallelMinWork)
  for (int64_t i = 0; i < n; ++i) out[i] = a[i] + b[i];
}

}  // namespace cpu

}  // namespace mxdp
