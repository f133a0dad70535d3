// GPT-2 on the GPU: its own parts (parameter indices, the activation arena
// laid out below, the forward and backward of each stage, FP8 compute) on
// LmCuda (models/cuda/lm_cuda.h), which holds what every GPU language model
// does the same way (weights, batch upload, the hooks, graph segments, loss).
// The same model as gpt.h (architecture, parameter list, init:
// gpt_param_specs, gpt_init_param), in bf16 with fp32 accumulation.
//
// Forward of block l (resid[l] is the residual stream entering it):
//   ln1  = LN1(resid[l])              (fused into the previous block's last residual add)
//   qkv  = ln1 @ Wqkv^T + b           cuBLASLt, bias epilogue
//   atty = attention(qkv)             cuDNN SDPA, causal; stats kept for backward
//   mid  = resid[l] + atty @ Wproj^T + b ; ln2 = LN2(mid)     (one fused kernel)
//   h    = gelu(ln2 @ Wfc^T + b)      cuBLASLt GELU_AUX_BIAS: keeps h and the pre-activation
//   resid[l+1] = mid + h @ Wmproj^T + b ; next LN               (fused)
// Head: logits = LNf(resid[L]) @ wte^T, then the fused classifier turns the
// logits into per-row losses and, in place, into dlogits.
// Under FP8 compute ln1 and ln2 are not written: the LayerNorm kernels write
// only mean and rstd (and the residual sum), and act_quantize makes the linear
// layers' operands from those (forward_block_fp8).
//
// Hooks: before_layer(l+1) is called before the fused residual+LN kernel that
// first reads block l+1's LayerNorm (so the engine makes it fresh before any
// read); after_layer_backward(L) as soon as that layer's gradients are in.
#include "models/gpt2/cuda/gpt_cuda.h"

#include <algorithm>
#include <array>
#include <cstdint>
#include <memory>
#include <vector>

#include "models/cuda/column_sums.h"
#include "models/cuda/fp8_linear.h"
#include "models/cuda/lm_cuda.h"
#include "models/gpt2/cuda/gpt_kernels.h"
#include "util/check.h"
#include "util/cuda_check.h"

namespace mxdp::cuda {

namespace {

class GptCuda final : public LmCuda<GptModel, GptConfig> {
 public:
  GptCuda(const GptConfig& cfg, cudaStream_t stream, const GptCudaOptions& opts)
      : LmCuda(cfg, gpt_param_specs(cfg), cfg.padded_vocab, "GPT", stream, opts.cuda_graphs) {
    int i = 2;
    for (int l = 0; l < cfg_.n_layer; ++l, i += 12) blocks_.push_back({i, i + 1, i + 2, i + 3, i + 4, i + 5, i + 6, i + 7, i + 8, i + 9, i + 10, i + 11});
    lnfw_ = i;
    lnfb_ = i + 1;
    stage_grads_.push_back({0, 1});  // wte, wpe
    for (const BlockParams& p : blocks_)
      stage_grads_.push_back({p.ln1w, p.ln1b, p.qkvw, p.qkvb, p.projw, p.projb, p.ln2w, p.ln2b, p.fcw, p.fcb, p.mprojw,
                              p.mprojb});
    stage_grads_.push_back({0, lnfw_, lnfb_});  // the head's weight is wte
    for (const BlockParams& p : blocks_) block_linears_.push_back({p.qkvw, p.projw, p.fcw, p.mprojw});
  }

 private:
  // A block's parameters (X = int: their indices) and their gradients (X =
  // float*: backward_stage's g, in stage_grads_'s order, which is this one).
  template <class X>
  struct Block {
    X ln1w, ln1b, qkvw, qkvb, projw, projb, ln2w, ln2b, fcw, fcb, mprojw, mprojb;
  };
  using BlockParams = Block<int>;
  using BlockGrads = Block<float*>;
  static BlockGrads block_grads(float* const* g) {
    return {g[0], g[1], g[2], g[3], g[4], g[5], g[6], g[7], g[8], g[9], g[10], g[11]};
  }
  // The dimensions a block's stage body works with: the batch (B, T; M = B T
  // rows), the width C, the heads NH and their size HS.
  struct Dims {
    int B, T, C, NH, HS, M;
  };
  Dims dims() const { return {B_, T_, cfg_.d_model, cfg_.n_head, cfg_.d_model / cfg_.n_head, B_ * T_}; }

