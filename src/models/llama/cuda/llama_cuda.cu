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
// Under FP8 compute (docs/fp8.md) the four linears of a block (qkv, o,
// gate_up, down) read the engine's FP8 W / W^T through Fp8Linear, and hn1, hn2
// and act are not written: the RMSNorm kernels write only rstd, and
// act_quantize's RMSNorm and SwiGLU ops make the linears' operands from the
// norms' inputs and from gu (forward_block_fp8).
//
// Hooks: before_layer(l+1) is called before the fused residual+RMSNorm kernel
// that first reads block l's attn_norm.w; after_layer_backward(L) as soon as
// that layer's gradients are in.
#include "models/llama/cuda/llama_cuda.h"

#include <array>
#include <cmath>
#include <cstdint>
#include <vector>

#include "models/cuda/column_sums.h"  // bias_backward, colsum_scratch_floats, kColsumCounters
#include "models/cuda/embedding.h"
#include "models/cuda/fp8_linear.h"
#include "models/cuda/lm_cuda.h"
#include "models/cuda/norm_backward.h"  // norm_backward_scratch_floats
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
    const LlamaParamIndex ix = llama_param_index(cfg_);
    embed_ = ix.embed;
    blocks_ = ix.blocks;
    norm_ = ix.norm;
    head_ = ix.head;
    stage_grads_.push_back({embed_});
    for (const BlockParams& p : blocks_)
      stage_grads_.push_back({p.attn_norm, p.qkvw, p.qkvb, p.ow, p.mlp_norm, p.gate_up, p.down});
    stage_grads_.push_back({head_, norm_});
    for (const BlockParams& p : blocks_) block_linears_.push_back({p.qkvw, p.ow, p.gate_up, p.down});
  }

 private:
  using BlockParams = LlamaParamIndex::Block;

  // Activations for one (B, T), carved out of one allocation (with io_: the
  // batch, the logits and the losses; and with RoPE's tables, so that the
  // graphs' key, which names the arena, covers them).
  struct Activations {
    uint16_t *resid, *resid_mid, *hn1, *hn2, *qkv, *atty, *gu, *hnf;  // hn1, hn2 (and act): bf16 blocks only
    uint16_t *act, *tmp, *dresid, *dln, *datty, *dqkv, *dact, *dgu;  // dgu: bf16 blocks only
    float *rstd1, *rstd2, *rstdf, *stats, *rms_scratch, *bias_scratch, *cos, *sin;
  };
  // Block l's slices of the activations. hn1, hn2 and act are null in an FP8
  // block, whose four X^T operands (the wgrads' inputs, made by the forward's
  // quantize passes and kept for backward) take their place: hn1^T [C, Mp],
  // atty^T [Q, Mp], hn2^T [C, Mp], act^T [F, Mp].
  struct BlockActs {
    uint16_t *x, *hn1, *qkv, *atty, *mid, *hn2, *gu, *act;
    float *rstd1, *rstd2, *stats;
    Fp8Slot hn1t, attyt, hn2t, actt;
  };
  // The widths of an FP8 block's X^T operands, in BlockActs' order (LmCuda::take_xt, xt_slots).
  std::array<int64_t, 4> xt_widths() const {
    return {cfg_.d_model, cfg_.q_dim(), cfg_.d_model, cfg_.d_ff};
  }
  // A block's gradients: backward_stage's g, in the order the constructor
  // lists them in stage_grads_, BlockParams' (qkvb null without biases).
  struct BlockGrads {
    float *attn_norm, *qkvw, *qkvb, *ow, *mlp_norm, *gate_up, *down;
  };
  static BlockGrads block_grads(float* const* g) { return {g[0], g[1], g[2], g[3], g[4], g[5], g[6]}; }
  // The dimensions a block's stage body works with: the batch (B, T; M = B T
  // rows), the width C, the query and key/value heads NH and KV of size hd,
  // qkv's width S, the query's Q, and the MLP's F.
  struct Dims {
    int B, T, C, NH, KV, hd, M, S, Q, F;
  };
  Dims dims() const {
    return {B_, T_, cfg_.d_model, cfg_.n_head, cfg_.n_kv_head, cfg_.head_dim, B_ * T_, cfg_.qkv_dim(), cfg_.q_dim(),
            cfg_.d_ff};
  }

  static const LlamaConfig& validated(const LlamaConfig& cfg) {
    validate(cfg);
    return cfg;
  }
  uint16_t* bias(int p) const { return p >= 0 ? w(p) : nullptr; }
  float eps() const { return float(cfg_.rms_eps); }  // the RMSNorms' eps, in fp32 as their kernels take it

  void init_param(uint64_t seed, int p, float* out) const override { llama_init_param(cfg_, specs_, seed, p, out); }
  void carve(ArenaSlicer& take, int B, int T) override;
  void activations_ready(int B, int T) override;
  void forward_stage(int s) override;
  void backward_stage(int s, float* const* g) override;
  BlockActs block_acts(int l);
  void forward_block(int l);
  void forward_block_fp8(int l);
  void backward_head(float* dhead, float* dnorm);
  void backward_block(int l, const BlockGrads& dp);
  void backward_block_fp8(int l, const BlockGrads& dp);

  std::vector<float> inv_freq_;
  std::vector<BlockParams> blocks_;
  int embed_ = 0, norm_ = 0, head_ = 0;
  Activations act_{};
};

