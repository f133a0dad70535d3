#include "models/gpt2/hf_gpt2.h"

#include <cmath>
#include <cstring>
#include <filesystem>
#include <map>
#include <set>

#include <nlohmann/json.hpp>

#include "io/safetensors.h"
#include "models/gpt2/spec.h"
#include "models/hf_files.h"
#include "util/check.h"

namespace mxdp {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

constexpr const char* kPrefix = "transformer.";

// {rows, cols} row-major -> {cols, rows}.
std::vector<float> transposed(const float* x, int64_t rows, int64_t cols) {
  std::vector<float> y(size_t(rows * cols));
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) y[size_t(c * rows + r)] = x[r * cols + c];
  return y;
}

// config.json against the model being built.
void check_config(const json& c, const GptConfig& m, const std::string& path) {
  MXDP_CHECK(c.is_object(), "'", path, "' is not a JSON object");
  if (c.contains("model_type"))
    MXDP_CHECK(c["model_type"] == "gpt2", "'", path, "': model_type is ", c["model_type"].dump(),
               ", not \"gpt2\"");
  auto geti = [&](const char* key, int model_value, const char* flag) {
    if (!c.contains(key)) return;
    MXDP_CHECK(c[key].is_number_integer(), "'", path, "': ", key, " is ", c[key].dump(), ", not an integer");
    const int64_t v = c[key].get<int64_t>();
    MXDP_CHECK(v == model_value, "'", path, "': ", key, " is ", v, " but the model being built has ", model_value,
               " (pass ", flag, " ", v, ")");
  };
  geti("vocab_size", m.vocab, "--vocab");
  geti("n_positions", m.max_seq, "--max-seq");
  geti("n_embd", m.d_model, "--d-model");
  geti("n_layer", m.n_layer, "--n-layer");
  geti("n_head", m.n_head, "--n-head");
  if (c.contains("n_inner") && !c["n_inner"].is_null())
    MXDP_CHECK(c["n_inner"] == 4 * m.d_model, "'", path, "': n_inner is ", c["n_inner"].dump(),
               "; mxdp's MLP is 4 * n_embd = ", 4 * m.d_model, " wide");
  if (c.contains("activation_function"))
    MXDP_CHECK(c["activation_function"] == "gelu_new" || c["activation_function"] == "gelu_pytorch_tanh", "'", path,
               "': activation_function is ", c["activation_function"].dump(),
               "; mxdp computes GELU with the tanh approximation (gelu_new)");
  if (c.contains("layer_norm_epsilon"))
    MXDP_CHECK(c["layer_norm_epsilon"].is_number() && std::fabs(c["layer_norm_epsilon"].get<double>() - 1e-5) < 1e-12,
               "'", path, "': layer_norm_epsilon is ", c["layer_norm_epsilon"].dump(), "; mxdp's LayerNorm uses 1e-5");
  for (const char* key : {"scale_attn_by_inverse_layer_idx"})
    if (c.contains(key)) MXDP_CHECK(c[key] == false, "'", path, "': ", key, " is set; mxdp does not scale so");
  for (const char* key : {"scale_attn_weights", "tie_word_embeddings"})
    if (c.contains(key)) MXDP_CHECK(c[key] == true, "'", path, "': ", key, " is false; mxdp's GPT-2 needs it true");
}

// GPT2Config as transformers writes it, for the model mxdp trained.
nlohmann::ordered_json hf_gpt2_config(const GptConfig& cfg) {
  nlohmann::ordered_json c;
  c["architectures"] = {"GPT2LMHeadModel"};
  c["model_type"] = "gpt2";
  c["vocab_size"] = cfg.vocab;
  c["n_positions"] = cfg.max_seq;
  c["n_ctx"] = cfg.max_seq;
  c["n_embd"] = cfg.d_model;
  c["n_layer"] = cfg.n_layer;
  c["n_head"] = cfg.n_head;
  c["n_inner"] = nullptr;
  c["activation_function"] = "gelu_new";
  c["resid_pdrop"] = 0.0;
  c["embd_pdrop"] = 0.0;
  c["attn_pdrop"] = 0.0;
  c["layer_norm_epsilon"] = 1e-5;
  c["initializer_range"] = 0.02;
  c["scale_attn_weights"] = true;
  c["scale_attn_by_inverse_layer_idx"] = false;
  c["reorder_and_upcast_attn"] = false;
  c["use_cache"] = true;
  c["tie_word_embeddings"] = true;
  // GPT-2's <|endoftext|>; a model of another vocabulary has no such token.
  c["bos_token_id"] = cfg.vocab == 50257 ? json(50256) : json(nullptr);
  c["eos_token_id"] = cfg.vocab == 50257 ? json(50256) : json(nullptr);
  return c;
}

}  // namespace

