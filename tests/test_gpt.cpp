// GPT-2 on the CPU against PyTorch (tests/data/gpt_golden.bin, written by
// scripts/gen_gpt_golden.py in float64), plus determinism, hook order,
// gradient accumulation and config validation.
#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "util/check.h"
#include "models/gpt2/gpt.h"
#include "gpt_golden.h"

namespace mxdp {
namespace {

using testing::Golden;
using testing::load_golden;

// ---------------------------------------------------------------- helpers

// Owns one zeroed fp32 gradient per param; records the hook calls.
class TestHooks : public ModelHooks {
 public:
  explicit TestHooks(const Model& m) {
    for (const auto& p : m.params()) grads.emplace_back(size_t(p.numel()), 0.f);
  }
  void before_layer(int layer) override { before.push_back(layer); }
  float* grad(int param) override { return grads.at(size_t(param)).data(); }
  void after_layer_backward(int layer) override { after.push_back(layer); }
  void zero() {
    for (auto& g : grads) std::fill(g.begin(), g.end(), 0.f);
  }
  std::vector<std::vector<float>> grads;
  std::vector<int> before, after;
};

void set_weights(Gpt& m, const std::vector<std::vector<float>>& w) {
  for (size_t i = 0; i < w.size(); ++i) std::copy(w[i].begin(), w[i].end(), m.weights(int(i)));
}

// Elementwise |got - ref| <= atol + rtol * |ref|; prints max abs and max
// relative error (relative to max |ref| of the tensor).
::testing::AssertionResult close(const char* what, const float* got, const float* ref, size_t n,
                                 double atol, double rtol) {
  double max_abs = 0, max_ref = 0;
  size_t worst = 0, bad = 0;
  for (size_t i = 0; i < n; ++i) {
    const double e = std::fabs(double(got[i]) - ref[i]);
    if (!(e <= atol + rtol * std::fabs(ref[i]))) {
      if (bad++ == 0) worst = i;
    }
    if (!(e <= max_abs)) max_abs = e;
    max_ref = std::max(max_ref, std::fabs(double(ref[i])));
  }
  std::printf("  %-22s n=%-6zu max|ref| %.3e  max abs err %.3e  rel (to max|ref|) %.3e\n", what, n, max_ref,
              max_abs, max_ref > 0 ? max_abs / max_ref : 0.0);
  if (bad == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << what << ": " << bad << " of " << n << " elements off, first at " << worst
                                       << ": got " << got[worst] << " ref " << ref[worst];
}

Batch batch_of(const std::vector<int32_t>& in, const std::vector<int32_t>& tg, int B, int T) {
  return {in.data(), tg.data(), B, T};
}

// Deterministic pseudo-random tokens in [0, vocab).
std::vector<int32_t> tokens(int n, int vocab, uint32_t seed) {
  std::vector<int32_t> t(static_cast<size_t>(n));
  uint32_t s = seed;
  for (auto& x : t) {
    s = s * 1664525u + 1013904223u;
    x = int32_t((s >> 8) % uint32_t(vocab));
  }
  return t;
}

// ---------------------------------------------------------------- golden

// Tolerances against the float64 PyTorch reference (fp32 arithmetic here), per
// element |got - ref| <= atol + rtol*|ref|: logits and loss 1e-5 + 1e-5 rel,
// gradients 5e-7 + 1e-4 rel (gradients reach 0.2). Observed with GCC 12 /
// x86-64: logits 1.4e-6, loss 0, gradients <= 1.1e-7 abs (< 1e-6 of each
// tensor's max), so the bounds leave ~5-10x for other compilers' libm.
constexpr double kLogitAtol = 1e-5, kLogitRtol = 1e-5;
constexpr double kGradAtol = 5e-7, kGradRtol = 1e-4;

TEST(GptGolden, LogitsLossAndEveryGradientMatchPyTorch) {
  const Golden g = load_golden();
  Gpt m(g.cfg);
  ASSERT_EQ(m.params().size(), g.shapes.size());
  for (size_t i = 0; i < g.shapes.size(); ++i) ASSERT_EQ(m.params()[i].shape, g.shapes[i]) << m.params()[i].name;
  set_weights(m, g.params);
  TestHooks hooks(m);
  const float loss = m.forward(batch_of(g.inputs, g.targets, g.B, g.T), hooks);
  std::printf("  loss %.7f  torch %.7f  abs err %.3e\n", loss, g.loss, std::fabs(double(loss) - g.loss));
  EXPECT_NEAR(loss, g.loss, kLogitAtol + kLogitRtol * std::fabs(g.loss));
  std::vector<float> logits;
  for (int b = 0; b < g.B; ++b)
    for (int t = 0; t < g.T; ++t) {
      const float* z = m.logits(b, t);
      logits.insert(logits.end(), z, z + g.cfg.padded_vocab);
    }
  EXPECT_TRUE(close("logits", logits.data(), g.logits.data(), logits.size(), kLogitAtol, kLogitRtol));
  m.backward(hooks);
  for (size_t i = 0; i < g.grads.size(); ++i)
    EXPECT_TRUE(close(m.params()[i].name.c_str(), hooks.grads[i].data(), g.grads[i].data(), g.grads[i].size(),
                      kGradAtol, kGradRtol));
}

// torch.optim.AdamW, transcribed: decoupled decay p *= 1 - lr*wd (decay params
// only), then m, v, bias corrections, p -= lr/bc1 * m / (sqrt(v)/sqrt(bc2) + eps).
struct AdamW {
  float lr, b1, b2, eps, wd;
  std::vector<std::vector<float>> m, v;
  int step = 0;
  void update(Gpt& model, const std::vector<std::vector<float>>& grads) {
    std::vector<float*> p;
    for (size_t i = 0; i < grads.size(); ++i) p.push_back(model.weights(int(i)));
    update(p, model.params(), grads);
  }
  void update(const std::vector<float*>& params, const std::vector<ParamSpec>& specs,
              const std::vector<std::vector<float>>& grads) {
    if (m.empty())
      for (const auto& g : grads) m.emplace_back(g.size(), 0.f), v.emplace_back(g.size(), 0.f);
    ++step;
    const float bc1 = 1.f - std::pow(b1, float(step)), bc2 = 1.f - std::pow(b2, float(step));
    for (size_t i = 0; i < grads.size(); ++i) {
      float* p = params[i];
      const float decay = specs[i].decay ? wd : 0.f;
      for (size_t j = 0; j < grads[i].size(); ++j) {
        const float g = grads[i][j];
        p[j] *= 1.f - lr * decay;
        m[i][j] = b1 * m[i][j] + (1.f - b1) * g;
        v[i][j] = b2 * v[i][j] + (1.f - b2) * g * g;
        p[j] -= lr / bc1 * m[i][j] / (std::sqrt(v[i][j]) / std::sqrt(bc2) + eps);
      }
    }
  }
};

// Loss before each of 10 AdamW steps on the golden batch: 1e-5 abs + 1e-5 rel
// (fp32 here vs float64 there; the loss falls from 4.34 to 1.13; observed
// max error 2.4e-7).
TEST(GptGolden, AdamWLossTrajectoryMatchesPyTorch) {
  const Golden g = load_golden();
  Gpt m(g.cfg);
  set_weights(m, g.params);
  TestHooks hooks(m);
  AdamW opt{g.lr, g.beta1, g.beta2, g.eps, g.wd, {}, {}, 0};
  double max_err = 0;
  for (int s = 0; s < g.n_steps; ++s) {
    hooks.zero();
    const float loss = m.forward(batch_of(g.inputs, g.targets, g.B, g.T), hooks);
    m.backward(hooks);
    opt.update(m, hooks.grads);
    const double err = std::fabs(double(loss) - g.losses[size_t(s)]);
    max_err = std::max(max_err, err);
    std::printf("  step %d loss %.6f torch %.6f abs err %.2e\n", s, loss, g.losses[size_t(s)], err);
    EXPECT_NEAR(loss, g.losses[size_t(s)], 1e-5 + 1e-5 * std::fabs(g.losses[size_t(s)])) << "step " << s;
  }
  std::printf("  max abs loss err over %d steps: %.3e\n", g.n_steps, max_err);
}

// ---------------------------------------------------------------- the GPU's golden checks

// The checks gputest_gpt_golden.cu holds the bf16 GPU GPT to (gpt_golden.h),
// run here on the CPU GPT so that what they accept and reject is tested
// without a GPU.

std::vector<float> real_logits_of(Gpt& m, const Golden& g) {
  std::vector<float> out;
  for (int b = 0; b < g.B; ++b)
    for (int t = 0; t < g.T; ++t) out.insert(out.end(), m.logits(b, t), m.logits(b, t) + g.cfg.vocab);
  return out;
}

std::vector<std::string> names_of(const Gpt& m) {
  std::vector<std::string> n;
  for (const auto& p : m.params()) n.push_back(p.name);
  return n;
}

// The bf16 check accepts the CPU GPT computing with the golden weights rounded
// to bf16 (what the GPU holds), and rejects each of these wrong results: a
// gradient off by 10% (a wrong scale), half a gradient missing (a lost term, a
// race), a gradient read in the wrong layout (transposed), two sequences'
// logits swapped (a wrong index), a loss off by 1%.
TEST(GptGolden, Bf16CheckAcceptsBf16WeightsAndRejectsWrongResults) {
  const Golden g = load_golden();
  Gpt m(g.cfg);
  auto w = g.params;
  for (auto& t : w)
    for (float& x : t) x = testing::bfr(x);
  set_weights(m, w);
  TestHooks hooks(m);
  const float loss = m.forward(batch_of(g.inputs, g.targets, g.B, g.T), hooks);
  const std::vector<float> logits = real_logits_of(m, g);
  m.backward(hooks);
  const auto names = names_of(m);
  const auto tol = testing::kBf16GoldenTolerance;
  const auto ok = testing::golden_mismatches(g, loss, logits, hooks.grads, names, tol, true);
  EXPECT_TRUE(ok.empty()) << "bf16 weights alone exceed the GPU's tolerances: " << (ok.empty() ? "" : ok[0]);

  auto rejected = [&](const std::string& what, float l, const std::vector<float>& z,
                      const std::vector<std::vector<float>>& gr, const std::string& must_name) {
    const auto bad = testing::golden_mismatches(g, l, z, gr, names, tol, false);
    bool named = false;
    for (const auto& b : bad) named |= b.rfind(must_name + ":", 0) == 0;
    EXPECT_TRUE(named) << what << ": not reported as a mismatch of " << must_name;
  };
  auto find = [&](const std::string& n) { return size_t(std::find(names.begin(), names.end(), n) - names.begin()); };
  {
    auto gr = hooks.grads;
    for (float& x : gr[find("h1.mlp.fc.w")]) x *= 1.1f;
    rejected("gradient scaled by 1.1", loss, logits, gr, "h1.mlp.fc.w");
  }
  {
    auto gr = hooks.grads;
    auto& t = gr[find("h0.attn.qkv.b")];
    std::fill(t.begin() + t.size() / 2, t.end(), 0.f);
    rejected("half a gradient missing", loss, logits, gr, "h0.attn.qkv.b");
  }
  {
    auto gr = hooks.grads;
    auto& t = gr[find("h0.attn.proj.w")];  // [C, C]
    const size_t C = size_t(g.cfg.d_model);
    std::vector<float> tr(t.size());
    for (size_t i = 0; i < C; ++i)
      for (size_t j = 0; j < C; ++j) tr[j * C + i] = t[i * C + j];
    t = tr;
    rejected("gradient transposed", loss, logits, gr, "h0.attn.proj.w");
  }
  {
    auto z = logits;
    const size_t row = size_t(g.T) * g.cfg.vocab;
    std::swap_ranges(z.begin(), z.begin() + row, z.begin() + row);
    rejected("logits of sequences 0 and 1 swapped", loss, z, hooks.grads, "logits");
  }
  rejected("loss off by 1%", loss * 1.01f, logits, hooks.grads, "loss");
}

// The golden AdamW trajectory of the CPU GPT under variations: fp32 masters,
// compute weights bf16(master) (the GPU engine's bf16 gather), optionally
// every gradient perturbed by relative noise (a stand-in for the GPU's bf16
// activations), the lr scaled, or the first update skipped.
struct TrajectoryVariant {
  bool bf16_weights = true;
  double grad_noise = 0;  // each gradient element times (1 + grad_noise * N(0, 1))
  double grad_noise_rms = 0;  // plus grad_noise_rms * (RMS of its tensor) * N(0, 1)
  float lr_scale = 1;
  bool skip_first_update = false;
};
std::vector<float> golden_trajectory(const Golden& g, const TrajectoryVariant& var) {
  Gpt m(g.cfg);
  auto master = g.params;
  TestHooks hooks(m);
  AdamW opt{g.lr * var.lr_scale, g.beta1, g.beta2, g.eps, g.wd, {}, {}, 0};
  std::vector<float*> mp;
  for (auto& t : master) mp.push_back(t.data());
  uint64_t rng = 12345;
  auto normal = [&] {  // Box-Muller on a 64-bit LCG: reproducible everywhere
    auto u = [&] {
      rng = rng * 6364136223846793005ull + 1442695040888963407ull;
      return (double(rng >> 11) + 0.5) / 9007199254740992.0;
    };
    const double a = u(), b = u();
    return std::sqrt(-2 * std::log(a)) * std::cos(6.283185307179586 * b);
  };
  std::vector<float> losses;
  for (int s = 0; s < g.n_steps; ++s) {
    auto w = master;
    if (var.bf16_weights)
      for (auto& t : w)
        for (float& x : t) x = testing::bfr(x);
    set_weights(m, w);
    hooks.zero();
    losses.push_back(m.forward(batch_of(g.inputs, g.targets, g.B, g.T), hooks));
    m.backward(hooks);
    if (var.grad_noise > 0)
      for (auto& t : hooks.grads)
        for (float& x : t) x = float(x * (1 + var.grad_noise * normal()));
    if (var.grad_noise_rms > 0)
      for (auto& t : hooks.grads) {
        double ss = 0;
        for (float x : t) ss += double(x) * x;
        const double rms = std::sqrt(ss / double(t.size()));
        for (float& x : t) x = float(x + var.grad_noise_rms * rms * normal());
      }
    if (!(var.skip_first_update && s == 0)) opt.update(mp, m.params(), hooks.grads);
  }
  return losses;
}

// kBf16TrajectoryTolerance accepts bf16 weights, also with 5% relative noise on
// every gradient element or noise of 5% of each gradient's RMS added to every
// element (the GPU's whole-gradient error is within 5% of its norm, and is a
// systematic rounding rather than noise), and rejects an lr 25% too high or 20%
// too low, a skipped update, and a run that does not learn.
TEST(GptGolden, Bf16TrajectoryCheckAcceptsBf16AndRejectsWrongUpdates) {
  const Golden g = load_golden();
  const double tol = testing::kBf16TrajectoryTolerance;
  auto check = [&](const char* what, const TrajectoryVariant& v) {
    std::printf(" %s:\n", what);
    return testing::golden_trajectory_mismatches(g, golden_trajectory(g, v), tol, true);
  };
  EXPECT_TRUE(check("bf16 weights", {}).empty());
  EXPECT_TRUE(check("bf16 weights, 5% gradient noise", {.grad_noise = 0.05}).empty());
  EXPECT_TRUE(check("bf16 weights, noise of 5% of each gradient's RMS", {.grad_noise_rms = 0.05}).empty());
  EXPECT_FALSE(check("lr x 1.25", {.lr_scale = 1.25f}).empty());
  EXPECT_FALSE(check("lr x 0.8", {.lr_scale = 0.8f}).empty());
  EXPECT_FALSE(check("first update skipped", {.skip_first_update = true}).empty());
  EXPECT_FALSE(check("no update", {.lr_scale = 0.f}).empty());
}

// ---------------------------------------------------------------- determinism

// A config whose sizes are not multiples of the kernels' tiles: B*T = 39 rows,
// head size 32, padded vocab 100.
GptConfig odd_config() {
  return {.vocab = 97, .padded_vocab = 100, .max_seq = 16, .n_layer = 2, .n_head = 3, .d_model = 96};
}

struct RunResult {
  float loss;
  std::vector<float> logits;
  std::vector<std::vector<float>> grads;
};

// Big enough that every kernel's loop runs in parallel (see kParallelMinWork
// in gpt.cpp): B*T = 185 rows.
GptConfig det_config() {
  GptConfig c = odd_config();
  c.max_seq = 40;
  return c;
}

RunResult run_once(const GptConfig& cfg, int threads) {
  const int saved = omp_get_max_threads();
  omp_set_num_threads(threads);
  Gpt m(cfg);
  m.init_weights(7);
  const int B = 5, T = 37;
  auto in = tokens(B * T, cfg.vocab, 1), tg = tokens(B * T, cfg.vocab, 2);
  TestHooks hooks(m);
  RunResult r;
  r.loss = m.forward(batch_of(in, tg, B, T), hooks);
  for (int b = 0; b < B; ++b)
    for (int t = 0; t < T; ++t) r.logits.insert(r.logits.end(), m.logits(b, t), m.logits(b, t) + cfg.padded_vocab);
  m.backward(hooks);
  r.grads = hooks.grads;
  omp_set_num_threads(saved);
  return r;
}

void expect_bitwise_equal(const RunResult& a, const RunResult& b, const Gpt& names) {
  EXPECT_EQ(std::memcmp(&a.loss, &b.loss, 4), 0) << a.loss << " vs " << b.loss;
  ASSERT_EQ(a.logits.size(), b.logits.size());
  EXPECT_EQ(std::memcmp(a.logits.data(), b.logits.data(), 4 * a.logits.size()), 0) << "logits";
  for (size_t i = 0; i < a.grads.size(); ++i)
    EXPECT_EQ(std::memcmp(a.grads[i].data(), b.grads[i].data(), 4 * a.grads[i].size()), 0)
        << "grad of " << names.params()[i].name;
}

TEST(GptDeterminism, RunToRunBitwise) {
  const Gpt names(det_config());
  expect_bitwise_equal(run_once(det_config(), 2), run_once(det_config(), 2), names);
}

TEST(GptDeterminism, ThreadCountIndependentBitwise) {
  const Gpt names(det_config());
  const RunResult one = run_once(det_config(), 1);
  expect_bitwise_equal(one, run_once(det_config(), 3), names);
  expect_bitwise_equal(one, run_once(det_config(), 4), names);
}

TEST(GptDeterminism, InitIsThreadCountIndependentAndGpt2Like) {
  const GptConfig cfg = odd_config();
  omp_set_num_threads(1);
  Gpt a(cfg);
  a.init_weights(42);
  omp_set_num_threads(3);
  Gpt b(cfg);
  b.init_weights(42);
  Gpt c(cfg);
  c.init_weights(43);
  for (size_t i = 0; i < a.params().size(); ++i) {
    const ParamSpec& p = a.params()[i];
    const size_t n = size_t(p.numel());
    EXPECT_EQ(std::memcmp(a.weights(int(i)), b.weights(int(i)), 4 * n), 0) << p.name;
    const float* w = a.weights(int(i));
    if (p.shape.size() == 2) {
      EXPECT_NE(std::memcmp(w, c.weights(int(i)), 4 * n), 0) << p.name << " does not depend on the seed";
      const size_t n_real = p.name == "wte" ? size_t(cfg.vocab) * cfg.d_model : n;
      double s = 0, s2 = 0;
      for (size_t j = 0; j < n_real; ++j) s += w[j], s2 += double(w[j]) * w[j];
      const double mean = s / n_real, sd = std::sqrt(s2 / n_real - mean * mean);
      const bool resid = p.name.ends_with("proj.w");
      const double want = resid ? 0.02 / std::sqrt(2.0 * cfg.n_layer) : 0.02;
      EXPECT_NEAR(sd, want, 0.05 * want) << p.name;  // n >= 9216: sd of sd ~ 0.7%
      EXPECT_NEAR(mean, 0.0, 0.05 * want) << p.name;
      for (size_t j = n_real; j < n; ++j) ASSERT_EQ(w[j], 0.f) << "padding row of wte";
    } else {
      const float want = p.name.ends_with("ln1.w") || p.name.ends_with("ln2.w") || p.name == "lnf.w" ? 1.f : 0.f;
      for (size_t j = 0; j < n; ++j) ASSERT_EQ(w[j], want) << p.name;
    }
  }
  omp_set_num_threads(2);
}

// Activations are re-sized when B or T change: a model that ran other shapes
// first gives bitwise the results of a fresh one.
TEST(GptDeterminism, ChangingBatchShapeGivesFreshResults) {
  const GptConfig cfg = odd_config();
  Gpt fresh(cfg), used(cfg);
  fresh.init_weights(13);
  used.init_weights(13);
  auto in = tokens(3 * 16, cfg.vocab, 31), tg = tokens(3 * 16, cfg.vocab, 32);
  TestHooks hf(fresh), hu(used);
  for (auto [B, T] : {std::pair{3, 16}, std::pair{1, 4}}) {
    used.forward(batch_of(in, tg, B, T), hu);
    used.backward(hu);
  }
  hu.zero();
  const float lf = fresh.forward(batch_of(in, tg, 2, 9), hf);
  const float lu = used.forward(batch_of(in, tg, 2, 9), hu);
  EXPECT_EQ(std::memcmp(&lf, &lu, 4), 0) << lf << " vs " << lu;
  fresh.backward(hf);
  used.backward(hu);
  for (size_t i = 0; i < hf.grads.size(); ++i)
    EXPECT_EQ(std::memcmp(hf.grads[i].data(), hu.grads[i].data(), 4 * hf.grads[i].size()), 0)
        << fresh.params()[i].name;
}

// ---------------------------------------------------------------- hooks

TEST(GptHooks, LayerOrderAndGradsFinalAtAfterLayerBackward) {
  const GptConfig cfg = odd_config();
  Gpt m(cfg);
  m.init_weights(3);
  const int L = m.num_layers();
  ASSERT_EQ(L, cfg.n_layer + 2);
  // Params in forward order: layers non-decreasing, first = 0, last = L-1.
  for (size_t i = 1; i < m.params().size(); ++i) EXPECT_LE(m.params()[i - 1].layer, m.params()[i].layer);
  EXPECT_EQ(m.params().front().layer, 0);
  EXPECT_EQ(m.params().back().layer, L - 1);
  for (const auto& p : m.params()) {
    EXPECT_EQ(p.decay, p.shape.size() == 2) << p.name;
    if (p.shape.size() == 2) {
      EXPECT_EQ(p.shape[1] % 32, 0) << p.name << ": rows of whole 32-blocks travel in the low-precision format";
    }
  }

  // Records, at after_layer_backward(L), a copy of the grads of the params of layer L.
  struct Snap : TestHooks {
    using TestHooks::TestHooks;
    const Model* model = nullptr;
    std::vector<std::vector<float>> at_done;
    void after_layer_backward(int layer) override {
      TestHooks::after_layer_backward(layer);
      for (size_t i = 0; i < grads.size(); ++i)
        if (model->params()[i].layer == layer) at_done[i] = grads[i];
    }
  } hooks(m);
  hooks.model = &m;
  hooks.at_done.resize(m.params().size());
  auto in = tokens(2 * 9, cfg.vocab, 5), tg = tokens(2 * 9, cfg.vocab, 6);
  m.forward(batch_of(in, tg, 2, 9), hooks);
  m.backward(hooks);
  std::vector<int> up, down;
  for (int l = 0; l < L; ++l) up.push_back(l), down.insert(down.begin(), l);
  EXPECT_EQ(hooks.before, up);
  EXPECT_EQ(hooks.after, down);
  for (size_t i = 0; i < m.params().size(); ++i) {
    ASSERT_EQ(hooks.at_done[i].size(), hooks.grads[i].size()) << m.params()[i].name << " never reported";
    EXPECT_EQ(std::memcmp(hooks.at_done[i].data(), hooks.grads[i].data(), 4 * hooks.grads[i].size()), 0)
        << "grad of " << m.params()[i].name << " changed after after_layer_backward(" << m.params()[i].layer
        << ")";
  }
}

// The engine makes a layer's weights fresh in before_layer(L). Here weights
// start as NaN and each layer's real values are written only in its
// before_layer: the loss must be bitwise that of the normal run, so no layer
// reads a parameter before its before_layer.
TEST(GptHooks, NoParamReadBeforeItsBeforeLayer) {
  const GptConfig cfg = odd_config();
  Gpt ref(cfg);
  ref.init_weights(11);
  auto in = tokens(2 * 10, cfg.vocab, 8), tg = tokens(2 * 10, cfg.vocab, 9);
  TestHooks h0(ref);
  const float want = ref.forward(batch_of(in, tg, 2, 10), h0);

  Gpt lazy(cfg);
  struct Lazy : TestHooks {
    using TestHooks::TestHooks;
    Gpt* src = nullptr;
    Gpt* dst = nullptr;
    void before_layer(int layer) override {
      TestHooks::before_layer(layer);
      for (size_t i = 0; i < dst->params().size(); ++i)
        if (dst->params()[i].layer == layer)
          std::memcpy(dst->weights(int(i)), src->weights(int(i)), 4 * size_t(dst->params()[i].numel()));
    }
  } hooks(lazy);
  hooks.src = &ref;
  hooks.dst = &lazy;
  for (size_t i = 0; i < lazy.params().size(); ++i)
    std::fill_n(lazy.weights(int(i)), lazy.params()[i].numel(), std::nanf(""));
  const float got = lazy.forward(batch_of(in, tg, 2, 10), hooks);
  EXPECT_EQ(std::memcmp(&got, &want, 4), 0) << got << " vs " << want;
}

// ---------------------------------------------------------------- accumulation

TEST(GptGrad, TwoBackwardPassesAccumulateTwice) {
  const GptConfig cfg = odd_config();
  Gpt m(cfg);
  m.init_weights(5);
  auto in = tokens(2 * 11, cfg.vocab, 3), tg = tokens(2 * 11, cfg.vocab, 4);
  TestHooks once(m), twice(m);
  m.forward(batch_of(in, tg, 2, 11), once);
  m.backward(once);
  for (int r = 0; r < 2; ++r) {
    m.forward(batch_of(in, tg, 2, 11), twice);
    m.backward(twice);
  }
  for (size_t i = 0; i < m.params().size(); ++i) {
    const auto& g1 = once.grads[i];
    const auto& g2 = twice.grads[i];
    double max_g = 0;
    for (float x : g1) max_g = std::max(max_g, double(std::fabs(x)));
    EXPECT_GT(max_g, 0.0) << m.params()[i].name << " has an all-zero gradient";
    for (size_t j = 0; j < g1.size(); ++j) {
      if (m.params()[i].name == "wte") {
        // Two contributions (head, then embedding) per pass: (h+e)+h+e is not
        // bitwise 2(h+e), but within a few ulps.
        ASSERT_NEAR(g2[j], 2 * g1[j], 1e-6 * max_g) << "wte[" << j << "]";
      } else {
        // Every other gradient is added once per pass: s + s == 2s exactly.
        ASSERT_EQ(g2[j], 2 * g1[j]) << m.params()[i].name << "[" << j << "]";
      }
    }
  }
}

TEST(GptGrad, BackwardNeedsAForwardWithTargets) {
  const GptConfig cfg = odd_config();
  Gpt m(cfg);
  m.init_weights(1);
  TestHooks h(m);
  EXPECT_THROW(m.backward(h), Error);
  auto in = tokens(8, cfg.vocab, 1), tg = tokens(8, cfg.vocab, 2);
  m.forward(batch_of(in, tg, 1, 8), h);
  m.backward(h);
  EXPECT_THROW(m.backward(h), Error);  // the probabilities are gone
  m.forward_logits(in.data(), 1, 8, h);
  EXPECT_THROW(m.backward(h), Error);
}

// ---------------------------------------------------------------- inference

TEST(GptInference, ForwardLogitsMatchesTrainingForward) {
  const GptConfig cfg = odd_config();
  Gpt m(cfg);
  m.init_weights(9);
  const int B = 2, T = 7;
  auto in = tokens(B * T, cfg.vocab, 21), tg = tokens(B * T, cfg.vocab, 22);
  TestHooks h(m);
  m.forward(batch_of(in, tg, B, T), h);
  std::vector<float> a(m.logits(1, T - 1), m.logits(1, T - 1) + cfg.vocab);
  m.forward_logits(in.data(), B, T, h);
  EXPECT_EQ(m.logits_last(1), a);
  EXPECT_EQ(m.logits_last(1).size(), size_t(cfg.vocab));
  // Causal: the last position of a longer sequence does not change earlier logits.
  std::vector<float> first(m.logits(0, 3), m.logits(0, 3) + cfg.padded_vocab);
  std::vector<int32_t> in2 = in;
  in2[size_t(T - 1)] = (in2[size_t(T - 1)] + 1) % cfg.vocab;  // sequence 0, last token
  m.forward_logits(in2.data(), B, T, h);
  EXPECT_EQ(std::vector<float>(m.logits(0, 3), m.logits(0, 3) + cfg.padded_vocab), first);
  EXPECT_NE(std::vector<float>(m.logits(0, T - 1), m.logits(0, T - 1) + cfg.vocab), m.logits_last(1));
  // A sampler needs no gradient buffers.
  NullHooks none;
  m.forward_logits(in.data(), B, T, none);
  EXPECT_EQ(m.logits_last(1), a);
  EXPECT_THROW(none.grad(0), Error);
}

// ---------------------------------------------------------------- configs

template <class F>
void expect_error(F f, const std::string& needle) {
  try {
    f();
    ADD_FAILURE() << "no error; expected one mentioning '" << needle << "'";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

TEST(GptConfig, ValidationErrors) {
  GptConfig ok = odd_config();
  EXPECT_NO_THROW(validate(ok));
  auto with = [&](auto edit) {
    GptConfig c = ok;
    edit(c);
    return c;
  };
  expect_error([&] { validate(with([](GptConfig& c) { c.d_model = 100; })); }, "multiple of n_head");
  expect_error([&] { validate(with([](GptConfig& c) { c.d_model = 48; c.n_head = 3; })); }, "multiple of 32");
  expect_error([&] { validate(with([](GptConfig& c) { c.n_layer = 0; })); }, "n_layer must be positive");
  expect_error([&] { validate(with([](GptConfig& c) { c.vocab = -1; })); }, "vocab must be positive");
  expect_error([&] { validate(with([](GptConfig& c) { c.max_seq = 0; })); }, "max_seq must be positive");
  expect_error([&] { validate(with([](GptConfig& c) { c.n_head = 0; })); }, "n_head must be positive");
  expect_error([&] { validate(with([](GptConfig& c) { c.padded_vocab = 90; })); }, "padded_vocab");
  expect_error([&] { Gpt m(with([](GptConfig& c) { c.d_model = 0; })); }, "d_model must be positive");
  expect_error([] { gpt_config("gpt2-small"); }, "unknown GPT config 'gpt2-small' (known: tiny, gpt2-124m");

  Gpt m(ok);
  m.init_weights(0);
  TestHooks h(m);
  auto in = tokens(2 * 17, ok.vocab, 1), tg = tokens(2 * 17, ok.vocab, 2);
  expect_error([&] { m.forward(batch_of(in, tg, 2, 17), h); }, "max_seq=16");
  in[5] = ok.vocab;
  expect_error([&] { m.forward(batch_of(in, tg, 2, 8), h); }, "token 97 at position 5");
  in[5] = 0;
  tg[3] = -1;
  expect_error([&] { m.forward(batch_of(in, tg, 2, 8), h); }, "target -1 at position 3");
  expect_error([&] { m.weights(int(m.params().size())); }, "out of range");
}

// Parameter counts of the GPT-2 family as published (Hugging Face checkpoints,
// vocab 50257) plus the padding rows of wte.
TEST(GptConfig, NamedConfigsHaveGpt2ParameterCounts) {
  struct Want {
    const char* name;
    int L, H, C;
    int64_t hf_params;
  };
  for (const Want& w : {Want{"gpt2-124m", 12, 12, 768, 124439808}, Want{"gpt2-350m", 24, 16, 1024, 354823168},
                        Want{"gpt2-774m", 36, 20, 1280, 774030080}, Want{"gpt2-1558m", 48, 25, 1600, 1557611200}}) {
    const GptConfig c = gpt_config(w.name);
    EXPECT_EQ(c.vocab, 50257);
    EXPECT_EQ(c.padded_vocab, 50304);
    EXPECT_EQ(c.max_seq, 1024);
    EXPECT_EQ(c.n_layer, w.L);
    EXPECT_EQ(c.n_head, w.H);
    EXPECT_EQ(c.d_model, w.C);
    EXPECT_EQ(gpt_num_parameters(c) - int64_t(c.padded_vocab - c.vocab) * c.d_model, w.hf_params) << w.name;
    for (const auto& p : gpt_param_specs(c))
      if (p.shape.size() == 2) {
        EXPECT_EQ(p.shape[1] % 32, 0) << w.name << " " << p.name << ": rows of whole 32-blocks";
      }
  }
  const GptConfig t = gpt_config("tiny");
  EXPECT_EQ(t.vocab, 256);
  Gpt m(t);
  EXPECT_EQ(m.num_parameters(), gpt_num_parameters(t));
}

}  // namespace
}  // namespace mxdp