  // Activations for one (B, T), carved out of one allocation (with io_: the
  // batch, the logits and the losses).
  struct Activations {
    uint16_t *resid, *resid_mid, *ln1, *ln2, *qkv, *atty, *fch_pre, *fch, *lnf;  // ln1, ln2, fch: bf16 compute only
    uint16_t *tmp, *dresid, *dln, *datty, *dqkv, *dfch;
    float *ln1_mean, *ln1_rstd, *ln2_mean, *ln2_rstd, *lnf_mean, *lnf_rstd, *stats, *scratch;
    // The column sums of dresid as the last LayerNorm backward left it (the
    // final LayerNorm's, or block l+1's ln1): block l's mlp.proj bias gradient,
    // made in that LayerNorm's column-sum launch and added in block l's segment.
    float* mproj_dbias;
  };
  // An FP8 block's X^T operands (LmCuda::take_xt, xt_slots): ln1^T, atty^T,
  // ln2^T ([C, Mp] each) and h^T ([4C, Mp], h = gelu(pre)); their widths, in
  // that order (BlockActs::ln1t ... ht).
  std::array<int64_t, 4> xt_widths() const {
    const int64_t C = cfg_.d_model;
    return {C, C, C, 4 * C};
  }

  void init_param(uint64_t seed, int p, float* out) const override { gpt_init_param(cfg_, specs_, seed, p, out); }
  void carve(ArenaSlicer& take, int B, int T) override;
  void activations_ready(int B, int T) override;
  void forward_stage(int s) override;
  void backward_stage(int s, float* const* g) override;

  // Block l's slices of the activations.
  struct BlockActs {
    uint16_t *x, *ln1, *qkv, *atty, *mid, *ln2, *pre;  // pre: fc's output before the GELU; ln1, ln2: null in FP8
    uint16_t* h;  // the GELU's output (bf16 compute; FP8 compute makes it inside act_quantize)
    float *ln1_mean, *ln1_rstd, *ln2_mean, *ln2_rstd, *stats;  // stats: attention's softmax statistics
    Fp8Slot ln1t, attyt, ln2t, ht;  // FP8 compute: the X^T operands of qkv, attn.proj, fc and mlp.proj's wgrads
  };
  BlockActs block_acts(int l);
  void forward_block(int l);
  void forward_block_fp8(int l);
  void backward_head(float* dwte, float* dlnfw, float* dlnfb);
  void backward_block(int l, const BlockGrads& dp);
  void backward_block_fp8(int l, const BlockGrads& dp);

