#include "engine/optimizer.h"

#include <cmath>

namespace mxdp {

AdamWScalars adamw_scalars(const AdamWParams& a) {
  AdamWScalars s;
  const float bc1 = 1.0f - std::pow(a.beta1, float(a.t));
  s.bc2_sqrt = std::sqrt(1.0f - std::pow(a.beta2, float(a.t)));
  s.step_size = a.lr / bc1;
  s.decay = 1.0f - a.lr * a.weight_decay;
  s.one_minus_b1 = 1.0f - a.beta1;
  s.b2 = a.beta2;
  s.one_minus_b2 = 1.0f - a.beta2;
  s.eps = a.eps;
  return s;
}

AdamWChoice adamw_choice(const AdamWParams& a) {
  AdamWChoice c;
  c.first_t = a.t;
  for (int k = 0; k < kMaxStepsInFlight; ++k) {
    AdamWParams ak = a;
    ak.t = a.t + k;
    c.s[k] = adamw_scalars(ak);
  }
  return c;
}

void adamw_update(float* p, float* m, float* v, const float* g, int64_t n, const AdamWParams& a) {
  const AdamWScalars s = adamw_scalars(a);
  for (int64_t i = 0; i < n; ++i) adamw_element(p[i], m[i], v[i], g[i], s);
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
