// GPT-2 on the CPU. See gpt.h for the architecture and the parameter layout.
//
// Its own layer loops are in gpt_cpu.cpp, the ones every CPU model shares in
// models/cpu/.
#include "models/gpt2/gpt.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "models/cpu/parallel.h"
#include "models/cpu/residual.h"
#include "models/gpt2/gpt_cpu.h"
#include "models/init_rng.h"
#include "util/check.h"

namespace mxdp {

// ---------------------------------------------------------------- configs

GptConfig gpt_config(const std::string& name) {
  GptConfig c;
  if (name == "tiny") {
    // Byte-level; sized so that one core runs a B=8 x T=64 forward+backward
    // in a few tens of ms (docs/gpt.md has the measurements).
    c = {.vocab = 256, .padded_vocab = 256, .max_seq = 128, .n_layer = 4, .n_head = 4, .d_model = 64};
  } else if (name == "gpt2-124m") {
    c = {.vocab = 50257, .padded_vocab = 50304, .max_seq = 1024, .n_layer = 12, .n_head = 12, .d_model = 768};
  } else if (name == "gpt2-350m") {
    c = {.vocab = 50257, .padded_vocab = 50304, .max_seq = 1024, .n_layer = 24, .n_head = 16, .d_model = 1024};
  } else if (name == "gpt2-774m") {
    c = {.vocab = 50257, .padded_vocab = 50304, .max_seq = 1024, .n_layer = 36, .n_head = 20, .d_model = 1280};
  } else if (name == "gpt2-1558m") {
    c = {.vocab = 50257, .padded_vocab = 50304, .max_seq = 1024, .n_layer = 48, .n_head = 25, .d_model = 1600};
  } else {
    std::string known;
    for (const auto& n : gpt_config_names()) {
      if (!known.empty()) known += ", ";
      known += n;
    }
    MXDP_FAIL("unknown GPT config '", name, "' (known: ", known, ")");
  }
  return c;
}

std::vector<std::string> gpt_config_names() {
  return {"tiny", "gpt2-124m", "gpt2-350m", "gpt2-774m", "gpt2-1558m"};
}

void validate(const GptConfig& c) {
  MXDP_CHECK(c.vocab > 0, "GPT config: vocab must be positive, got ", c.vocab);
  MXDP_CHECK(c.padded_vocab >= c.vocab, "GPT config: padded_vocab (", c.padded_vocab,
             ") must be >= vocab (", c.vocab, ")");
  MXDP_CHECK(c.max_seq > 0, "GPT config: max_seq must be positive, got ", c.max_seq);
  MXDP_CHECK(c.n_layer > 0, "GPT config: n_layer must be positive, got ", c.n_layer);
  MXDP_CHECK(c.n_head > 0, "GPT config: n_head must be positive, got ", c.n_head);
  MXDP_CHECK(c.d_model > 0, "GPT config: d_model must be positive, got ", c.d_model);
  MXDP_CHECK(c.d_model % c.n_head == 0, "GPT config: d_model (", c.d_model,
             ") must be a multiple of n_head (", c.n_head, ")");
  MXDP_CHECK(c.d_model % 32 == 0, "GPT config: d_model (", c.d_model,
             ") must be a multiple of 32 so that every 2-D weight has rows of whole 32-blocks");
}

std::vector<ParamSpec> gpt_param_specs(const GptConfig& c) {
  validate(c);
  const int64_t C = c.d_model;
  std::vector<ParamSpec> s;
  // fp8_linear: the four linear layers of a block (compute_dtype fp8 reads
  // them as FP8; the embeddings and the tied head stay as they are).
  auto add = [&](std::string name, std::vector<int64_t> shape, int layer, bool fp8_linear = false,
                 bool embedding = false) {
    bool decay = shape.size() == 2;
    s.push_back({std::move(name), std::move(shape), layer, decay, fp8_linear, embedding});
  };
  add("wte", {c.padded_vocab, C}, 0, false, true);  // also the tied LM head
  add("wpe", {c.max_seq, C}, 0, false, true);
  for (int l = 1; l <= c.n_layer; ++l) {
    const std::string p = fmt::format("h{}.", l - 1);
    add(p + "ln1.w", {C}, l);
    add(p + "ln1.b", {C}, l);
    add(p + "attn.qkv.w", {3 * C, C}, l, true);
    add(p + "attn.qkv.b", {3 * C}, l);
    add(p + "attn.proj.w", {C, C}, l, true);
    add(p + "attn.proj.b", {C}, l);
    add(p + "ln2.w", {C}, l);
    add(p + "ln2.b", {C}, l);
    add(p + "mlp.fc.w", {4 * C, C}, l, true);
    add(p + "mlp.fc.b", {4 * C}, l);
    add(p + "mlp.proj.w", {C, 4 * C}, l, true);
    add(p + "mlp.proj.b", {C}, l);
  }
  add("lnf.w", {C}, c.n_layer + 1);
  add("lnf.b", {C}, c.n_layer + 1);
  return s;
}

std::vector<ParamSpec> gpt_fp8_param_specs(const GptConfig& cfg, const Fp8Compute& c) {
  return c.apply(gpt_param_specs(cfg), cfg.n_layer);
}

double gpt_train_flops_per_token(const GptConfig& c, int seq_len) {
  const double C = c.d_model, L = c.n_layer;
  const double matmul_weights = L * 12.0 * C * C + double(c.vocab) * C;
  return 6.0 * matmul_weights + 6.0 * L * double(seq_len) * C;
}

int64_t gpt_num_parameters(const GptConfig& c) {
  int64_t n = 0;
  for (const auto& p : gpt_param_specs(c)) n += p.numel();
  return n;
}


using namespace cpu;

// ---------------------------------------------------------------- Gpt

Gpt::Gpt(const GptConfig& cfg)
    : cfg_(cfg), params_(gpt_param_specs(cfg)), head_(cfg.vocab, cfg.padded_vocab) {
  int i = 2;
  for (int l = 0; l < cfg_.n_layer; ++l, i += 12)
    blocks_.push_back({i, i + 1, i + 2, i + 3, i + 4, i + 5, i + 6, i + 7, i + 8, i + 9, i + 10, i + 11});
  lnfw_ = i;
  lnfb_ = i + 1;
}

void Gpt::set_fp8_compute(const Fp8Compute& c) {
  const std::vector<ParamSpec> specs = gpt_fp8_param_specs(cfg_, c);
  for (size_t p = 0; p < specs.size(); ++p) params_.set_fp8_linear(int(p), specs[p].fp8_linear);
  fp8_ = c.on;
}

void gpt_init_param(const GptConfig& cfg, const std::vector<ParamSpec>& specs, uint64_t seed, int p, float* x) {
  MXDP_CHECK(p >= 0 && p < int(specs.size()), "param index ", p, " out of range");
  const float resid_std = 0.02f / std::sqrt(2.f * cfg.n_layer);
  const ParamSpec& s = specs[p];
  const int64_t n = s.numel();
  const std::string& nm = s.name;
  if (s.shape.size() == 2) {
    const float std = nm.ends_with("proj.w") ? resid_std : 0.02f;
    const int64_t n_init = nm == "wte" ? int64_t(cfg.vocab) * cfg.d_model : n;  // padding rows stay 0
    fill_normal(x, n, n_init, std, seed, p);
  } else {
    const float v = nm.ends_with("ln1.w") || nm.ends_with("ln2.w") || nm == "lnf.w" ? 1.f : 0.f;
    std::fill(x, x + n, v);
  }
}

void Gpt::init_weights(uint64_t seed) {
  for (size_t p = 0; p < params().size(); ++p) gpt_init_param(cfg_, params(), seed, int(p), w(int(p)));
}

void Gpt::ensure_activations(int B, int T) {
  if (B == B_ && T == T_) return;
  const int64_t BT = int64_t(B) * T, C = cfg_.d_model, L = cfg_.n_layer, NH = cfg_.n_head;
  const auto size = cpu::resize_fresh;
  size(resid_, (L + 1) * BT * C);
  size(resid_mid_, L * BT * C);
  size(ln1_, L * BT * C);
  size(ln1_mean_, L * BT);
  size(ln1_rstd_, L * BT);
  size(qkv_, L * BT * 3 * C);
  size(atty_, L * BT * C);
  size(att_, L * B * NH * T * T);
  size(ln2_, L * BT * C);
  size(ln2_mean_, L * BT);
  size(ln2_rstd_, L * BT);
  size(fch_, L * BT * 4 * C);
  size(fch_tanh_, L * BT * 4 * C);
  size(fch_gelu_, BT * 4 * C);
  size(lnf_, BT * C);
  size(lnf_mean_, BT);
  size(lnf_rstd_, BT);
  head_.resize(B, T);
  size(tmp_, BT * C);
  for (auto* v : {&dresid_, &dln_, &dqkv_, &datty_, &dfch_, &dfchg_}) std::vector<float>().swap(*v);
  tokens_.assign(size_t(BT), 0);
  B_ = B;
  T_ = T;
}

void Gpt::run_forward(const int32_t* tokens, int B, int T, ModelHooks& hooks) {
  check_inputs(tokens, B, T, cfg_.vocab, cfg_.max_seq);
  const int64_t BT = int64_t(B) * T;
  ensure_activations(B, T);
  std::copy(tokens, tokens + BT, tokens_.begin());
  const int C = cfg_.d_model, NH = cfg_.n_head, Vp = cfg_.padded_vocab;
  const int M = int(BT);

  // Layer 0: embeddings.
  hooks.before_layer(0);
  {
    const float* wte = w(wte_);
    const float* wpe = w(wpe_);
    float* x = resid_.data();
#pragma omp parallel for schedule(static) if(BT * C >= kParallelMinWork)
    for (int64_t m = 0; m < BT; ++m) {
      const float* te = wte + int64_t(tokens_[m]) * C;
      const float* pe = wpe + (m % T) * C;
      for (int i = 0; i < C; ++i) x[m * C + i] = te[i] + pe[i];
    }
  }

  // Layers 1..n_layer: blocks.
  for (int l = 0; l < cfg_.n_layer; ++l) {
    hooks.before_layer(l + 1);
    const BlockParams& p = blocks_[l];
    const float* x = resid_.data() + l * BT * C;
    float* ln1 = ln1_.data() + l * BT * C;
    float* qkv = qkv_.data() + l * BT * 3 * C;
    float* atty = atty_.data() + l * BT * C;
    float* xm = resid_mid_.data() + l * BT * C;
    float* ln2 = ln2_.data() + l * BT * C;
    float* fch = fch_.data() + l * BT * 4 * C;
    float* th = fch_tanh_.data() + l * BT * 4 * C;
    float* y = resid_.data() + (l + 1) * BT * C;
    layernorm_forward(ln1, ln1_mean_.data() + l * BT, ln1_rstd_.data() + l * BT, x, w(p.ln1w), w(p.ln1b),
                      M, C);
    // A block linear layer: y = x W^T + b, in fp32 or (FP8 compute) from the engine's FP8 W.
    const bool fp8 = fp8_ && params()[size_t(p.qkvw)].fp8_linear;  // this block computes in FP8
    const auto linear = [&](float* y, const float* xin, int wp, int bp, int N, int K) {
      block_linear_forward(fp8, y, xin, wp, w(wp), w(bp), M, N, K, hooks, wt_, fp8s_);
    };
    linear(qkv, ln1, p.qkvw, p.qkvb, 3 * C, C);
    attention_forward(atty, att_.data() + int64_t(l) * B * NH * T * T, qkv, B, T, C, NH);
    linear(tmp_.data(), atty, p.projw, p.projb, C, C);
    residual_add(xm, x, tmp_.data(), BT * C);
    layernorm_forward(ln2, ln2_mean_.data() + l * BT, ln2_rstd_.data() + l * BT, xm, w(p.ln2w), w(p.ln2b),
                      M, C);
    linear(fch, ln2, p.fcw, p.fcb, 4 * C, C);
    gelu_forward(fch_gelu_.data(), th, fch, BT * 4 * C);
    linear(tmp_.data(), fch_gelu_.data(), p.mprojw, p.mprojb, C, 4 * C);
    residual_add(y, xm, tmp_.data(), BT * C);
  }

  // Layer n_layer+1: final LayerNorm and the tied head.
  hooks.before_layer(cfg_.n_layer + 1);
  layernorm_forward(lnf_.data(), lnf_mean_.data(), lnf_rstd_.data(),
                    resid_.data() + cfg_.n_layer * BT * C, w(lnfw_), w(lnfb_), M, C);
  matmul_forward(head_.buffer(), lnf_.data(), w(wte_), nullptr, M, Vp, C, wt_);
}

void Gpt::forward_logits(const int32_t* tokens, int B, int T, ModelHooks& hooks) {
  head_.forward_logits([&] { run_forward(tokens, B, T, hooks); });
}

// The loss: cross-entropy over the first `vocab` logits of each row. The
// logits stay in head_ (logits() reads them); backward turns them into dlogits.
float Gpt::forward(const Batch& batch, ModelHooks& hooks) {
  return head_.forward(batch, [&] { run_forward(batch.inputs, batch.B, batch.T, hooks); });
}

void Gpt::backward(ModelHooks& hooks) {
  const float* dlogits = head_.dlogits();  // (softmax - onehot) / BT over the real vocab, 0 on padding
  const int B = B_, T = T_, C = cfg_.d_model, NH = cfg_.n_head, Vp = cfg_.padded_vocab;
  const int64_t BT = int64_t(B) * T;
  const int M = int(BT);
  for (auto* v : {&dresid_, &dln_, &datty_}) v->resize(size_t(BT * C));
  dqkv_.resize(size_t(BT * 3 * C));
  dfch_.resize(size_t(BT * 4 * C));
  dfchg_.resize(size_t(BT * 4 * C));

  // Layer n_layer+1.
  {
    // Head (weight = wte, layer 0): dwte += dlogits^T @ lnf, dlnf = dlogits @ wte.
    matmul_backward(dln_.data(), hooks.grad(wte_), nullptr, dlogits, lnf_.data(), w(wte_), M, Vp, C);
    std::fill(dresid_.begin(), dresid_.end(), 0.f);
    layernorm_backward(dresid_.data(), hooks.grad(lnfw_), hooks.grad(lnfb_), dln_.data(),
                       resid_.data() + cfg_.n_layer * BT * C, w(lnfw_), lnf_mean_.data(), lnf_rstd_.data(),
                       M, C);
    hooks.after_layer_backward(cfg_.n_layer + 1);
  }

  // Blocks, last to first. dresid_ holds d(loss)/d(block output) and becomes
  // d(loss)/d(block input).
  for (int l = cfg_.n_layer - 1; l >= 0; --l) {
    const BlockParams& p = blocks_[l];
    const float* x = resid_.data() + l * BT * C;
    const float* xm = resid_mid_.data() + l * BT * C;
    const float* ln1 = ln1_.data() + l * BT * C;
    const float* qkv = qkv_.data() + l * BT * 3 * C;
    const float* atty = atty_.data() + l * BT * C;
    const float* ln2 = ln2_.data() + l * BT * C;
    const float* fch = fch_.data() + l * BT * 4 * C;
    const float* th = fch_tanh_.data() + l * BT * 4 * C;
    gelu_from_tanh(fch_gelu_.data(), th, fch, BT * 4 * C);  // the forward's values, bitwise
    // A block linear layer's backward, in fp32 or (FP8 compute) with the engine's FP8 W^T.
    const bool fp8 = fp8_ && params()[size_t(p.qkvw)].fp8_linear;  // this block computes in FP8
    const auto linear_back = [&](float* dx, int wp, int bp, const float* dy, const float* xin, int N, int K) {
      block_linear_backward(fp8, dx, hooks.grad(bp), dy, xin, wp, w(wp), M, N, K, hooks, fp8s_);
    };
    // MLP half: y = xm + mproj(gelu(fc(ln2(xm)))).
    linear_back(dfchg_.data(), p.mprojw, p.mprojb, dresid_.data(), fch_gelu_.data(), C, 4 * C);
    gelu_backward(dfch_.data(), fch, th, dfchg_.data(), BT * 4 * C);
    linear_back(dln_.data(), p.fcw, p.fcb, dfch_.data(), ln2, 4 * C, C);
    layernorm_backward(dresid_.data(), hooks.grad(p.ln2w), hooks.grad(p.ln2b), dln_.data(), xm, w(p.ln2w),
                       ln2_mean_.data() + l * BT, ln2_rstd_.data() + l * BT, M, C);
    // Attention half: xm = x + proj(attn(qkv(ln1(x)))).
    linear_back(datty_.data(), p.projw, p.projb, dresid_.data(), atty, C, C);
    attention_backward(dqkv_.data(), datty_.data(), qkv, att_.data() + int64_t(l) * B * NH * T * T, B, T, C,
                       NH);
    linear_back(dln_.data(), p.qkvw, p.qkvb, dqkv_.data(), ln1, 3 * C, C);
    layernorm_backward(dresid_.data(), hooks.grad(p.ln1w), hooks.grad(p.ln1b), dln_.data(), x, w(p.ln1w),
                       ln1_mean_.data() + l * BT, ln1_rstd_.data() + l * BT, M, C);
    hooks.after_layer_backward(l + 1);
  }

  // Layer 0: embeddings. The head's contribution to dwte is already in.
  {
    // dwpe[t] += sum_b dx[b, t], in order of b; one t per task.
    float* dwpe = hooks.grad(wpe_);
    const float* dx = dresid_.data();
#pragma omp parallel for schedule(static) if(BT * C >= kParallelMinWork)
    for (int t = 0; t < T; ++t) {
      float* o = dwpe + int64_t(t) * C;
      std::vector<float> acc(C, 0.f);
      for (int b = 0; b < B; ++b)
        for (int i = 0; i < C; ++i) acc[i] += dx[(int64_t(b) * T + t) * C + i];
      for (int i = 0; i < C; ++i) o[i] += acc[i];
    }
    embedding_backward(hooks.grad(wte_), dx, tokens_.data(), BT, C);  // dwte[token] += dx, in position order
  }
  hooks.after_layer_backward(0);
}

}  // namespace mxdp
