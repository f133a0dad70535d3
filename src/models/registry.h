// The model registry: one entry (ModelSpec) per architecture, in the spirit of
// torchtitan's ModelSpec. Everything above the models (trainer, sample,
// trained weights, export, plan, checkpoints) works with any registered model
// through this interface and a ModelConfig handle; only the architecture's own
// folder (models/gpt2/) knows its config struct and its classes.
//
// Registration is a table in registry.cpp. Adding an architecture is its
// folder (its Model, its spec.cpp) and one row in that table.
//
// Checkpoints record a model as today: extra["model"] is the architecture's
// config JSON (ModelConfig::config), and extra["arch"] names the architecture;
// it is written only for an architecture other than gpt2 and read as "gpt2"
// when absent, so every GPT-2 checkpoint, old or new, is byte for byte as before.
#pragma once

#include <cstdint>
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>
#include <span>
#include <string>
#include <vector>

#include "models/model.h"

namespace mxdp {

struct ModelSpec;

// A model config of any architecture: its name and its config as JSON (the
// shape checkpoints record in extra["model"]; only the architecture reads the fields).
struct ModelConfig {
  std::string arch;
  nlohmann::json config;
  const ModelSpec& spec() const;  // the registry's entry for arch
};

// The size flags of `mxdp train` / `mxdp plan` (--n-layer, ...): > 0 overrides
// the preset's value.
struct ModelOverrides {
  int n_layer = 0, n_head = 0, d_model = 0, max_seq = 0, vocab = 0;
};

struct InferenceWeights;  // train/trained_weights.h

// One architecture. Every function takes configs of this architecture only.
struct ModelSpec {
  const char* name;  // "gpt2": ModelConfig::arch, checkpoints' extra["arch"]
  // The preset names it answers to (--model), and the config of one, with the
  // overrides applied, validated (an unknown name throws, naming the known ones).
  std::vector<std::string> (*presets)();
  ModelConfig (*from_preset)(const std::string& preset, const ModelOverrides& overrides);
  // The config a checkpoint's extra["model"] records, validated; `what` (the
  // checkpoint's path) starts every error.
  ModelConfig (*from_json)(const nlohmann::json& model, const std::string& what);
  // For the run header: "n_layer 4, n_head 4, d_model 64, max_seq 128, vocab 256".
  std::string (*describe)(const ModelConfig& c);
  // What follows from the architecture's config type (with_config_entries
  // below fills these in from it).
  int64_t (*num_parameters)(const ModelConfig& c) = nullptr;  // stored parameters, padding included
  std::vector<ParamSpec> (*param_specs)(const ModelConfig& c) = nullptr;
  int (*vocab)(const ModelConfig& c) = nullptr;    // real vocabulary
  int (*max_seq)(const ModelConfig& c) = nullptr;  // longest sequence
  int (*n_layer)(const ModelConfig& c) = nullptr;  // blocks (for messages)
  int (*d_model)(const ModelConfig& c) = nullptr;  // width (the default learning rate follows it)
  // Model FLOPs of training on one token of seq_len-token sequences (MFU's
  // numerator; each architecture's count says what it includes).
  double (*train_flops_per_token)(const ModelConfig& c, int seq_len) = nullptr;
  // The model on the CPU (fp32, host memory), and on the current GPU computing
  // on `stream` (a cudaStream_t); build_cuda is null where this mxdp was built
  // without CUDA and cuDNN.
  std::unique_ptr<LanguageModel> (*build_cpu)(const ModelConfig& c) = nullptr;
  std::unique_ptr<LanguageModel> (*build_cuda)(const ModelConfig& c, void* stream);
  // Hugging Face adapter: overwrite every weight of `model` (built by this
  // spec) from a Hugging Face directory or .safetensors file; write a
  // checkpoint's inference weights as a Hugging Face directory.
  void (*hf_import)(LanguageModel& model, const std::string& path);
  void (*hf_export)(const InferenceWeights& w, const std::string& dir, bool bf16, std::FILE* log);
  // Optional (null: the architecture reads no Hugging Face config): whether a
  // config.json (parsed) is one of this architecture's, and the config of a
  // Hugging Face directory (its config.json), for `--model DIR`.
  bool (*reads_hf_config)(const nlohmann::json& config_json) = nullptr;
  ModelConfig (*from_hf_dir)(const std::string& dir, const ModelOverrides& overrides) = nullptr;
};

// For an architecture's spec.cpp: `spec` with the entries that follow from
// its config type filled in (num_parameters, param_specs, vocab, max_seq,
// n_layer, d_model, train_flops_per_token, build_cpu). config_of maps a
// ModelConfig to the architecture's config (validated, as ModelSpec's
// functions need), params_of lists a config's parameters, flops_of counts a
// config's training FLOPs a token, CpuModel is built from a config.
template <auto config_of, auto params_of, auto flops_of, class CpuModel>
ModelSpec with_config_entries(ModelSpec spec) {
  spec.num_parameters = [](const ModelConfig& c) {
    int64_t n = 0;
    for (const ParamSpec& p : params_of(config_of(c))) n += p.numel();
    return n;
  };
  spec.param_specs = [](const ModelConfig& c) { return params_of(config_of(c)); };
  spec.vocab = [](const ModelConfig& c) { return config_of(c).vocab; };
  spec.max_seq = [](const ModelConfig& c) { return config_of(c).max_seq; };
  spec.n_layer = [](const ModelConfig& c) { return config_of(c).n_layer; };
  spec.d_model = [](const ModelConfig& c) { return config_of(c).d_model; };
  spec.train_flops_per_token = [](const ModelConfig& c, int seq_len) { return flops_of(config_of(c), seq_len); };
  spec.build_cpu = [](const ModelConfig& c) -> std::unique_ptr<LanguageModel> {
    return std::make_unique<CpuModel>(config_of(c));
  };
  return spec;
}

// Every registered architecture, in table order (the first is the default).
std::span<const ModelSpec* const> all_models();
// The entry of `arch`; an unknown name throws, naming the known ones.
const ModelSpec& model_spec(const std::string& arch);

// The config preset `name` names, of whichever architecture lists it (a name
// none lists goes to the default architecture, whose error names its presets).
// A directory holding a config.json is a Hugging Face model: the architecture
// whose reads_hf_config accepts it builds the config from it.
ModelConfig model_config(const std::string& name, const ModelOverrides& overrides = {});
// The model config a checkpoint's `extra` records (extra["arch"], default
// gpt2; extra["model"]), validated; `what` starts every error.
ModelConfig checkpoint_model_config(const nlohmann::json& extra, const std::string& what);
// What a checkpoint's extra records of `c`: sets extra["model"], and extra["arch"]
// unless c is gpt2 (whose checkpoints never carried it).
void record_model_config(nlohmann::json& extra, const ModelConfig& c);
// True when a checkpoint's extra records exactly `c`.
bool records_model_config(const nlohmann::json& extra, const ModelConfig& c);

}  // namespace mxdp