std::vector<HfGpt2Tensor> hf_gpt2_tensors(const GptConfig& cfg) {
  const std::vector<ParamSpec> specs = gpt_param_specs(cfg);
  std::map<std::string, int> idx;
  for (size_t p = 0; p < specs.size(); ++p) idx[specs[p].name] = int(p);
  std::vector<HfGpt2Tensor> out;
  auto add = [&](const std::string& mx, const std::string& hf, bool transpose) {
    const int p = idx.at(mx);
    std::vector<int64_t> shape = specs[size_t(p)].shape;
    if (mx == "wte") shape[0] = cfg.vocab;  // padding rows are mxdp's own
    if (transpose) std::swap(shape[0], shape[1]);
    out.push_back({p, hf, shape, transpose});
  };
  add("wte", "wte.weight", false);
  add("wpe", "wpe.weight", false);
  for (int l = 0; l < cfg.n_layer; ++l) {
    const std::string n = std::to_string(l), m = std::string("h").append(n).append("."),
                      h = std::string("h.").append(n).append(".");
    add(m + "ln1.w", h + "ln_1.weight", false);
    add(m + "ln1.b", h + "ln_1.bias", false);
    add(m + "attn.qkv.w", h + "attn.c_attn.weight", true);
    add(m + "attn.qkv.b", h + "attn.c_attn.bias", false);
    add(m + "attn.proj.w", h + "attn.c_proj.weight", true);
    add(m + "attn.proj.b", h + "attn.c_proj.bias", false);
    add(m + "ln2.w", h + "ln_2.weight", false);
    add(m + "ln2.b", h + "ln_2.bias", false);
    add(m + "mlp.fc.w", h + "mlp.c_fc.weight", true);
    add(m + "mlp.fc.b", h + "mlp.c_fc.bias", false);
    add(m + "mlp.proj.w", h + "mlp.c_proj.weight", true);
    add(m + "mlp.proj.b", h + "mlp.c_proj.bias", false);
  }
  add("lnf.w", "ln_f.weight", false);
  add("lnf.b", "ln_f.bias", false);
  MXDP_CHECK(out.size() == specs.size(), "hf_gpt2_tensors: ", out.size(), " tensors for ", specs.size(), " params");
  return out;
}

void export_hf_gpt2(const InferenceWeights& w, const std::string& dir, bool bf16, std::FILE* log) {
  const GptConfig cfg = gpt2_config(w.config);
  std::vector<SafeTensorOut> tensors;
  for (const HfGpt2Tensor& t : hf_gpt2_tensors(cfg)) {
    const ParamSpec& s = w.specs[size_t(t.param)];
    const float* x = w.weights[size_t(t.param)].data();  // wte: its first vocab rows
    const std::vector<float> xt = t.transpose ? transposed(x, s.shape[0], s.shape[1]) : std::vector<float>();
    tensors.push_back(hf_tensor(std::string(kPrefix).append(t.name), t.shape, t.transpose ? xt.data() : x, bf16));
  }
  write_hf_dir(dir, tensors, hf_gpt2_config(cfg), w, bf16, log);
}

void init_from_hf_gpt2(GptModel& model, const std::string& path) {
  const GptConfig& cfg = model.config();
  std::error_code ec;
  const fs::path cj = fs::path(path) / "config.json";
  if (fs::is_directory(path, ec) && fs::is_regular_file(cj, ec))
    check_config(read_json_file(cj.string()), cfg, cj.string());
  const HfTensors files(path);

  // Names without the prefix; buffers and a tied head set aside.
  std::map<std::string, const HfTensors::Entry*> by_name;
  const HfTensors::Entry* lm_head = nullptr;
  for (const auto& [name, e] : files.by_name()) {
    const std::string n = name.starts_with(kPrefix) ? name.substr(std::strlen(kPrefix)) : name;
    if (n == "lm_head.weight") {
      lm_head = &e;
      continue;
    }
    if (n.starts_with("h.") && (n.ends_with(".attn.masked_bias") || (n.ends_with(".attn.bias") && e.info->shape.size() == 4)))
      continue;  // attention-mask buffers, not weights
    MXDP_CHECK(by_name.emplace(n, &e).second, "--init-from '", path, "': tensor '", n,
               "' appears both with and without the 'transformer.' prefix");
  }
  const std::vector<HfGpt2Tensor> want = hf_gpt2_tensors(cfg);
  std::set<std::string> expected;
  for (const auto& t : want) expected.insert(t.name);
  for (const auto& [n, t] : by_name)
    MXDP_CHECK(expected.count(n), "--init-from '", path, "': tensor '", t->info->name,
               "' is not part of a GPT-2 with the model's ", cfg.n_layer, " layers (pass --n-layer to match)");
  std::vector<float> wte_f32;
  for (const HfGpt2Tensor& t : want) {
    auto it = by_name.find(t.name);
    MXDP_CHECK(it != by_name.end(), "--init-from '", path, "': tensor '", kPrefix, t.name, "' (", shape_string(t.shape),
               ") is missing");
    const SafeTensorInfo& info = *it->second->info;
    MXDP_CHECK(info.shape == t.shape, "--init-from '", path, "': tensor '", info.name, "' has shape ",
               shape_string(info.shape), " but the model (vocab ", cfg.vocab, ", max_seq ", cfg.max_seq, ", d_model ",
               cfg.d_model, ") needs ", shape_string(t.shape), " (pass --vocab / --max-seq / --d-model to match)");
    std::vector<float> v = HfTensors::read_f32(*it->second);
    const ParamSpec& s = model.params()[size_t(t.param)];
    if (t.transpose) v = transposed(v.data(), t.shape[0], t.shape[1]);
    if (t.name == "wte.weight") {
      wte_f32 = v;
      v.resize(size_t(s.numel()), 0.0f);  // padding rows
    }
    MXDP_CHECK(int64_t(v.size()) == s.numel(), "--init-from: tensor '", info.name, "' has ", v.size(),
               " elements, param '", s.name, "' ", s.numel());
    model.set_weights(t.param, v.data());
  }
  if (lm_head) {
    MXDP_CHECK(lm_head->info->shape == std::vector<int64_t>({cfg.vocab, cfg.d_model}), "--init-from '", path,
               "': lm_head.weight has shape ", shape_string(lm_head->info->shape), ", not wte's");
    const std::vector<float> head = HfTensors::read_f32(*lm_head);
    MXDP_CHECK(std::memcmp(head.data(), wte_f32.data(), head.size() * sizeof(float)) == 0, "--init-from '", path,
               "': lm_head.weight differs from wte.weight; mxdp's GPT-2 ties the head to the embedding");
  }
}

}  // namespace mxdp
