#include "models/toy/toy_model.h"

#include <cmath>

#include "util/check.h"
#include "util/splitmix.h"

namespace mxdp {

ToyModel::ToyModel(int vocab, int d, int h) : V_(vocab), D_(d), H_(h) {
  MXDP_CHECK(vocab > 0 && d > 0 && h > 0 && d % 32 == 0 && h % 32 == 0,
             "ToyModel needs positive sizes with d, h multiples of 32; got V=", vocab, " D=", d, " H=", h);
  specs_ = {{"emb", {V_, D_}, 0, true},      {"mlp.up.w", {H_, D_}, 1, true},
            {"mlp.up.b", {H_}, 1, false},     {"mlp.down.w", {D_, H_}, 2, true},
            {"mlp.down.b", {D_}, 2, false},   {"norm.w", {D_}, 3, false},
            {"head.w", {V_, D_}, 3, true}};
  for (auto& s : specs_) w_.emplace_back(s.numel(), 0.0f);
}

void ToyModel::init_weights(uint64_t seed) {
  // splitmix64 -> uniform in [-a, a): fully specified, the same everywhere.
  uint64_t st = seed;
  auto next = [&] { return double(splitmix64_mix(st += kSplitmix64Gamma) >> 11) * 0x1.0p-53; };
  for (size_t p = 0; p < specs_.size(); ++p) {
    const bool is_norm = p == kNorm;
    const double a = specs_[p].shape.size() == 2 ? 1.0 / std::sqrt(double(specs_[p].shape[1])) : 0.1;
    for (float& x : w_[p]) x = float(is_norm ? 1.0 + 0.1 * (2 * next() - 1) : a * (2 * next() - 1));
  }
}

float ToyModel::forward(const Batch& batch, ModelHooks& hooks) {
  const int N = batch.B * batch.T;
  MXDP_CHECK(N > 0 && batch.inputs && batch.targets, "ToyModel::forward: empty batch");
  tok_.assign(batch.inputs, batch.inputs + N);
  tgt_.assign(batch.targets, batch.targets + N);
  for (int i = 0; i < N; ++i)
    MXDP_CHECK(tok_[i] >= 0 && tok_[i] < V_ && tgt_[i] >= 0 && tgt_[i] < V_, "token out of range");
  x0_.assign(size_t(N) * D_, 0);
  hid_.assign(size_t(N) * H_, 0);
  x1_.assign(size_t(N) * D_, 0);
  rinv_.assign(N, 0);
  y_.assign(size_t(N) * D_, 0);
  prob_.assign(size_t(N) * V_, 0);

  hooks.before_layer(0);
  for (int n = 0; n < N; ++n)
    for (int d = 0; d < D_; ++d) x0_[n * D_ + d] = w_[kEmb][tok_[n] * D_ + d];
  hooks.before_layer(1);
  for (int n = 0; n < N; ++n)
    for (int j = 0; j < H_; ++j) {
      float s = w_[kB1][j];
      for (int d = 0; d < D_; ++d) s += w_[kW1][j * D_ + d] * x0_[n * D_ + d];
      hid_[n * H_ + j] = std::tanh(s);
    }
  hooks.before_layer(2);
  for (int n = 0; n < N; ++n)
    for (int d = 0; d < D_; ++d) {
      float s = w_[kB2][d];
      for (int j = 0; j < H_; ++j) s += w_[kW2][d * H_ + j] * hid_[n * H_ + j];
      x1_[n * D_ + d] = x0_[n * D_ + d] + s;
    }
  hooks.before_layer(3);
  double loss = 0;
  for (int n = 0; n < N; ++n) {
    float ms = 0;
    for (int d = 0; d < D_; ++d) ms += x1_[n * D_ + d] * x1_[n * D_ + d];
    rinv_[n] = 1.0f / std::sqrt(ms / D_ + 1e-5f);
    for (int d = 0; d < D_; ++d) y_[n * D_ + d] = w_[kNorm][d] * x1_[n * D_ + d] * rinv_[n];
    float* pr = &prob_[size_t(n) * V_];
    float mx = -INFINITY;
    for (int v = 0; v < V_; ++v) {
      float s = 0;
      for (int d = 0; d < D_; ++d) s += w_[kHead][v * D_ + d] * y_[n * D_ + d];
      pr[v] = s;
      mx = std::fmax(mx, s);
    }
    float z = 0;
    for (int v = 0; v < V_; ++v) z += (pr[v] = std::exp(pr[v] - mx));
    for (int v = 0; v < V_; ++v) pr[v] /= z;
    loss += -std::log(pr[tgt_[n]]);
  }
  return float(loss / N);
}

void ToyModel::backward(ModelHooks& hooks) {
  const int N = int(tok_.size());
  MXDP_CHECK(N > 0, "ToyModel::backward before forward");
  std::vector<float> dy(size_t(N) * D_, 0), dx1(size_t(N) * D_, 0), dh(size_t(N) * H_, 0);
  // layer 3: head and norm
  float* gHead = hooks.grad(kHead);
  float* gNorm = hooks.grad(kNorm);
  for (int n = 0; n < N; ++n) {
    for (int v = 0; v < V_; ++v) {
      float dl = (prob_[size_t(n) * V_ + v] - (v == tgt_[n] ? 1.0f : 0.0f)) / float(N);
      for (int d = 0; d < D_; ++d) {
        gHead[v * D_ + d] += dl * y_[n * D_ + d];
        dy[n * D_ + d] += dl * w_[kHead][v * D_ + d];
      }
    }
    float dot = 0;
    for (int d = 0; d < D_; ++d) {
      float xh = x1_[n * D_ + d] * rinv_[n];
      gNorm[d] += dy[n * D_ + d] * xh;
      dot += dy[n * D_ + d] * w_[kNorm][d] * xh;
    }
    for (int d = 0; d < D_; ++d) {
      float xh = x1_[n * D_ + d] * rinv_[n];
      dx1[n * D_ + d] = (dy[n * D_ + d] * w_[kNorm][d] - xh * dot / D_) * rinv_[n];
    }
  }
  hooks.after_layer_backward(3);
  // layer 2: down projection
  float* gW2 = hooks.grad(kW2);
  float* gB2 = hooks.grad(kB2);
  for (int n = 0; n < N; ++n)
    for (int d = 0; d < D_; ++d) {
      float g = dx1[n * D_ + d];
      gB2[d] += g;
      for (int j = 0; j < H_; ++j) {
        gW2[d * H_ + j] += g * hid_[n * H_ + j];
        dh[n * H_ + j] += g * w_[kW2][d * H_ + j];
      }
    }
  hooks.after_layer_backward(2);
  // layer 1: up projection (tanh)
  float* gW1 = hooks.grad(kW1);
  float* gB1 = hooks.grad(kB1);
  std::vector<float> dx0 = dx1;  // residual
  for (int n = 0; n < N; ++n)
    for (int j = 0; j < H_; ++j) {
      float h = hid_[n * H_ + j];
      float g = dh[n * H_ + j] * (1 - h * h);
      gB1[j] += g;
      for (int d = 0; d < D_; ++d) {
        gW1[j * D_ + d] += g * x0_[n * D_ + d];
        dx0[n * D_ + d] += g * w_[kW1][j * D_ + d];
      }
    }
  hooks.after_layer_backward(1);
  // layer 0: embedding
  float* gE = hooks.grad(kEmb);
  for (int n = 0; n < N; ++n)
    for (int d = 0; d < D_; ++d) gE[tok_[n] * D_ + d] += dx0[n * D_ + d];
  hooks.after_layer_backward(0);
}

}  // namespace mxdp
