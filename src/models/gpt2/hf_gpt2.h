// The Hugging Face GPT-2 layout (transformers' GPT2LMHeadModel), out and in.
//
// A directory with
//   config.json        GPT2Config fields: vocab_size, n_positions (= n_ctx), n_embd,
//                      n_layer, n_head, activation_function "gelu_new" (GELU, tanh
//                      approximation), layer_norm_epsilon 1e-5, dropouts 0,
//                      tie_word_embeddings true, ...
//   model.safetensors  the tensors, named and shaped as GPT2LMHeadModel's state dict:
//     transformer.wte.weight               [vocab, C]   (mxdp's padding rows dropped)
//     transformer.wpe.weight               [n_positions, C]
//     transformer.h.N.ln_1.weight / .bias  [C]
//     transformer.h.N.attn.c_attn.weight   [C, 3C]      Conv1D: [in, out], y = x W + b,
//     transformer.h.N.attn.c_attn.bias     [3C]           i.e. mxdp's qkv.w {3C, C} transposed
//     transformer.h.N.attn.c_proj.weight   [C, C]       (transposed) / .bias [C]
//     transformer.h.N.ln_2.weight / .bias  [C]
//     transformer.h.N.mlp.c_fc.weight      [C, 4C]      (transposed) / .bias [4C]
//     transformer.h.N.mlp.c_proj.weight    [4C, C]      (transposed) / .bias [C]
//     transformer.ln_f.weight / .bias      [C]
//   with no lm_head.weight: the head is tied to wte (as save_pretrained writes it).
//
// Reading (init_from_hf_gpt2) takes such a directory (or one whose weights are
// the shards a model.safetensors.index.json lists) or a bare .safetensors
// file, with or without the "transformer." prefix (the GPT-2 files on the
// Hugging Face hub have none), F32, BF16 or F16 tensors; it ignores the
// attention-mask buffers older files carry (h.N.attn.bias [1,1,n,n],
// h.N.attn.masked_bias) and accepts an lm_head.weight only if it equals wte.
// Every other name and every shape is checked against the model being built,
// and config.json (when there is one) against its config; errors say which
// flag would match (--n-layer, --d-model, --vocab, ...).
#pragma once

#include <cstdio>
#include <string>
#include <vector>

#include "models/gpt2/gpt.h"
#include "train/trained_weights.h"

namespace mxdp {

// Where mxdp param p goes in the Hugging Face layout.
struct HfGpt2Tensor {
  int param = 0;                // index in gpt_param_specs(cfg)
  std::string name;             // without the "transformer." prefix, e.g. "h.0.attn.c_attn.weight"
  std::vector<int64_t> shape;   // in the file
  bool transpose = false;       // a Conv1D weight: [in, out] = mxdp's {out, in} transposed
};
std::vector<HfGpt2Tensor> hf_gpt2_tensors(const GptConfig& cfg);

// Writes DIR/config.json and DIR/model.safetensors (DIR created if missing)
// from a checkpoint's inference weights; `bf16` rounds every tensor to
// bfloat16 (nearest even), else fp32. Prints what it wrote to `log` unless null.
void export_hf_gpt2(const InferenceWeights& w, const std::string& dir, bool bf16, std::FILE* log = stdout);

// Overwrites every weight of `model` with the GPT-2 at `path` (a directory
// holding model.safetensors and config.json, or a .safetensors file), through
// GptModel::set_weights. wte's padding rows become 0.
void init_from_hf_gpt2(GptModel& model, const std::string& path);

}  // namespace mxdp
