// The Llama family on the CPU. See llama.h and llama_config.h; its own layer
// loops are in llama_cpu.cpp, the ones every CPU model shares in models/cpu/.
#include "models/llama/llama.h"

#include <algorithm>

#include "models/cpu/matmul.h"
#include "models/cpu/parallel.h"
#include "models/cpu/residual.h"
#include "models/llama/llama_cpu.h"
#include "util/check.h"

namespace mxdp {

using namespace cpu;

Llama::Llama(const LlamaConfig& cfg)
    : cfg_(cfg), params_(llama_param_specs(cfg)), inv_freq_(llama_inv_freq(cfg)), head_(cfg.vocab, cfg.vocab) {
  const LlamaParamIndex ix = llama_param_index(cfg_);
  embed_ = ix.embed;
  blocks_ = ix.blocks;
  norm_ = ix.norm;
  head_w_ = ix.head;
}

void Llama::set_fp8_compute(const Fp8Compute& c) {
  const std::vector<ParamSpec> specs = c.apply(llama_param_specs(cfg_), cfg_.n_layer);
  for (size_t p = 0; p < specs.size(); ++p) params_.set_fp8_linear(int(p), specs[p].fp8_linear);
  fp8_ = c.on;
}

void Llama::linear(float* y, const float* x, int wp, const float* bias, int M, int N, int K, ModelHooks& hooks) {
  block_linear_forward(fp8_ && params()[size_t(wp)].fp8_linear, y, x, wp, w(wp), bias, M, N, K, hooks, wt_, fp8s_);
}

void Llama::linear_backward(float* dx, int wp, float* dbias, const float* dy, const float* x, int M, int N, int K,
                            ModelHooks& hooks) {
  block_linear_backward(fp8_ && params()[size_t(wp)].fp8_linear, dx, dbias, dy, x, wp, w(wp), M, N, K, hooks, fp8s_);
}

void Llama::init_weights(uint64_t seed) {
  for (size_t p = 0; p < params().size(); ++p) llama_init_param(cfg_, params(), seed, int(p), w(int(p)));
}

void Llama::ensure_activations(int B, int T) {
  if (B == B_ && T == T_) return;
  const int64_t BT = int64_t(B) * T, C = cfg_.d_model, L = cfg_.n_layer, NH = cfg_.n_head, F = cfg_.d_ff;
  const auto size = cpu::resize_fresh;
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
  head_.resize(B, T);
  size(tmp_, BT * C);
  size(act_, BT * F);
  for (auto* v : {&dresid_, &dln_, &dqkv_, &datty_, &dact_, &dgu_}) std::vector<float>().swap(*v);
  tokens_.assign(size_t(BT), 0);
  B_ = B;
  T_ = T;
}

void Llama::run_forward(const int32_t* tokens, int B, int T, ModelHooks& hooks) {
  check_inputs(tokens, B, T, cfg_.vocab, cfg_.max_seq);
  const int64_t BT = int64_t(B) * T;
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
    linear(qkv, hn1, p.qkvw, p.qkvb >= 0 ? w(p.qkvb) : nullptr, M, S, C, hooks);
    llama::rope(qkv, inv_freq_.data(), B, T, NH, KV, hd, /*inverse=*/false);
    causal_attention_forward(atty, att_.data() + int64_t(l) * B * NH * T * T, qkv, B, T, NH, KV, hd);
    linear(tmp_.data(), atty, p.ow, nullptr, M, C, Q, hooks);
    residual_add(xm, x, tmp_.data(), BT * C);
    llama::rmsnorm_forward(hn2, rstd2_.data() + l * BT, xm, w(p.mlp_norm), M, C, eps);
    linear(gu, hn2, p.gate_up, nullptr, M, 2 * F, C, hooks);
    llama::swiglu_forward(act_.data(), gu, M, F);
    linear(tmp_.data(), act_.data(), p.down, nullptr, M, C, F, hooks);
    residual_add(y, xm, tmp_.data(), BT * C);
  }
  hooks.before_layer(cfg_.n_layer + 1);
  llama::rmsnorm_forward(hnf_.data(), rstdf_.data(), resid_.data() + cfg_.n_layer * BT * C, w(norm_), M, C, eps);
  matmul_forward(head_.buffer(), hnf_.data(), w(head_w_), nullptr, M, cfg_.vocab, C, wt_);
}

void Llama::forward_logits(const int32_t* tokens, int B, int T, ModelHooks& hooks) {
  head_.forward_logits([&] { run_forward(tokens, B, T, hooks); });
}

float Llama::forward(const Batch& batch, ModelHooks& hooks) {
  return head_.forward(batch, [&] { run_forward(batch.inputs, batch.B, batch.T, hooks); });
}

void Llama::backward(ModelHooks& hooks) {
  const float* dlogits = head_.dlogits();  // (softmax - onehot) / BT
  const int C = cfg_.d_model, V = cfg_.vocab;
  const int64_t BT = int64_t(B_) * T_;
  const int M = int(BT);
  dresid_.assign(size_t(BT * C), 0.f);
  dln_.resize(size_t(BT * C));
  dqkv_.resize(size_t(BT * cfg_.qkv_dim()));
  datty_.resize(size_t(BT * cfg_.q_dim()));
  dact_.resize(size_t(BT * cfg_.d_ff));
  dgu_.resize(size_t(BT * 2 * cfg_.d_ff));

  matmul_backward(dln_.data(), hooks.grad(head_w_), nullptr, dlogits, hnf_.data(), w(head_w_), M, V, C);
  llama::rmsnorm_backward(dresid_.data(), hooks.grad(norm_), dln_.data(), resid_.data() + cfg_.n_layer * BT * C,
                          w(norm_), rstdf_.data(), M, C);
  hooks.after_layer_backward(cfg_.n_layer + 1);

  for (int l = cfg_.n_layer - 1; l >= 0; --l) {
    block_backward(l, hooks);
    hooks.after_layer_backward(l + 1);
  }

  embedding_backward(hooks.grad(embed_), dresid_.data(), tokens_.data(), BT, C);  // dembed[token] += dx
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
  linear_backward(dact_.data(), p.down, nullptr, dresid_.data(), act_.data(), M, C, F, hooks);
  llama::swiglu_backward(dgu_.data(), dact_.data(), gu, M, F);
  linear_backward(dln_.data(), p.gate_up, nullptr, dgu_.data(), hn2, M, 2 * F, C, hooks);
  llama::rmsnorm_backward(dresid_.data(), hooks.grad(p.mlp_norm), dln_.data(), xm, w(p.mlp_norm),
                          rstd2_.data() + l * BT, M, C);
  // Attention half: xm = x + o(attn(rope(qkv(rmsnorm(x))))).
  linear_backward(datty_.data(), p.ow, nullptr, dresid_.data(), atty, M, C, Q, hooks);
  causal_attention_backward(dqkv_.data(), datty_.data(), qkv, att_.data() + int64_t(l) * B * NH * T * T, B, T, NH,
                            KV, hd);
  llama::rope(dqkv_.data(), inv_freq_.data(), B, T, NH, KV, hd, /*inverse=*/true);
  linear_backward(dln_.data(), p.qkvw, p.qkvb >= 0 ? hooks.grad(p.qkvb) : nullptr, dqkv_.data(), hn1, M, S, C,
                  hooks);
  llama::rmsnorm_backward(dresid_.data(), hooks.grad(p.attn_norm), dln_.data(), x, w(p.attn_norm),
                          rstd1_.data() + l * BT, M, C);
}

}  // namespace mxdp
