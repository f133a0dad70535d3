// GPT-2 on the GPU (one file of over 500 lines: the forward and backward of a
// block share the activation arena laid out below). The same model as gpt.h
// (architecture, parameter list, init: gpt_param_specs, gpt_init_param), in
// bf16 with fp32 accumulation.
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
//
// Hooks: before_layer(l+1) is called before the fused residual+LN kernel that
// first reads block l+1's LayerNorm (so the engine makes it fresh before any
// read); after_layer_backward(L) as soon as that layer's gradients are in.
#include "models/gpt2/cuda/gpt_cuda.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <span>

#include "util/check.h"
#include "models/cuda/attention.h"
#include "models/cuda/fp8_linear.h"
#include "models/cuda/gemm.h"
#include "models/gpt2/cuda/gpt_kernels.h"
#include "models/cuda/stream_graphs.h"
#include "util/cuda_check.h"
#include "formats/codec.h"

namespace mxdp::cuda {

namespace {

// Device memory owned by the model.
template <class T>
class Buf {
 public:
  Buf() = default;
  explicit Buf(int64_t n) { resize(n); }
  ~Buf() { reset(); }
  Buf(const Buf&) = delete;
  Buf& operator=(const Buf&) = delete;
  void resize(int64_t n) {
    reset();
    if (n > 0) MXDP_CUDA_CHECK(cudaMalloc(&p_, size_t(n) * sizeof(T)));
    n_ = n;
  }
  void reset() {
    if (p_) cudaFree(p_);
    p_ = nullptr;
    n_ = 0;
  }
  T* get() const { return p_; }
  int64_t size() const { return n_; }
  void swap(Buf& o) {
    std::swap(p_, o.p_);
    std::swap(n_, o.n_);
  }

 private:
  T* p_ = nullptr;
  int64_t n_ = 0;
};

int64_t round_up(int64_t x, int64_t m) { return (x + m - 1) / m * m; }

class GptCuda final : public GptModel {
 public:
  GptCuda(const GptConfig& cfg, cudaStream_t stream, const GptCudaOptions& opts)
      : cfg_(cfg), specs_(gpt_param_specs(cfg)), s_(stream), gemm_(stream), att_(stream),
        graphs_(stream, opts.cuda_graphs) {
    for (const auto& p : specs_) {
      offsets_.push_back(total_);
      total_ += round_up(p.numel(), 128);  // every param 256-byte aligned
    }
    layout_weights();
    int i = 2;
    for (int l = 0; l < cfg_.n_layer; ++l, i += 12) blocks_.push_back({i, i + 1, i + 2, i + 3, i + 4, i + 5, i + 6, i + 7, i + 8, i + 9, i + 10, i + 11});
    lnfw_ = i;
    lnfb_ = i + 1;
    MXDP_CUDA_CHECK(cudaMallocHost(&loss_host_, sizeof(float)));
    for (Staging& st : staging_) MXDP_CUDA_CHECK(cudaEventCreateWithFlags(&st.done, cudaEventDisableTiming));
    loss_mean_.resize(1);
  }
  ~GptCuda() override {
    cudaStreamSynchronize(s_);
    for (Staging& st : staging_) {
      cudaEventDestroy(st.done);
      if (st.host) cudaFreeHost(st.host);
    }
    cudaFreeHost(loss_host_);
  }

  const GptConfig& config() const override { return cfg_; }
  const std::vector<ParamSpec>& params() const override { return specs_; }
  int num_layers() const override { return cfg_.n_layer + 2; }
  float* weights(int) override {
    MXDP_FAIL("the GPU GPT keeps bf16 compute weights: use compute_weights()");
  }
  ComputeDType compute_dtype() const override { return ComputeDType::BF16; }
  void* compute_weights(int p) override { return w(check_param(p)); }

  // FP8 compute (docs/fp8.md): the four linear layers of each block read the
  // engine's W / W^T (ModelHooks::fp8_weight) through Fp8Linear, their inputs
  // and output gradients quantized 1x128 by act_quantize; those weights then
  // have no bf16 copy here. The embeddings, attention, LayerNorms and the LM
  // head stay bf16. Set before the first forward; needs d_model % 128 == 0.
  void set_fp8_compute(bool on) override {
    if (on) check_fp8_compute(specs_);
    if (on == fp8_) return;
    MXDP_CHECK(!ran_, "set_fp8_compute: set it before the model's first forward");
    fp8_ = on;
    B_ = T_ = 0;  // the arena's layout depends on it (bf16: h, ln1 and ln2 per block; FP8: the X^T operands)
    if (on && !lin_) lin_ = std::make_unique<Fp8Linear>(s_);
    fw_.assign(on ? specs_.size() : 0, {});
    fwt_.assign(on ? specs_.size() : 0, {});
    layout_weights();
  }
  bool reads_fp8_weights() const override { return fp8_; }

