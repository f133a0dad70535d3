// The Llama family on the GPU: its own parts (parameter indices, the
// activation arena laid out below with RoPE's tables, the forward and
// backward of each stage) on LmCuda (models/cuda/lm_cuda.h), which holds what
// every GPU language model does the same way (weights, batch upload, the
// hooks, graph segments, loss). The same model as llama.h (architecture,
// parameter list, init: llama_param_specs, llama_init_param, llama_inv_freq),
// in bf16 with fp32 accumulation.
//
// Forward of block l (resid[l] is the residual stream entering it):
//   hn1  = RMSNorm(resid[l])          (fused into the previous block's last residual add)
//   qkv  = hn1 @ Wqkv^T (+ b)         cuBLASLt (bias epilogue for Qwen2)
//   qkv  = RoPE(q, k) in place        the rotated q, k are what attention and its backward read
//   atty = attention(qkv)             cuDNN SDPA, causal, grouped-query; stats kept for backward
//   mid  = resid[l] + atty @ Wo^T ; hn2 = RMSNorm(mid)         (one fused kernel)
//   gu   = hn2 @ Wgate_up^T           kept
//   act  = silu(gate) * up            kept (down's weight gradient reads it)
//   resid[l+1] = mid + act @ Wdown^T ; next RMSNorm             (fused)
// Head: logits = RMSNorm(resid[L]) @ head^T, then the shared fused classifier
// (models/cuda/classifier.h) turns the logits into per-row losses and, in
// place, into dlogits.
//
// Hooks: before_layer(l+1) is called before the fused residual+RMSNorm kernel
// that first reads block l's attn_norm.w; after_layer_backward(L) as soon as
// that layer's gradients are in.
#include "models/llama/cuda/llama_cuda.h"

#include <cmath>
#include <cstdint>
#include <vector>

#include "models/cuda/column_sums.h"  // bias_backward, colsum_scratch_floats, kColsumCounters
#include "models/cuda/lm_cuda.h"
#include "models/llama/cuda/llama_kernels.h"
#include "util/check.h"
#include "util/cuda_check.h"

namespace mxdp::cuda {

namespace {

class LlamaCuda final : public LmCuda<LlamaModel, LlamaConfig> {
 public:
  LlamaCuda(const LlamaConfig& cfg, cudaStream_t stream, const LlamaCudaOptions& opts)
      : LmCuda(validated(cfg), llama_param_specs(cfg), cfg.vocab, "Llama", stream, opts.cuda_graphs),
        inv_freq_(llama_inv_freq(cfg)) {
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
    MXDP_CHECK(i == int(specs_.size()), "GPU Llama: ", i, " param indices for ", specs_.size(), " params");
    stage_grads_.push_back({embed_});
    for (const BlockParams& p : blocks_)
      stage_grads_.push_back({p.attn_norm, p.qkvw, p.qkvb, p.ow, p.mlp_norm, p.gate_up, p.down});
    stage_grads_.push_back({head_, norm_});
  }

 private:
  struct BlockParams {
    int attn_norm, qkvw, qkvb, ow, mlp_norm, gate_up, down;  // qkvb -1 without biases
  };

  // Activations for one (B, T), carved out of one allocation (with io_: the
  // batch, the logits and the losses; and with RoPE's tables, so that the
  // graphs' key, which names the arena, covers them).
  struct Activations {
    uint16_t *resid, *resid_mid, *hn1, *hn2, *qkv, *atty, *gu, *hnf;
    uint16_t *act, *tmp, *dresid, *dln, *datty, *dqkv, *dact, *dgu;
    float *rstd1, *rstd2, *rstdf, *stats, *rms_scratch, *bias_scratch, *cos, *sin;
  };

  static const LlamaConfig& validated(const LlamaConfig& cfg) {
    validate(cfg);
    return cfg;
  }
  uint16_t* bias(int p) const { return p >= 0 ? w(p) : nullptr; }

