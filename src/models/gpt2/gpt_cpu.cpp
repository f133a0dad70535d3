// GPT-2's own CPU kernels (declared in gpt_cpu.h): LayerNorm and the tanh
// GELU, after llm.c's train_gpt2.c, with the determinism rule of
// models/cpu/parallel.h (each output one sequential loop; OpenMP splits outputs).
#include "models/gpt2/gpt_cpu.h"

#include <algorithm>
#include <cmath>
#include <numbers>

#include "models/cpu/parallel.h"

namespace mxdp::cpu {

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

}  // namespace mxdp::cpu
