#include "models/llama/llama_config.h"

#include <cmath>
#include <numbers>
#include <string>
#include <unordered_map>

#include <fmt/format.h>

#include "models/init_rng.h"
#include "util/check.h"

namespace mxdp {

using nlohmann::json;

LlamaConfig llama_config(const std::string& name) {
  LlamaConfig c;
  if (name == "llama-tiny") {
    // Byte-level, GQA 4:2; a B=8 x T=64 step takes tens of ms on one core.
    c = {.vocab = 256, .max_seq = 128, .n_layer = 4, .n_head = 4, .n_kv_head = 2, .head_dim = 16, .d_model = 64,
         .d_ff = 192};
  } else if (name == "smollm2-135m") {
    c = {.vocab = 49152, .max_seq = 8192, .n_layer = 30, .n_head = 9, .n_kv_head = 3, .head_dim = 64,
         .d_model = 576, .d_ff = 1536, .rms_eps = 1e-5, .rope_theta = 100000.0};
  } else if (name == "smollm2-360m") {
    c = {.vocab = 49152, .max_seq = 8192, .n_layer = 32, .n_head = 15, .n_kv_head = 5, .head_dim = 64,
         .d_model = 960, .d_ff = 2560, .rms_eps = 1e-5, .rope_theta = 100000.0};
  } else if (name == "qwen2.5-0.5b") {
    c = {.vocab = 151936, .max_seq = 32768, .n_layer = 24, .n_head = 14, .n_kv_head = 2, .head_dim = 64,
         .d_model = 896, .d_ff = 4864, .rms_eps = 1e-6, .rope_theta = 1000000.0, .qkv_bias = true};
  } else if (name == "llama3.2-1b") {
    c = {.vocab = 128256, .max_seq = 131072, .n_layer = 16, .n_head = 32, .n_kv_head = 8, .head_dim = 64,
         .d_model = 2048, .d_ff = 8192, .rms_eps = 1e-5, .rope_theta = 500000.0,
         .rope_scaling = {.factor = 32.0, .low_freq_factor = 1.0, .high_freq_factor = 4.0, .original_max_seq = 8192}};
  } else {
    std::string known;
    for (const auto& n : llama_config_names()) known += (known.empty() ? "" : ", ") + n;
    MXDP_FAIL("unknown Llama config '", name, "' (known: ", known, ")");
  }
  return c;
}

std::vector<std::string> llama_config_names() {
  return {"llama-tiny", "smollm2-135m", "smollm2-360m", "qwen2.5-0.5b", "llama3.2-1b"};
}

void validate(const LlamaConfig& c) {
  auto pos = [](int v, const char* what) { MXDP_CHECK(v > 0, "Llama config: ", what, " must be positive, got ", v); };
  pos(c.vocab, "vocab");
  pos(c.max_seq, "max_seq");
  pos(c.n_layer, "n_layer");
  pos(c.n_head, "n_head");
  pos(c.n_kv_head, "n_kv_head");
  pos(c.head_dim, "head_dim");
  pos(c.d_model, "d_model");
  pos(c.d_ff, "d_ff");
  MXDP_CHECK(c.n_head % c.n_kv_head == 0, "Llama config: n_head (", c.n_head, ") must be a multiple of n_kv_head (",
             c.n_kv_head, ")");
  MXDP_CHECK(c.head_dim % 2 == 0, "Llama config: head_dim (", c.head_dim, ") must be even for rotary embeddings");
  for (auto [v, what] : {std::pair{c.d_model, "d_model"}, {c.q_dim(), "n_head * head_dim"}, {c.d_ff, "d_ff"}})
    MXDP_CHECK(v % 32 == 0, "Llama config: ", what, " (", v,
               ") must be a multiple of 32 so that every 2-D weight has rows of whole 32-blocks");
  MXDP_CHECK(c.rms_eps > 0 && std::isfinite(c.rms_eps), "Llama config: rms_eps must be positive, got ", c.rms_eps);
  MXDP_CHECK(c.rope_theta > 0 && std::isfinite(c.rope_theta), "Llama config: rope_theta must be positive, got ",
             c.rope_theta);
  const Llama3RopeScaling& s = c.rope_scaling;
  if (s.factor != 0.0)
    MXDP_CHECK(s.factor > 0 && s.low_freq_factor > 0 && s.high_freq_factor > s.low_freq_factor &&
                   s.original_max_seq > 0,
               "Llama config: rope_scaling needs factor > 0, 0 < low_freq_factor < high_freq_factor and "
               "original_max_position_embeddings > 0");
}

std::vector<ParamSpec> llama_param_specs(const LlamaConfig& c) {
  validate(c);
  const int64_t C = c.d_model, F = c.d_ff;
  std::vector<ParamSpec> s;
  // fp8_linear: the four linear layers of a block (compute_dtype fp8 reads
  // them as FP8; the embedding and the head stay as they are).
  auto add = [&](std::string name, std::vector<int64_t> shape, int layer, bool fp8_linear = false) {
    const bool decay = shape.size() == 2;
    s.push_back({std::move(name), std::move(shape), layer, decay, fp8_linear});
  };
  add("embed", {c.vocab, C}, 0);
  s.back().embedding = true;  // the tied head too, where tie_embeddings
  for (int l = 1; l <= c.n_layer; ++l) {
    const std::string p = fmt::format("h{}.", l - 1);
    add(p + "attn_norm.w", {C}, l);
    add(p + "qkv.w", {c.qkv_dim(), C}, l, true);
    if (c.qkv_bias) add(p + "qkv.b", {c.qkv_dim()}, l);
    add(p + "o.w", {C, c.q_dim()}, l, true);
    add(p + "mlp_norm.w", {C}, l);
    add(p + "gate_up.w", {2 * F, C}, l, true);
    add(p + "down.w", {C, F}, l, true);
  }
  add("norm.w", {C}, c.n_layer + 1);
  if (!c.tie_embeddings) add("lm_head", {c.vocab, C}, c.n_layer + 1);
  return s;
}

LlamaParamIndex llama_param_index(const LlamaConfig& c) {
  const std::vector<ParamSpec> specs = llama_param_specs(c);
  std::unordered_map<std::string, int> at;
  for (size_t i = 0; i < specs.size(); ++i) at.emplace(specs[i].name, int(i));
  const auto find = [&](const std::string& name) {
    const auto it = at.find(name);
    MXDP_CHECK(it != at.end(), "internal: the Llama has no param named ", name);
    return it->second;
  };
  LlamaParamIndex ix;
  ix.embed = find("embed");
  for (int l = 0; l < c.n_layer; ++l) {
    const std::string p = fmt::format("h{}.", l);
    ix.blocks.push_back({find(p + "attn_norm.w"), find(p + "qkv.w"), c.qkv_bias ? find(p + "qkv.b") : -1,
                         find(p + "o.w"), find(p + "mlp_norm.w"), find(p + "gate_up.w"), find(p + "down.w")});
  }
  ix.norm = find("norm.w");
  ix.head = c.tie_embeddings ? ix.embed : find("lm_head");
  return ix;
}

double llama_train_flops_per_token(const LlamaConfig& c, int seq_len) {
  const double C = c.d_model, F = c.d_ff, L = c.n_layer;
  const double block = C * c.qkv_dim() + double(c.q_dim()) * C + 2.0 * F * C + F * C;
  const double matmul_weights = L * block + double(c.vocab) * C;
  return 6.0 * matmul_weights + 6.0 * L * double(seq_len) * c.q_dim();
}

int64_t llama_num_parameters(const LlamaConfig& c) {
  int64_t n = 0;
  for (const auto& p : llama_param_specs(c)) n += p.numel();
  return n;
}

void llama_init_param(const LlamaConfig& c, const std::vector<ParamSpec>& specs, uint64_t seed, int p, float* x) {
  MXDP_CHECK(p >= 0 && p < int(specs.size()), "param index ", p, " out of range");
  const ParamSpec& s = specs[size_t(p)];
  const int64_t n = s.numel();
  if (s.shape.size() == 2) {
    const bool resid = s.name.ends_with("o.w") || s.name.ends_with("down.w");
    const float std = resid ? 0.02f / std::sqrt(2.f * float(c.n_layer)) : 0.02f;
    fill_normal(x, n, n, std, seed, p);
  } else {
    const float v = s.name.ends_with("norm.w") ? 1.f : 0.f;
    std::fill(x, x + n, v);
  }
}

std::vector<float> llama_inv_freq(const LlamaConfig& c) {
  const int half = c.head_dim / 2;
  std::vector<float> f(static_cast<size_t>(half));
  for (int i = 0; i < half; ++i) {
    // transformers: 1 / base ** (arange(0, dim, 2).float() / dim), in fp32.
    const float e = float(2 * i) / float(c.head_dim);
    f[size_t(i)] = 1.0f / std::pow(float(c.rope_theta), e);
  }
  const Llama3RopeScaling& s = c.rope_scaling;
  if (s.factor == 0.0) return f;
  // Llama 3: long wavelengths are slowed by `factor`, short ones kept, the
  // band between interpolated (transformers' _compute_llama3_parameters).
  const float old_len = float(s.original_max_seq);
  const float low_wavelen = old_len / float(s.low_freq_factor);
  const float high_wavelen = old_len / float(s.high_freq_factor);
  const float factor = float(s.factor);
  for (float& inv : f) {
    const float wavelen = 2.0f * std::numbers::pi_v<float> / inv;
    float scaled = wavelen > low_wavelen ? inv / factor : inv;
    if (!(wavelen < high_wavelen) && !(wavelen > low_wavelen)) {
      const float smooth =
          (old_len / wavelen - float(s.low_freq_factor)) / float(s.high_freq_factor - s.low_freq_factor);
      scaled = (1.0f - smooth) * scaled / factor + smooth * scaled;
    }
    inv = scaled;
  }
  return f;
}

json llama_config_json(const LlamaConfig& c) {
  validate(c);
  json j = {{"vocab", c.vocab},         {"max_seq", c.max_seq},   {"n_layer", c.n_layer},
            {"n_head", c.n_head},       {"n_kv_head", c.n_kv_head}, {"head_dim", c.head_dim},
            {"d_model", c.d_model},     {"d_ff", c.d_ff},         {"rms_eps", c.rms_eps},
            {"rope_theta", c.rope_theta}, {"qkv_bias", c.qkv_bias}, {"tie_embeddings", c.tie_embeddings}};
  const Llama3RopeScaling& s = c.rope_scaling;
  j["rope_scaling"] = s.factor == 0.0 ? json(nullptr)
                                      : json{{"factor", s.factor},
                                             {"low_freq_factor", s.low_freq_factor},
                                             {"high_freq_factor", s.high_freq_factor},
                                             {"original_max_seq", s.original_max_seq}};
  return j;
}

LlamaConfig llama_config_from_json(const json& j, const std::string& what) {
  LlamaConfig c;
  try {
    c.vocab = j.at("vocab").get<int>();
    c.max_seq = j.at("max_seq").get<int>();
    c.n_layer = j.at("n_layer").get<int>();
    c.n_head = j.at("n_head").get<int>();
    c.n_kv_head = j.at("n_kv_head").get<int>();
    c.head_dim = j.at("head_dim").get<int>();
    c.d_model = j.at("d_model").get<int>();
    c.d_ff = j.at("d_ff").get<int>();
    c.rms_eps = j.at("rms_eps").get<double>();
    c.rope_theta = j.at("rope_theta").get<double>();
    c.qkv_bias = j.at("qkv_bias").get<bool>();
    c.tie_embeddings = j.at("tie_embeddings").get<bool>();
    const json& s = j.at("rope_scaling");
    if (!s.is_null())
      c.rope_scaling = {s.at("factor").get<double>(), s.at("low_freq_factor").get<double>(),
                        s.at("high_freq_factor").get<double>(), s.at("original_max_seq").get<int>()};
  } catch (const json::exception& e) {
    MXDP_FAIL(what, ": the Llama model config ", j.dump(), " is incomplete: ", e.what());
  }
  validate(c);
  return c;
}

namespace {

// Field `key` of a Hugging Face config, or `fallback` when absent or null.
template <class T>
T hf_get(const json& hf, const char* key, T fallback, const std::string& what) {
  if (!hf.contains(key) || hf[key].is_null()) return fallback;
  try {
    return hf[key].get<T>();
  } catch (const json::exception&) {
    MXDP_FAIL(what, ": ", key, " is ", hf[key].dump(), ", not the expected type");
  }
}

template <class T>
T hf_require(const json& hf, const char* key, const std::string& what) {
  MXDP_CHECK(hf.contains(key) && !hf[key].is_null(), what, ": the Hugging Face config has no ", key);
  return hf_get<T>(hf, key, T{}, what);
}

}  // namespace

LlamaConfig llama_from_hf_config(const json& hf, const std::string& what) {
  MXDP_CHECK(hf.is_object(), what, " is not a JSON object");
  const std::string type = hf_get<std::string>(hf, "model_type", "", what);
  MXDP_CHECK(type == "llama" || type == "qwen2", what, ": model_type is \"", type,
             "\"; mxdp's Llama family reads \"llama\" (LlamaForCausalLM) and \"qwen2\" (Qwen2ForCausalLM)");
  const bool qwen = type == "qwen2";
  LlamaConfig c;
  c.vocab = hf_require<int>(hf, "vocab_size", what);
  c.d_model = hf_require<int>(hf, "hidden_size", what);
  c.d_ff = hf_require<int>(hf, "intermediate_size", what);
  c.n_layer = hf_require<int>(hf, "num_hidden_layers", what);
  c.n_head = hf_require<int>(hf, "num_attention_heads", what);
  c.n_kv_head = hf_get<int>(hf, "num_key_value_heads", c.n_head, what);
  MXDP_CHECK(c.n_head > 0, what, ": num_attention_heads must be positive");
  c.head_dim = hf_get<int>(hf, "head_dim", c.d_model / c.n_head, what);
  c.max_seq = hf_get<int>(hf, "max_position_embeddings", 2048, what);
  c.rms_eps = hf_get<double>(hf, "rms_norm_eps", 1e-6, what);
  c.tie_embeddings = hf_get<bool>(hf, "tie_word_embeddings", false, what);
  const std::string act = hf_get<std::string>(hf, "hidden_act", "silu", what);
  MXDP_CHECK(act == "silu", what, ": hidden_act is \"", act, "\"; mxdp's SwiGLU MLP computes silu");
  MXDP_CHECK(!hf_get<bool>(hf, "mlp_bias", false, what), what, ": mlp_bias is true; mxdp's MLP has no biases");
  if (qwen) {
    c.qkv_bias = true;  // Qwen2Attention: q/k/v with bias, o without
    MXDP_CHECK(!hf_get<bool>(hf, "use_sliding_window", false, what), what,
               ": use_sliding_window is true; mxdp's attention is full causal");
  } else {
    MXDP_CHECK(!hf_get<bool>(hf, "attention_bias", false, what), what,
               ": attention_bias is true (biases on q/k/v/o); mxdp's Llama has none (Qwen2's q/k/v biases are "
               "model_type qwen2)");
  }
  MXDP_CHECK(hf_get<int>(hf, "pretraining_tp", 1, what) == 1, what, ": pretraining_tp must be 1");
  // Rotary: rope_theta and rope_scaling (transformers 4.x), or rope_parameters (5.x).
  json rope = hf.contains("rope_parameters") && hf["rope_parameters"].is_object() ? hf["rope_parameters"]
              : hf.contains("rope_scaling") && hf["rope_scaling"].is_object()     ? hf["rope_scaling"]
                                                                                  : json::object();
  c.rope_theta = hf_get<double>(rope, "rope_theta", hf_get<double>(hf, "rope_theta", 10000.0, what), what);
  const std::string rope_type = hf_get<std::string>(rope, "rope_type", hf_get<std::string>(rope, "type", "default", what), what);
  if (rope_type == "llama3") {
    c.rope_scaling = {hf_require<double>(rope, "factor", what), hf_require<double>(rope, "low_freq_factor", what),
                      hf_require<double>(rope, "high_freq_factor", what),
                      hf_require<int>(rope, "original_max_position_embeddings", what)};
  } else {
    MXDP_CHECK(rope_type == "default", what, ": rope_type \"", rope_type,
               "\" is not computed by mxdp (it computes \"default\" and \"llama3\")");
  }
  try {
    validate(c);
  } catch (const Error& e) {
    MXDP_FAIL(what, ": ", e.what());
  }
  return c;
}

nlohmann::ordered_json llama_to_hf_config(const LlamaConfig& c) {
  validate(c);
  const bool qwen = c.qkv_bias;
  nlohmann::ordered_json j;
  j["architectures"] = {qwen ? "Qwen2ForCausalLM" : "LlamaForCausalLM"};
  j["model_type"] = qwen ? "qwen2" : "llama";
  j["vocab_size"] = c.vocab;
  j["hidden_size"] = c.d_model;
  j["intermediate_size"] = c.d_ff;
  j["num_hidden_layers"] = c.n_layer;
  j["num_attention_heads"] = c.n_head;
  j["num_key_value_heads"] = c.n_kv_head;
  j["head_dim"] = c.head_dim;
  j["max_position_embeddings"] = c.max_seq;
  j["rms_norm_eps"] = c.rms_eps;
  j["rope_theta"] = c.rope_theta;
  const Llama3RopeScaling& s = c.rope_scaling;
  if (s.factor != 0.0)
    j["rope_scaling"] = {{"rope_type", "llama3"},
                         {"factor", s.factor},
                         {"low_freq_factor", s.low_freq_factor},
                         {"high_freq_factor", s.high_freq_factor},
                         {"original_max_position_embeddings", s.original_max_seq}};
  else
    j["rope_scaling"] = nullptr;
  j["hidden_act"] = "silu";
  j["tie_word_embeddings"] = c.tie_embeddings;
  if (qwen) {
    j["use_sliding_window"] = false;
    j["sliding_window"] = nullptr;
  } else {
    j["attention_bias"] = false;
    j["mlp_bias"] = false;
  }
  j["attention_dropout"] = 0.0;
  j["initializer_range"] = 0.02;
  j["use_cache"] = true;
  return j;
}

}  // namespace mxdp