  void init_weights(uint64_t seed) override {
    std::vector<float> host(size_t(total_), 0.f);
    for (size_t p = 0; p < specs_.size(); ++p) gpt_init_param(cfg_, specs_, seed, int(p), host.data() + offsets_[p]);
    init_.resize(total_);
    MXDP_CUDA_CHECK(cudaMemcpyAsync(init_.get(), host.data(), host.size() * sizeof(float), cudaMemcpyHostToDevice, s_));
    to_compute_weights();
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
  // Until the engine took the initial values (e.g. --init-from, or weights set
  // without init_weights), they change too, as the CPU model's do: the engine
  // starts its masters from initial_weights(), not from bf16.
  void set_weights(int p, const float* host) override {
    const int64_t n = specs_[check_param(p)].numel();
    if (!init_.get() && !init_released_) {
      init_.resize(total_);
      MXDP_CUDA_CHECK(cudaMemsetAsync(init_.get(), 0, size_t(total_) * sizeof(float), s_));
    }
    Buf<float> tmp;
    float* dst = init_.get() ? init_.get() + offsets_[p] : (tmp.resize(n), tmp.get());
    MXDP_CUDA_CHECK(cudaMemcpyAsync(dst, host, size_t(n) * sizeof(float), cudaMemcpyHostToDevice, s_));
    if (has_bf16(p)) f32_to_bf16(dst, w(p), n, s_);
    MXDP_CUDA_CHECK(cudaStreamSynchronize(s_));
  }

  void forward_into(const Batch& batch, ModelHooks& hooks, float* loss) override {
    state_ = State::kNone;
    MXDP_CHECK(batch.targets != nullptr, "forward needs targets (use forward_logits for inference)");
    upload_batch(batch.inputs, batch.targets, batch.B, batch.T);
    run_forward(hooks);
    const int M = B_ * T_;
    segment(kLossSegment, {&loss, 1}, [&] {
      classifier(act_.logits, act_.losses, act_.targets, M, cfg_.vocab, cfg_.padded_vocab, 1.f / float(M),
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
    // Inference pads T up to a multiple of 64 (with token 0): positions < T
    // see only positions <= themselves (causal), so their logits are those of
    // the unpadded sequence, and a sampler growing T one token at a time
    // needs one attention graph per 64 lengths instead of one per length.
    MXDP_CHECK(B >= 1 && T >= 1 && T <= cfg_.max_seq, "forward_logits: B must be >= 1 and T in [1, max_seq=",
               cfg_.max_seq, "], got B=", B, " T=", T);
    const int Tp = int(std::min<int64_t>(round_up(T, 64), cfg_.max_seq));
    std::vector<int32_t> padded(size_t(B) * Tp, 0);
    for (int b = 0; b < B; ++b) std::copy(tokens + int64_t(b) * T, tokens + int64_t(b + 1) * T, padded.begin() + int64_t(b) * Tp);
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
    const uint16_t* src = act_.logits + (int64_t(b) * T_ + real_T_ - 1) * cfg_.padded_vocab;
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
    int ln1w, ln1b, qkvw, qkvb, projw, projb, ln2w, ln2b, fcw, fcb, mprojw, mprojb;
  };
  enum class State { kNone, kLogits, kLoss, kBackwardDone };

  // Activations for one (B, T), carved out of one allocation.
  struct Activations {
    uint16_t *resid, *resid_mid, *ln1, *ln2, *qkv, *atty, *fch_pre, *fch, *lnf, *logits;  // fch: bf16 compute only
    uint16_t *tmp, *dresid, *dln, *datty, *dqkv, *dfch;
    float *ln1_mean, *ln1_rstd, *ln2_mean, *ln2_rstd, *lnf_mean, *lnf_rstd, *stats, *losses, *scratch;
    // The column sums of dresid as the last LayerNorm backward left it (the
    // final LayerNorm's, or block l+1's ln1): block l's mlp.proj bias gradient,
    // made in that LayerNorm's column-sum launch and added in block l's segment.
    float* mproj_dbias;
    int32_t *tokens, *targets, *order, *seg_start, *seg_token;
    uint8_t* xt_codes;  // FP8 compute only: every block's X^T operands (BlockActs::ln1t ... ht)
    float* xt_scales;
  };
  // FP8 compute keeps, per block, the wgrad operand X^T of each linear's input,
  // made by the forward's quantize pass of that input: ln1^T, atty^T, ln2^T
  // ([C, Mp] each) and h^T ([4C, Mp], h = gelu(pre)). Their widths in units of
  // C, in that order, and their sum (the codes of a block: kXtWidth C Mp bytes).
  static constexpr int kXtWidths[4] = {1, 1, 1, 4};
  static constexpr int kXtWidth = 7;

  int check_param(int p) const {
    MXDP_CHECK(p >= 0 && p < int(specs_.size()), "param index ", p, " out of range [0, ", specs_.size(), ")");
    return p;
  }
  // Whether param p has bf16 compute weights here (not: an FP8 linear weight under FP8 compute).
  bool has_bf16(int p) const { return woff_[size_t(p)] >= 0; }
  uint16_t* w(int p) const {
    MXDP_CHECK(has_bf16(p), "'", specs_[size_t(p)].name, "' is read as FP8 (compute_dtype fp8): it has no bf16 ",
               "compute weights");
    return weights_.get() + woff_[size_t(p)];
  }
  // (Re)allocates the bf16 compute weights for the params that have them,
  // keeping the values of those that had them before (zeros for new ones).
  void layout_weights();
  // The bf16 compute weights from init_ (the fp32 initial values).
  void to_compute_weights();

  void ensure_activations(int B, int T);
  void upload_batch(const int32_t* tokens, const int32_t* targets, int B, int T);
  void run_forward(ModelHooks& hooks);
  void forward_stage(int s);
  // Block l's slices of the activations.
  struct BlockActs {
    uint16_t *x, *ln1, *qkv, *atty, *mid, *ln2, *pre;  // pre: fc's output before the GELU
    uint16_t* h;  // the GELU's output (bf16 compute; FP8 compute makes it inside act_quantize)
    float *ln1_mean, *ln1_rstd, *ln2_mean, *ln2_rstd, *stats;  // stats: attention's softmax statistics
    Fp8Slot ln1t, attyt, ln2t, ht;  // FP8 compute: the X^T operands of qkv, attn.proj, fc and mlp.proj's wgrads
  };
  BlockActs block_acts(int l);
  void forward_block(int l);
  void forward_block_fp8(int l);
  void backward_head(float* dwte, float* dlnfw, float* dlnfb);
  void backward_block(int l, float* const* g);
  void backward_block_fp8(int l, float* const* g);
  // FP8 compute: the block's W (forward) or W^T (backward) from the hooks into
  // fw_ / fwt_, outside any graph capture (W^T may be made now, on the
  // stream); their pointers, for the segment's key.
  std::vector<intptr_t> fetch_fp8(int l, ModelHooks& hooks, bool transposed);

  // The work between two hook calls is one graph segment (stream_graphs.h):
  // forward stage s (what runs after before_layer(s)), the loss, backward
  // stage s (what runs before after_layer_backward(s)). Its key is what its
  // launches depend on beyond the model's fixed buffers: the shape, the
  // activations and workspaces (reallocated when the shape changes), and
  // the pointers the hooks handed out.
  static constexpr int kLossSegment = 0;
  int forward_segment(int s) const { return 1 + s; }
  int backward_segment(int s) const { return 1 + num_layers() + s; }
  // `pointers`: the device pointers (beyond the fixed ones) in the segment's key.
  void segment(int id, std::span<float* const> pointers, const std::function<void()>& work,
               std::span<const intptr_t> extra = {});

  GptConfig cfg_;
  std::vector<ParamSpec> specs_;
  cudaStream_t s_;
  Gemm gemm_;
  Attention att_;
  StreamGraphs graphs_;
  std::vector<int64_t> offsets_;  // of each param in init_ (fp32)
  std::vector<int64_t> woff_;     // of each param in weights_ (bf16), -1 for none
  int64_t total_ = 0;
  Buf<uint16_t> weights_;
  bool fp8_ = false;              // FP8 compute of the block linears
  bool ran_ = false;              // a forward has run (the graphs hold weight pointers)
  std::unique_ptr<Fp8Linear> lin_;
  std::vector<Fp8Weight> fw_;     // per param: W (forward) and W^T (backward) of this pass
  std::vector<Fp8Weight> fwt_;
  Buf<float> init_;
  bool init_released_ = false;  // the engine took the initial values
  std::vector<BlockParams> blocks_;
  int lnfw_ = 0, lnfb_ = 0;

  int B_ = 0, T_ = 0, real_T_ = 0;
  Buf<uint8_t> arena_;
  Activations act_{};
  int n_seg_ = 0;
  // Pinned host copies of tokens, targets and encoder segments, used in turn: a
  // batch's upload waits only for the one kStagingSlots uploads back, so the host
  // can prepare the next steps' batches while the GPU still runs this one's.
  struct Staging {
    int32_t* host = nullptr;
    int64_t n = 0;
    cudaEvent_t done = nullptr;  // its last upload has left it
    bool pending = false;
  };
  static constexpr int kStagingSlots = 4;
  std::array<Staging, kStagingSlots> staging_{};
  int next_staging_ = 0;
  Buf<float> loss_mean_;
  float* loss_host_ = nullptr;
  State state_ = State::kNone;
};

void GptCuda::ensure_activations(int B, int T) {
  if (B == B_ && T == T_) return;
  MXDP_CUDA_CHECK(cudaStreamSynchronize(s_));
  const int64_t BT = int64_t(B) * T, C = cfg_.d_model, L = cfg_.n_layer, NH = cfg_.n_head, Vp = cfg_.padded_vocab;
  // Two passes: size the arena, then hand out 256-byte aligned slices.
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
    // The LayerNorm outputs are kept per block for bf16 compute's wgrads. FP8
    // compute's wgrads read their transposed operands (xt, below) instead, so
    // there ln1 and ln2 of every block share one buffer that only the forward
    // reads (ln1 is quantized before ln2 is written).
    take(a.ln1, fp8_ ? BT * C : L * BT * C);
    if (fp8_) a.ln2 = a.ln1;
    else take(a.ln2, L * BT * C);
    take(a.qkv, L * BT * 3 * C);
    take(a.atty, L * BT * C);
    take(a.fch_pre, L * BT * 4 * C);
    // The GELU output is kept for the MLP's backward (recomputing it there cost
    // 0.9 ms a step at 124M B 16, for 1.2 GB); FP8 compute keeps its FP8
    // transpose instead (xt, below), the operand mlp.proj's wgrad reads.
    take(a.fch, fp8_ ? 0 : L * BT * 4 * C);
    take(a.lnf, BT * C);
    take(a.logits, BT * Vp);
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
    take(a.losses, BT);
    take(a.scratch, colsum_scratch_floats(BT, 4 * C));
    take(a.mproj_dbias, C);
    take(a.tokens, BT);
    take(a.targets, BT);
    take(a.order, BT);
    take(a.seg_start, BT + 1);
    take(a.seg_token, BT);
    const int64_t xt = fp8_ ? L * kXtWidth * C * fp8_rows_padded(BT) : 0;  // codes; a scale per 128
    take(a.xt_codes, xt);
    take(a.xt_scales, xt / 128);
    if (pass == 0) {
      arena_.resize(at);
      base = arena_.get();
    }
  }
  // The column sums' counters start at zero (the kernels leave them so).
  MXDP_CUDA_CHECK(cudaMemsetAsync(act_.scratch, 0, kColsumCounters * sizeof(float), s_));
  if (fp8_) lin_->reserve(int(BT), int(4 * C));
  B_ = B;
  T_ = T;
}

// Tokens and targets go up through a pinned buffer, with the encoder's
// backward segments: the positions sorted by (token, position) by a counting
// sort, so that each wte row's gradient is summed in position order.
void GptCuda::upload_batch(const int32_t* tokens, const int32_t* targets, int B, int T) {
  MXDP_CHECK(B >= 1, "batch size B must be >= 1, got ", B);
  MXDP_CHECK(T >= 1 && T <= cfg_.max_seq, "sequence length T must be in [1, max_seq=", cfg_.max_seq, "], got ", T);
  MXDP_CHECK(tokens != nullptr, "null token pointer");
  const int64_t BT = int64_t(B) * T;
  const int V = cfg_.vocab;
  for (int64_t i = 0; i < BT; ++i) {
    MXDP_CHECK(tokens[i] >= 0 && tokens[i] < V, "token ", tokens[i], " at position ", i, " outside [0, vocab=", V, ")");
    if (targets)
      MXDP_CHECK(targets[i] >= 0 && targets[i] < V, "target ", targets[i], " at position ", i, " outside [0, vocab=", V, ")");
  }
  ensure_activations(B, T);
  const int64_t need = 5 * BT + 1;
  Staging& sg = staging_[size_t(next_staging_)];
  next_staging_ = (next_staging_ + 1) % kStagingSlots;
  if (sg.pending) MXDP_CUDA_CHECK(cudaEventSynchronize(sg.done));  // its upload has left the buffer
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

void GptCuda::segment(int id, std::span<float* const> pointers, const std::function<void()>& work,
                      std::span<const intptr_t> extra) {
  StreamGraphs::Key key{B_, T_, reinterpret_cast<intptr_t>(arena_.get()),
                        reinterpret_cast<intptr_t>(att_.workspace()), att_.workspace_bytes(),
                        reinterpret_cast<intptr_t>(lin_ ? lin_->workspace_key() : nullptr)};
  for (float* p : pointers) key.push_back(reinterpret_cast<intptr_t>(p));
  for (intptr_t p : extra) key.push_back(p);
  graphs_.run(id, key, work);
}

std::vector<intptr_t> GptCuda::fetch_fp8(int l, ModelHooks& hooks, bool transposed) {
  if (!fp8_) return {};
  std::vector<intptr_t> key;
  const BlockParams& p = blocks_[size_t(l)];
  for (int wp : {p.qkvw, p.projw, p.fcw, p.mprojw}) {
    Fp8Weight& f = transposed ? fwt_[size_t(wp)] : fw_[size_t(wp)];
    f = transposed ? hooks.fp8_weight_transposed(wp) : hooks.fp8_weight(wp);
    key.push_back(reinterpret_cast<intptr_t>(f.codes));
    key.push_back(reinterpret_cast<intptr_t>(f.scales));
  }
  return key;
}

void GptCuda::run_forward(ModelHooks& hooks) {
  ran_ = true;
  for (int s = 0; s <= cfg_.n_layer + 1; ++s) {
    hooks.before_layer(s);
    const std::vector<intptr_t> extra = s >= 1 && s <= cfg_.n_layer ? fetch_fp8(s - 1, hooks, false) : std::vector<intptr_t>{};
    segment(forward_segment(s), {}, [&] { forward_stage(s); }, extra);
  }
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
    encoder_forward(a.resid, a.tokens, w(0), w(1), B, T, C, s_);
    return;
  }
  if (s == 1) {
    layernorm_forward(a.ln1, a.ln1_mean, a.ln1_rstd, a.resid, w(blocks_[0].ln1w), w(blocks_[0].ln1b), M, C, s_);
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
    gemm_.forward(a.logits, a.lnf, w(0), nullptr, M, Vp, C);
    return;
  }
  fp8_ ? forward_block_fp8(l) : forward_block(l);
}

GptCuda::BlockActs GptCuda::block_acts(int l) {
  const int M = B_ * T_;
  const int64_t BTC = int64_t(M) * cfg_.d_model, lm = int64_t(l) * M;
  const int64_t ln_at = fp8_ ? 0 : l * BTC;  // one LayerNorm output buffer under FP8 compute
  Activations& a = act_;
  BlockActs b{a.resid + l * BTC,        a.ln1 + ln_at,     a.qkv + l * 3 * BTC, a.atty + l * BTC,
              a.resid_mid + l * BTC,    a.ln2 + ln_at,     a.fch_pre + l * 4 * BTC,
              fp8_ ? nullptr : a.fch + l * 4 * BTC,
              a.ln1_mean + lm,          a.ln1_rstd + lm,   a.ln2_mean + lm,     a.ln2_rstd + lm,
              a.stats + int64_t(l) * B_ * cfg_.n_head * T_};
  if (fp8_) {
    // Block l's X^T operands, one after another: [width C, Mp] codes and
    // (Mp / 128) x width C scales each (Mp: M padded to 128, as act_quantize writes).
    static_assert(kXtWidths[0] + kXtWidths[1] + kXtWidths[2] + kXtWidths[3] == kXtWidth);
    const int64_t CMp = cfg_.d_model * fp8_rows_padded(M);
    uint8_t* codes = a.xt_codes + l * kXtWidth * CMp;
    float* scales = a.xt_scales + l * kXtWidth * CMp / 128;
    Fp8Slot* xt[4] = {&b.ln1t, &b.attyt, &b.ln2t, &b.ht};
    for (int i = 0; i < 4; ++i) {
      *xt[i] = {codes, scales};
      codes += kXtWidths[i] * CMp;
      scales += kXtWidths[i] * CMp / 128;
    }
  }
  return b;
}

void GptCuda::forward_block(int l) {
  const int B = B_, T = T_, C = cfg_.d_model, NH = cfg_.n_head, HS = C / NH, M = B * T;
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

void GptCuda::backward(ModelHooks& hooks) {
  MXDP_CHECK(state_ == State::kLoss, "backward needs a forward with targets since the last backward");
  state_ = State::kBackwardDone;
  const int L = cfg_.n_layer;
  {
    float* g[3] = {hooks.grad(0), hooks.grad(lnfw_), hooks.grad(lnfb_)};
    segment(backward_segment(L + 1), g, [&] { backward_head(g[0], g[1], g[2]); });
  }
  hooks.after_layer_backward(L + 1);
  for (int l = L - 1; l >= 0; --l) {
    const BlockParams& p = blocks_[l];
    float* g[12];
    const int ids[12] = {p.ln1w, p.ln1b, p.qkvw, p.qkvb, p.projw, p.projb, p.ln2w, p.ln2b, p.fcw, p.fcb, p.mprojw, p.mprojb};
    for (int i = 0; i < 12; ++i) g[i] = hooks.grad(ids[i]);
    const std::vector<intptr_t> extra = fetch_fp8(l, hooks, true);
    segment(backward_segment(l + 1), g, [&] { fp8_ ? backward_block_fp8(l, g) : backward_block(l, g); }, extra);
    hooks.after_layer_backward(l + 1);
  }
  // Not a graph: its launch size is the batch's number of distinct tokens.
  encoder_backward(hooks.grad(0), hooks.grad(1), act_.dresid, act_.order, act_.seg_start, act_.seg_token, n_seg_, B_,
                   T_, cfg_.d_model, s_);
  hooks.after_layer_backward(0);
}

// Head (its weight is wte, layer 0): dlnf = dlogits @ wte, dwte += dlogits^T @ lnf.
void GptCuda::backward_head(float* dwte, float* dlnfw, float* dlnfb) {
  const int M = B_ * T_, C = cfg_.d_model, Vp = cfg_.padded_vocab, L = cfg_.n_layer;
  Activations& a = act_;
  gemm_.backward_data(a.dln, a.logits, w(0), M, Vp, C);
  gemm_.backward_weight(dwte, a.logits, a.lnf, M, Vp, C);
  layernorm_backward(a.dresid, /*accumulate=*/false, dlnfw, dlnfb, {a.mproj_dbias, false}, a.scratch, a.dln,
                     a.resid + L * int64_t(M) * C, w(lnfw_), a.lnf_mean, a.lnf_rstd, M, C, s_);
}

// g: the block's gradients in BlockParams order (ln1w ... mprojb).
void GptCuda::backward_block(int l, float* const* g) {
  const int B = B_, T = T_, C = cfg_.d_model, NH = cfg_.n_head, HS = C / NH, M = B * T;
  Activations& a = act_;
  const BlockParams& p = blocks_[size_t(l)];
  const BlockActs b = block_acts(l);
  float *d_ln1w = g[0], *d_ln1b = g[1], *d_qkvw = g[2], *d_qkvb = g[3], *d_projw = g[4], *d_projb = g[5];
  float *d_ln2w = g[6], *d_ln2b = g[7], *d_fcw = g[8], *d_fcb = g[9], *d_mprojw = g[10], *d_mprojb = g[11];
  // MLP: resid[l+1] = mid + mproj(h), h = gelu(fc(ln2)) kept from the forward.
  gemm_.backward_weight(d_mprojw, a.dresid, b.h, M, C, 4 * C);
  add_into(d_mprojb, a.mproj_dbias, C, s_);  // the column sums of a.dresid (see Activations)
  gemm_.backward_data(a.dfch, a.dresid, w(p.mprojw), M, C, 4 * C, b.pre);  // through the GELU too
  gemm_.backward_data(a.dln, a.dfch, w(p.fcw), M, 4 * C, C);
  gemm_.backward_weight(d_fcw, a.dfch, b.ln2, M, 4 * C, C);
  bias_backward(d_fcb, a.scratch, a.dfch, M, 4 * C, s_);
  layernorm_backward(a.dresid, true, d_ln2w, d_ln2b, {d_projb}, a.scratch, a.dln, b.mid, w(p.ln2w), b.ln2_mean,
                     b.ln2_rstd, M, C, s_);  // d_projb: the column sums of the new a.dresid
  // Attention: mid = x + proj(attn(qkv(ln1))).
  gemm_.backward_data(a.datty, a.dresid, w(p.projw), M, C, C);
  gemm_.backward_weight(d_projw, a.dresid, b.atty, M, C, C);
  att_.backward(a.dqkv, a.datty, b.qkv, b.atty, b.stats, B, T, NH, HS);
  gemm_.backward_data(a.dln, a.dqkv, w(p.qkvw), M, 3 * C, C);
  gemm_.backward_weight(d_qkvw, a.dqkv, b.ln1, M, 3 * C, C);
  bias_backward(d_qkvb, a.scratch, a.dqkv, M, 3 * C, s_);
  const ColumnSum below = l > 0 ? ColumnSum{a.mproj_dbias, false} : ColumnSum{};  // block l-1's mlp.proj bias
  layernorm_backward(a.dresid, true, d_ln1w, d_ln1b, below, a.scratch, a.dln, b.x, w(p.ln1w), b.ln1_mean, b.ln1_rstd,
                     M, C, s_);
}

void GptCuda::layout_weights() {
  std::vector<int64_t> off(specs_.size(), -1);
  int64_t n = 0;
  for (size_t p = 0; p < specs_.size(); ++p)
    if (!(fp8_ && specs_[p].fp8_linear)) {
      off[p] = n;
      n += round_up(specs_[p].numel(), 128);  // every param 256-byte aligned
    }
  Buf<uint16_t> nw(n);
  MXDP_CUDA_CHECK(cudaMemsetAsync(nw.get(), 0, size_t(n) * 2, s_));
  for (size_t p = 0; p < specs_.size() && !woff_.empty(); ++p)
    if (off[p] >= 0 && woff_[p] >= 0)
      MXDP_CUDA_CHECK(cudaMemcpyAsync(nw.get() + off[p], weights_.get() + woff_[p], size_t(specs_[p].numel()) * 2,
                                      cudaMemcpyDeviceToDevice, s_));
  MXDP_CUDA_CHECK(cudaStreamSynchronize(s_));
  weights_.swap(nw);
  woff_ = std::move(off);
}

void GptCuda::to_compute_weights() {
  for (int p = 0; p < int(specs_.size()); ++p)
    if (has_bf16(p)) f32_to_bf16(init_.get() + offsets_[size_t(p)], w(p), specs_[size_t(p)].numel(), s_);
}

// Block l's body under FP8 compute (forward_stage's, with the four linears in
// FP8): each GEMM's input quantized 1x128 in one act_quantize pass into both
// its operands, the rows for fprop (the kRows slot) and the transpose for
// backward's wgrad (the block's own X^T slot, kept until then: making it here
// from the tile already loaded costs less than reading the bf16 input again in
// backward). The bias adds (and fc's GELU) are in act_quantize too; the GELU
// output h goes only to its two operands and is not stored in bf16.
// Every forward makes the X^T operands, an eval's too: they are the same
// graphs, and a training backward always follows its own forward.
void GptCuda::forward_block_fp8(int l) {
  const int B = B_, T = T_, C = cfg_.d_model, NH = cfg_.n_head, HS = C / NH, M = B * T;
  const BlockParams& p = blocks_[size_t(l)];
  const BlockActs b = block_acts(l);
  uint16_t* tmp = act_.tmp;
  const Fp8Slot q = lin_->slot(Fp8Linear::kRows);
  const auto quantize = [&](const uint16_t* in, const Fp8Slot& xt) {
    act_quantize({.x = in, .rows = q, .cols = xt}, M, C, s_);
  };
  quantize(b.ln1, b.ln1t);
  lin_->fprop(b.qkv, q, fw_[size_t(p.qkvw)], w(p.qkvb), M, 3 * C, C);
  att_.forward(b.atty, b.stats, b.qkv, B, T, NH, HS);
  quantize(b.atty, b.attyt);
  lin_->fprop(tmp, q, fw_[size_t(p.projw)], w(p.projb), M, C, C);
  residual_layernorm_forward(b.mid, b.ln2, b.ln2_mean, b.ln2_rstd, b.x, tmp, w(p.ln2w), w(p.ln2b), M, C, s_);
  quantize(b.ln2, b.ln2t);
  lin_->fprop(b.pre, q, fw_[size_t(p.fcw)], nullptr, M, 4 * C, C);
  // pre + bias is written back: backward's GELU gradient reads it.
  act_quantize({.x = b.pre, .bias = w(p.fcb), .biased = b.pre, .op = ActOp::Gelu, .rows = q, .cols = b.ht}, M, 4 * C,
               s_);
  lin_->fprop(tmp, q, fw_[size_t(p.mprojw)], w(p.mprojb), M, C, 4 * C);
}

// backward_block under FP8 compute. Per linear layer: the output gradient dY
// quantized both ways (kRows for dgrad, kCols, the transpose, for wgrad); the
// input's transpose X^T for wgrad is the one the forward made (BlockActs::
// ln1t ... ht). mproj's dgrad goes through the GELU in the next act_quantize,
// which also makes fc's dY operands.
void GptCuda::backward_block_fp8(int l, float* const* g) {
  const int B = B_, T = T_, C = cfg_.d_model, NH = cfg_.n_head, HS = C / NH, M = B * T;
  Activations& a = act_;
  const BlockParams& p = blocks_[size_t(l)];
  const BlockActs b = block_acts(l);
  float *d_ln1w = g[0], *d_ln1b = g[1], *d_qkvw = g[2], *d_qkvb = g[3], *d_projw = g[4], *d_projb = g[5];
  float *d_ln2w = g[6], *d_ln2b = g[7], *d_fcw = g[8], *d_fcb = g[9], *d_mprojw = g[10], *d_mprojb = g[11];
  const Fp8Slot dy = lin_->slot(Fp8Linear::kRows), dyt = lin_->slot(Fp8Linear::kCols);
  const auto grad_operands = [&](const uint16_t* d, int N) { act_quantize({.x = d, .rows = dy, .cols = dyt}, M, N, s_); };
  // MLP: resid[l+1] = mid + mproj(gelu(fc(ln2))).
  grad_operands(a.dresid, C);
  lin_->wgrad(d_mprojw, dyt, b.ht, M, C, 4 * C);
  add_into(d_mprojb, a.mproj_dbias, C, s_);  // the column sums of a.dresid (see Activations)
  lin_->dgrad(a.dfch, dy, fwt_[size_t(p.mprojw)], M, C, 4 * C);
  act_quantize({.x = a.dfch, .op = ActOp::GeluGrad, .aux = b.pre, .out = a.dfch, .rows = dy, .cols = dyt}, M, 4 * C,
               s_);
  lin_->wgrad(d_fcw, dyt, b.ln2t, M, 4 * C, C);
  lin_->dgrad(a.dln, dy, fwt_[size_t(p.fcw)], M, 4 * C, C);
  bias_backward(d_fcb, a.scratch, a.dfch, M, 4 * C, s_);
  layernorm_backward(a.dresid, true, d_ln2w, d_ln2b, {d_projb}, a.scratch, a.dln, b.mid, w(p.ln2w), b.ln2_mean,
                     b.ln2_rstd, M, C, s_);  // d_projb: the column sums of the new a.dresid
  // Attention: mid = x + proj(attn(qkv(ln1))).
  grad_operands(a.dresid, C);
  lin_->wgrad(d_projw, dyt, b.attyt, M, C, C);
  lin_->dgrad(a.datty, dy, fwt_[size_t(p.projw)], M, C, C);
  att_.backward(a.dqkv, a.datty, b.qkv, b.atty, b.stats, B, T, NH, HS);
  grad_operands(a.dqkv, 3 * C);
  lin_->wgrad(d_qkvw, dyt, b.ln1t, M, 3 * C, C);
  lin_->dgrad(a.dln, dy, fwt_[size_t(p.qkvw)], M, 3 * C, C);
  bias_backward(d_qkvb, a.scratch, a.dqkv, M, 3 * C, s_);
  const ColumnSum below = l > 0 ? ColumnSum{a.mproj_dbias, false} : ColumnSum{};  // block l-1's mlp.proj bias
  layernorm_backward(a.dresid, true, d_ln1w, d_ln1b, below, a.scratch, a.dln, b.x, w(p.ln1w), b.ln1_mean, b.ln1_rstd,
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
