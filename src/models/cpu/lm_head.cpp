// The CPU models' LM head output (declared in lm_head.h).
#include "models/cpu/lm_head.h"

#include <algorithm>
#include <cmath>

#include "models/cpu/parallel.h"
#include "util/check.h"

namespace mxdp::cpu {

namespace {

void check_ids(const int32_t* ids, int64_t n, int vocab, const char* what) {
  for (int64_t i = 0; i < n; ++i)
    MXDP_CHECK(ids[i] >= 0 && ids[i] < vocab, what, " ", ids[i], " at position ", i, " outside [0, vocab=", vocab,
               ")");
}

}  // namespace

void check_inputs(const int32_t* tokens, int B, int T, int vocab, int max_seq) {
  MXDP_CHECK(B >= 1, "batch size B must be >= 1, got ", B);
  MXDP_CHECK(T >= 1 && T <= max_seq, "sequence length T must be in [1, max_seq=", max_seq, "], got ", T);
  MXDP_CHECK(tokens != nullptr, "null token pointer");
  check_ids(tokens, int64_t(B) * T, vocab, "token");
}

void check_targets(const int32_t* targets, int64_t n, int vocab) {
  MXDP_CHECK(targets != nullptr, "forward needs targets (use forward_logits for inference)");
  check_ids(targets, n, vocab, "target");
}

float cross_entropy_forward(float* losses, const float* logits, const int32_t* targets, int64_t BT, int V, int Vp) {
#pragma omp parallel for schedule(static) if (BT * Vp >= kParallelMinWork)
  for (int64_t m = 0; m < BT; ++m) {
    const float* z = logits + m * Vp;
    float maxv = -INFINITY;
    for (int v = 0; v < V; ++v) maxv = std::max(maxv, z[v]);
    float sum = 0.f;
    for (int v = 0; v < V; ++v) sum += std::exp(z[v] - maxv);
    losses[m] = std::log(sum) - (z[targets[m]] - maxv);
  }
  double total = 0.0;  // in row order
  for (int64_t m = 0; m < BT; ++m) total += losses[m];
  return float(total / double(BT));
}

void cross_entropy_backward(float* logits, const int32_t* targets, int64_t BT, int V, int Vp) {
  const float inv_bt = 1.f / float(BT);
#pragma omp parallel for schedule(static) if (BT * Vp >= kParallelMinWork)
  for (int64_t m = 0; m < BT; ++m) {
    float* z = logits + m * Vp;
    float maxv = -INFINITY;
    for (int v = 0; v < V; ++v) maxv = std::max(maxv, z[v]);
    float sum = 0.f;
    for (int v = 0; v < V; ++v) {
      z[v] = std::exp(z[v] - maxv);
      sum += z[v];
    }
    const float inv = 1.f / sum;
    for (int v = 0; v < V; ++v) z[v] = (z[v] * inv - (v == targets[m] ? 1.f : 0.f)) * inv_bt;
    for (int v = V; v < Vp; ++v) z[v] = 0.f;
  }
}

void LmOutput::resize(int B, int T) {
  if (B == B_ && T == T_) return;
  const size_t BT = size_t(B) * size_t(T);
  std::vector<float>().swap(logits_);  // release first: B, T may have shrunk
  logits_.resize(BT * size_t(Vp_));
  losses_.assign(BT, 0.f);
  targets_.assign(BT, 0);
  B_ = B;
  T_ = T;
}

float LmOutput::loss(const int32_t* targets) {
  const int64_t BT = int64_t(B_) * T_;
  std::copy(targets, targets + BT, targets_.begin());
  const float l = cross_entropy_forward(losses_.data(), logits_.data(), targets_.data(), BT, V_, Vp_);
  state_ = State::kLoss;
  return l;
}

float* LmOutput::dlogits() {
  MXDP_CHECK(state_ == State::kLoss, "backward needs a forward with targets since the last backward");
  state_ = State::kBackwardDone;
  cross_entropy_backward(logits_.data(), targets_.data(), int64_t(B_) * T_, V_, Vp_);
  return logits_.data();
}

const float* LmOutput::logits(int b, int t) const {
  MXDP_CHECK(state_ == State::kLogits || state_ == State::kLoss, "logits() needs a forward since the last backward");
  MXDP_CHECK(b >= 0 && b < B_ && t >= 0 && t < T_, "logits(", b, ", ", t, ") outside B=", B_, " T=", T_);
  return logits_.data() + (int64_t(b) * T_ + t) * Vp_;
}

std::vector<float> LmOutput::logits_last(int b) const {
  const float* z = logits(b, T_ - 1);
  return std::vector<float>(z, z + V_);
}

}  // namespace mxdp::cpu
