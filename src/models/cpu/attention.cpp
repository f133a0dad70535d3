// The CPU models' causal attention (declared in attention.h).
#include "models/cpu/attention.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "models/cpu/parallel.h"

namespace mxdp::cpu {

namespace {

// dst[i*T + t] = the head at column `off` of sequence b's rows (stride S), head
// dim major: dot products against every position vectorise over positions
// while each one still sums over i in order.
void gather_head_transposed(float* dst, const float* qkv, int b, int64_t off, int T, int S, int hd) {
  for (int t = 0; t < T; ++t) {
    const float* src = qkv + (int64_t(b) * T + t) * S + off;
    for (int i = 0; i < hd; ++i) dst[int64_t(i) * T + t] = src[i];
  }
}

}  // namespace

void causal_attention_forward(float* out, float* att, const float* qkv, int B, int T, int NH, int KV, int hd) {
  const int S = (NH + 2 * KV) * hd, G = NH / KV, Q = NH * hd;
  const float scale = 1.f / std::sqrt(float(hd));
#pragma omp parallel for collapse(2) schedule(static) if (int64_t(B) * NH * T * T * hd >= kParallelMinMacs)
  for (int b = 0; b < B; ++b)
    for (int h = 0; h < NH; ++h) {
      const int g = h / G;
      std::vector<float> kt(size_t(hd) * T);
      gather_head_transposed(kt.data(), qkv, b, Q + int64_t(g) * hd, T, S, hd);
      for (int t = 0; t < T; ++t) {
        const float* q = qkv + (int64_t(b) * T + t) * S + h * hd;
        float* a = att + ((int64_t(b) * NH + h) * T + t) * T;
        // a[t2] = q . k[t2], summed over i in order.
        for (int t2 = 0; t2 <= t; ++t2) a[t2] = 0.f;
        for (int i = 0; i < hd; ++i) {
          const float qi = q[i];
          const float* k = kt.data() + size_t(i) * T;
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
        float* o = out + (int64_t(b) * T + t) * Q + h * hd;
        for (int i = 0; i < hd; ++i) o[i] = 0.f;
        for (int t2 = 0; t2 <= t; ++t2) {
          const float* v = qkv + (int64_t(b) * T + t2) * S + Q + KV * hd + g * hd;
          for (int i = 0; i < hd; ++i) o[i] += a[t2] * v[i];
        }
      }
    }
}

void causal_attention_backward(float* dqkv, const float* dout, const float* qkv, const float* att, int B, int T,
                               int NH, int KV, int hd) {
  const int S = (NH + 2 * KV) * hd, G = NH / KV, Q = NH * hd;
  const float scale = 1.f / std::sqrt(float(hd));
#pragma omp parallel for collapse(2) schedule(static) if (int64_t(B) * NH * T * T * hd >= kParallelMinMacs)
  for (int b = 0; b < B; ++b)
    for (int g = 0; g < KV; ++g) {
      const int64_t koff = Q + int64_t(g) * hd, voff = Q + int64_t(KV + g) * hd;
      for (int t = 0; t < T; ++t) {
        float* row = dqkv + (int64_t(b) * T + t) * S;
        for (int h = g * G; h < (g + 1) * G; ++h)
          for (int i = 0; i < hd; ++i) row[h * hd + i] = 0.f;
        for (int i = 0; i < hd; ++i) row[koff + i] = row[voff + i] = 0.f;
      }
      std::vector<float> vt(size_t(hd) * T), datt(static_cast<size_t>(T)), dpre(static_cast<size_t>(T));
      gather_head_transposed(vt.data(), qkv, b, voff, T, S, hd);
      for (int h = g * G; h < (g + 1) * G; ++h)
        for (int t = 0; t < T; ++t) {
          const float* a = att + ((int64_t(b) * NH + h) * T + t) * T;
          const float* d = dout + (int64_t(b) * T + t) * Q + h * hd;
          const float* q = qkv + (int64_t(b) * T + t) * S + h * hd;
          float* dq = dqkv + (int64_t(b) * T + t) * S + h * hd;
          // out = sum_t2 a[t2] v[t2]: datt[t2] = d . v[t2] (over i in order), dv[t2] += a[t2] d.
          for (int t2 = 0; t2 <= t; ++t2) datt[t2] = 0.f;
          for (int i = 0; i < hd; ++i) {
            const float di = d[i];
            const float* v = vt.data() + size_t(i) * T;
            for (int t2 = 0; t2 <= t; ++t2) datt[t2] += di * v[t2];
          }
          float pd = 0.f;  // sum_t2 a[t2] * datt[t2]
          for (int t2 = 0; t2 <= t; ++t2) {
            float* dv = dqkv + (int64_t(b) * T + t2) * S + voff;
            for (int i = 0; i < hd; ++i) dv[i] += a[t2] * d[i];
            pd += a[t2] * datt[t2];
          }
          // softmax: dpre = a * (datt - sum a*datt); then the scaled dot product.
          for (int t2 = 0; t2 <= t; ++t2) dpre[t2] = a[t2] * (datt[t2] - pd) * scale;
          for (int t2 = 0; t2 <= t; ++t2) {
            const float* k = qkv + (int64_t(b) * T + t2) * S + koff;
            float* dk = dqkv + (int64_t(b) * T + t2) * S + koff;
            for (int i = 0; i < hd; ++i) {
              dq[i] += dpre[t2] * k[i];
              dk[i] += dpre[t2] * q[i];
            }
          }
        }
    }
}

}  // namespace mxdp::cpu