  std::vector<BlockParams> blocks_;
  int lnfw_ = 0, lnfb_ = 0;
  Activations act_{};
};

void GptCuda::carve(ArenaSlicer& take, int B, int T) {
  const int64_t BT = int64_t(B) * T, C = cfg_.d_model, L = cfg_.n_layer, NH = cfg_.n_head, Vp = cfg_.padded_vocab;
  Activations& a = act_;
  take(a.resid, (L + 1) * BT * C);
  take(a.resid_mid, L * BT * C);
  // The LayerNorm outputs are kept per block for bf16 compute's wgrads. FP8
  // compute never writes them: act_quantize makes their operands (fprop's rows
  // and the X^T, below, that the wgrads read) from the LayerNorm's input and
  // statistics.
  const int64_t Lb = L - n_fp8_blocks();  // the bf16 blocks
  take(a.ln1, Lb * BT * C);
  take(a.ln2, Lb * BT * C);
  take(a.qkv, L * BT * 3 * C);
  take(a.atty, L * BT * C);
  take(a.fch_pre, L * BT * 4 * C);
  // The GELU output is kept for the MLP's backward (recomputing it there cost
  // 0.9 ms a step at 124M B 16, for 1.2 GB); FP8 compute keeps its FP8
  // transpose instead (xt, below), the operand mlp.proj's wgrad reads.
  take(a.fch, Lb * BT * 4 * C);
  take(a.lnf, BT * C);
  take(io_.logits, BT * Vp);
  take(a.tmp, BT * C);
  take(a.dresid, BT * C);
  take(a.dln, BT * C);
  take(a.datty, BT * C);
  take(a.dqkv, BT * 3 * C);
  take(a.dfch, BT * 4 * C);
  take(a.ln1_mean, L * BT);
  take(a.ln1_rstd, L * BT);
  take(a.ln2_mean, L * BT);
  take(a.ln2_rstd, L * BT);
  take(a.lnf_mean, BT);
  take(a.lnf_rstd, BT);
  take(a.stats, L * B * NH * T);
  take(io_.losses, BT);
  take(a.scratch, std::max(colsum_scratch_floats(BT, 4 * C), norm_backward_scratch_floats(BT, C)));
  take(a.mproj_dbias, C);
  take_batch(take, BT);
  take_xt(take, BT, xt_widths());
}

void GptCuda::activations_ready(int, int) {
  // The column sums' counters start at zero (the kernels leave them so).
  MXDP_CUDA_CHECK(cudaMemsetAsync(act_.scratch, 0, kColsumCounters * sizeof(float), s_));
}

// Layer 0 is the embeddings, layer 1 + l block l, layer L + 1 the final
// LayerNorm. Stage s runs once layer s is fresh: stage 1 is block 0's LN1 and
// body; stage s >= 2 the residual add closing block s - 2 fused with the
// LayerNorm of layer s, then block s - 1's body (or, for s = L + 1, the head).
void GptCuda::forward_stage(int s) {
  const int B = B_, T = T_, C = cfg_.d_model, Vp = cfg_.padded_vocab, L = cfg_.n_layer;
  const int M = B * T;
  const int64_t BTC = int64_t(M) * C;
  Activations& a = act_;
  if (s == 0) {
    encoder_forward(a.resid, io_.tokens, w(0), w(1), B, T, C, s_);
    return;
  }
  if (s == 1) {
    const BlockActs b = block_acts(0);
    layernorm_forward(b.ln1, b.ln1_mean, b.ln1_rstd, b.x, w(blocks_[0].ln1w), w(blocks_[0].ln1b), M, C, s_);
  } else {
    const int l = s - 2;  // the block this residual add closes: resid[l + 1] = mid + tmp
    const BlockActs b = block_acts(l);
    if (l + 1 < L) {
      const BlockActs n = block_acts(l + 1);
      const BlockParams& np = blocks_[size_t(l + 1)];
      residual_layernorm_forward(n.x, n.ln1, n.ln1_mean, n.ln1_rstd, b.mid, a.tmp, w(np.ln1w), w(np.ln1b), M, C, s_);
    } else {
      residual_layernorm_forward(b.x + BTC, a.lnf, a.lnf_mean, a.lnf_rstd, b.mid, a.tmp, w(lnfw_), w(lnfb_), M, C, s_);
    }
  }
  const int l = s - 1;  // the block whose body runs now
  if (l == L) {
    gemm_.forward(io_.logits, a.lnf, w(0), nullptr, M, Vp, C);
    return;
  }
  fp8_block(l) ? forward_block_fp8(l) : forward_block(l);
}

GptCuda::BlockActs GptCuda::block_acts(int l) {
  const int M = B_ * T_;
  const int64_t BTC = int64_t(M) * cfg_.d_model, lm = int64_t(l) * M;
  Activations& a = act_;
  // An FP8 block: null LayerNorm outputs (the kernels then write none) and no
  // h. ln1, ln2 and h are indexed among the bf16 blocks, X^T among the FP8 ones.
  const bool fp8 = fp8_block(l);
  const int64_t k = block_slot(l);
  BlockActs b{a.resid + l * BTC,        fp8 ? nullptr : a.ln1 + k * BTC,  a.qkv + l * 3 * BTC, a.atty + l * BTC,
              a.resid_mid + l * BTC,    fp8 ? nullptr : a.ln2 + k * BTC,  a.fch_pre + l * 4 * BTC,
              fp8 ? nullptr : a.fch + k * 4 * BTC,
              a.ln1_mean + lm,          a.ln1_rstd + lm,   a.ln2_mean + lm,     a.ln2_rstd + lm,
              a.stats + int64_t(l) * B_ * cfg_.n_head * T_};
  if (fp8) xt_slots(l, xt_widths(), {&b.ln1t, &b.attyt, &b.ln2t, &b.ht});
  return b;
}

void GptCuda::forward_block(int l) {
  const auto [B, T, C, NH, HS, M] = dims();
  const BlockParams& p = blocks_[size_t(l)];
  const BlockActs b = block_acts(l);
  uint16_t* tmp = act_.tmp;
  gemm_.forward(b.qkv, b.ln1, w(p.qkvw), w(p.qkvb), M, 3 * C, C);
  att_.forward(b.atty, b.stats, b.qkv, B, T, NH, HS);
  gemm_.forward(tmp, b.atty, w(p.projw), w(p.projb), M, C, C);
  residual_layernorm_forward(b.mid, b.ln2, b.ln2_mean, b.ln2_rstd, b.x, tmp, w(p.ln2w), w(p.ln2b), M, C, s_);
  gemm_.forward(b.h, b.ln2, w(p.fcw), w(p.fcb), M, 4 * C, C, b.pre);
  gemm_.forward(tmp, b.h, w(p.mprojw), w(p.mprojb), M, C, 4 * C);
}

// Stage L + 1 is the head and the final LayerNorm, stage 1 + l block l,
// stage 0 the embeddings (g in stage_grads_'s order).
void GptCuda::backward_stage(int s, float* const* g) {
  if (s == 0) {
    encoder_backward(g[0], g[1], act_.dresid, io_.order, io_.seg_start, io_.seg_token, n_seg_, B_, T_, cfg_.d_model,
                     s_);
  } else if (s == cfg_.n_layer + 1) {
    backward_head(g[0], g[1], g[2]);
  } else {
    const BlockGrads dp = block_grads(g);
    fp8_block(s - 1) ? backward_block_fp8(s - 1, dp) : backward_block(s - 1, dp);
  }
}

// Head (its weight is wte, layer 0): dlnf = dlogits @ wte, dwte += dlogits^T @ lnf.
void GptCuda::backward_head(float* dwte, float* dlnfw, float* dlnfb) {
  const int M = B_ * T_, C = cfg_.d_model, Vp = cfg_.padded_vocab, L = cfg_.n_layer;
  Activations& a = act_;
  gemm_.backward_data(a.dln, io_.logits, w(0), M, Vp, C);
  gemm_.backward_weight(dwte, io_.logits, a.lnf, M, Vp, C);
  layernorm_backward(a.dresid, /*accumulate=*/false, dlnfw, dlnfb, {a.mproj_dbias, false}, a.scratch, a.dln,
                     a.resid + L * int64_t(M) * C, w(lnfw_), a.lnf_mean, a.lnf_rstd, M, C, s_);
}

// dp: the block's gradients.
void GptCuda::backward_block(int l, const BlockGrads& dp) {
  const auto [B, T, C, NH, HS, M] = dims();
  Activations& a = act_;
  const BlockParams& p = blocks_[size_t(l)];
  const BlockActs b = block_acts(l);
  // MLP: resid[l+1] = mid + mproj(h), h = gelu(fc(ln2)) kept from the forward.
  gemm_.backward_weight(dp.mprojw, a.dresid, b.h, M, C, 4 * C);
  add_into(dp.mprojb, a.mproj_dbias, C, s_);  // the column sums of a.dresid (see Activations)
  gemm_.backward_data(a.dfch, a.dresid, w(p.mprojw), M, C, 4 * C, b.pre);  // through the GELU too
  gemm_.backward_data(a.dln, a.dfch, w(p.fcw), M, 4 * C, C);
  gemm_.backward_weight(dp.fcw, a.dfch, b.ln2, M, 4 * C, C);
  bias_backward(dp.fcb, a.scratch, a.dfch, M, 4 * C, s_);
  layernorm_backward(a.dresid, true, dp.ln2w, dp.ln2b, {dp.projb}, a.scratch, a.dln, b.mid, w(p.ln2w), b.ln2_mean,
                     b.ln2_rstd, M, C, s_);  // dp.projb: the column sums of the new a.dresid
  // Attention: mid = x + proj(attn(qkv(ln1))).
  gemm_.backward_data(a.datty, a.dresid, w(p.projw), M, C, C);
  gemm_.backward_weight(dp.projw, a.dresid, b.atty, M, C, C);
  att_.backward(a.dqkv, a.datty, b.qkv, b.atty, b.stats, B, T, NH, HS);
  gemm_.backward_data(a.dln, a.dqkv, w(p.qkvw), M, 3 * C, C);
  gemm_.backward_weight(dp.qkvw, a.dqkv, b.ln1, M, 3 * C, C);
  bias_backward(dp.qkvb, a.scratch, a.dqkv, M, 3 * C, s_);
  const ColumnSum below = l > 0 ? ColumnSum{a.mproj_dbias, false} : ColumnSum{};  // block l-1's mlp.proj bias
  layernorm_backward(a.dresid, true, dp.ln1w, dp.ln1b, below, a.scratch, a.dln, b.x, w(p.ln1w), b.ln1_mean, b.ln1_rstd,
                     M, C, s_);
}

// Block l's body under FP8 compute (forward_stage's, with the four linears in
// FP8): each GEMM's input quantized 1x128 in one act_quantize pass into both
// its operands, the rows for fprop (the kRows slot) and the transpose for
// backward's wgrad (the block's own X^T slot, kept until then: making it here
// from the tile already loaded costs less than reading the bf16 input again in
// backward). The bias adds (and fc's GELU) are in act_quantize too; the GELU
// output h goes only to its two operands and is not stored in bf16. Nor are
// the LayerNorm outputs ln1 and ln2 (their kernels get a null output):
// act_quantize's LayerNorm op computes them from the LayerNorm's input and the
// mean and rstd the kernel wrote, the bits the kernel would have written.
// Every forward makes the X^T operands, an eval's too: they are the same
// graphs, and a training backward always follows its own forward.
void GptCuda::forward_block_fp8(int l) {
  const auto [B, T, C, NH, HS, M] = dims();
  const BlockParams& p = blocks_[size_t(l)];
  const BlockActs b = block_acts(l);
  uint16_t* tmp = act_.tmp;
  const Fp8Slot q = lin().slot(Fp8Linear::kRows);
  const auto quantize_ln = [&](const uint16_t* ln_input, const NormArgs& ln, const Fp8Slot& xt) {
    act_quantize({.x = ln_input, .op = ActOp::LayerNorm, .norm = ln, .rows = q, .cols = xt}, M, C, s_);
  };
  quantize_ln(b.x, {b.ln1_mean, b.ln1_rstd, w(p.ln1w), w(p.ln1b)}, b.ln1t);
  lin().fprop(b.qkv, q, fw(p.qkvw), w(p.qkvb), M, 3 * C, C);
  att_.forward(b.atty, b.stats, b.qkv, B, T, NH, HS);
  act_quantize({.x = b.atty, .rows = q, .cols = b.attyt}, M, C, s_);
  lin().fprop(tmp, q, fw(p.projw), w(p.projb), M, C, C);
  residual_layernorm_forward(b.mid, nullptr, b.ln2_mean, b.ln2_rstd, b.x, tmp, w(p.ln2w), w(p.ln2b), M, C, s_);
  quantize_ln(b.mid, {b.ln2_mean, b.ln2_rstd, w(p.ln2w), w(p.ln2b)}, b.ln2t);
  // pre + bias is written back (backward's GELU gradient reads it); GELU(pre)'s rows operand goes
  // to the kCols scratch (free in the forward): the fused GEMM still reads q while it writes them.
  const Fp8Slot g = lin().slot(Fp8Linear::kCols);
  lin().fprop_gelu(b.pre, q, fw(p.fcw), w(p.fcb), M, 4 * C, C, g, b.ht);
  lin().fprop(tmp, g, fw(p.mprojw), w(p.mprojb), M, C, 4 * C);
}

// backward_block under FP8 compute. Per linear layer: the output gradient dY
// quantized both ways (kRows for dgrad, kCols, the transpose, for wgrad); the
// input's transpose X^T for wgrad is the one the forward made (BlockActs::
// ln1t ... ht). mproj's dgrad goes through the GELU in the next act_quantize,
// which also makes fc's dY operands. The bias gradients of fc and qkv are the
// column sums of their dY, added by the act_quantize that quantizes it
// (bias_backward's bits, without reading dY again): so fc's dY, the GELU
// gradient's output, is not written in bf16 at all.
void GptCuda::backward_block_fp8(int l, const BlockGrads& dp) {
  const auto [B, T, C, NH, HS, M] = dims();
  Activations& a = act_;
  const BlockParams& p = blocks_[size_t(l)];
  const BlockActs b = block_acts(l);
  const Fp8Slot dy = lin().slot(Fp8Linear::kRows), dyt = lin().slot(Fp8Linear::kCols);
  const auto grad_operands = [&](const uint16_t* d, int N, float* dbias) {
    act_quantize({.x = d, .rows = dy, .cols = dyt, .sums = {dbias, a.scratch}}, M, N, s_);
  };
  // MLP: resid[l+1] = mid + mproj(gelu(fc(ln2))).
  grad_operands(a.dresid, C, nullptr);  // mproj's bias gradient: a.mproj_dbias, below
  lin().wgrad(dp.mprojw, dyt, b.ht, M, C, 4 * C);
  add_into(dp.mprojb, a.mproj_dbias, C, s_);  // the column sums of a.dresid (see Activations)
  lin().dgrad(a.dfch, dy, fwt(p.mprojw), M, C, 4 * C);
  act_quantize({.x = a.dfch, .op = ActOp::GeluGrad, .aux = b.pre, .rows = dy, .cols = dyt, .sums = {dp.fcb, a.scratch}},
               M, 4 * C, s_);
  lin().wgrad(dp.fcw, dyt, b.ln2t, M, 4 * C, C);
  lin().dgrad(a.dln, dy, fwt(p.fcw), M, 4 * C, C);
  layernorm_backward(a.dresid, true, dp.ln2w, dp.ln2b, {dp.projb}, a.scratch, a.dln, b.mid, w(p.ln2w), b.ln2_mean,
                     b.ln2_rstd, M, C, s_);  // dp.projb: the column sums of the new a.dresid
  // Attention: mid = x + proj(attn(qkv(ln1))).
  grad_operands(a.dresid, C, nullptr);  // proj's bias gradient: layernorm_backward's, above
  lin().wgrad(dp.projw, dyt, b.attyt, M, C, C);
  lin().dgrad(a.datty, dy, fwt(p.projw), M, C, C);
  att_.backward(a.dqkv, a.datty, b.qkv, b.atty, b.stats, B, T, NH, HS);
  grad_operands(a.dqkv, 3 * C, dp.qkvb);
  lin().wgrad(dp.qkvw, dyt, b.ln1t, M, 3 * C, C);
  lin().dgrad(a.dln, dy, fwt(p.qkvw), M, 3 * C, C);
  const ColumnSum below = l > 0 ? ColumnSum{a.mproj_dbias, false} : ColumnSum{};  // block l-1's mlp.proj bias
  layernorm_backward(a.dresid, true, dp.ln1w, dp.ln1b, below, a.scratch, a.dln, b.x, w(p.ln1w), b.ln1_mean, b.ln1_rstd,
                     M, C, s_);
}

}  // namespace

std::unique_ptr<GptModel> make_gpt(const GptConfig& cfg, cudaStream_t stream, const GptCudaOptions& opts) {
  MXDP_CHECK(stream != nullptr, "the GPU GPT needs a stream (the engine ops' stream)");
  return std::make_unique<GptCuda>(cfg, stream, opts);
}

GraphStats graph_stats(const GptModel& model) {
  const auto* m = dynamic_cast<const GptCuda*>(&model);
  MXDP_CHECK(m, "graph_stats: not the GPU GPT");
  return {m->graphs().launches(), m->graphs().eager_runs(), m->graphs().graphs()};
}

}  // namespace mxdp::cuda
