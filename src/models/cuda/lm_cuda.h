// What every GPU language model (GptCuda: gpt2/cuda/gpt_cuda.cu, LlamaCuda:
// llama/cuda/llama_cuda.cu) does the same way, as a base class template over
// the model's interface (GptModel, LlamaModel) and config:
//
//   weights     bf16 compute weights (one allocation, each param 256-byte
//               aligned; params read as FP8 under FP8 compute have none) and
//               the fp32 initial values the engine starts its masters from
//               (init_weights, set_weights, initial_weights, release_...);
//   batches     token and target upload through a ring of pinned host
//               buffers, with the embedding backward's segments (BatchUpload);
//   activations one arena per (B, T), laid out by the model (carve);
//   the steps   forward, forward_into, forward_logits, logits_last, backward:
//               the engine hooks around each layer, the work between two
//               hook calls run as one graph segment (stream_graphs.h), the
//               loss (the fused classifier and mean_loss, classifier.h), and
//               when each may be called (State);
//   FP8 compute set_fp8_compute (docs/fp8.md): which blocks compute their
//               linear layers in FP8, the engine's W / W^T of those layers
//               fetched from the hooks for each stage, the FP8 linear layer
//               (Fp8Linear: the GEMMs and their scratch operands), and the
//               X^T operands an FP8 block keeps for backward (take_xt,
//               xt_slots: the model gives their widths).
//
// A model writes only its own parts: its parameter indices (with, per block,
// its FP8 linears' weights), the arena's layout, the body of each forward and
// backward stage (in bf16 and in FP8), and its init. Stage s
// is the work of layer s (layer 0 the embedding, 1 + l block l, L + 1 the
// head): forward stage s runs after before_layer(s), backward stage s before
// after_layer_backward(s); stage 0's backward is not a graph (its launch size
// is the batch's number of distinct tokens).
#pragma once

#include <cuda_runtime_api.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <utility>
#include <vector>

#include "formats/codec.h"
#include "formats/cuda/bf16_cuda.h"
#include "models/cuda/attention.h"
#include "models/cuda/classifier.h"  // classifier, mean_loss: every GPU model's loss
#include "models/cuda/fp8_linear.h"
#include "models/cuda/gemm.h"
#include "models/cuda/stream_graphs.h"
#include "models/model.h"
#include "util/check.h"
#include "util/cuda_check.h"

namespace mxdp::cuda {

// Device memory owned by a model.
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

inline int64_t round_up(int64_t x, int64_t m) { return (x + m - 1) / m * m; }

// Hands out 256-byte aligned slices of the activation arena. A model's carve
// runs twice: with no base, to size the arena (the pointers are null), then
// with the arena, to point into it.
class ArenaSlicer {
 public:
  explicit ArenaSlicer(uint8_t* base = nullptr) : base_(base) {}
  template <class T>
  void operator()(T*& ptr, int64_t n) {
    ptr = reinterpret_cast<T*>(base_ ? base_ + at_ : nullptr);
    at_ = round_up(at_ + n * int64_t(sizeof(T)), 256);
  }
  int64_t size() const { return at_; }

 private:
  uint8_t* base_;
  int64_t at_ = 0;
};

// The arena slices the shared parts read or write (the model's carve places
// them among its own): the batch, the embedding backward's segments (see
// BatchUpload) and the head's logits and per-row losses.
struct LmSlices {
  int32_t *tokens, *targets, *order, *seg_start, *seg_token;
  uint16_t* logits;  // [B*T, logits_ld]; dlogits in place after a forward with targets
  float* losses;
};

// Tokens and targets go up through a pinned buffer, with the embedding's
// backward segments: the positions sorted by (token, position) by a counting
// sort, so that each embedding row's gradient is summed in position order.
// The buffers are used in turn: an upload waits only for the one kSlots
// uploads back, so the host can prepare the next steps' batches while the GPU
// still runs this one's.
class BatchUpload {
 public:
  BatchUpload();
  ~BatchUpload();  // its owner has synchronized the stream
  BatchUpload(const BatchUpload&) = delete;
  BatchUpload& operator=(const BatchUpload&) = delete;

  // BT tokens (and targets; null: zeros) in [0, V), checked by the caller,
  // into dst's tokens, targets, order, seg_start and seg_token, on `s`.
  // Returns the number of segments (distinct tokens).
  int upload(const int32_t* tokens, const int32_t* targets, int64_t BT, int V, const LmSlices& dst, cudaStream_t s);

