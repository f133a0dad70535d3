// The CPU Llama's kernels (declared in llama_cpu.h). Summation orders are
// fixed per output element; see llama_cpu.h.
#include "models/llama/llama_cpu.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "models/cpu/parallel.h"

namespace mxdp::cpu::llama {

void rmsnorm_forward(float* out, float* rstd, const float* inp, const float* w, int M, int C, float eps) {
#pragma omp parallel for schedule(static) if (int64_t(M) * C >= kParallelMinWork)
  for (int m = 0; m < M; ++m) {
    const float* x = inp + int64_t(m) * C;
    float ss = 0.f;
    for (int i = 0; i < C; ++i) ss += x[i] * x[i];
    const float r = 1.f / std::sqrt(ss / float(C) + eps);
    float* o = out + int64_t(m) * C;
    for (int i = 0; i < C; ++i) o[i] = w[i] * (x[i] * r);
    rstd[m] = r;
  }
}

// y = w * n, n = x * r, r = (mean(x^2) + eps)^-1/2:
// dx = r * (w*d - n * mean(w*d*n)), dw += sum_m d * n.
void rmsnorm_backward(float* dinp, float* dw, const float* dout, const float* inp, const float* w, const float* rstd,
                      int M, int C) {
#pragma omp parallel for schedule(static) if (int64_t(M) * C >= kParallelMinWork)
  for (int m = 0; m < M; ++m) {
    const float* x = inp + int64_t(m) * C;
    const float* d = dout + int64_t(m) * C;
    const float r = rstd[m];
    float dot = 0.f;
    for (int i = 0; i < C; ++i) dot += (w[i] * d[i]) * (x[i] * r);
    dot /= float(C);
    float* di = dinp + int64_t(m) * C;
    for (int i = 0; i < C; ++i) di[i] += (w[i] * d[i] - (x[i] * r) * dot) * r;
  }
  constexpr int NB = 32;
  const int nb = (C + NB - 1) / NB;
#pragma omp parallel for schedule(static) if (int64_t(M) * C >= kParallelMinWork)
  for (int ib = 0; ib < nb; ++ib) {
    const int i0 = ib * NB, i1 = std::min(C, i0 + NB);
    float acc[NB] = {};
    for (int m = 0; m < M; ++m) {
      const float* x = inp + int64_t(m) * C;
      const float* d = dout + int64_t(m) * C;
      for (int i = i0; i < i1; ++i) acc[i - i0] += d[i] * (x[i] * rstd[m]);
    }
    for (int i = i0; i < i1; ++i) dw[i] += acc[i - i0];
  }
}

void rope(float* qkv, const float* inv_freq, int B, int T, int NH, int KV, int hd, bool inverse) {
  const int half = hd / 2, S = (NH + 2 * KV) * hd;
  std::vector<float> cs(size_t(T) * half), sn(size_t(T) * half);
  for (int t = 0; t < T; ++t)
    for (int i = 0; i < half; ++i) {
      const float a = float(t) * inv_freq[i];  // transformers: position * inv_freq in fp32
      cs[size_t(t) * half + i] = std::cos(a);
      sn[size_t(t) * half + i] = inverse ? -std::sin(a) : std::sin(a);
    }
  const int64_t BT = int64_t(B) * T;
#pragma omp parallel for schedule(static) if (BT * (NH + KV) * hd >= kParallelMinWork)
  for (int64_t m = 0; m < BT; ++m) {
    const float* c = cs.data() + (m % T) * half;
    const float* s = sn.data() + (m % T) * half;
    for (int h = 0; h < NH + KV; ++h) {  // the q heads, then the k heads: contiguous
      float* x = qkv + m * S + int64_t(h) * hd;
      for (int i = 0; i < half; ++i) {
        const float x1 = x[i], x2 = x[i + half];
        x[i] = x1 * c[i] - x2 * s[i];
        x[i + half] = x2 * c[i] + x1 * s[i];
      }
    }
  }
}

namespace {
inline float sigmoid(float x) { return 1.f / (1.f + std::exp(-x)); }
}  // namespace

void swiglu_forward(float* out, const float* gate_up, int M, int F) {
#pragma omp parallel for schedule(static) if (int64_t(M) * F >= kParallelMinWork)
  for (int m = 0; m < M; ++m) {
    const float* g = gate_up + int64_t(m) * 2 * F;
    const float* u = g + F;
    float* o = out + int64_t(m) * F;
    for (int j = 0; j < F; ++j) o[j] = g[j] * sigmoid(g[j]) * u[j];
  }
}

void swiglu_backward(float* dgate_up, const float* dout, const float* gate_up, int M, int F) {
#pragma omp parallel for schedule(static) if (int64_t(M) * F >= kParallelMinWork)
  for (int m = 0; m < M; ++m) {
    const float* g = gate_up + int64_t(m) * 2 * F;
    const float* u = g + F;
    const float* d = dout + int64_t(m) * F;
    float* dg = dgate_up + int64_t(m) * 2 * F;
    float* du = dg + F;
    for (int j = 0; j < F; ++j) {
      const float s = sigmoid(g[j]);
      const float silu = g[j] * s;
      dg[j] = d[j] * u[j] * (s + silu * (1.f - s));
      du[j] = d[j] * silu;
    }
  }
}

}  // namespace mxdp::cpu::llama
