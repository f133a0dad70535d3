// AdamW on fp32 master weights (the same update torch.optim.AdamW makes) and the
// learning-rate schedule (linear warmup, then cosine to min_lr). Pure functions
// over arrays: the engine calls them on its shard (or, in reference mode, on the
// whole buffer), so both runs make bitwise the same update for each element.
#pragma once

#include <cmath>
#include <cstdint>

namespace mxdp {

struct AdamWParams {
  float lr;
  float beta1, beta2, eps;
  float weight_decay;  // already 0 for params that take no decay
  int64_t t;           // 1-based count of applied updates (bias correction)
};

// The per-step scalars of the update, computed once on the host so that every
// device applies the same fp32 values.
struct AdamWScalars {
  float step_size;     // lr / (1 - beta1^t)
  float decay;         // 1 - lr * weight_decay
  float one_minus_b1;  // 1 - beta1
  float b2, one_minus_b2;
  float bc2_sqrt;      // sqrt(1 - beta2^t)
  float eps;
};
AdamWScalars adamw_scalars(const AdamWParams& a);

// The host launches an optimizer step before it has read whether the step
// before was skipped (non-finite gradients, decided on the device), so it does
// not know the AdamW count t of the update it launches: it is one of first_t ..
// first_t + kMaxStepsInFlight - 1. It passes the scalars of each, and the device
// picks by its own count of applied updates (StepControl::updates, engine_ops.h).
// The engine keeps at most kMaxStepsInFlight - 1 earlier steps unread.
constexpr int kMaxStepsInFlight = 2;
struct AdamWChoice {
  int64_t first_t = 1;
  AdamWScalars s[kMaxStepsInFlight];
};
// a.t is first_t.
AdamWChoice adamw_choice(const AdamWParams& a);

#if defined(__CUDACC__)
#define MXDP_OPT_HD __host__ __device__ inline
#else
#define MXDP_OPT_HD inline
#endif

// One element of torch.optim.AdamW (foreach=False): decay first, then the Adam
// step with denom = sqrt(v) / sqrt(1 - beta2^t) + eps. Written once for host
// and device; in device code it must be compiled without FMA contraction
// (-fmad=false) to give the host's bits.
MXDP_OPT_HD void adamw_element(float& p, float& m, float& v, float g, const AdamWScalars& s) {
  const float pi = p * s.decay;
  const float mi = m + (g - m) * s.one_minus_b1;
  const float vi = v * s.b2 + s.one_minus_b2 * g * g;
  const float denom = sqrtf(vi) / s.bc2_sqrt + s.eps;
  p = pi - s.step_size * (mi / denom);
  m = mi;
  v = vi;
}

// The scalars of update number t (the applied count including it); t outside
// first_t .. first_t + kMaxStepsInFlight - 1 is the caller's bug: the engine
// checks the count it reads back (clamped here, so memory stays safe). No
// index computed at run time: in a kernel, c lives in parameter space.
MXDP_OPT_HD AdamWScalars adamw_pick(const AdamWChoice& c, int64_t t) {
  AdamWScalars s = c.s[0];
  for (int k = 1; k < kMaxStepsInFlight; ++k)
    if (t - c.first_t >= k) s = c.s[k];
  return s;
}

// p, m, v, g: n elements each. g is the (clipped) gradient.
void adamw_update(float* p, float* m, float* v, const float* g, int64_t n, const AdamWParams& a);

// Learning rate at optimizer iteration `it` (0-based): linear warmup from lr/warmup
// to lr over warmup_steps, then cosine from lr to min_lr ending at decay_steps,
// min_lr after; decay_steps == 0 keeps lr constant after warmup.
double lr_at(int64_t it, double lr, double min_lr, int64_t warmup_steps, int64_t decay_steps);

}  // namespace mxdp
