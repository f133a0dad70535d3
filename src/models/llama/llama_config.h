// The Llama family's config (Llama 3, Qwen2 / Qwen2.5, SmolLM2, TinyLlama):
// the shape, the named presets, the parameter list, the init, and the map from
// and to a Hugging Face config.json (LlamaForCausalLM, Qwen2ForCausalLM).
//
// Architecture (as transformers' modeling_llama.py / modeling_qwen2.py):
//   x = embed[token]                                               layer 0
//   for each block l = 1..n_layer:                                 layer l
//     h = RMSNorm(x) * attn_norm.w                (fp32, eps rms_eps)
//     q, k, v = h @ qkv.w^T (+ qkv.b: Qwen2)      n_head q heads, n_kv_head k/v heads
//     q, k = RoPE(q), RoPE(k)                     rotate_half convention, rope_theta
//                                                 (Llama 3's rope_scaling when set)
//     x = x + o(attn(q, k, v))                    causal, q head h reads k/v head
//                                                 h / (n_head / n_kv_head); scale 1/sqrt(head_dim)
//     h = RMSNorm(x) * mlp_norm.w
//     x = x + down(silu(gate(h)) * up(h))         SwiGLU, d_ff wide
//   logits = RMSNorm(x) * norm.w @ head^T         head = embed (tied) or lm_head
//   loss = mean cross-entropy over the B*T positions        layer n_layer+1
//
// Parameters, in params() order (2-D weights {rows, cols}, cols the input
// dimension, as nn.Linear; Q = n_head*head_dim, KV = n_kv_head*head_dim, F = d_ff):
//   embed {V, C}                                                     layer 0
//   per block l (layer l+1):  hL.attn_norm.w {C}, hL.qkv.w {Q+2KV, C},
//     [hL.qkv.b {Q+2KV}: qkv_bias], hL.o.w {C, Q}, hL.mlp_norm.w {C},
//     hL.gate_up.w {2F, C}, hL.down.w {C, F}
//   norm.w {C}, [lm_head {V, C}: untied]                             layer n_layer+1
// qkv rows are [q | k | v] (HF's q_proj, k_proj, v_proj stacked), gate_up rows
// [gate | up]: one GEMM each, and every 2-D weight has rows of whole 32-blocks.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "models/model.h"

namespace mxdp {

// Llama 3's rope_scaling ("rope_type": "llama3"); factor 0 = none.
struct Llama3RopeScaling {
  double factor = 0.0;
  double low_freq_factor = 1.0;
  double high_freq_factor = 4.0;
  int original_max_seq = 8192;  // original_max_position_embeddings
  bool operator==(const Llama3RopeScaling&) const = default;
};

struct LlamaConfig {
  int vocab = 256;
  int max_seq = 128;  // max_position_embeddings (RoPE has no table: only a bound on T)
  int n_layer = 2;
  int n_head = 4;
  int n_kv_head = 2;
  int head_dim = 16;
  int d_model = 64;
  int d_ff = 192;
  double rms_eps = 1e-5;
  double rope_theta = 10000.0;
  Llama3RopeScaling rope_scaling{};  // factor 0: none
  bool qkv_bias = false;       // Qwen2: q/k/v projections have biases
  bool tie_embeddings = true;  // the head reads embed
  bool operator==(const LlamaConfig&) const = default;

  int q_dim() const { return n_head * head_dim; }
  int kv_dim() const { return n_kv_head * head_dim; }
  int qkv_dim() const { return q_dim() + 2 * kv_dim(); }
};

// Presets: "llama-tiny" (byte-level, CPU/CI), "smollm2-135m", "smollm2-360m",
// "qwen2.5-0.5b", "llama3.2-1b" (the shapes of their public config.json).
LlamaConfig llama_config(const std::string& name);
std::vector<std::string> llama_config_names();

// Throws mxdp::Error with one clear sentence unless the shape is consistent:
// sizes positive, n_head a multiple of n_kv_head, head_dim even, d_model,
// n_head*head_dim and d_ff multiples of 32, eps and theta positive.
void validate(const LlamaConfig& c);

std::vector<ParamSpec> llama_param_specs(const LlamaConfig& c);

// Where each weight sits in llama_param_specs(c), found by its name: the one
// index by which the CPU and the GPU Llama address their weights and
// gradients.
struct LlamaParamIndex {
  struct Block {
    int attn_norm, qkvw, qkvb, ow, mlp_norm, gate_up, down;  // qkvb -1 without biases
  };
  int embed = 0;
  std::vector<Block> blocks;  // n_layer
  int norm = -1;
  int head = -1;  // embed when the embeddings are tied
};
LlamaParamIndex llama_param_index(const LlamaConfig& c);

// Model FLOPs of training on one token of seq_len-token sequences, forward and
// backward (the numerator of MFU): 6 a weight of every matrix product (each
// block's qkv, o, gate_up and down, and the LM head, tied or not; the
// embedding is a lookup) and 6 n_layer seq_len q_dim for attention's two
// products over the causal half of the seq_len^2 scores (PaLM's count takes
// all of them; grouped K/V heads change the projections, not these products).
// Norms, RoPE, the SwiGLU and the softmax are not counted.
double llama_train_flops_per_token(const LlamaConfig& c, int seq_len);
int64_t llama_num_parameters(const LlamaConfig& c);

// Param p's initial fp32 values into out (numel floats): 2-D weights
// normal(0, 0.02), the residual projections (o.w, down.w) normal(0,
// 0.02/sqrt(2*n_layer)), RMSNorm weights 1, biases 0. Depends only on
// (seed, p, element index); the one definition every device uses.
void llama_init_param(const LlamaConfig& c, const std::vector<ParamSpec>& specs, uint64_t seed, int p, float* out);

// RoPE's inverse frequencies (head_dim/2 of them), as transformers computes
// them: 1 / theta^(2i/head_dim), then Llama 3's scaling when configured.
std::vector<float> llama_inv_freq(const LlamaConfig& c);

// mxdp's config JSON (checkpoints' extra["model"]) and back; `what` starts errors.
nlohmann::json llama_config_json(const LlamaConfig& c);
LlamaConfig llama_config_from_json(const nlohmann::json& j, const std::string& what);

// A Hugging Face config.json of LlamaForCausalLM (model_type "llama") or
// Qwen2ForCausalLM ("qwen2"), validated; anything mxdp does not compute
// (another activation, sliding window, mlp_bias, a rope_type other than
// default/llama3) is an error naming the field. `what` (the file) starts errors.
LlamaConfig llama_from_hf_config(const nlohmann::json& hf, const std::string& what);
// The config.json transformers loads for `c` ("qwen2" when qkv_bias, else "llama").
nlohmann::ordered_json llama_to_hf_config(const LlamaConfig& c);

}  // namespace mxdp