 private:
  struct Slot {
    int32_t* host = nullptr;
    int64_t n = 0;
    cudaEvent_t done = nullptr;  // its last upload has left it
    bool pending = false;
  };
  static constexpr int kSlots = 4;
  std::array<Slot, kSlots> slots_{};
  int next_ = 0;
};

template <class Interface, class Config>
class LmCuda : public Interface {
 public:
  // specs: the model's parameter list; logits_ld: the logits' row stride
  // (>= vocab: the classifier's padded width); name: the model in messages
  // ("the GPU <name> ...").
  LmCuda(const Config& cfg, std::vector<ParamSpec> specs, int logits_ld, const char* name, cudaStream_t stream,
         bool cuda_graphs);
  ~LmCuda() override;

  const Config& config() const override { return cfg_; }
  const std::vector<ParamSpec>& params() const override { return specs_; }
  int num_layers() const override { return cfg_.n_layer + 2; }
  float* weights(int) override { MXDP_FAIL("the GPU ", name_, " keeps bf16 compute weights: use compute_weights()"); }
  ComputeDType compute_dtype() const override { return ComputeDType::BF16; }
  void* compute_weights(int p) override { return w(check_param(p)); }

  void init_weights(uint64_t seed) override;
  const float* initial_weights(int p) override;
  void release_initial_weights() override;
  // Until the engine took the initial values (e.g. --init-from, or weights set
  // without init_weights), they change too, as the CPU model's do: the engine
  // starts its masters from initial_weights(), not from bf16.
  void set_weights(int p, const float* host) override;

  // FP8 compute (docs/fp8.md): the linear layers of the blocks c names
  // (block_linears_) read the engine's W / W^T (ModelHooks::fp8_weight)
  // through Fp8Linear, and have no bf16 copy here; the model's FP8 stage
  // bodies quantize their inputs and output gradients 1x128. Everything else
  // stays bf16: the embeddings, attention, the norms, the head, and the
  // linears of the blocks c keeps in bf16 (they read bf16 weights the engine
  // dequantizes, as under bf16 compute). Set before the first forward
  // (check_fp8_compute says what it needs; a width that is not a multiple of
  // 128 ends in partial tiles).
  void set_fp8_compute(const Fp8Compute& c) override;
  bool reads_fp8_weights() const override { return fp8_; }

  void forward_into(const Batch& batch, ModelHooks& hooks, float* loss) override;
  float forward(const Batch& batch, ModelHooks& hooks) override;
  void forward_logits(const int32_t* tokens, int B, int T, ModelHooks& hooks) override;
  std::vector<float> logits_last(int b) const override;
  void backward(ModelHooks& hooks) override;

  const StreamGraphs& graphs() const { return graphs_; }

 protected:
  // ---- the model's own parts
  // Param p's fp32 initial values into out (gpt_init_param, llama_init_param).
  virtual void init_param(uint64_t seed, int p, float* out) const = 0;
  // The arena's layout for (B, T): every slice by `take(ptr, count)`, io_'s
  // among them. Runs twice (ArenaSlicer); B_, T_ are still the old shape.
  virtual void carve(ArenaSlicer& take, int B, int T) = 0;
  // Once the arena for (B, T) is in place: what the model sets up in it.
  virtual void activations_ready(int /*B*/, int /*T*/) {}
  virtual void forward_stage(int s) = 0;
  // g: the gradients of stage_grads_[s], in that order (null for -1).
  virtual void backward_stage(int s, float* const* g) = 0;

