// The Llama family on the CPU. See llama.h and llama_config.h; the layer
// loops are in llama_cpu.cpp, the GEMMs GPT-2's (gpt_cpu.h).
#include "models/llama/llama.h"

#include <algorithm>
#include <cmath>

#include "models/gpt2/gpt_cpu.h"
#include "models/llama/llama_cpu.h"
#include "util/check.h"

namespace mxdp {

using namespace cpu;

Llama::Llama(const LlamaConfig& cfg) : cfg_(cfg), specs_(llama_param_specs(cfg)), inv_freq_(llama_inv_freq(cfg)) {
  int64_t n = 0;
  for (const auto& p : specs_) {
    offsets_.push_back(n);
    n += p.numel();
  }
  weights_.assign(size_t(n), 0.f);
  int i = 1;
  for (int l = 0; l < cfg_.n_layer; ++l) {
    BlockParams b{};
    b.attn_norm = i++;
    b.qkvw = i++;
    b.qkvb = cfg_.qkv_bias ? i++ : -1;
    b.ow = i++;
    b.mlp_norm = i++;
    b.gate_up = i++;
    b.down = i++;
    blocks_.push_back(b);
  }
  norm_ = i++;
  head_ = cfg_.tie_embeddings ? embed_ : i++;
  MXDP_CHECK(i == int(specs_.size()), "Llama: ", i, " param indices for ", specs_.size(), " params");
}

float* Llama::weights(int param) {
  MXDP_CHECK(param >= 0 && param < int(specs_.size()), "param index ", param, " out of range [0, ", specs_.size(),
             ")");
  return w(param);
}

void Llama::init_weights(uint64_t seed) {
  for (size_t p = 0; p < specs_.size(); ++p) llama_init_param(cfg_, specs_, seed, int(p), w(int(p)));
}

void Llama::set_weights(int param, const float* host) {
  std::copy(host, host + specs_.at(size_t(param)).numel(), weights(param));
}

void Llama::ensure_activations(int B, int T) {
  if (B == B_ && T == T_) return;
  const int64_t BT = int64_t(B) * T, C = cfg_.d_model, L = cfg_.n_layer, NH = cfg_.n_head, F = cfg_.d_ff;
  auto size = [](std::vector<float>& v, int64_t n) {
    std::vector<float>().swap(v);
    v.resize(size_t(n));
  };
  size(resid_, (L + 1) * BT * C);
  size(resid_mid_, L * BT * C);
  size(hn1_, L * BT * C);
  size(rstd1_, L * BT);
  size(qkv_, L * BT * cfg_.qkv_dim());
  size(atty_, L * BT * cfg_.q_dim());
  size(att_, L * B * NH * T * T);
  size(hn2_, L * BT * C);
  size(rstd2_, L * BT);
  size(gate_up_, L * BT * 2 * F);
  size(hnf_, BT * C);
  size(rstdf_, BT);
  size(probs_, BT * cfg_.vocab);
  size(losses_, BT);
  size(tmp_, BT * C);
  size(act_, BT * F);
  for (auto* v : {&dresid_, &dln_, &dqkv_, &datty_, &dact_, &dgu_}) std::vector<float>().swap(*v);
  tokens_.assign(size_t(BT), 0);
  targets_.assign(size_t(BT), 0);
  B_ = B;
  T_ = T;
}

void Llama::run_forward(const int32_t* tokens, int B, int T, ModelHooks& hooks) {
  MXDP_CHECK(B >= 1, "batch size B must be >= 1, got ", B);
  MXDP_CHECK(T >= 1 && T <= cfg_.max_seq, "sequence length T must be in [1, max_seq=", cfg_.max_seq, "], got ", T);
  MXDP_CHECK(tokens != nullptr, "null token pointer");
  const int64_t BT = int64_t(B) * T;
  for (int64_t i = 0; i < BT; ++i)
    MXDP_CHECK(tokens[i] >= 0 && tokens[i] < cfg_.vocab, "token ", tokens[i], " at position ", i,
               " outside [0, vocab=", cfg_.vocab, ")");
  ensure_activations(B, T);
  std::copy(tokens, tokens + BT, tokens_.begin());
  const int C = cfg_.d_model, NH = cfg_.n_head, KV = cfg_.n_kv_head, hd = cfg_.head_dim, F = cfg_.d_ff;
  const int Q = cfg_.q_dim(), S = cfg_.qkv_dim(), M = int(BT);
  const float eps = float(cfg_.rms_eps);

  hooks.before_layer(0);
  {
    const float* e = w(embed_);
    float* x = resid_.data();
#pragma omp parallel for schedule(static) if (BT * C >= kParallelMinWork)
    for (int64_t m = 0; m < BT; ++m) std::copy(e + int64_t(tokens_[m]) * C, e + int64_t(tokens_[m] + 1) * C, x + m * C);
  }
  for (int l = 0; l < cfg_.n_layer; ++l) {
    hooks.before_layer(l + 1);
    const BlockParams& p = blocks_[size_t(l)];
    const float* x = resid_.data() + l * BT * C;
    float* hn1 = hn1_.data() + l * BT * C;
    float* qkv = qkv_.data() + l * BT * S;
    float* atty = atty_.data() + l * BT * Q;
    float* xm = resid_mid_.data() + l * BT * C;
    float* hn2 = hn2_.data() + l * BT * C;
    float* gu = gate_up_.data() + l * BT * 2 * F;
    float* y = resid_.data() + (l + 1) * BT * C;
    llama::rmsnorm_forward(hn1, rstd1_.data() + l * BT, x, w(p.attn_norm), M, C, eps);
    matmul_forward(qkv, hn1, w(p.qkvw), p.qkvb >= 0 ? w(p.qkvb) : nullptr, M, S, C, wt_);
    llama::rope(qkv, inv_freq_.data(), B, T, NH, KV, hd, /*inverse=*/false);
    llama::attention_forward(atty, att_.data() + int64_t(l) * B * NH * T * T, qkv, B, T, NH, KV, hd);
    matmul_forward(tmp_.data(), atty, w(p.ow), nullptr, M, C, Q, wt_);
    residual_add(xm, x, tmp_.data(), BT * C);
    llama::rmsnorm_forward(hn2, rstd2_.data() + l * BT, xm, w(p.mlp_norm), M, C, eps);
    matmul_forward(gu, hn2, w(p.gate_up), nullptr, M, 2 * F, C, wt_);
    llama::swiglu_forward(act_.data(), gu, M, F);
    matmul_forward(tmp_.data(), act_.data(), w(p.down), nullptr, M, C, F, wt_);
    residual_add(y, xm, tmp_.data(), BT * C);
  }
  hooks.before_layer(cfg_.n_layer + 1);
  llama::rmsnorm_forward(hnf_.data(), rstdf_.data(), resid_.data() + cfg_.n_layer * BT * C, w(norm_), M, C, eps);
  matmul_forward(probs_.data(), hnf_.data(), w(head_), nullptr, M, cfg_.vocab, C, wt_);
}

void Llama::forward_logits(const int32_t* tokens, int B, int T, ModelHooks& hooks) {
  state_ = State::kNone;
  run_forward(tokens, B, T, hooks);
  state_ = State::kLogits;
}

float Llama::forward(const Batch& batch, ModelHooks& hooks) {
  state_ = State::kNone;
  MXDP_CHECK(batch.targets != nullptr, "forward needs targets (use forward_logits for inference)");
  const int64_t BT = int64_t(batch.B) * batch.T;
  const int V = cfg_.vocab;
  for (int64_t i = 0; i < BT; ++i)
    MXDP_CHECK(batch.targets[i] >= 0 && batch.targets[i] < V, "target ", batch.targets[i], " at position ", i,
               " outside [0, vocab=", V, ")");
  run_forward(batch.inputs, batch.B, batch.T, hooks);
  std::copy(batch.targets, batch.targets + BT, targets_.begin());
#pragma omp parallel for schedule(static) if (BT * V >= kParallelMinWork)
  for (int64_t m = 0; m < BT; ++m) {
    const float* z = probs_.data() + m * V;
    float maxv = -INFINITY;
    for (int v = 0; v < V; ++v) maxv = std::max(maxv, z[v]);
    float sum = 0.f;
    for (int v = 0; v < V; ++v) sum += std::exp(z[v] - maxv);
    losses_[size_t(m)] = std::log(sum) - (z[targets_[size_t(m)]] - maxv);
  }
  double total = 0.0;
  for (int64_t m = 0; m < BT; ++m) total += losses_[size_t(m)];
  state_ = State::kLoss;
  return float(total / double(BT));
}

const float* Llama::logits(int b, int t) const {
  MXDP_CHECK(state_ == State::kLogits || state_ == State::kLoss, "logits() needs a forward since the last backward");
  MXDP_CHECK(b >= 0 && b < B_ && t >= 0 && t < T_, "logits(", b, ", ", t, ") outside B=", B_, " T=", T_);
  return probs_.data() + (int64_t(b) * T_ + t) * cfg_.vocab;
}

std::vector<float> Llama::logits_last(int b) const {
  const float* z = logits(b, T_ - 1);
  return std::vector<float>(z, z + cfg_.vocab);
}

void Llama::backward(ModelHooks& hooks) {
  MXDP_CHECK(state_ == State::kLoss, "backward needs a forward with targets since the last backward");
  state_ = State::kBackwardDone;
  const int C = cfg_.d_model, V = cfg_.vocab;
  const int64_t BT = int64_t(B_) * T_;
  const int M = int(BT);
  dresid_.assign(size_t(BT * C), 0.f);
  dln_.resize(size_t(BT * C));
  dqkv_.resize(size_t(BT * cfg_.qkv_dim()));
  datty_.resize(size_t(BT * cfg_.q_dim()));
  dact_.resize(size_t(BT * cfg_.d_ff));
  dgu_.resize(size_t(BT * 2 * cfg_.d_ff));

  // dlogits = (softmax - onehot) / BT.
  const float inv_bt = 1.f / float(BT);
#pragma omp parallel for schedule(static) if (BT * V >= kParallelMinWork)
  for (int64_t m = 0; m < BT; ++m) {
    float* z = probs_.data() + m * V;
    float maxv = -INFINITY;
    for (int v = 0; v < V; ++v) maxv = std::max(maxv, z[v]);
    float sum = 0.f;
    for (int v = 0; v < V; ++v) {
      z[v] = std::exp(z[v] - maxv);
      sum += z[v];
    }
    const float inv = 1.f / sum;
    for (int v = 0; v < V; ++v) z[v] = (z[v] * inv - (v == targets_[size_t(m)] ? 1.f : 0.f)) * inv_bt;
  }
  matmul_backward(dln_.data(), hooks.grad(head_), nullptr, probs_.data(), hnf_.data(), w(head_), M, V, C);
  llama::rmsnorm_backward(dresid_.data(), hooks.grad(norm_), dln_.data(), resid_.data() + cfg_.n_layer * BT * C,
                          w(norm_), rstdf_.data(), M, C);
  hooks.after_layer_backward(cfg_.n_layer + 1);

  for (int l = cfg_.n_layer - 1; l >= 0; --l) {
    block_backward(l, hooks);
    hooks.after_layer_backward(l + 1);
  }

  // Embedding: dembed[token] += dx in position order (rows repeat: sequential).
  float* de = hooks.grad(embed_);
  for (int64_t m = 0; m < BT; ++m) {
    float* o = de + int64_t(tokens_[size_t(m)]) * C;
    const float* d = dresid_.data() + m * C;
    for (int i = 0; i < C; ++i) o[i] += d[i];
  }
  hooks.after_layer_backward(0);
}

// dresid_ holds d(loss)/d(block l's output) and becomes d(loss)/d(its input).
void Llama::block_backward(int l, ModelHooks& hooks) {
  const BlockParams& p = blocks_[size_t(l)];
  const int C = cfg_.d_model, NH = cfg_.n_head, KV = cfg_.n_kv_head, hd = cfg_.head_dim, F = cfg_.d_ff;
  const int Q = cfg_.q_dim(), S = cfg_.qkv_dim(), B = B_, T = T_;
  const int64_t BT = int64_t(B) * T;
  const int M = int(BT);
  const float* x = resid_.data() + l * BT * C;
  const float* xm = resid_mid_.data() + l * BT * C;
  const float* hn1 = hn1_.data() + l * BT * C;
  const float* qkv = qkv_.data() + l * BT * S;
  const float* atty = atty_.data() + l * BT * Q;
  const float* hn2 = hn2_.data() + l * BT * C;
  const float* gu = gate_up_.data() + l * BT * 2 * F;
  // MLP half: y = xm + down(swiglu(gate_up(rmsnorm(xm)))).
  llama::swiglu_forward(act_.data(), gu, M, F);  // the forward's values, bitwise
  matmul_backward(dact_.data(), hooks.grad(p.down), nullptr, dresid_.data(), act_.data(), w(p.down), M, C, F);
  llama::swiglu_backward(dgu_.data(), dact_.data(), gu, M, F);
  matmul_backward(dln_.data(), hooks.grad(p.gate_up), nullptr, dgu_.data(), hn2, w(p.gate_up), M, 2 * F, C);
  llama::rmsnorm_backward(dresid_.data(), hooks.grad(p.mlp_norm), dln_.data(), xm, w(p.mlp_norm),
                          rstd2_.data() + l * BT, M, C);
  // Attention half: xm = x + o(attn(rope(qkv(rmsnorm(x))))).
  matmul_backward(datty_.data(), hooks.grad(p.ow), nullptr, dresid_.data(), atty, w(p.ow), M, C, Q);
  llama::attention_backward(dqkv_.data(), datty_.data(), qkv, att_.data() + int64_t(l) * B * NH * T * T, B, T, NH,
                            KV, hd);
  llama::rope(dqkv_.data(), inv_freq_.data(), B, T, NH, KV, hd, /*inverse=*/true);
  matmul_backward(dln_.data(), hooks.grad(p.qkvw), p.qkvb >= 0 ? hooks.grad(p.qkvb) : nullptr, dqkv_.data(), hn1,
                  w(p.qkvw), M, S, C);
  llama::rmsnorm_backward(dresid_.data(), hooks.grad(p.attn_norm), dln_.data(), x, w(p.attn_norm),
                          rstd1_.data() + l * BT, M, C);
}

}  // namespace mxdp
