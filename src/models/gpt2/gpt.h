// GPT-2 on the CPU: fp32 forward and backward, OpenMP, bitwise deterministic.
//
// Architecture (GPT-2, as in llm.c's train_gpt2.c and nanoGPT):
//   x = wte[token] + wpe[t]                                     layer 0
//   for each block l = 1..n_layer:                              layer l
//     x = x + proj(attn(qkv(LN1(x))))      causal, n_head heads, softmax scale 1/sqrt(d_head)
//     x = x + mlp_proj(gelu_tanh(fc(LN2(x))))                   fc: C -> 4C
//   logits = LNf(x) @ wte^T       (LM head tied to wte)         layer n_layer+1
//   loss = mean over the B*T positions of cross-entropy over the first `vocab` logits
// LayerNorm has weight and bias, eps 1e-5. Every linear layer has a bias.
//
// Storage: every 2-D weight is {rows, cols} row-major with cols = the input
// dimension the matmul contracts over (PyTorch's nn.Linear layout), so a row
// is d_model or 4*d_model long and holds whole 32-element blocks. wte is
// {padded_vocab, d_model}; rows >= vocab are padding: never a token, never in
// the softmax, initialised to 0, and their gradient stays 0.
//
// Layers seen by the hooks: 0 = embeddings (wte, wpe), 1..n_layer = blocks,
// n_layer+1 = final LayerNorm (+ the tied head, whose weight is wte, layer 0).
// params() lists, in this order:
//   wte {Vp,C}, wpe {max_seq,C},
//   per block: ln1.w {C}, ln1.b {C}, attn.qkv.w {3C,C}, attn.qkv.b {3C},
//              attn.proj.w {C,C}, attn.proj.b {C}, ln2.w {C}, ln2.b {C},
//              mlp.fc.w {4C,C}, mlp.fc.b {4C}, mlp.proj.w {C,4C}, mlp.proj.b {C},
//   lnf.w {C}, lnf.b {C}.
// qkv rows are [q | k | v], each C rows, head h owning rows h*d_head..(h+1)*d_head-1.
//
// Determinism: every output element (activation or gradient) is produced by
// one fixed sequential loop; OpenMP only splits the set of outputs between
// threads. Results are bitwise identical run to run and for any thread count.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "models/cpu/lm_head.h"
#include "models/cpu/storage.h"
#include "models/cpu/fp8_matmul.h"
#include "models/model.h"

namespace mxdp {

struct GptConfig {
  int vocab = 256;         // real vocabulary: tokens and softmax are over [0, vocab)
  int padded_vocab = 256;  // rows of wte (>= vocab); padding makes the head GEMM friendlier
  int max_seq = 64;        // rows of wpe: the longest sequence T
  int n_layer = 2;
  int n_head = 4;
  int d_model = 64;
};

// Named configs: "tiny" (byte-level, the CPU default), "gpt2-124m", "gpt2-350m",
// "gpt2-774m", "gpt2-1558m". Throws mxdp::Error naming the known configs otherwise.
GptConfig gpt_config(const std::string& name);
std::vector<std::string> gpt_config_names();

// Throws mxdp::Error with a clear message unless: all sizes positive,
// vocab <= padded_vocab, d_model % n_head == 0, d_model % 32 == 0 (every 2-D
// weight then has rows of whole 32-blocks, so all are eligible for the
// low-precision gather).
void validate(const GptConfig& cfg);

// The parameter list of a config (validated), without allocating anything.
std::vector<ParamSpec> gpt_param_specs(const GptConfig& cfg);
// gpt_param_specs as a model under FP8 compute `c` lists them: fp8_linear
// only on the linear weights of the blocks that compute in FP8 (all four
// linears of block l are layer l + 1's); c off: gpt_param_specs. c is checked
// (Fp8Compute::check) when on.
std::vector<ParamSpec> gpt_fp8_param_specs(const GptConfig& cfg, const Fp8Compute& c);
// Total stored parameters, padding rows of wte included.
int64_t gpt_num_parameters(const GptConfig& cfg);
// Model FLOPs of training on one token of seq_len-token sequences, forward and
// backward (the numerator of MFU): 6 a weight of every matrix product (the
// four linears of each block, 12 d_model^2, and the tied LM head over the
// real vocabulary; wte and wpe are read as lookups) and 6 n_layer seq_len
// d_model for attention's two products over the causal half of the
// seq_len^2 scores (PaLM's and nanoGPT's count takes all of them, 12 n_layer
// seq_len d_model; the benchmarks count as here). Biases, norms, GELU and the
// softmax are not counted.
double gpt_train_flops_per_token(const GptConfig& cfg, int seq_len);

// A GPT on any device: a LanguageModel (model.h) with its config.
// Gpt (below) is the CPU model; cuda/gpt_cuda.h has the GPU one. Both have the
// same parameter list (gpt_param_specs) and the same init (gpt_init_param).
class GptModel : public LanguageModel {
 public:
  virtual const GptConfig& config() const = 0;
  int vocab() const override { return config().vocab; }
  int max_seq() const override { return config().max_seq; }
};

// Writes param p's initial fp32 values (GPT-2 init, see Gpt::init_weights) into
// out (host memory, numel floats). The one definition both devices use.
void gpt_init_param(const GptConfig& cfg, const std::vector<ParamSpec>& specs, uint64_t seed, int p, float* out);

class Gpt : public GptModel {
 public:
  explicit Gpt(const GptConfig& cfg);

