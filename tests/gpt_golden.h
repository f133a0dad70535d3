// The PyTorch golden file of the GPT (tests/data/gpt_golden.bin, written by
// scripts/gen_gpt_golden.py in float64; format in that script): its reader,
// and the check the GPU GPT is held to against it (test_gpt.cpp holds the fp32
// CPU GPT to it element by element; gputest_gpt_golden.cu holds the bf16 GPU
// GPT to it with golden_mismatches and kBf16GoldenTolerance).
#pragma once

#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "util/check.h"
#include "compare_util.h"
#include "models/gpt2/gpt.h"

namespace mxdp::testing {

struct Golden {
  GptConfig cfg;
  int B = 0, T = 0, n_steps = 0;
  float lr = 0, beta1 = 0, beta2 = 0, eps = 0, wd = 0;
  std::vector<std::vector<int64_t>> shapes;
  std::vector<int32_t> inputs, targets;
  std::vector<std::vector<float>> params, grads;
  std::vector<float> logits, losses;
  float loss = 0;
};

inline Golden load_golden() {
  const std::string path = std::string(MXDP_SOURCE_DIR) + "/tests/data/gpt_golden.bin";
  std::ifstream f(path, std::ios::binary);
  MXDP_CHECK(f.good(), "cannot open ", path);
  auto read = [&](void* dst, size_t n) {
    f.read(static_cast<char*>(dst), std::streamsize(n));
    MXDP_CHECK(f.good(), "truncated golden file ", path);
  };
  char magic[8];
  read(magic, 8);
  MXDP_CHECK(std::memcmp(magic, "MXGPTGD1", 8) == 0, "bad magic in ", path);
  int32_t h[12];
  read(h, sizeof h);
  MXDP_CHECK(h[0] == 1, "golden version ", h[0]);
  Golden g;
  g.cfg = {.vocab = h[1], .padded_vocab = h[2], .max_seq = h[3], .n_layer = h[4], .n_head = h[5], .d_model = h[6]};
  g.B = h[7];
  g.T = h[8];
  g.n_steps = h[9];
  const int n_params = h[10];
  float hp[5];
  read(hp, sizeof hp);
  g.lr = hp[0], g.beta1 = hp[1], g.beta2 = hp[2], g.eps = hp[3], g.wd = hp[4];
  for (int i = 0; i < n_params; ++i) {
    int32_t nd;
    read(&nd, 4);
    std::vector<int32_t> d(static_cast<size_t>(nd));
    read(d.data(), 4 * size_t(nd));
    g.shapes.emplace_back(d.begin(), d.end());
  }
  const size_t BT = size_t(g.B) * g.T;
  g.inputs.resize(BT);
  g.targets.resize(BT);
  read(g.inputs.data(), 4 * BT);
  read(g.targets.data(), 4 * BT);
  auto read_tensors = [&](std::vector<std::vector<float>>& out) {
    for (const auto& s : g.shapes) {
      int64_t n = 1;
      for (int64_t d : s) n *= d;
      out.emplace_back(size_t(n));
      read(out.back().data(), 4 * size_t(n));
    }
  };
  read_tensors(g.params);
  g.logits.resize(BT * size_t(g.cfg.padded_vocab));
  read(g.logits.data(), 4 * g.logits.size());
  read(&g.loss, 4);
  read_tensors(g.grads);
  g.losses.resize(size_t(g.n_steps));
  read(g.losses.data(), 4 * g.losses.size());
  MXDP_CHECK(f.peek() == EOF, "trailing bytes in ", path);
  return g;
}

// The golden logits of the real vocabulary, [B*T, vocab] (the file holds the
// padded vocabulary: [B*T, padded_vocab]).
inline std::vector<float> golden_real_logits(const Golden& g) {
  std::vector<float> out;
  for (size_t r = 0; r < size_t(g.B) * g.T; ++r) {
    const float* z = g.logits.data() + r * size_t(g.cfg.padded_vocab);
    out.insert(out.end(), z, z + g.cfg.vocab);
  }
  return out;
}

// Tolerances of a bf16 forward/backward against the float64 golden values, as
// relative error of the whole tensor (rel_err): the ones gputest_gpt.cu holds
// the GPU GPT to against the CPU GPT (logits 2%, loss 0.5%, every gradient
// 5%). Here the reference's weights are not bf16 values, so the GPU's rounding
// of the weights (2^-9 relative per element) is part of the error too: on the
// CPU GPT, rounding the weights alone costs 0.47% of the logits, 0.3-0.7% of
// each gradient and 1e-4 of the loss (GptGolden.Bf16CheckAccepts... prints it).
struct GoldenTolerance {
  double logits, loss, grad;
};
inline constexpr GoldenTolerance kBf16GoldenTolerance{2e-2, 5e-3, 5e-2};

// What differs from the golden values beyond `tol`, one line each (empty: all
// within). loss: the mean loss of the golden batch; logits: the real-vocab
// logits of every position, [B*T, vocab]; grads: every param's gradient in the
// golden order. Prints every relative error when `print`.
inline std::vector<std::string> golden_mismatches(const Golden& g, float loss, const std::vector<float>& logits,
                                                  const std::vector<std::vector<float>>& grads,
                                                  const std::vector<std::string>& names, GoldenTolerance tol,
                                                  bool print) {
  std::vector<std::string> bad;
  auto report = [&](const std::string& what, double err, double limit) {
    if (print) std::printf("  %-22s rel err %.3e (limit %.0e)\n", what.c_str(), err, limit);
    if (!(err <= limit)) bad.push_back(what + ": relative error " + std::to_string(err) + " > " + std::to_string(limit));
  };
  report("loss", std::fabs(double(loss) - g.loss) / std::fabs(g.loss), tol.loss);
  report("logits", rel_err(logits, golden_real_logits(g)), tol.logits);
  if (grads.size() != g.grads.size()) {
    bad.push_back("got " + std::to_string(grads.size()) + " gradients, the golden file has " +
                  std::to_string(g.grads.size()));
    return bad;
  }
  for (size_t i = 0; i < grads.size(); ++i)
    report(i < names.size() ? names[i] : "param " + std::to_string(i), rel_err(grads[i], g.grads[i]), tol.grad);
  return bad;
}

// Tolerance of a bf16 run's AdamW trajectory on the golden batch (10 steps,
// loss 4.34 -> 1.13): every step's loss within 2% relative of the golden one.
// Measured on the CPU GPT (GptGolden.Bf16TrajectoryCheck... in test_gpt.cpp):
// bf16 compute weights from fp32 masters stay within 0.064%; adding to every
// gradient element noise of 5% of its tensor's RMS (the GPU's whole-gradient
// bound, as noise: Adam turns small noisy elements into full-size steps) 0.53%;
// the GPU's forward alone may be 0.5% off (kBf16GoldenTolerance). An lr 20% too
// high or too low leaves the band at the first update (3%), a skipped update by 18%.
inline constexpr double kBf16TrajectoryTolerance = 2e-2;

// What differs from the golden losses (one per step) beyond `tol` relative.
inline std::vector<std::string> golden_trajectory_mismatches(const Golden& g, const std::vector<float>& losses,
                                                             double tol, bool print) {
  std::vector<std::string> bad;
  if (losses.size() != g.losses.size())
    return {"got " + std::to_string(losses.size()) + " losses, the golden file has " + std::to_string(g.losses.size())};
  double worst = 0;
  for (size_t s = 0; s < losses.size(); ++s) {
    const double err = std::fabs(double(losses[s]) - g.losses[s]) / std::fabs(g.losses[s]);
    worst = std::max(worst, std::isfinite(err) ? err : INFINITY);
    if (print) std::printf("  step %zu loss %.6f torch %.6f rel err %.3e\n", s, losses[s], g.losses[s], err);
    if (!(err <= tol))
      bad.push_back("step " + std::to_string(s) + ": loss " + std::to_string(losses[s]) + ", torch " +
                    std::to_string(g.losses[s]) + ", relative error " + std::to_string(err) + " > " + std::to_string(tol));
  }
  if (print) std::printf("  worst relative loss error over %zu steps: %.3e (limit %.1e)\n", losses.size(), worst, tol);
  return bad;
}

}  // namespace mxdp::testing