void LlamaCuda::carve(ArenaSlicer& take, int B, int T) {
  const int64_t BT = int64_t(B) * T, C = cfg_.d_model, L = cfg_.n_layer, NH = cfg_.n_head, V = cfg_.vocab;
  const int64_t S = cfg_.qkv_dim(), Q = cfg_.q_dim(), F = cfg_.d_ff, half = cfg_.head_dim / 2;
  Activations& a = act_;
  // The norms' outputs and the SwiGLU's are kept for the bf16 blocks' wgrads;
  // an FP8 block keeps its X^T operands instead (xt, below).
  const int64_t Lb = L - n_fp8_blocks();
  take(a.resid, (L + 1) * BT * C);
  take(a.resid_mid, L * BT * C);
  take(a.hn1, Lb * BT * C);
  take(a.hn2, Lb * BT * C);
  take(a.qkv, L * BT * S);
  take(a.atty, L * BT * Q);
  take(a.gu, L * BT * 2 * F);
  take(a.act, Lb * BT * F);
  take(a.hnf, BT * C);
  take(io_.logits, BT * V);
  take(a.tmp, BT * C);
  take(a.dresid, BT * C);
  take(a.dln, BT * C);
  take(a.datty, BT * Q);
  take(a.dqkv, BT * S);
  take(a.dact, BT * F);
  take(a.dgu, Lb > 0 ? BT * 2 * F : 0);  // an FP8 block quantizes the SwiGLU gradient as it makes it
  take(a.rstd1, L * BT);
  take(a.rstd2, L * BT);
  take(a.rstdf, BT);
  take(a.stats, L * B * NH * T);
  take(io_.losses, BT);
  take(a.rms_scratch, norm_backward_scratch_floats(BT, C));
  take(a.bias_scratch, cfg_.qkv_bias ? colsum_scratch_floats(BT, S) : 0);
  take(a.cos, T * half);
  take(a.sin, T * half);
  take_batch(take, BT);
  take_xt(take, BT, xt_widths());
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
  Activations& a = act_;
  if (s == 0) {
    llama::embedding_forward(a.resid, io_.tokens, w(embed_), M, C, s_);
    return;
  }
  if (s == 1) {
    llama::rmsnorm_forward(block_acts(0).hn1, a.rstd1, a.resid, w(blocks_[0].attn_norm), M, C, eps(), s_);
  } else {
    const int l = s - 2;  // the block this residual add closes
    const bool last = l + 1 == L;
    uint16_t* next = last ? a.hnf : block_acts(l + 1).hn1;  // null for an FP8 block
    float* rstd = last ? a.rstdf : a.rstd1 + int64_t(l + 1) * M;
    const int nw = last ? norm_ : blocks_[size_t(l + 1)].attn_norm;
    llama::residual_rmsnorm_forward(a.resid + (l + 1) * BTC, next, rstd, a.resid_mid + l * BTC, a.tmp, w(nw), M, C,
                                    eps(), s_);
  }
  if (s - 1 == L) {
    gemm_.forward(io_.logits, a.hnf, w(head_), nullptr, M, cfg_.vocab, C);
    return;
  }
  fp8_block(s - 1) ? forward_block_fp8(s - 1) : forward_block(s - 1);
}

