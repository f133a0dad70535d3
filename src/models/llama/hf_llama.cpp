#include "models/llama/hf_llama.h"

#include <cstring>
#include <filesystem>
#include <map>
#include <set>

#include <nlohmann/json.hpp>

#include "io/safetensors.h"
#include "models/hf_files.h"
#include "models/llama/spec.h"
#include "util/check.h"

namespace mxdp {

namespace fs = std::filesystem;
using nlohmann::json;

std::vector<HfLlamaTensor> hf_llama_tensors(const LlamaConfig& c) {
  const std::vector<ParamSpec> specs = llama_param_specs(c);
  std::map<std::string, int> idx;
  for (size_t p = 0; p < specs.size(); ++p) idx[specs[p].name] = int(p);
  const int64_t C = c.d_model, Q = c.q_dim(), KV = c.kv_dim(), F = c.d_ff, V = c.vocab;
  std::vector<HfLlamaTensor> out;
  auto add = [&](const std::string& mx, const std::string& hf, std::vector<int64_t> shape, int64_t row0) {
    out.push_back({idx.at(mx), hf, std::move(shape), row0});
  };
  add("embed", "model.embed_tokens.weight", {V, C}, 0);
  for (int l = 0; l < c.n_layer; ++l) {
    const std::string layer = std::to_string(l), m = "h" + layer + ".", h = "model.layers." + layer + ".";
    add(m + "attn_norm.w", h + "input_layernorm.weight", {C}, 0);
    add(m + "qkv.w", h + "self_attn.q_proj.weight", {Q, C}, 0);
    add(m + "qkv.w", h + "self_attn.k_proj.weight", {KV, C}, Q);
    add(m + "qkv.w", h + "self_attn.v_proj.weight", {KV, C}, Q + KV);
    if (c.qkv_bias) {
      add(m + "qkv.b", h + "self_attn.q_proj.bias", {Q}, 0);
      add(m + "qkv.b", h + "self_attn.k_proj.bias", {KV}, Q);
      add(m + "qkv.b", h + "self_attn.v_proj.bias", {KV}, Q + KV);
    }
    add(m + "o.w", h + "self_attn.o_proj.weight", {C, Q}, 0);
    add(m + "mlp_norm.w", h + "post_attention_layernorm.weight", {C}, 0);
    add(m + "gate_up.w", h + "mlp.gate_proj.weight", {F, C}, 0);
    add(m + "gate_up.w", h + "mlp.up_proj.weight", {F, C}, F);
    add(m + "down.w", h + "mlp.down_proj.weight", {C, F}, 0);
  }
  add("norm.w", "model.norm.weight", {C}, 0);
  if (!c.tie_embeddings) add("lm_head", "lm_head.weight", {V, C}, 0);
  return out;
}

LlamaConfig read_hf_llama_config(const std::string& dir) {
  const std::string cj = (fs::path(dir) / "config.json").string();
  std::error_code ec;
  MXDP_CHECK(fs::is_regular_file(cj, ec), "'", dir, "' has no config.json (a Hugging Face model directory has one)");
  return llama_from_hf_config(read_json_file(cj), cj);
}

void export_hf_llama(const InferenceWeights& w, const std::string& dir, bool bf16, std::FILE* log) {
  const LlamaConfig c = llama_config_of(w.config);
  std::vector<SafeTensorOut> tensors;
  for (const HfLlamaTensor& t : hf_llama_tensors(c)) {
    const ParamSpec& s = w.specs[size_t(t.param)];
    const int64_t row = s.shape.size() == 2 ? s.shape[1] : 1;
    tensors.push_back(hf_tensor(t.name, t.shape, w.weights[size_t(t.param)].data() + t.row0 * row, bf16));
  }
  write_hf_dir(dir, tensors, llama_to_hf_config(c), w, bf16, log);
}

void init_from_hf_llama(LlamaModel& model, const std::string& path) {
  const LlamaConfig& c = model.config();
  std::error_code ec;
  if (fs::is_directory(path, ec) && fs::is_regular_file(fs::path(path) / "config.json", ec)) {
    const LlamaConfig hf = read_hf_llama_config(path);
    MXDP_CHECK(hf == c, "--init-from '", path, "': its config.json describes ", llama_describe(hf),
               " but the model being built is ", llama_describe(c), " (pass --model '", path,
               "' to build the model its config.json describes)");
  }
  const HfTensors files(path);
  const std::vector<HfLlamaTensor> want = hf_llama_tensors(c);
  std::set<std::string> expected;
  for (const auto& t : want) expected.insert(t.name);
  const bool tied_head_in_file = c.tie_embeddings && files.by_name().count("lm_head.weight");
  for (const auto& [n, e] : files.by_name()) {
    if (n == "lm_head.weight" && tied_head_in_file) continue;
    if (n.find(".rotary_emb.inv_freq") != std::string::npos) continue;  // a buffer older files carry
    MXDP_CHECK(expected.count(n), "--init-from '", path, "': tensor '", n, "' is not part of the model (",
               llama_describe(c), ")");
  }
  std::vector<std::vector<float>> values(model.params().size());
  for (size_t p = 0; p < values.size(); ++p) values[p].assign(size_t(model.params()[p].numel()), 0.f);
  for (const HfLlamaTensor& t : want) {
    auto it = files.by_name().find(t.name);
    MXDP_CHECK(it != files.by_name().end(), "--init-from '", path, "': tensor '", t.name, "' (", shape_string(t.shape),
               ") is missing");
    const SafeTensorInfo& info = *it->second.info;
    MXDP_CHECK(info.shape == t.shape, "--init-from '", path, "': tensor '", t.name, "' has shape ",
               shape_string(info.shape), " but the model (", llama_describe(c), ") needs ", shape_string(t.shape));
    const std::vector<float> v = HfTensors::read_f32(it->second);
    const ParamSpec& s = model.params()[size_t(t.param)];
    const int64_t row = s.shape.size() == 2 ? s.shape[1] : 1;
    std::copy(v.begin(), v.end(), values[size_t(t.param)].begin() + t.row0 * row);
  }
  if (tied_head_in_file) {
    const std::vector<float> head = HfTensors::read_f32(files.by_name().at("lm_head.weight"));
    const std::vector<float>& embed = values[0];
    MXDP_CHECK(head.size() == embed.size() && std::memcmp(head.data(), embed.data(), 4 * head.size()) == 0,
               "--init-from '", path,
               "': lm_head.weight differs from model.embed_tokens.weight but config.json ties them");
  }
  for (size_t p = 0; p < values.size(); ++p) model.set_weights(int(p), values[p].data());
}

}  // namespace mxdp