  void init_param(uint64_t seed, int p, float* out) const override { llama_init_param(cfg_, specs_, seed, p, out); }
  void carve(ArenaSlicer& take, int B, int T) override;
  void activations_ready(int B, int T) override;
  void forward_stage(int s) override;
  void backward_stage(int s, float* const* g) override;
  void block_forward(int l);
  void backward_head(float* dhead, float* dnorm);
  void backward_block(int l, float* const* g);

  std::vector<float> inv_freq_;
  std::vector<BlockParams> blocks_;
  int embed_ = 0, norm_ = 0, head_ = 0;
  Activations act_{};
};

void LlamaCuda::carve(ArenaSlicer& take, int B, int T) {
  const int64_t BT = int64_t(B) * T, C = cfg_.d_model, L = cfg_.n_layer, NH = cfg_.n_head, V = cfg_.vocab;
  const int64_t S = cfg_.qkv_dim(), Q = cfg_.q_dim(), F = cfg_.d_ff, half = cfg_.head_dim / 2;
  Activations& a = act_;
  take(a.resid, (L + 1) * BT * C);
  take(a.resid_mid, L * BT * C);
  take(a.hn1, L * BT * C);
  take(a.hn2, L * BT * C);
  take(a.qkv, L * BT * S);
  take(a.atty, L * BT * Q);
  take(a.gu, L * BT * 2 * F);
  take(a.act, L * BT * F);
  take(a.hnf, BT * C);
  take(io_.logits, BT * V);
  take(a.tmp, BT * C);
  take(a.dresid, BT * C);
  take(a.dln, BT * C);
  take(a.datty, BT * Q);
  take(a.dqkv, BT * S);
  take(a.dact, BT * F);
  take(a.dgu, BT * 2 * F);
  take(a.rstd1, L * BT);
  take(a.rstd2, L * BT);
  take(a.rstdf, BT);
  take(a.stats, L * B * NH * T);
  take(io_.losses, BT);
  take(a.rms_scratch, llama::rmsnorm_scratch_floats(BT, C));
  take(a.bias_scratch, cfg_.qkv_bias ? colsum_scratch_floats(BT, S) : 0);
  take(a.cos, T * half);
  take(a.sin, T * half);
  take_batch(take, BT);
}

void LlamaCuda::activations_ready(int, int T) {
  const int64_t half = cfg_.head_dim / 2;
  // The bias column sums' counters start at zero (the kernels leave them so).
  if (cfg_.qkv_bias) MXDP_CUDA_CHECK(cudaMemsetAsync(act_.bias_scratch, 0, kColsumCounters * sizeof(float), s_));
  // RoPE's tables, as the CPU model computes them: angle t * inv_freq[i] in fp32.
  std::vector<float> cs(size_t(T * half)), sn(cs.size());
  for (int64_t t = 0; t < T; ++t)
    for (int64_t i = 0; i < half; ++i) {
      const float a = float(t) * inv_freq_[size_t(i)];
      cs[size_t(t * half + i)] = std::cos(a);
      sn[size_t(t * half + i)] = std::sin(a);
    }
  MXDP_CUDA_CHECK(cudaMemcpyAsync(act_.cos, cs.data(), cs.size() * 4, cudaMemcpyHostToDevice, s_));
  MXDP_CUDA_CHECK(cudaMemcpyAsync(act_.sin, sn.data(), sn.size() * 4, cudaMemcpyHostToDevice, s_));
  MXDP_CUDA_CHECK(cudaStreamSynchronize(s_));  // cs, sn go away
}

// Layer 0 is the embedding, layer 1 + l block l, layer L + 1 the final norm
// and the head. Stage 1 is block 0's attn RMSNorm and body; stage s >= 2 the
// residual add closing block s - 2 fused with the RMSNorm of layer s, then
// block s - 1's body (or, for s = L + 1, the head).
void LlamaCuda::forward_stage(int s) {
  const int M = B_ * T_, C = cfg_.d_model, L = cfg_.n_layer;
  const int64_t BTC = int64_t(M) * C;
  const float eps = float(cfg_.rms_eps);
  Activations& a = act_;
  if (s == 0) {
    llama::embedding_forward(a.resid, io_.tokens, w(embed_), M, C, s_);
    return;
  }
  if (s == 1) {
    llama::rmsnorm_forward(a.hn1, a.rstd1, a.resid, w(blocks_[0].attn_norm), M, C, eps, s_);
  } else {
    const int l = s - 2;  // the block this residual add closes
    const bool last = l + 1 == L;
    uint16_t* next = last ? a.hnf : a.hn1 + (l + 1) * BTC;
    float* rstd = last ? a.rstdf : a.rstd1 + int64_t(l + 1) * M;
    const int nw = last ? norm_ : blocks_[size_t(l + 1)].attn_norm;
    llama::residual_rmsnorm_forward(a.resid + (l + 1) * BTC, next, rstd, a.resid_mid + l * BTC, a.tmp, w(nw), M, C,
                                    eps, s_);
  }
  if (s - 1 == L) {
    gemm_.forward(io_.logits, a.hnf, w(head_), nullptr, M, cfg_.vocab, C);
    return;
  }
  block_forward(s - 1);
}

void LlamaCuda::block_forward(int l) {
  const int B = B_, T = T_, C = cfg_.d_model, NH = cfg_.n_head, KV = cfg_.n_kv_head, hd = cfg_.head_dim;
  const int M = B * T, S = cfg_.qkv_dim(), Q = cfg_.q_dim(), F = cfg_.d_ff;
  const int64_t BTC = int64_t(M) * C;
  const float eps = float(cfg_.rms_eps);
  Activations& a = act_;
  const BlockParams& p = blocks_[size_t(l)];
  uint16_t* x = a.resid + l * BTC;
  uint16_t* qkv = a.qkv + int64_t(l) * M * S;
  uint16_t* atty = a.atty + int64_t(l) * M * Q;
  uint16_t* mid = a.resid_mid + l * BTC;
  uint16_t* gu = a.gu + int64_t(l) * M * 2 * F;
  uint16_t* act = a.act + int64_t(l) * M * F;
  gemm_.forward(qkv, a.hn1 + l * BTC, w(p.qkvw), bias(p.qkvb), M, S, C);
  llama::rope(qkv, a.cos, a.sin, B, T, NH, KV, hd, /*inverse=*/false, s_);
  att_.forward_gqa(atty, a.stats + int64_t(l) * B * NH * T, qkv, B, T, NH, KV, hd);
  gemm_.forward(a.tmp, atty, w(p.ow), nullptr, M, C, Q);
  llama::residual_rmsnorm_forward(mid, a.hn2 + l * BTC, a.rstd2 + int64_t(l) * M, x, a.tmp, w(p.mlp_norm), M, C, eps,
                                  s_);
  gemm_.forward(gu, a.hn2 + l * BTC, w(p.gate_up), nullptr, M, 2 * F, C);
  llama::swiglu_forward(act, gu, M, F, s_);
  gemm_.forward(a.tmp, act, w(p.down), nullptr, M, C, F);
}

// Stage L + 1 is the head and the final RMSNorm, stage 1 + l block l, stage
// 0 the embedding (g in stage_grads_'s order).
void LlamaCuda::backward_stage(int s, float* const* g) {
  if (s == 0) {
    llama::embedding_backward(g[0], act_.dresid, io_.order, io_.seg_start, io_.seg_token, n_seg_, cfg_.d_model, s_);
  } else if (s == cfg_.n_layer + 1) {
    backward_head(g[0], g[1]);
  } else {
    backward_block(s - 1, g);
  }
}

// dhnf = dlogits @ head, dhead += dlogits^T @ hnf, then the final RMSNorm
// (dresid is overwritten: the residual stream's gradient starts here).
void LlamaCuda::backward_head(float* dhead, float* dnorm) {
  const int M = B_ * T_, C = cfg_.d_model, V = cfg_.vocab, L = cfg_.n_layer;
  Activations& a = act_;
  gemm_.backward_data(a.dln, io_.logits, w(head_), M, V, C);
  gemm_.backward_weight(dhead, io_.logits, a.hnf, M, V, C);
  llama::rmsnorm_backward(a.dresid, /*accumulate=*/false, dnorm, a.rms_scratch, a.dln, a.resid + int64_t(L) * M * C,
                          w(norm_), a.rstdf, M, C, s_);
}

// g: the block's gradients in BlockParams order (qkvb null without biases).
void LlamaCuda::backward_block(int l, float* const* g) {
  const int B = B_, T = T_, C = cfg_.d_model, NH = cfg_.n_head, KV = cfg_.n_kv_head, hd = cfg_.head_dim;
  const int M = B * T, S = cfg_.qkv_dim(), Q = cfg_.q_dim(), F = cfg_.d_ff;
  const int64_t BTC = int64_t(M) * C;
  Activations& a = act_;
  const BlockParams& p = blocks_[size_t(l)];
  float *d_attn_norm = g[0], *d_qkvw = g[1], *d_qkvb = g[2], *d_ow = g[3], *d_mlp_norm = g[4], *d_gate_up = g[5],
        *d_down = g[6];
  const uint16_t* x = a.resid + l * BTC;
  const uint16_t* hn1 = a.hn1 + l * BTC;
  const uint16_t* qkv = a.qkv + int64_t(l) * M * S;
  const uint16_t* atty = a.atty + int64_t(l) * M * Q;
  const uint16_t* mid = a.resid_mid + l * BTC;
  const uint16_t* hn2 = a.hn2 + l * BTC;
  const uint16_t* gu = a.gu + int64_t(l) * M * 2 * F;
  const uint16_t* act = a.act + int64_t(l) * M * F;
  // MLP half: y = mid + down(swiglu(gate_up(rmsnorm(mid)))). The SwiGLU
  // output is kept from the forward: recomputing it here cost a pass over
  // gate_up (3 d_ff values a token read and written) to save d_ff of memory.
  gemm_.backward_weight(d_down, a.dresid, act, M, C, F);
  gemm_.backward_data(a.dact, a.dresid, w(p.down), M, C, F);
  llama::swiglu_backward(a.dgu, a.dact, gu, M, F, s_);
  gemm_.backward_data(a.dln, a.dgu, w(p.gate_up), M, 2 * F, C);
  gemm_.backward_weight(d_gate_up, a.dgu, hn2, M, 2 * F, C);
  llama::rmsnorm_backward(a.dresid, true, d_mlp_norm, a.rms_scratch, a.dln, mid, w(p.mlp_norm),
                          a.rstd2 + int64_t(l) * M, M, C, s_);
  // Attention half: mid = x + o(attn(rope(qkv(rmsnorm(x))))).
  gemm_.backward_data(a.datty, a.dresid, w(p.ow), M, C, Q);
  gemm_.backward_weight(d_ow, a.dresid, atty, M, C, Q);
  att_.backward_gqa(a.dqkv, a.datty, qkv, atty, a.stats + int64_t(l) * B * NH * T, B, T, NH, KV, hd);
  llama::rope(a.dqkv, a.cos, a.sin, B, T, NH, KV, hd, /*inverse=*/true, s_);
  gemm_.backward_data(a.dln, a.dqkv, w(p.qkvw), M, S, C);
  gemm_.backward_weight(d_qkvw, a.dqkv, hn1, M, S, C);
  if (d_qkvb) bias_backward(d_qkvb, a.bias_scratch, a.dqkv, M, S, s_);
  llama::rmsnorm_backward(a.dresid, true, d_attn_norm, a.rms_scratch, a.dln, x, w(p.attn_norm),
                          a.rstd1 + int64_t(l) * M, M, C, s_);
}

}  // namespace

std::unique_ptr<LlamaModel> make_llama(const LlamaConfig& cfg, cudaStream_t stream, const LlamaCudaOptions& opts) {
  MXDP_CHECK(stream != nullptr, "the GPU Llama needs a stream (the engine ops' stream)");
  return std::make_unique<LlamaCuda>(cfg, stream, opts);
}

int64_t llama_cuda_graphs(const LanguageModel& model) {
  const auto* m = dynamic_cast<const LlamaCuda*>(&model);
  MXDP_CHECK(m, "llama_cuda_graphs: not the GPU Llama");
  return m->graphs().graphs();
}

}  // namespace mxdp::cuda