  // ---- for the model's parts
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
  // The batch's slices of io_ (tokens, targets and the embedding segments'
  // order, seg_start, seg_token), one after another where carve places them.
  void take_batch(ArenaSlicer& take, int64_t BT) {
    take(io_.tokens, BT);
    take(io_.targets, BT);
    take(io_.order, BT);
    take(io_.seg_start, BT + 1);
    take(io_.seg_token, BT);
  }
  // FP8 compute: whether block l computes its linears in FP8; its index among
  // the blocks of its kind (FP8 or bf16), i.e. its slot in the activations a
  // model keeps for that kind only; how many blocks compute in FP8.
  bool fp8_block(int l) const { return fp8_ && specs_[size_t(block_linears_[size_t(l)][0])].fp8_linear; }
  int64_t block_slot(int l) const { return slot_[size_t(l)]; }
  int64_t n_fp8_blocks() const { return n_fp8_blocks_; }
  // An FP8 block keeps, for backward, the wgrad operand X^T of each of its
  // linears' inputs, made by the forward's quantize pass of that input.
  // widths: their widths (the rows of each X^T), in the order the model names
  // them. take_xt: carve's slices of them, the FP8 blocks' one block after
  // another. xt_slots: FP8 block l's, one after another in its slot, each of
  // [width, Mp] codes and (Mp / 128) x width scales (Mp: the B T rows padded
  // to 128, as act_quantize writes), into *out[i].
  template <size_t N>
  void take_xt(ArenaSlicer& take, int64_t BT, const std::array<int64_t, N>& widths) {
    const int64_t n = n_fp8_blocks_ * block_width(widths) * fp8_rows_padded(BT);  // codes; a scale per 128
    take(xt_.codes, n);
    take(xt_.scales, n / 128);
  }
  template <size_t N>
  void xt_slots(int l, const std::array<int64_t, N>& widths, const std::array<Fp8Slot*, N>& out) const {
    const int64_t Mp = fp8_rows_padded(int64_t(B_) * T_), k = block_slot(l);
    uint8_t* codes = xt_.codes + k * block_width(widths) * Mp;
    float* scales = xt_.scales + k * block_width(widths) * Mp / 128;
    for (size_t i = 0; i < N; ++i) {
      *out[i] = {codes, scales};
      codes += widths[i] * Mp;
      scales += widths[i] * Mp / 128;
    }
  }
  // The FP8 linear layer, and the engine's W (forward) and W^T (backward) of
  // FP8 weight p for the stage running now.
  Fp8Linear& lin() const { return *lin_; }
  const Fp8Weight& fw(int p) const { return fw_[size_t(p)]; }
  const Fp8Weight& fwt(int p) const { return fwt_[size_t(p)]; }

  Config cfg_;
  std::vector<ParamSpec> specs_;
  cudaStream_t s_;
  Gemm gemm_;
  Attention att_;
  // Per stage s (0 .. num_layers() - 1): the params whose gradients backward
  // stage s adds to, in the order backward_stage reads them; -1: none there
  // (a null gradient). The model fills it in its constructor.
  std::vector<std::vector<int>> stage_grads_;
  // Per block: the weights of its linear layers that FP8 compute reads as FP8
  // (those its spec flags fp8_linear), the first of them named in fp8_block.
  // The model fills it in its constructor.
  std::vector<std::vector<int>> block_linears_;

  int B_ = 0, T_ = 0;  // the arena's shape (0: none yet; a model sets both to 0 to have it laid out again)
  LmSlices io_{};
  int n_seg_ = 0;      // the batch's embedding segments (distinct tokens)
  bool ran_ = false;   // a forward has run (the graphs hold weight pointers)

 private:
  enum class State { kNone, kLogits, kLoss, kBackwardDone };

  template <size_t N>
  static int64_t block_width(const std::array<int64_t, N>& widths) {
    int64_t sum = 0;
    for (int64_t w : widths) sum += w;
    return sum;
  }

  void to_compute_weights();  // the bf16 compute weights from init_ (the fp32 initial values)
  // (Re)allocates the bf16 compute weights for the params that have them (all
  // but the fp8_linear ones when `fp8`), keeping the values of those that had
  // them before (zeros for new ones).
  void layout_weights(bool fp8);
  // FP8 compute: block s - 1's W (forward) or W^T (backward) from the hooks
  // into fw_ / fwt_, outside any graph capture (W^T may be made now, on the
  // stream); their pointers, for the segment's key. Empty for other stages.
  std::vector<intptr_t> fetch_stage_weights(int s, ModelHooks& hooks, bool transposed);
  void ensure_activations(int B, int T);
  void upload_batch(const int32_t* tokens, const int32_t* targets, int B, int T);
  void run_forward(ModelHooks& hooks);

