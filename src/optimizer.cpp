#include "optimizer.h"

#include <cmath>

namespace mxdp {

void adamw_update(float* p, float* m, float* v, const float* g, int64_t n, const AdamWParams& a) {
  // torch.optim.AdamW (foreach=False): decay first, then the Adam step with
  // step_size = lr / bc1 and denom = sqrt(v) / sqrt(bc2) + eps.
  const float bc1 = 1.0f - std::pow(a.beta1, float(a.t));
  const float bc2_sqrt = std::sqrt(1.0f - std::pow(a.beta2, float(a.t)));
  const float step_size = a.lr / bc1;
  const float decay = 1.0f - a.lr * a.weight_decay;
  for (int64_t i = 0; i < n; ++i) {
    float gi = g[i];
    float pi = p[i] * decay;
    float mi = m[i] + (gi - m[i]) * (1.0f - a.beta1);
    float vi = v[i] * a.beta2 + (1.0f - a.beta2) * gi * gi;
    float denom = std::sqrt(vi) / bc2_sqrt + a.eps;
    p[i] = pi - step_size * (mi / denom);
    m[i] = mi;
    v[i] = vi;
  }
}

double lr_at(int64_t it, double lr, double min_lr, int64_t warmup, int64_t decay_steps) {
  if (warmup > 0 && it < warmup) return lr * double(it + 1) / double(warmup);
  if (decay_steps <= 0) return lr;
  if (it >= decay_steps) return min_lr;
  double progress = double(it - warmup) / double(decay_steps - warmup);
  double coeff = 0.5 * (1.0 + std::cos(M_PI * progress));
  return min_lr + coeff * (lr - min_lr);
}

}  // namespace mxdp
