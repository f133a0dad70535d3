// The Llama family's entry in the model registry (models/registry.h), and the
// map between the registry's ModelConfig and LlamaConfig.
#pragma once

#include <string>

#include "models/llama/llama_config.h"
#include "models/registry.h"

namespace mxdp {

const ModelSpec& llama_spec();

// {"llama", llama_config_json(c)} (validated).
ModelConfig llama_model_config(const LlamaConfig& c);
// The LlamaConfig of a llama ModelConfig (another architecture throws).
LlamaConfig llama_config_of(const ModelConfig& c);
// "n_layer 4, n_head 4, n_kv_head 2, head_dim 16, d_model 64, d_ff 192, max_seq 128, vocab 256, ..."
std::string llama_describe(const LlamaConfig& c);

}  // namespace mxdp
