#include "models/gpt2/hf_gpt2.h"

#include <cmath>
#include <cstring>
#include <filesystem>
#include <map>
#include <set>
#include <sstream>

#include <nlohmann/json.hpp>

#include "util/check.h"
#include "io/checkpoint.h"
#include "formats/codec.h"
#include "io/safetensors.h"
#include "models/gpt2/spec.h"

namespace mxdp {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

constexpr const char* kPrefix = "transformer.";

bool starts_with(const std::string& s, const std::string& p) { return s.compare(0, p.size(), p) == 0; }
bool ends_with(const std::string& s, const std::string& x) {
  return s.size() >= x.size() && s.compare(s.size() - x.size(), x.size(), x) == 0;
}

// {rows, cols} row-major -> {cols, rows}.
std::vector<float> transposed(const float* x, int64_t rows, int64_t cols) {
  std::vector<float> y(size_t(rows * cols));
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) y[size_t(c * rows + r)] = x[r * cols + c];
  return y;
}

json read_json_file(const std::string& path) {
  const std::vector<uint8_t> b = read_file(path);
  try {
    return json::parse(b.begin(), b.end());
  } catch (const std::exception& e) {
    MXDP_FAIL("'", path, "' is not valid JSON: ", e.what());
  }
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
  std::error_code ec;
  if (fs::exists(dir, ec) && !fs::is_directory(dir, ec)) MXDP_FAIL("--output '", dir, "' exists and is not a directory");
  fs::create_directories(dir, ec);
  MXDP_CHECK(!ec, "cannot create '", dir, "': ", ec.message());

  std::vector<SafeTensorOut> tensors;
  int64_t params = 0;
  for (const HfGpt2Tensor& t : hf_gpt2_tensors(cfg)) {
    const ParamSpec& s = w.specs[size_t(t.param)];
    const float* x = w.weights[size_t(t.param)].data();
    std::vector<float> v = t.transpose ? transposed(x, s.shape[0], s.shape[1])
                                       : std::vector<float>(x, x + t.shape[0] * (t.shape.size() > 1 ? t.shape[1] : 1));
    const size_t n = v.size();
    params += int64_t(n);
    SafeTensorOut o{std::string(kPrefix).append(t.name), bf16 ? "BF16" : "F32", t.shape, {}};
    if (bf16) {
      o.bytes.resize(2 * n);
      for (size_t i = 0; i < n; ++i) {
        const uint16_t u = codec::bf16_from_f32(v[i]);
        o.bytes[2 * i] = uint8_t(u);
        o.bytes[2 * i + 1] = uint8_t(u >> 8);
      }
    } else {
      o.bytes.resize(4 * n);
      std::memcpy(o.bytes.data(), v.data(), 4 * n);
    }
    tensors.push_back(std::move(o));
  }
  const std::string st = (fs::path(dir) / "model.safetensors").string();
  write_safetensors(st, tensors, {{"format", "pt"}, {"producer", "mxdp export"}});

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
  c["torch_dtype"] = bf16 ? "bfloat16" : "float32";
  c["mxdp"] = {{"checkpoint", w.path}, {"iteration", w.iteration}, {"weights", w.describe}};
  const std::string js = c.dump(2) + "\n";
  const std::string cj = (fs::path(dir) / "config.json").string();
  write_file_atomic(cj, std::vector<uint8_t>(js.begin(), js.end()));
  if (log) {
    std::fprintf(log, "export: %s (step %lld), weights %s\n", w.path.c_str(), (long long)w.iteration,
                 w.describe.c_str());
    std::fprintf(log, "export: wrote %s (%zu tensors, %lld params, %s) and %s\n", st.c_str(), tensors.size(),
                 (long long)params, bf16 ? "bf16" : "fp32", cj.c_str());
  }
}

void init_from_hf_gpt2(GptModel& model, const std::string& path) {
  const GptConfig& cfg = model.config();
  std::error_code ec;
  std::string st = path;
  if (fs::is_directory(path, ec)) {
    st = (fs::path(path) / "model.safetensors").string();
    MXDP_CHECK(fs::is_regular_file(st, ec), "--init-from '", path, "' is a directory without model.safetensors");
    const fs::path cj = fs::path(path) / "config.json";
    if (fs::is_regular_file(cj, ec)) check_config(read_json_file(cj.string()), cfg, cj.string());
  }
  const SafetensorsFile f(st);

  // Names without the prefix; buffers and a tied head set aside.
  std::map<std::string, const SafeTensorInfo*> by_name;
  const SafeTensorInfo* lm_head = nullptr;
  for (const SafeTensorInfo& t : f.tensors()) {
    std::string n = starts_with(t.name, kPrefix) ? t.name.substr(std::strlen(kPrefix)) : t.name;
    if (n == "lm_head.weight" || t.name == "lm_head.weight") {
      lm_head = &t;
      continue;
    }
    if (starts_with(n, "h.") && (ends_with(n, ".attn.masked_bias") || (ends_with(n, ".attn.bias") && t.shape.size() == 4)))
      continue;  // attention-mask buffers, not weights
    MXDP_CHECK(by_name.emplace(n, &t).second, "--init-from '", st, "': tensor '", n,
               "' appears both with and without the 'transformer.' prefix");
  }
  const std::vector<HfGpt2Tensor> want = hf_gpt2_tensors(cfg);
  std::set<std::string> expected;
  for (const auto& t : want) expected.insert(t.name);
  for (const auto& [n, t] : by_name)
    MXDP_CHECK(expected.count(n), "--init-from '", st, "': tensor '", t->name,
               "' is not part of a GPT-2 with the model's ", cfg.n_layer, " layers (pass --n-layer to match)");
  std::vector<float> wte_f32;
  for (const HfGpt2Tensor& t : want) {
    auto it = by_name.find(t.name);
    MXDP_CHECK(it != by_name.end(), "--init-from '", st, "': tensor '", kPrefix, t.name, "' (", shape_string(t.shape),
               ") is missing");
    const SafeTensorInfo& info = *it->second;
    MXDP_CHECK(info.shape == t.shape, "--init-from '", st, "': tensor '", info.name, "' has shape ",
               shape_string(info.shape), " but the model (vocab ", cfg.vocab, ", max_seq ", cfg.max_seq, ", d_model ",
               cfg.d_model, ") needs ", shape_string(t.shape), " (pass --vocab / --max-seq / --d-model to match)");
    std::vector<float> v = f.read_f32(info);
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
    MXDP_CHECK(lm_head->shape == std::vector<int64_t>({cfg.vocab, cfg.d_model}), "--init-from '", st,
               "': lm_head.weight has shape ", shape_string(lm_head->shape), ", not wte's");
    const std::vector<float> head = f.read_f32(*lm_head);
    MXDP_CHECK(std::memcmp(head.data(), wte_f32.data(), head.size() * sizeof(float)) == 0, "--init-from '", st,
               "': lm_head.weight differs from wte.weight; mxdp's GPT-2 ties the head to the embedding");
  }
}

}  // namespace mxdp
