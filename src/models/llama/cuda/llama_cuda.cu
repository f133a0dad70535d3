// The Llama family on the GPU (one file of over 500 lines: the forward and
// backward of a block share the activation arena laid out below). The same
// model as llama.h (architecture, parameter list, init: llama_param_specs,
// llama_init_param, llama_inv_freq), in bf16 with fp32 accumulation.
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
// Head: logits = RMSNorm(resid[L]) @ head^T, then GPT-2's fused classifier
// turns the logits into per-row losses and, in place, into dlogits.
//
// Hooks: before_layer(l+1) is called before the fused residual+RMSNorm kernel
// that first reads block l's attn_norm.w; after_layer_backward(L) as soon as
// that layer's gradients are in.
#include "models/llama/cuda/llama_cuda.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <span>
#include <vector>

#include "formats/codec.h"
#include "formats/cuda/bf16_cuda.h"
#include "models/cuda/attention.h"
#include "models/cuda/gemm.h"
#include "models/cuda/stream_graphs.h"
#include "models/gpt2/cuda/gpt_kernels.h"  // classifier, mean_loss, bias_backward
#include "models/llama/cuda/llama_kernels.h"
#include "util/check.h"
#include "util/cuda_check.h"

namespace mxdp::cuda {

namespace {

// Device memory owned by the model.
template <class T>
class Buf {
 public:
  Buf() = default;
  ~Buf() { reset(); }
  Buf(const Buf&) = delete;
  Buf& operator=(const Buf&) = delete;
  void resize(int64_t n) {
    reset();
    if (n > 0) MXDP_CUDA_CHECK(cudaMalloc(&p_, size_t(n) * sizeof(T)));
  }
  void reset() {
    if (p_) cudaFree(p_);
    p_ = nullptr;
  }
  T* get() const { return p_; }

 private:
  T* p_ = nullptr;
};

int64_t round_up(int64_t x, int64_t m) { return (x + m - 1) / m * m; }

class LlamaCuda final : public LlamaModel {
 public:
  LlamaCuda(const LlamaConfig& cfg, cudaStream_t stream, const LlamaCudaOptions& opts)
      : cfg_(cfg), specs_(llama_param_specs(cfg)), inv_freq_(llama_inv_freq(cfg)), s_(stream), gemm_(stream),
        att_(stream), graphs_(stream, opts.cuda_graphs) {
    validate(cfg_);
    for (const auto& p : specs_) {
      offsets_.push_back(total_);
      total_ += round_up(p.numel(), 128);  // every param 256-byte aligned
    }
    weights_.resize(total_);
    MXDP_CUDA_CHECK(cudaMemsetAsync(weights_.get(), 0, size_t(total_) * 2, s_));
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
    MXDP_CUDA_CHECK(cudaMallocHost(&loss_host_, sizeof(float)));
    for (Staging& st : staging_) MXDP_CUDA_CHECK(cudaEventCreateWithFlags(&st.done, cudaEventDisableTiming));
    loss_mean_.resize(1);
  }
  ~LlamaCuda() override {
    cudaStreamSynchronize(s_);
    for (Staging& st : staging_) {
      cudaEventDestroy(st.done);
      if (st.host) cudaFreeHost(st.host);
    }
    cudaFreeHost(loss_host_);
  }

  const LlamaConfig& config() const override { return cfg_; }
  const std::vector<ParamSpec>& params() const override { return specs_; }
  int num_layers() const override { return cfg_.n_layer + 2; }
  float* weights(int) override { MXDP_FAIL("the GPU Llama keeps bf16 compute weights: use compute_weights()"); }
  ComputeDType compute_dtype() const override { return ComputeDType::BF16; }
  void* compute_weights(int p) override { return w(check_param(p)); }

