#include "models/registry.h"

#include <algorithm>
#include <filesystem>

#include "models/gpt2/spec.h"
#include "models/hf_files.h"
#include "models/llama/spec.h"
#include "util/check.h"

namespace mxdp {

using nlohmann::json;

void NullHooks::before_layer(int) {}
float* NullHooks::grad(int param) { MXDP_FAIL("NullHooks has no gradient buffers (asked for param ", param, ")"); }
void NullHooks::after_layer_backward(int) {}

std::span<const ModelSpec* const> all_models() {
  // The registry: one row per architecture. (The toy model of the engine's
  // tests has no logits to sample from and no Hugging Face layout: not a row.)
  static const ModelSpec* const table[] = {&gpt2_spec(), &llama_spec()};
  return table;
}

const ModelSpec& model_spec(const std::string& arch) {
  std::string known;
  for (const ModelSpec* s : all_models()) {
    if (arch == s->name) return *s;
    known += (known.empty() ? "" : ", ") + std::string(s->name);
  }
  MXDP_FAIL("unknown model architecture '", arch, "' (known: ", known, ")");
}

const ModelSpec& ModelConfig::spec() const { return model_spec(arch); }

namespace {

ModelConfig hf_dir_model_config(const std::string& dir, const ModelOverrides& overrides) {
  const std::string cj = (std::filesystem::path(dir) / "config.json").string();
  const json c = read_json_file(cj);
  for (const ModelSpec* s : all_models())
    if (s->reads_hf_config && s->from_hf_dir && s->reads_hf_config(c)) return s->from_hf_dir(dir, overrides);
  MXDP_FAIL("'", cj, "': mxdp has no architecture for model_type ", c.is_object() && c.contains("model_type")
                                                                       ? c["model_type"].dump()
                                                                       : std::string("(none)"));
}

}  // namespace

ModelConfig model_config(const std::string& name, const ModelOverrides& overrides) {
  std::error_code ec;
  if (std::filesystem::is_regular_file(std::filesystem::path(name) / "config.json", ec))
    return hf_dir_model_config(name, overrides);
  const ModelSpec* owner = all_models()[0];
  for (const ModelSpec* s : all_models()) {
    const std::vector<std::string> p = s->presets();
    if (std::find(p.begin(), p.end(), name) != p.end()) {
      owner = s;
      break;
    }
  }
  return owner->from_preset(name, overrides);
}

namespace {
constexpr const char* kDefaultArch = "gpt2";  // checkpoints without extra["arch"]
}

ModelConfig checkpoint_model_config(const json& extra, const std::string& what) {
  MXDP_CHECK(extra.is_object() && extra.contains("model") && extra["model"].is_object(), what,
             ": the checkpoint records no model config (extra.model)");
  std::string arch = kDefaultArch;
  if (extra.contains("arch")) {
    MXDP_CHECK(extra["arch"].is_string(), what, ": the checkpoint's arch is ", extra["arch"].dump(), ", not a name");
    arch = extra["arch"].get<std::string>();
  }
  return model_spec(arch).from_json(extra["model"], what);
}

void record_model_config(json& extra, const ModelConfig& c) {
  extra["model"] = c.config;
  if (c.arch != kDefaultArch) extra["arch"] = c.arch;
}

bool records_model_config(const json& extra, const ModelConfig& c) {
  return extra.is_object() && extra.contains("model") && extra["model"] == c.config &&
         extra.value("arch", std::string(kDefaultArch)) == c.arch;
}

}  // namespace mxdp