LlamaCuda::BlockActs LlamaCuda::block_acts(int l) {
  const int64_t M = int64_t(B_) * T_, C = cfg_.d_model, F = cfg_.d_ff, lm = l * M;
  Activations& a = act_;
  const bool fp8 = fp8_block(l);
  const int64_t k = block_slot(l);  // hn1, hn2, act among the bf16 blocks, X^T among the FP8 ones
  BlockActs b{a.resid + lm * C,
              fp8 ? nullptr : a.hn1 + k * M * C,
              a.qkv + lm * cfg_.qkv_dim(),
              a.atty + lm * cfg_.q_dim(),
              a.resid_mid + lm * C,
              fp8 ? nullptr : a.hn2 + k * M * C,
              a.gu + lm * 2 * F,
              fp8 ? nullptr : a.act + k * M * F,
              a.rstd1 + lm,
              a.rstd2 + lm,
              a.stats + l * int64_t(B_) * cfg_.n_head * T_};
  if (fp8) xt_slots(l, xt_widths(), {&b.hn1t, &b.attyt, &b.hn2t, &b.actt});
  return b;
}

void LlamaCuda::forward_block(int l) {
  const auto [B, T, C, NH, KV, hd, M, S, Q, F] = dims();
  const BlockParams& p = blocks_[size_t(l)];
  const BlockActs b = block_acts(l);
  uint16_t* tmp = act_.tmp;
  gemm_.forward(b.qkv, b.hn1, w(p.qkvw), bias(p.qkvb), M, S, C);
  llama::rope(b.qkv, act_.cos, act_.sin, B, T, NH, KV, hd, /*inverse=*/false, s_);
  att_.forward_gqa(b.atty, b.stats, b.qkv, B, T, NH, KV, hd);
  gemm_.forward(tmp, b.atty, w(p.ow), nullptr, M, C, Q);
  llama::residual_rmsnorm_forward(b.mid, b.hn2, b.rstd2, b.x, tmp, w(p.mlp_norm), M, C, eps(), s_);
  gemm_.forward(b.gu, b.hn2, w(p.gate_up), nullptr, M, 2 * F, C);
  llama::swiglu_forward(b.act, b.gu, M, F, s_);
  gemm_.forward(tmp, b.act, w(p.down), nullptr, M, C, F);
}