  const GptConfig& config() const override { return cfg_; }
  const std::vector<ParamSpec>& params() const override { return params_.specs(); }
  int num_layers() const override { return cfg_.n_layer + 2; }
  float* weights(int param) override { return params_.checked(param); }
  int64_t num_parameters() const { return params_.num_parameters(); }
  // FP8 compute (compute_dtype fp8, docs/fp8.md): the four linear layers of
  // each block read the engine's FP8 W / W^T (ModelHooks::fp8_weight) and
  // quantize their activations and gradients 1x128 (models/cpu/fp8_matmul.h); the
  // embeddings, attention and the LM head stay fp32, and so do the linears of
  // the blocks c keeps in bf16. Any d_model: a width that is not a multiple
  // of 128 ends in partial tiles and 1x128 blocks (check_fp8_compute,
  // model.h, says what it needs).
  void set_fp8_compute(const Fp8Compute& c) override;
  bool reads_fp8_weights() const override { return fp8_; }

  // GPT-2 init from a counter-based RNG (splitmix64 + Box-Muller, so the
  // values do not depend on the standard library): 2-D weights normal(0, 0.02),
  // residual projections (attn.proj.w, mlp.proj.w) normal(0, 0.02/sqrt(2*n_layer)),
  // LayerNorm weights 1, biases 0, padding rows of wte 0. Each element's value
  // depends only on (seed, param index, element index).
  void init_weights(uint64_t seed) override;

  // Requires 1 <= T <= max_seq, 1 <= B, tokens and targets in [0, vocab).
  float forward(const Batch& batch, ModelHooks& hooks) override;
  void forward_into(const Batch& b, ModelHooks& h, float* loss) override { *loss = forward(b, h); }  // host memory
  // Accumulates into hooks.grad(i). Needs a forward with targets since the
  // last backward (backward overwrites the probabilities with their gradient).
  void backward(ModelHooks& hooks) override;

  // Inference: forward without targets (no loss, no backward possible). Fills
  // the logits of every position; read them with logits().
  void forward_logits(const int32_t* tokens, int B, int T, ModelHooks& hooks) override;
  // Logits of sequence b, position t of the last forward: padded_vocab floats,
  // of which the first vocab are meaningful. Valid until the next forward or
  // backward (backward turns them into gradients).
  const float* logits(int b, int t) const { return head_.logits(b, t); }
  // The `vocab` real logits of position T-1 of sequence b (what a sampler needs).
  std::vector<float> logits_last(int b = 0) const override { return head_.logits_last(b); }
  void set_weights(int param, const float* host) override { params_.set(param, host); }

 private:
  struct BlockParams {  // param indices of one block
    int ln1w, ln1b, qkvw, qkvb, projw, projb, ln2w, ln2b, fcw, fcb, mprojw, mprojb;
  };
  void ensure_activations(int B, int T);
  void run_forward(const int32_t* tokens, int B, int T, ModelHooks& hooks);
  float* w(int i) { return params_[i]; }

  GptConfig cfg_;
  cpu::ParamStore params_;
  int wte_ = 0, wpe_ = 1, lnfw_ = 0, lnfb_ = 0;
  std::vector<BlockParams> blocks_;

  // Activations of the last forward (sized for B_ x T_; re-sized when they change).
  int B_ = 0, T_ = 0;
  std::vector<int32_t> tokens_;
  std::vector<float> resid_;     // (n_layer+1) x [BT, C]: residual stream entering block l; last = output
  std::vector<float> resid_mid_; // n_layer x [BT, C]: after the attention half of block l
  std::vector<float> ln1_, ln1_mean_, ln1_rstd_, qkv_, atty_, att_;
  std::vector<float> ln2_, ln2_mean_, ln2_rstd_, fch_, fch_tanh_;
  std::vector<float> lnf_, lnf_mean_, lnf_rstd_;
  cpu::LmOutput head_;           // [BT, Vp]: the logits, their loss, then dlogits
  // Scratch.
  std::vector<float> wt_;        // a transposed weight for the forward GEMM
  bool fp8_ = false;             // FP8 compute of the block linears (of some blocks at least)
  cpu::Fp8Scratch fp8s_;             // their quantized operands
  std::vector<float> tmp_;       // [BT, C]
  std::vector<float> fch_gelu_;  // [BT, 4C]: gelu(fch) of the block at hand
  std::vector<float> dresid_, dln_, dqkv_, datty_, dfch_, dfchg_;
};

}  // namespace mxdp
