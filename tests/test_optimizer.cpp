// AdamW against an independent double-precision transcription of
// torch.optim.AdamW, and the LR schedule against its closed form.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "util/check.h"
#include "engine/optimizer.h"
#include "engine/options.h"

using namespace mxdp;

TEST(AdamW, MatchesDoublePrecisionReference) {
  std::mt19937 rng(3);
  std::normal_distribution<float> nd(0, 1);
  const int n = 1000;
  std::vector<float> p(n), m(n, 0), v(n, 0), g(n);
  std::vector<double> P(n), M(n, 0), V(n, 0);
  for (int i = 0; i < n; ++i) P[i] = p[i] = nd(rng);
  const double lr = 1e-2, b1 = 0.9, b2 = 0.95, eps = 1e-8, wd = 0.1;
  for (int t = 1; t <= 20; ++t) {
    for (int i = 0; i < n; ++i) g[i] = nd(rng) * (i % 7 == 0 ? 1e-4f : 1.0f);
    adamw_update(p.data(), m.data(), v.data(), g.data(), n,
                 {float(lr), float(b1), float(b2), float(eps), float(wd), t});
    for (int i = 0; i < n; ++i) {
      P[i] *= 1 - lr * wd;
      M[i] = b1 * M[i] + (1 - b1) * g[i];
      V[i] = b2 * V[i] + (1 - b2) * double(g[i]) * g[i];
      double mh = M[i] / (1 - std::pow(b1, t)), vh = V[i] / (1 - std::pow(b2, t));
      P[i] -= lr * mh / (std::sqrt(vh) + eps);
    }
  }
  double max_err = 0;
  for (int i = 0; i < n; ++i) max_err = std::max(max_err, std::abs(p[i] - P[i]) / (1e-3 + std::abs(P[i])));
  EXPECT_LT(max_err, 1e-4) << "fp32 update drifted from the fp64 reference";
}

TEST(AdamW, NoDecayWhenZeroAndZeroGradKeepsZeroParam) {
  std::vector<float> p = {0.0f, 2.0f}, m = {0, 0}, v = {0, 0}, g = {0.0f, 0.0f};
  adamw_update(p.data(), m.data(), v.data(), g.data(), 2, {0.1f, 0.9f, 0.95f, 1e-8f, 0.0f, 1});
  EXPECT_EQ(p[0], 0.0f);
  EXPECT_EQ(p[1], 2.0f);
  adamw_update(p.data(), m.data(), v.data(), g.data(), 2, {0.1f, 0.9f, 0.95f, 1e-8f, 0.5f, 2});
  EXPECT_FLOAT_EQ(p[1], 2.0f * (1 - 0.1f * 0.5f));
}

TEST(LrSchedule, WarmupThenCosine) {
  const double lr = 1.0, mn = 0.1;
  EXPECT_DOUBLE_EQ(lr_at(0, lr, mn, 4, 104), 0.25);
  EXPECT_DOUBLE_EQ(lr_at(3, lr, mn, 4, 104), 1.0);
  EXPECT_DOUBLE_EQ(lr_at(4, lr, mn, 4, 104), 1.0);                // cosine starts at lr
  EXPECT_NEAR(lr_at(54, lr, mn, 4, 104), (lr + mn) / 2, 1e-12);  // halfway
  EXPECT_DOUBLE_EQ(lr_at(104, lr, mn, 4, 104), mn);
  EXPECT_DOUBLE_EQ(lr_at(500, lr, mn, 4, 104), mn);
  EXPECT_DOUBLE_EQ(lr_at(500, lr, mn, 0, 0), lr);  // constant
  for (int i = 5; i < 104; ++i) EXPECT_LE(lr_at(i, lr, mn, 4, 104), lr_at(i - 1, lr, mn, 4, 104));
}

TEST(Options, InvalidCombinationsSayWhy) {
  auto msg = [](DpOptions o, int dp = 2) {
    try {
      o.validate(dp);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  DpOptions o;
  EXPECT_EQ(msg(o), "");
  o.reuse_grad_buf = true;
  o.weight_format = WeightFormat::Nvfp4;
  EXPECT_NE(msg(o).find("reuse_grad_buf holds the MXFP8"), std::string::npos) << msg(o);
  o = DpOptions{};
  o.distributed_optimizer = false;
  EXPECT_NE(msg(o).find("overlap_param_gather needs distributed_optimizer"), std::string::npos);
  o.overlap_param_gather = false;
  EXPECT_EQ(msg(o), "");
  o = DpOptions{};
  o.min_lr = 1.0;
  EXPECT_NE(msg(o).find("min_lr"), std::string::npos);
  o = DpOptions{};
  o.micro_batches = 0;
  EXPECT_NE(msg(o).find("micro_batches"), std::string::npos);
  EXPECT_THROW(parse_weight_format("fp8"), Error);
  EXPECT_EQ(parse_weight_format("nvfp4"), WeightFormat::Nvfp4);
  EXPECT_THROW(parse_scale_rounding("up"), Error);
  EXPECT_THROW(parse_grad_reduce_dtype("fp16"), Error);
}