  void init_weights(uint64_t seed) override {
    std::vector<float> host(size_t(total_), 0.f);
    for (size_t p = 0; p < specs_.size(); ++p) llama_init_param(cfg_, specs_, seed, int(p), host.data() + offsets_[p]);
    init_.resize(total_);
    MXDP_CUDA_CHECK(cudaMemcpyAsync(init_.get(), host.data(), host.size() * sizeof(float), cudaMemcpyHostToDevice, s_));
    f32_to_bf16(init_.get(), weights_.get(), total_, s_);
    MXDP_CUDA_CHECK(cudaStreamSynchronize(s_));  // `host` goes away
  }
  const float* initial_weights(int p) override {
    MXDP_CHECK(init_.get(), "initial_weights(", p, ") needs init_weights() first (or they were released)");
    return init_.get() + offsets_[check_param(p)];
  }
  void release_initial_weights() override {
    MXDP_CUDA_CHECK(cudaStreamSynchronize(s_));
    init_.reset();
    init_released_ = true;
  }
  // As the GPU GPT's: until the engine took the initial values, set_weights
  // sets them too (--init-from starts the masters from the file's fp32 values).
  void set_weights(int p, const float* host) override {
    const int64_t n = specs_[check_param(p)].numel();
    if (!init_.get() && !init_released_) {
      init_.resize(total_);
      MXDP_CUDA_CHECK(cudaMemsetAsync(init_.get(), 0, size_t(total_) * sizeof(float), s_));
    }
    Buf<float> tmp;
    float* dst = init_.get() ? init_.get() + offsets_[p] : (tmp.resize(n), tmp.get());
    MXDP_CUDA_CHECK(cudaMemcpyAsync(dst, host, size_t(n) * sizeof(float), cudaMemcpyHostToDevice, s_));
    f32_to_bf16(dst, w(p), n, s_);
    MXDP_CUDA_CHECK(cudaStreamSynchronize(s_));
  }

  void forward_into(const Batch& batch, ModelHooks& hooks, float* loss) override {
    state_ = State::kNone;
    MXDP_CHECK(batch.targets != nullptr, "forward needs targets (use forward_logits for inference)");
    upload_batch(batch.inputs, batch.targets, batch.B, batch.T);
    run_forward(hooks);
    const int M = B_ * T_;
    segment(kLossSegment, {&loss, 1}, [&] {
      classifier(act_.logits, act_.losses, act_.targets, M, cfg_.vocab, cfg_.vocab, 1.f / float(M),
                 /*write_grad=*/true, s_);
      mean_loss(act_.losses, M, loss, s_);
    });
    state_ = State::kLoss;
  }
  float forward(const Batch& batch, ModelHooks& hooks) override {
    forward_into(batch, hooks, loss_mean_.get());
    MXDP_CUDA_CHECK(cudaMemcpyAsync(loss_host_, loss_mean_.get(), sizeof(float), cudaMemcpyDeviceToHost, s_));
    MXDP_CUDA_CHECK(cudaStreamSynchronize(s_));
    return *loss_host_;
  }

  void forward_logits(const int32_t* tokens, int B, int T, ModelHooks& hooks) override {
    state_ = State::kNone;
    // As the GPU GPT: T padded up to a multiple of 64 with token 0. Causal
    // attention keeps positions < T blind to the padding; a sampler growing T
    // needs one attention graph per 64 lengths.
    MXDP_CHECK(B >= 1 && T >= 1 && T <= cfg_.max_seq, "forward_logits: B must be >= 1 and T in [1, max_seq=",
               cfg_.max_seq, "], got B=", B, " T=", T);
    const int Tp = int(std::min<int64_t>(round_up(T, 64), cfg_.max_seq));
    std::vector<int32_t> padded(size_t(B) * Tp, 0);
    for (int b = 0; b < B; ++b)
      std::copy(tokens + int64_t(b) * T, tokens + int64_t(b + 1) * T, padded.begin() + int64_t(b) * Tp);
    upload_batch(padded.data(), nullptr, B, Tp);
    run_forward(hooks);
    real_T_ = T;
    state_ = State::kLogits;
  }