  // The work between two hook calls is one graph segment (stream_graphs.h):
  // forward stage s (what runs after before_layer(s)), the loss, backward
  // stage s (what runs before after_layer_backward(s)). Its key is what its
  // launches depend on beyond the model's fixed buffers: the shape, the
  // activations and workspaces (reallocated when the shape changes), and
  // the pointers the hooks handed out.
  static constexpr int kLossSegment = 0;
  int forward_segment(int s) const { return 1 + s; }
  int backward_segment(int s) const { return 1 + num_layers() + s; }
  // `pointers`: the gradients (beyond the fixed buffers) in the segment's key; `extra`: more of them.
  void segment(int id, std::span<float* const> pointers, const std::function<void()>& work,
               std::span<const intptr_t> extra = {});

  int logits_ld_;
  const char* name_;
  StreamGraphs graphs_;
  std::vector<int64_t> offsets_;  // of each param in init_ (fp32)
  std::vector<int64_t> woff_;     // of each param in weights_ (bf16), -1 for none
  int64_t total_ = 0;
  Buf<uint16_t> weights_;
  Buf<float> init_;
  bool init_released_ = false;  // the engine took the initial values

  const std::vector<ParamSpec> base_specs_;  // the constructor's list: set_fp8_compute starts from it
  bool fp8_ = false;              // FP8 compute of the block linears (of some blocks at least)
  std::vector<int> slot_;         // per block, see block_slot
  int64_t n_fp8_blocks_ = 0;
  int64_t fp8_width_ = 0;         // the widest side of an FP8 weight: the operands' widest row
  std::unique_ptr<Fp8Linear> lin_;
  std::vector<Fp8Weight> fw_, fwt_;  // per param: W and W^T of this pass (FP8 weights only)
  Fp8Slot xt_{};                     // the FP8 blocks' X^T operands, in the arena (take_xt)