// Block l's body under FP8 compute (forward_block's, with the four linears in
// FP8): each GEMM's input quantized 1x128 in one act_quantize pass into both
// its operands, the rows for fprop (the kRows slot) and the transpose for
// backward's wgrad (the block's own X^T slot, kept until then). hn1 and hn2
// are not written (their kernels get a null output): act_quantize's RMSNorm
// op computes them from the norm's input and the rstd the kernel wrote, the
// bits the kernel would have written; the SwiGLU output likewise goes only to
// its two operands, made from gu by the SwiGLU op. Every forward makes the X^T
// operands, an eval's too (the same graphs; a backward always follows its own
// forward).
void LlamaCuda::forward_block_fp8(int l) {
  const auto [B, T, C, NH, KV, hd, M, S, Q, F] = dims();
  const BlockParams& p = blocks_[size_t(l)];
  const BlockActs b = block_acts(l);
  uint16_t* tmp = act_.tmp;
  Fp8Linear& lin = this->lin();
  const Fp8Slot q = lin.slot(Fp8Linear::kRows);
  const auto quantize_norm = [&](const uint16_t* input, const float* rstd, int norm_w, const Fp8Slot& xt) {
    act_quantize({.x = input, .op = ActOp::RmsNorm, .norm = {.rstd = rstd, .w = w(norm_w)}, .rows = q, .cols = xt},
                 M, C, s_);
  };
  quantize_norm(b.x, b.rstd1, p.attn_norm, b.hn1t);
  lin.fprop(b.qkv, q, fw(p.qkvw), bias(p.qkvb), M, S, C);
  llama::rope(b.qkv, act_.cos, act_.sin, B, T, NH, KV, hd, /*inverse=*/false, s_);
  att_.forward_gqa(b.atty, b.stats, b.qkv, B, T, NH, KV, hd);
  act_quantize({.x = b.atty, .rows = q, .cols = b.attyt}, M, Q, s_);
  lin.fprop(tmp, q, fw(p.ow), nullptr, M, C, Q);
  llama::residual_rmsnorm_forward(b.mid, nullptr, b.rstd2, b.x, tmp, w(p.mlp_norm), M, C, eps(), s_);
  quantize_norm(b.mid, b.rstd2, p.mlp_norm, b.hn2t);
  lin.fprop(b.gu, q, fw(p.gate_up), nullptr, M, 2 * F, C);
  act_quantize({.x = b.gu, .op = ActOp::SwiGlu, .rows = q, .cols = b.actt}, M, F, s_);
  lin.fprop(tmp, q, fw(p.down), nullptr, M, C, F);
}