  std::vector<float> logits_last(int b) const override {
    MXDP_CHECK(state_ == State::kLogits, "logits_last() needs forward_logits() first (forward with targets turns "
               "the GPU model's logits into their gradient in place)");
    MXDP_CHECK(b >= 0 && b < B_, "logits_last(", b, ") outside B=", B_);
    std::vector<uint16_t> row(size_t(cfg_.vocab));
    const uint16_t* src = act_.logits + (int64_t(b) * T_ + real_T_ - 1) * cfg_.vocab;
    MXDP_CUDA_CHECK(cudaMemcpyAsync(row.data(), src, row.size() * 2, cudaMemcpyDeviceToHost, s_));
    MXDP_CUDA_CHECK(cudaStreamSynchronize(s_));
    std::vector<float> out(row.size());
    for (size_t i = 0; i < row.size(); ++i) out[i] = codec::bf16_to_f32(row[i]);
    return out;
  }

  void backward(ModelHooks& hooks) override;

  const StreamGraphs& graphs() const { return graphs_; }

 private:
  struct BlockParams {
    int attn_norm, qkvw, qkvb, ow, mlp_norm, gate_up, down;  // qkvb -1 without biases
  };
  static constexpr int kBlockParams = 7;
  enum class State { kNone, kLogits, kLoss, kBackwardDone };

  // Activations for one (B, T), carved out of one allocation (with RoPE's
  // tables, so that the graphs' key, which names the arena, covers them).
  struct Activations {
    uint16_t *resid, *resid_mid, *hn1, *hn2, *qkv, *atty, *gu, *hnf, *logits;
    uint16_t *act, *tmp, *dresid, *dln, *datty, *dqkv, *dact, *dgu;
    float *rstd1, *rstd2, *rstdf, *stats, *losses, *rms_scratch, *bias_scratch, *cos, *sin;
    int32_t *tokens, *targets, *order, *seg_start, *seg_token;
  };

  int check_param(int p) const {
    MXDP_CHECK(p >= 0 && p < int(specs_.size()), "param index ", p, " out of range [0, ", specs_.size(), ")");
    return p;
  }
  uint16_t* w(int p) const { return weights_.get() + offsets_[p]; }
  const uint16_t* bias(int p) const { return p >= 0 ? w(p) : nullptr; }

  void ensure_activations(int B, int T);
  void upload_batch(const int32_t* tokens, const int32_t* targets, int B, int T);
  void run_forward(ModelHooks& hooks);
  void forward_stage(int s);
  void block_forward(int l);
  void backward_head(float* dhead, float* dnorm);
  void backward_block(int l, float* const* g);

  // Graph segments as the GPU GPT's (stream_graphs.h): forward stage s, the
  // loss, backward stage s; keyed by the shape, the arena, the attention
  // workspace and the gradient pointers the hooks handed out.
  static constexpr int kLossSegment = 0;
  int forward_segment(int s) const { return 1 + s; }
  int backward_segment(int s) const { return 1 + num_layers() + s; }
  void segment(int id, std::span<float* const> pointers, const std::function<void()>& work);

  LlamaConfig cfg_;
  std::vector<ParamSpec> specs_;
  std::vector<float> inv_freq_;
  cudaStream_t s_;
  Gemm gemm_;
  Attention att_;
  StreamGraphs graphs_;
  std::vector<int64_t> offsets_;
  int64_t total_ = 0;
  Buf<uint16_t> weights_;
  Buf<float> init_;
  bool init_released_ = false;
  std::vector<BlockParams> blocks_;
  int embed_ = 0, norm_ = 0, head_ = 0;