  Buf<uint8_t> arena_;
  int real_T_ = 0;  // forward_logits: the T asked for (the arena's T_ is padded)
  BatchUpload upload_;
  Buf<float> loss_mean_;
  float* loss_host_ = nullptr;
  State state_ = State::kNone;
};

// ---------------------------------------------------------------- definitions

template <class I, class C>
LmCuda<I, C>::LmCuda(const C& cfg, std::vector<ParamSpec> specs, int logits_ld, const char* name, cudaStream_t stream,
                     bool cuda_graphs)
    : cfg_(cfg), specs_(std::move(specs)), s_(stream), gemm_(stream), att_(stream), logits_ld_(logits_ld),
      name_(name), graphs_(stream, cuda_graphs), base_specs_(specs_) {
  for (const auto& p : specs_) {
    offsets_.push_back(total_);
    total_ += round_up(p.numel(), 128);  // every param 256-byte aligned
  }
  for (int l = 0; l < cfg_.n_layer; ++l) slot_.push_back(l);  // every block bf16
  layout_weights(false);
  MXDP_CUDA_CHECK(cudaMallocHost(&loss_host_, sizeof(float)));
  loss_mean_.resize(1);
}

template <class I, class C>
LmCuda<I, C>::~LmCuda() {
  cudaStreamSynchronize(s_);
  cudaFreeHost(loss_host_);
}

template <class I, class C>
void LmCuda<I, C>::init_weights(uint64_t seed) {
  std::vector<float> host(size_t(total_), 0.f);
  for (size_t p = 0; p < specs_.size(); ++p) init_param(seed, int(p), host.data() + offsets_[p]);
  init_.resize(total_);
  MXDP_CUDA_CHECK(cudaMemcpyAsync(init_.get(), host.data(), host.size() * sizeof(float), cudaMemcpyHostToDevice, s_));
  to_compute_weights();
  MXDP_CUDA_CHECK(cudaStreamSynchronize(s_));  // `host` goes away
}

template <class I, class C>
const float* LmCuda<I, C>::initial_weights(int p) {
  MXDP_CHECK(init_.get(), "initial_weights(", p, ") needs init_weights() first (or they were released)");
  return init_.get() + offsets_[check_param(p)];
}

template <class I, class C>
void LmCuda<I, C>::release_initial_weights() {
  MXDP_CUDA_CHECK(cudaStreamSynchronize(s_));
  init_.reset();
  init_released_ = true;
}

template <class I, class C>
void LmCuda<I, C>::set_weights(int p, const float* host) {
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

template <class I, class C>
void LmCuda<I, C>::layout_weights(bool fp8) {
  std::vector<int64_t> off(specs_.size(), -1);
  int64_t n = 0;
  for (size_t p = 0; p < specs_.size(); ++p)
    if (!(fp8 && specs_[p].fp8_linear)) {
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

template <class I, class C>
void LmCuda<I, C>::set_fp8_compute(const Fp8Compute& c) {
  const std::vector<ParamSpec> specs = c.apply(base_specs_, cfg_.n_layer);
  size_t listed = 0, flagged = 0;
  for (const std::vector<int>& b : block_linears_) listed += b.size();
  for (const ParamSpec& p : base_specs_) flagged += p.fp8_linear;
  MXDP_CHECK(block_linears_.size() == size_t(cfg_.n_layer) && listed == flagged, "internal: the GPU ", name_,
             " lists ", listed, " block linears for ", flagged, " FP8 linear weights");
  std::vector<int> slot(size_t(cfg_.n_layer));  // per block: its index among the blocks of its kind
  int n_fp8 = 0, n_bf16 = 0;
  for (int l = 0; l < cfg_.n_layer; ++l) slot[size_t(l)] = c.fp8_block(l, cfg_.n_layer) ? n_fp8++ : n_bf16++;
  if (c.on == fp8_ && slot == slot_ && n_fp8 == n_fp8_blocks_) return;
  MXDP_CHECK(!ran_, "set_fp8_compute: set it before the model's first forward");
  fp8_width_ = 0;
  for (size_t p = 0; p < specs.size(); ++p) {
    specs_[p].fp8_linear = specs[p].fp8_linear;
    if (c.on && specs[p].fp8_linear) fp8_width_ = std::max({fp8_width_, specs[p].shape[0], specs[p].shape[1]});
  }
  fp8_ = c.on;
  slot_ = std::move(slot);
  n_fp8_blocks_ = n_fp8;
  B_ = T_ = 0;  // the arena's layout depends on it (the activations each kind of block keeps)
  if (fp8_ && !lin_) lin_ = std::make_unique<Fp8Linear>(s_);
  fw_.assign(fp8_ ? specs_.size() : 0, {});
  fwt_.assign(fp8_ ? specs_.size() : 0, {});
  layout_weights(fp8_);
}

template <class I, class C>
std::vector<intptr_t> LmCuda<I, C>::fetch_stage_weights(int s, ModelHooks& hooks, bool transposed) {
  if (s < 1 || s > cfg_.n_layer || !fp8_block(s - 1)) return {};
  std::vector<intptr_t> key;
  for (int p : block_linears_[size_t(s - 1)]) {
    Fp8Weight& f = transposed ? fwt_[size_t(p)] : fw_[size_t(p)];
    f = transposed ? hooks.fp8_weight_transposed(p) : hooks.fp8_weight(p);
    key.push_back(reinterpret_cast<intptr_t>(f.codes));
    key.push_back(reinterpret_cast<intptr_t>(f.scales));
  }
  return key;
}

template <class I, class C>
void LmCuda<I, C>::to_compute_weights() {
  for (int p = 0; p < int(specs_.size()); ++p)
    if (has_bf16(p)) f32_to_bf16(init_.get() + offsets_[size_t(p)], w(p), specs_[size_t(p)].numel(), s_);
}

template <class I, class C>
void LmCuda<I, C>::forward_into(const Batch& batch, ModelHooks& hooks, float* loss) {
  state_ = State::kNone;
  MXDP_CHECK(batch.targets != nullptr, "forward needs targets (use forward_logits for inference)");
  upload_batch(batch.inputs, batch.targets, batch.B, batch.T);
  run_forward(hooks);
  const int M = B_ * T_;
  segment(kLossSegment, {&loss, 1}, [&] {
    classifier(io_.logits, io_.losses, io_.targets, M, cfg_.vocab, logits_ld_, 1.f / float(M), /*write_grad=*/true,
               s_);
    mean_loss(io_.losses, M, loss, s_);
  });
  state_ = State::kLoss;
}

template <class I, class C>
float LmCuda<I, C>::forward(const Batch& batch, ModelHooks& hooks) {
  forward_into(batch, hooks, loss_mean_.get());
  MXDP_CUDA_CHECK(cudaMemcpyAsync(loss_host_, loss_mean_.get(), sizeof(float), cudaMemcpyDeviceToHost, s_));
  MXDP_CUDA_CHECK(cudaStreamSynchronize(s_));
  return *loss_host_;
}

template <class I, class C>
void LmCuda<I, C>::forward_logits(const int32_t* tokens, int B, int T, ModelHooks& hooks) {
  state_ = State::kNone;
  // Inference pads T up to a multiple of 64 (with token 0): positions < T
  // see only positions <= themselves (causal), so their logits are those of
  // the unpadded sequence, and a sampler growing T one token at a time
  // needs one attention graph per 64 lengths instead of one per length.
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

template <class I, class C>
std::vector<float> LmCuda<I, C>::logits_last(int b) const {
  MXDP_CHECK(state_ == State::kLogits, "logits_last() needs forward_logits() first (forward with targets turns "
             "the GPU model's logits into their gradient in place)");
  MXDP_CHECK(b >= 0 && b < B_, "logits_last(", b, ") outside B=", B_);
  std::vector<uint16_t> row(size_t(cfg_.vocab));
  const uint16_t* src = io_.logits + (int64_t(b) * T_ + real_T_ - 1) * logits_ld_;
  MXDP_CUDA_CHECK(cudaMemcpyAsync(row.data(), src, row.size() * 2, cudaMemcpyDeviceToHost, s_));
  MXDP_CUDA_CHECK(cudaStreamSynchronize(s_));
  std::vector<float> out(row.size());
  for (size_t i = 0; i < row.size(); ++i) out[i] = codec::bf16_to_f32(row[i]);
  return out;
}

template <class I, class C>
void LmCuda<I, C>::backward(ModelHooks& hooks) {
  MXDP_CHECK(state_ == State::kLoss, "backward needs a forward with targets since the last backward");
  state_ = State::kBackwardDone;
  MXDP_CHECK(int(stage_grads_.size()) == num_layers(), "the GPU ", name_, " lists the gradients of ",
             stage_grads_.size(), " stages, not ", num_layers());
  for (int s = cfg_.n_layer + 1; s >= 0; --s) {
    std::vector<float*> g;
    for (int p : stage_grads_[size_t(s)]) g.push_back(p >= 0 ? hooks.grad(p) : nullptr);
    if (s > 0) {
      const std::vector<intptr_t> extra = fetch_stage_weights(s, hooks, /*transposed=*/true);
      segment(backward_segment(s), g, [&] { backward_stage(s, g.data()); }, extra);
    } else {
      backward_stage(0, g.data());  // not a graph: its launch size is the batch's number of distinct tokens
    }
    hooks.after_layer_backward(s);
  }
}

template <class I, class C>
void LmCuda<I, C>::ensure_activations(int B, int T) {
  if (B == B_ && T == T_) return;
  MXDP_CUDA_CHECK(cudaStreamSynchronize(s_));
  ArenaSlicer sizing;
  carve(sizing, B, T);
  arena_.resize(sizing.size());
  ArenaSlicer take(arena_.get());
  carve(take, B, T);
  if (fp8_) lin_->reserve(int(int64_t(B) * T), int(fp8_width_));
  activations_ready(B, T);
  B_ = B;
  T_ = T;
}

template <class I, class C>
void LmCuda<I, C>::upload_batch(const int32_t* tokens, const int32_t* targets, int B, int T) {
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
  n_seg_ = upload_.upload(tokens, targets, BT, V, io_, s_);
}

template <class I, class C>
void LmCuda<I, C>::run_forward(ModelHooks& hooks) {
  ran_ = true;
  for (int s = 0; s <= cfg_.n_layer + 1; ++s) {
    hooks.before_layer(s);
    const std::vector<intptr_t> extra = fetch_stage_weights(s, hooks, /*transposed=*/false);
    segment(forward_segment(s), {}, [&] { forward_stage(s); }, extra);
  }
}

template <class I, class C>
void LmCuda<I, C>::segment(int id, std::span<float* const> pointers, const std::function<void()>& work,
                           std::span<const intptr_t> extra) {
  StreamGraphs::Key key{B_, T_, reinterpret_cast<intptr_t>(arena_.get()),
                        reinterpret_cast<intptr_t>(att_.workspace()), att_.workspace_bytes()};
  // Fp8Linear's scratch (reallocated when it grows) is in every segment's key.
  key.push_back(reinterpret_cast<intptr_t>(lin_ ? lin_->workspace_key() : nullptr));
  for (float* p : pointers) key.push_back(reinterpret_cast<intptr_t>(p));
  for (intptr_t p : extra) key.push_back(p);
  graphs_.run(id, key, work);
}

}  // namespace mxdp::cuda