// Stage L + 1 is the head and the final RMSNorm, stage 1 + l block l, stage
// 0 the embedding (g in stage_grads_'s order).
void LlamaCuda::backward_stage(int s, float* const* g) {
  if (s == 0) {
    embedding_backward(g[0], act_.dresid, io_.order, io_.seg_start, io_.seg_token, n_seg_, cfg_.d_model, s_);
  } else if (s == cfg_.n_layer + 1) {
    backward_head(g[0], g[1]);
  } else {
    const BlockGrads dp = block_grads(g);
    fp8_block(s - 1) ? backward_block_fp8(s - 1, dp) : backward_block(s - 1, dp);
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

// dp: the block's gradients (qkvb null without biases).
void LlamaCuda::backward_block(int l, const BlockGrads& dp) {
  const auto [B, T, C, NH, KV, hd, M, S, Q, F] = dims();
  Activations& a = act_;
  const BlockParams& p = blocks_[size_t(l)];
  const BlockActs b = block_acts(l);
  // MLP half: y = mid + down(swiglu(gate_up(rmsnorm(mid)))). The SwiGLU
  // output is kept from the forward: recomputing it here cost a pass over
  // gate_up (3 d_ff values a token read and written) to save d_ff of memory.
  gemm_.backward_weight(dp.down, a.dresid, b.act, M, C, F);
  gemm_.backward_data(a.dact, a.dresid, w(p.down), M, C, F);
  llama::swiglu_backward(a.dgu, a.dact, b.gu, M, F, s_);
  gemm_.backward_data(a.dln, a.dgu, w(p.gate_up), M, 2 * F, C);
  gemm_.backward_weight(dp.gate_up, a.dgu, b.hn2, M, 2 * F, C);
  llama::rmsnorm_backward(a.dresid, true, dp.mlp_norm, a.rms_scratch, a.dln, b.mid, w(p.mlp_norm), b.rstd2, M, C, s_);
  // Attention half: mid = x + o(attn(rope(qkv(rmsnorm(x))))).
  gemm_.backward_data(a.datty, a.dresid, w(p.ow), M, C, Q);
  gemm_.backward_weight(dp.ow, a.dresid, b.atty, M, C, Q);
  att_.backward_gqa(a.dqkv, a.datty, b.qkv, b.atty, b.stats, B, T, NH, KV, hd);
  llama::rope(a.dqkv, a.cos, a.sin, B, T, NH, KV, hd, /*inverse=*/true, s_);
  gemm_.backward_data(a.dln, a.dqkv, w(p.qkvw), M, S, C);
  gemm_.backward_weight(dp.qkvw, a.dqkv, b.hn1, M, S, C);
  if (dp.qkvb) bias_backward(dp.qkvb, a.bias_scratch, a.dqkv, M, S, s_);
  llama::rmsnorm_backward(a.dresid, true, dp.attn_norm, a.rms_scratch, a.dln, b.x, w(p.attn_norm), b.rstd1, M, C, s_);
}

// backward_block under FP8 compute. Per linear layer: the output gradient dY
// quantized both ways (kRows for dgrad, kCols, the transpose, for wgrad); the
// input's transpose X^T for wgrad is the one the forward made (BlockActs::
// hn1t ... actt). The qkv bias gradient (Qwen2) is the column sums of qkv's
// dY, added by the act_quantize that quantizes it (bias_backward's bits).
void LlamaCuda::backward_block_fp8(int l, const BlockGrads& dp) {
  const auto [B, T, C, NH, KV, hd, M, S, Q, F] = dims();
  Activations& a = act_;
  const BlockParams& p = blocks_[size_t(l)];
  const BlockActs b = block_acts(l);
  Fp8Linear& lin = this->lin();
  const Fp8Slot dy = lin.slot(Fp8Linear::kRows), dyt = lin.slot(Fp8Linear::kCols);
  const auto grad_operands = [&](const uint16_t* d, int N, float* dbias) {
    act_quantize({.x = d, .rows = dy, .cols = dyt, .sums = {dbias, a.bias_scratch}}, M, N, s_);
  };
  // MLP half: y = mid + down(swiglu(gate_up(rmsnorm(mid)))).
  grad_operands(a.dresid, C, nullptr);
  lin.wgrad(dp.down, dyt, b.actt, M, C, F);
  lin.dgrad(a.dact, dy, fwt(p.down), M, C, F);
  // gate_up's dY is the SwiGLU's gradient, made and quantized in one pass from
  // dact and gu (swiglu_backward's bits; the bf16 dgu is never written).
  act_quantize({.x = a.dact, .op = ActOp::SwiGluGrad, .aux = b.gu, .rows = dy, .cols = dyt}, M, 2 * F, s_);
  lin.wgrad(dp.gate_up, dyt, b.hn2t, M, 2 * F, C);
  lin.dgrad(a.dln, dy, fwt(p.gate_up), M, 2 * F, C);
  llama::rmsnorm_backward(a.dresid, true, dp.mlp_norm, a.rms_scratch, a.dln, b.mid, w(p.mlp_norm), b.rstd2, M, C, s_);
  // Attention half: mid = x + o(attn(rope(qkv(rmsnorm(x))))).
  grad_operands(a.dresid, C, nullptr);
  lin.wgrad(dp.ow, dyt, b.attyt, M, C, Q);
  lin.dgrad(a.datty, dy, fwt(p.ow), M, C, Q);
  att_.backward_gqa(a.dqkv, a.datty, b.qkv, b.atty, b.stats, B, T, NH, KV, hd);
  llama::rope(a.dqkv, a.cos, a.sin, B, T, NH, KV, hd, /*inverse=*/true, s_);
  grad_operands(a.dqkv, S, dp.qkvb);  // dp.qkvb null without biases: no sums
  lin.wgrad(dp.qkvw, dyt, b.hn1t, M, S, C);
  lin.dgrad(a.dln, dy, fwt(p.qkvw), M, S, C);
  llama::rmsnorm_backward(a.dresid, true, dp.attn_norm, a.rms_scratch, a.dln, b.x, w(p.attn_norm), b.rstd1, M, C, s_);
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