  int B_ = 0, T_ = 0, real_T_ = 0;
  Buf<uint8_t> arena_;
  Activations act_{};
  int n_seg_ = 0;
  // Pinned host copies of tokens, targets and the embedding's segments, used
  // in turn (as the GPU GPT's): an upload waits only for the one kStagingSlots back.
  struct Staging {
    int32_t* host = nullptr;
    int64_t n = 0;
    cudaEvent_t done = nullptr;
    bool pending = false;
  };
  static constexpr int kStagingSlots = 4;
  std::array<Staging, kStagingSlots> staging_{};
  int next_staging_ = 0;
  Buf<float> loss_mean_;
  float* loss_host_ = nullptr;
  State state_ = State::kNone;
};

void LlamaCuda::ensure_activations(int B, int T) {
  if (B == B_ && T == T_) return;
  MXDP_CUDA_CHECK(cudaStreamSynchronize(s_));
  const int64_t BT = int64_t(B) * T, C = cfg_.d_model, L = cfg_.n_layer, NH = cfg_.n_head, V = cfg_.vocab;
  const int64_t S = cfg_.qkv_dim(), Q = cfg_.q_dim(), F = cfg_.d_ff, half = cfg_.head_dim / 2;
  uint8_t* base = nullptr;
  int64_t at = 0;
  auto take = [&](auto*& ptr, int64_t n) {
    using T0 = std::remove_reference_t<decltype(*ptr)>;
    ptr = reinterpret_cast<T0*>(base ? base + at : nullptr);
    at = round_up(at + n * int64_t(sizeof(T0)), 256);
  };
  for (int pass = 0; pass < 2; ++pass) {
    at = 0;
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
    take(a.logits, BT * V);
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
    take(a.losses, BT);
    take(a.rms_scratch, llama::rmsnorm_scratch_floats(BT, C));
    take(a.bias_scratch, cfg_.qkv_bias ? colsum_scratch_floats(BT, S) : 0);
    take(a.cos, T * half);
    take(a.sin, T * half);
    take(a.tokens, BT);
    take(a.targets, BT);
    take(a.order, BT);
    take(a.seg_start, BT + 1);
    take(a.seg_token, BT);
    if (pass == 0) {
      arena_.resize(at);
      base = arena_.get();
    }
  }
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
  B_ = B;
  T_ = T;
}

// Tokens and targets go up through a pinned buffer, with the embedding's
// backward segments: the positions sorted by (token, position) by a counting
// sort, so that each embed row's gradient is summed in position order.
void LlamaCuda::upload_batch(const int32_t* tokens, const int32_t* targets, int B, int T) {
  MXDP_CHECK(B >= 1, "batch size B must be >= 1, got ", B);
  MXDP_CHECK(T >= 1 && T <= cfg_.max_seq, "sequence length T must be in [1, max_seq=", cfg_.max_seq, "], got ", T);
  MXDP_CHECK(tokens != nullptr, "null token pointer");
  const int64_t BT = int64_t(B) * T;
  const int V = cfg_.vocab;
  for (int64_t i = 0; i < BT; ++i) {
    MXDP_CHECK(tokens[i] >= 0 && tokens[i] < V, "token ", tokens[i], " at position ", i, " outside [0, vocab=", V, ")");
    if (targets)
      MXDP_CHECK(targets[i] >= 0 && targets[i] < V, "target ", targets[i], " at position ", i, " outside [0, vocab=", V,
                 ")");
  }
  ensure_activations(B, T);
  const int64_t need = 5 * BT + 1;
  Staging& sg = staging_[size_t(next_staging_)];
  next_staging_ = (next_staging_ + 1) % kStagingSlots;
  if (sg.pending) MXDP_CUDA_CHECK(cudaEventSynchronize(sg.done));
  if (need > sg.n) {
    if (sg.host) MXDP_CUDA_CHECK(cudaFreeHost(sg.host));
    sg.host = nullptr;
    MXDP_CUDA_CHECK(cudaMallocHost(&sg.host, size_t(need) * sizeof(int32_t)));
    sg.n = need;
  }
  int32_t* tok = sg.host;
  int32_t* tgt = tok + BT;
  int32_t* order = tgt + BT;
  int32_t* seg_start = order + BT;
  int32_t* seg_token = seg_start + BT + 1;
  std::copy(tokens, tokens + BT, tok);
  if (targets) std::copy(targets, targets + BT, tgt);
  else std::fill(tgt, tgt + BT, 0);
  std::vector<int32_t> count(size_t(V) + 1, 0);
  for (int64_t i = 0; i < BT; ++i) ++count[size_t(tok[i]) + 1];
  for (int v = 0; v < V; ++v) count[size_t(v) + 1] += count[size_t(v)];
  n_seg_ = 0;
  for (int v = 0; v < V; ++v)
    if (count[size_t(v) + 1] > count[size_t(v)]) {
      seg_start[n_seg_] = count[size_t(v)];
      seg_token[n_seg_] = v;
      ++n_seg_;
    }
  seg_start[n_seg_] = int32_t(BT);
  for (int64_t i = 0; i < BT; ++i) order[count[size_t(tok[i])]++] = int32_t(i);
  MXDP_CUDA_CHECK(cudaMemcpyAsync(act_.tokens, tok, size_t(BT) * 4, cudaMemcpyHostToDevice, s_));
  MXDP_CUDA_CHECK(cudaMemcpyAsync(act_.targets, tgt, size_t(BT) * 4, cudaMemcpyHostToDevice, s_));
  MXDP_CUDA_CHECK(cudaMemcpyAsync(act_.order, order, size_t(BT) * 4, cudaMemcpyHostToDevice, s_));
  MXDP_CUDA_CHECK(cudaMemcpyAsync(act_.seg_start, seg_start, size_t(n_seg_ + 1) * 4, cudaMemcpyHostToDevice, s_));
  MXDP_CUDA_CHECK(cudaMemcpyAsync(act_.seg_token, seg_token, size_t(n_seg_) * 4, cudaMemcpyHostToDevice, s_));
  MXDP_CUDA_CHECK(cudaEventRecord(sg.done, s_));
  sg.pending = true;
}

void LlamaCuda::segment(int id, std::span<float* const> pointers, const std::function<void()>& work) {
  StreamGraphs::Key key{B_, T_, reinterpret_cast<intptr_t>(arena_.get()),
                        reinterpret_cast<intptr_t>(att_.workspace()), att_.workspace_bytes()};
  for (float* p : pointers) key.push_back(reinterpret_cast<intptr_t>(p));
  graphs_.run(id, key, work);
}

void LlamaCuda::run_forward(ModelHooks& hooks) {
  for (int s = 0; s <= cfg_.n_layer + 1; ++s) {
    hooks.before_layer(s);
    segment(forward_segment(s), {}, [&] { forward_stage(s); });
  }
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
    llama::embedding_forward(a.resid, a.tokens, w(embed_), M, C, s_);
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
    gemm_.forward(a.logits, a.hnf, w(head_), nullptr, M, cfg_.vocab, C);
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

void LlamaCuda::backward(ModelHooks& hooks) {
  MXDP_CHECK(state_ == State::kLoss, "backward needs a forward with targets since the last backward");
  state_ = State::kBackwardDone;
  const int L = cfg_.n_layer;
  {
    float* g[2] = {hooks.grad(head_), hooks.grad(norm_)};
    segment(backward_segment(L + 1), g, [&] { backward_head(g[0], g[1]); });
  }
  hooks.after_layer_backward(L + 1);
  for (int l = L - 1; l >= 0; --l) {
    const BlockParams& p = blocks_[size_t(l)];
    const int ids[kBlockParams] = {p.attn_norm, p.qkvw, p.qkvb, p.ow, p.mlp_norm, p.gate_up, p.down};
    float* g[kBlockParams];
    for (int i = 0; i < kBlockParams; ++i) g[i] = ids[i] >= 0 ? hooks.grad(ids[i]) : nullptr;
    segment(backward_segment(l + 1), g, [&] { backward_block(l, g); });
    hooks.after_layer_backward(l + 1);
  }
  // Not a graph: its launch size is the batch's number of distinct tokens.
  llama::embedding_backward(hooks.grad(embed_), act_.dresid, act_.order, act_.seg_start, act_.seg_token, n_seg_,
                            cfg_.d_model, s_);
  hooks.after_layer_backward(0);
}

// dhnf = dlogits @ head, dhead += dlogits^T @ hnf, then the final RMSNorm
// (dresid is overwritten: the residual stream's gradient starts here).
void LlamaCuda::backward_head(float* dhead, float* dnorm) {
  const int M = B_ * T_, C = cfg_.d_model, V = cfg_.vocab, L = cfg_.n_layer;
  Activations& a = act_;
  gemm_.backward_data(a.dln, a.logits, w(head_), M, V, C);
  gemm_.backward_weight(dhead, a.logits, a.hnf, M, V, C);
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
