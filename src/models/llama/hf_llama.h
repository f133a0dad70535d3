// The Hugging Face layout of the Llama family (transformers' LlamaForCausalLM
// and Qwen2ForCausalLM), in and out.
//
// A directory with config.json (llama_config.h: llama_from_hf_config) and
// model.safetensors, or shards listed by model.safetensors.index.json
// ({"weight_map": {tensor: file}}), holding nn.Linear weights [out, in]:
//   model.embed_tokens.weight                          [V, C]
//   model.layers.N.input_layernorm.weight              [C]
//   model.layers.N.self_attn.{q,k,v}_proj.weight       [Q|KV|KV, C]  -> rows of hN.qkv.w
//   model.layers.N.self_attn.{q,k,v}_proj.bias         (Qwen2)       -> hN.qkv.b
//   model.layers.N.self_attn.o_proj.weight             [C, Q]
//   model.layers.N.post_attention_layernorm.weight     [C]
//   model.layers.N.mlp.{gate,up}_proj.weight           [F, C]        -> rows of hN.gate_up.w
//   model.layers.N.mlp.down_proj.weight                [C, F]
//   model.norm.weight                                  [C]
//   lm_head.weight                                     [V, C]  (untied; a tied model
//                                                       may carry it only equal to embed)
// F32, BF16 or F16 tensors are read; every name and shape is checked, an
// unknown tensor is an error naming it. Export writes config.json and one
// model.safetensors (F32 or BF16), without lm_head.weight when tied.
#pragma once

#include <cstdio>
#include <string>
#include <vector>

#include "models/llama/llama.h"
#include "train/trained_weights.h"

namespace mxdp {

// One Hugging Face tensor: rows [row0, row0 + shape[0]) of mxdp param `param`.
struct HfLlamaTensor {
  int param = 0;
  std::string name;
  std::vector<int64_t> shape;
  int64_t row0 = 0;
};
std::vector<HfLlamaTensor> hf_llama_tensors(const LlamaConfig& c);

// The config a Hugging Face directory's config.json describes (`dir`/config.json).
LlamaConfig read_hf_llama_config(const std::string& dir);

void export_hf_llama(const InferenceWeights& w, const std::string& dir, bool bf16, std::FILE* log = stdout);

// Overwrites every weight of `model` from the directory (or a .safetensors
// file) at `path`; a config.json there must describe the model's config.
void init_from_hf_llama(LlamaModel& model, const std::string& path);

}  // namespace mxdp
