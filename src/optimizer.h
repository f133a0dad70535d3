// AdamW on fp32 master weights (the same update torch.optim.AdamW makes) and the
// learning-rate schedule (linear warmup, then cosine to min_lr). Pure functions
// over arrays: the engine calls them on its shard (or, in reference mode, on the
// whole buffer), so both runs make bitwise the same update for each element.
#pragma once

#include <cstdint>

namespace mxdp {

struct AdamWParams {
  float lr;
  float beta1, beta2, eps;
  float weight_decay;  // already 0 for params that take no decay
  int64_t t;           // 1-based count of applied updates (bias correction)
};

// p, m, v, g: n elements each. g is the (clipped) gradient.
void adamw_update(float* p, float* m, float* v, const float* g, int64_t n, const AdamWParams& a);

// Learning rate at optimizer iteration `it` (0-based): linear warmup from lr/warmup
// to lr over warmup_steps, then cosine from lr to min_lr ending at decay_steps,
// min_lr after; decay_steps == 0 keeps lr constant after warmup.
double lr_at(int64_t it, double lr, double min_lr, int64_t warmup_steps, int64_t decay_steps);

}  // namespace mxdp
