// The Llama family on the CPU: fp32 forward and backward, OpenMP, bitwise
// deterministic for any thread count. Architecture and parameter layout:
// llama_config.h. Layers seen by the hooks: 0 = embedding, 1..n_layer =
// blocks, n_layer+1 = final RMSNorm and the head (embed when tied: its
// gradient is complete after layer 0's backward).
#pragma once

#include <cstdint>
#include <vector>

#include "models/cpu/fp8_matmul.h"
#include "models/cpu/lm_head.h"
#include "models/cpu/storage.h"
#include "models/llama/llama_config.h"
#include "models/model.h"

namespace mxdp {

// A Llama on any device (the CPU one below; a GPU one would derive too).
class LlamaModel : public LanguageModel {
 public:
  virtual const LlamaConfig& config() const = 0;
  int vocab() const override { return config().vocab; }
  int max_seq() const override { return config().max_seq; }
};

class Llama : public LlamaModel {
 public:
  explicit Llama(const LlamaConfig& cfg);

  const LlamaConfig& config() const override { return cfg_; }
  const std::vector<ParamSpec>& params() const override { return params_.specs(); }
  int num_layers() const override { return cfg_.n_layer + 2; }
  float* weights(int param) override { return params_.checked(param); }
  void init_weights(uint64_t seed) override;
  void set_weights(int param, const float* host) override { params_.set(param, host); }
  // FP8 compute (compute_dtype fp8, docs/fp8.md): the four linear layers of
  // each block (qkv, o, gate_up, down) read the engine's FP8 W / W^T and
  // quantize their activations and gradients 1x128 (models/cpu/fp8_matmul.h),
  // as the CPU GPT's do; the embedding, the norms and the head stay fp32.
  void set_fp8_compute(const Fp8Compute& c) override;
  bool reads_fp8_weights() const override { return fp8_; }

  float forward(const Batch& batch, ModelHooks& hooks) override;
  void forward_into(const Batch& b, ModelHooks& h, float* loss) override { *loss = forward(b, h); }
  void backward(ModelHooks& hooks) override;
  void forward_logits(const int32_t* tokens, int B, int T, ModelHooks& hooks) override;
  // vocab floats: the logits of sequence b, position t of the last forward.
  const float* logits(int b, int t) const { return head_.logits(b, t); }
  std::vector<float> logits_last(int b = 0) const override { return head_.logits_last(b); }

 private:
  using BlockParams = LlamaParamIndex::Block;
  void ensure_activations(int B, int T);
  void run_forward(const int32_t* tokens, int B, int T, ModelHooks& hooks);
  void block_backward(int l, ModelHooks& hooks);
  float* w(int i) { return params_[i]; }
  // y[M, N] = x W^T (+ bias), and its backward, for block linear weight wp: cpu::block_linear_*,
  // in FP8 when wp computes in FP8.
  void linear(float* y, const float* x, int wp, const float* bias, int M, int N, int K, ModelHooks& hooks);
  void linear_backward(float* dx, int wp, float* dbias, const float* dy, const float* x, int M, int N, int K,
                       ModelHooks& hooks);

  LlamaConfig cfg_;
  cpu::ParamStore params_;
  std::vector<float> inv_freq_;
  int embed_ = 0, norm_ = 0, head_w_ = 0;  // head_w_: the head's weight (embed_ when tied)
  std::vector<BlockParams> blocks_;
  bool fp8_ = false;      // FP8 compute of the block linears (of some blocks at least)
  cpu::Fp8Scratch fp8s_;  // their quantized operands

  int B_ = 0, T_ = 0;
  std::vector<int32_t> tokens_;
  std::vector<float> resid_;      // (L+1) x [BT, C]: the stream entering block l; last = output
  std::vector<float> resid_mid_;  // L x [BT, C]: after the attention half
  std::vector<float> hn1_, rstd1_, qkv_, atty_, att_;  // per block
  std::vector<float> hn2_, rstd2_, gate_up_;           // per block
  std::vector<float> hnf_, rstdf_;
  cpu::LmOutput head_;  // [BT, V]: the logits, their loss, then dlogits
  std::vector<float> wt_, tmp_, act_;  // scratch: transposed weight, [BT, C], [BT, F]
  std::vector<float> dresid_, dln_, dqkv_, datty_, dact_, dgu_;
};

}  // namespace mxdp
