// GPT-2's entry in the model registry (models/registry.h), and the two-way
// map between the registry's generic ModelConfig and GptConfig, for the code
// that needs GPT-2 itself (its Hugging Face adapter, tests, benchmarks).
#pragma once

#include "models/gpt2/gpt.h"
#include "models/registry.h"

namespace mxdp {

const ModelSpec& gpt2_spec();

// {"gpt2", {vocab, padded_vocab, max_seq, n_layer, n_head, d_model}} (validated).
ModelConfig gpt2_model_config(const GptConfig& c);
// The GptConfig of a gpt2 ModelConfig (validated; another architecture throws).
GptConfig gpt2_config(const ModelConfig& c);

}  // namespace mxdp
