// The Llama family's config and CPU model (src/models/llama/), checked against
// things that share no code with them: the published parameter counts of
// SmolLM2-135M, Qwen2.5-0.5B and Llama-3.2-1B (written out by hand below), the
// public config.json of each (as text), central finite differences of the
// loss for every parameter kind, and the model itself run at another thread
// count (bitwise). The comparison with transformers is test_llama_golden.cpp.
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <nlohmann/json.hpp>
#include <random>

#include "models/llama/llama.h"
#include "models/llama/spec.h"
#include "models/registry.h"
#include "util/check.h"

namespace mxdp {
namespace {

using nlohmann::json;

class GradHooks : public ModelHooks {
 public:
  explicit GradHooks(const Model& m) {
    for (const auto& p : m.params()) grads.emplace_back(size_t(p.numel()), 0.f);
  }
  void before_layer(int layer) override { before.push_back(layer); }
  float* grad(int p) override { return grads.at(size_t(p)).data(); }
  void after_layer_backward(int layer) override { after.push_back(layer); }
  std::vector<std::vector<float>> grads;
  std::vector<int> before, after;
};

// Hand counts: embed V*C; per block q C*Q + k,v 2*C*KV (+ biases Q+2KV),
// o Q*C, gate/up/down 3*C*F, two norms 2C; final norm C; untied head V*C.
TEST(LlamaConfig, PresetsHaveThePublishedParameterCounts) {
  EXPECT_EQ(llama_num_parameters(llama_config("smollm2-135m")), 134515008);
  EXPECT_EQ(llama_num_parameters(llama_config("smollm2-360m")), 361821120);
  EXPECT_EQ(llama_num_parameters(llama_config("qwen2.5-0.5b")), 494032768);
  EXPECT_EQ(llama_num_parameters(llama_config("llama3.2-1b")), 1235814400);
  for (const std::string& n : llama_config_names()) {
    const ModelConfig mc = model_config(n);
    EXPECT_EQ(mc.arch, "llama") << n;
    EXPECT_EQ(mc.spec().num_parameters(mc), llama_num_parameters(llama_config(n))) << n;
  }
}

// The public config.json files (their relevant fields, as published).
TEST(LlamaConfig, FromHuggingFaceConfigGivesThePresets) {
  const json smol = json::parse(R"({"architectures": ["LlamaForCausalLM"], "attention_bias": false,
    "head_dim": 64, "hidden_act": "silu", "hidden_size": 576, "intermediate_size": 1536,
    "max_position_embeddings": 8192, "mlp_bias": false, "model_type": "llama", "num_attention_heads": 9,
    "num_hidden_layers": 30, "num_key_value_heads": 3, "pretraining_tp": 1, "rms_norm_eps": 1e-05,
    "rope_scaling": null, "rope_theta": 100000, "tie_word_embeddings": true, "vocab_size": 49152})");
  EXPECT_EQ(llama_from_hf_config(smol, "smol"), llama_config("smollm2-135m"));
  const json qwen = json::parse(R"({"architectures": ["Qwen2ForCausalLM"], "hidden_act": "silu",
    "hidden_size": 896, "intermediate_size": 4864, "max_position_embeddings": 32768, "max_window_layers": 24,
    "model_type": "qwen2", "num_attention_heads": 14, "num_hidden_layers": 24, "num_key_value_heads": 2,
    "rms_norm_eps": 1e-06, "rope_theta": 1000000.0, "sliding_window": 32768, "tie_word_embeddings": true,
    "use_sliding_window": false, "vocab_size": 151936})");
  EXPECT_EQ(llama_from_hf_config(qwen, "qwen"), llama_config("qwen2.5-0.5b"));
  json llama = json::parse(R"({"architectures": ["LlamaForCausalLM"], "attention_bias": false, "head_dim": 64,
    "hidden_act": "silu", "hidden_size": 2048, "intermediate_size": 8192, "max_position_embeddings": 131072,
    "mlp_bias": false, "model_type": "llama", "num_attention_heads": 32, "num_hidden_layers": 16,
    "num_key_value_heads": 8, "pretraining_tp": 1, "rms_norm_eps": 1e-05,
    "rope_scaling": {"factor": 32.0, "high_freq_factor": 4.0, "low_freq_factor": 1.0,
                     "original_max_position_embeddings": 8192, "rope_type": "llama3"},
    "rope_theta": 500000.0, "tie_word_embeddings": true, "vocab_size": 128256})");
  EXPECT_EQ(llama_from_hf_config(llama, "llama"), llama_config("llama3.2-1b"));
  // What mxdp writes reads back as the same config.
  for (const std::string& n : llama_config_names()) {
    const LlamaConfig c = llama_config(n);
    EXPECT_EQ(llama_from_hf_config(json::parse(llama_to_hf_config(c).dump()), n), c) << n;
    EXPECT_EQ(llama_config_from_json(llama_config_json(c), n), c) << n;
  }
  // What mxdp does not compute is refused, naming the field.
  auto refuses = [](json j, const char* key, json v, const char* word) {
    j[key] = v;
    try {
      llama_from_hf_config(j, "cfg");
      ADD_FAILURE() << key << " accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(word), std::string::npos) << e.what();
    }
  };
  refuses(smol, "hidden_act", "gelu", "hidden_act");
  refuses(smol, "attention_bias", true, "attention_bias");
  refuses(smol, "mlp_bias", true, "mlp_bias");
  refuses(smol, "model_type", "mistral", "model_type");
  refuses(qwen, "use_sliding_window", true, "sliding");
  refuses(smol, "rope_scaling", json{{"rope_type", "yarn"}, {"factor", 4.0}}, "yarn");
  refuses(smol, "num_key_value_heads", 4, "multiple of n_kv_head");
}

// The index both Llama models address their params by: every param of
// llama_param_specs exactly once, each with the shape of its role (so an index
// pointing at another param of the block is caught), for the four kinds of
// model (qkv bias or not, tied head or not).
TEST(LlamaConfig, ParamIndexNamesEveryParamOnceWithTheShapeOfItsRole) {
  for (const bool bias : {false, true}) {
    for (const bool tied : {true, false}) {
      LlamaConfig c = llama_config("llama-tiny");
      c.qkv_bias = bias;
      c.tie_embeddings = tied;
      c.n_layer = 3;
      const std::vector<ParamSpec> specs = llama_param_specs(c);
      const LlamaParamIndex ix = llama_param_index(c);
      std::vector<int> uses(specs.size(), 0);
      const auto expect = [&](int p, std::vector<int64_t> shape, const std::string& role) {
        ASSERT_TRUE(p >= 0 && p < int(specs.size())) << role << ": index " << p;
        ++uses[size_t(p)];
        EXPECT_EQ(specs[size_t(p)].shape, shape) << role << " is " << specs[size_t(p)].name;
      };
      const int64_t C = c.d_model, V = c.vocab, S = c.qkv_dim(), Q = c.q_dim(), F = c.d_ff;
      expect(ix.embed, {V, C}, "embed");
      ASSERT_EQ(ix.blocks.size(), size_t(c.n_layer));
      for (const LlamaParamIndex::Block& b : ix.blocks) {
        expect(b.attn_norm, {C}, "attn_norm");
        expect(b.qkvw, {S, C}, "qkv.w");
        if (bias) expect(b.qkvb, {S}, "qkv.b");
        else EXPECT_EQ(b.qkvb, -1);
        expect(b.ow, {C, Q}, "o.w");
        expect(b.mlp_norm, {C}, "mlp_norm");
        expect(b.gate_up, {2 * F, C}, "gate_up.w");
        expect(b.down, {C, F}, "down.w");
        EXPECT_LT(b.attn_norm, b.mlp_norm);  // the block's two norms are not swapped
      }
      expect(ix.norm, {C}, "norm");
      if (tied) EXPECT_EQ(ix.head, ix.embed);
      else expect(ix.head, {V, C}, "lm_head");
      for (size_t p = 0; p < specs.size(); ++p)
        EXPECT_EQ(uses[p], 1) << specs[p].name << " named " << uses[p] << " times (bias " << bias << ", tied " << tied << ")";
      // Blocks in order: block l's params belong to layer l + 1.
      for (int l = 0; l < c.n_layer; ++l) EXPECT_EQ(specs[size_t(ix.blocks[size_t(l)].qkvw)].layer, l + 1);
    }
  }
}

// Llama 3 scaling, by hand for head_dim 8, theta 500000, factor 8, original
// context 512 (wavelengths 512 and 128 bound the bands): f0 = 1 (wavelength
// 6.3, kept), f1 = 500000^-0.25 (wavelength 167: interpolated), f2, f3 divided by 8.
TEST(LlamaConfig, Llama3RopeScalingByHand) {
  LlamaConfig c = llama_config("llama-tiny");
  c.head_dim = 8;
  c.n_head = 4;
  c.d_model = 32;
  c.rope_theta = 500000.0;
  c.rope_scaling = {8.0, 1.0, 4.0, 512};
  const std::vector<float> f = llama_inv_freq(c);
  ASSERT_EQ(f.size(), 4u);
  const double f1 = std::pow(500000.0, -0.25), wl1 = 2 * M_PI / f1;
  const double smooth = (512.0 / wl1 - 1.0) / 3.0;
  EXPECT_NEAR(f[0], 1.0, 1e-7);
  EXPECT_NEAR(f[1], (1 - smooth) * f1 / 8 + smooth * f1, 1e-6 * f1);
  EXPECT_NEAR(f[2], std::pow(500000.0, -0.5) / 8, 1e-6 * f[2]);
  EXPECT_NEAR(f[3], std::pow(500000.0, -0.75) / 8, 1e-6 * f[3]);
}

LlamaConfig small_config() {
  LlamaConfig c;
  c.vocab = 48;
  c.max_seq = 16;
  c.n_layer = 2;
  c.n_head = 4;
  c.n_kv_head = 2;
  c.head_dim = 8;
  c.d_model = 32;
  c.d_ff = 32;
  c.rope_theta = 500000.0;
  c.rope_scaling = {8.0, 1.0, 4.0, 16};
  c.qkv_bias = true;
  c.tie_embeddings = false;
  return c;
}

// Random weights of a larger scale than the init (norm weights and biases too),
// so that every term of every gradient matters.
void randomize(Llama& m, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> n(0.f, 1.f);
  for (int p = 0; p < int(m.params().size()); ++p) {
    const ParamSpec& s = m.params()[size_t(p)];
    float* w = m.weights(p);
    const bool norm = s.name.find("norm") != std::string::npos;
    for (int64_t i = 0; i < s.numel(); ++i) w[i] = norm ? 1.f + 0.2f * n(rng) : (s.shape.size() == 2 ? 0.3f : 0.1f) * n(rng);
  }
}

struct Data {
  std::vector<int32_t> in, tgt;
  Batch batch() const { return {in.data(), tgt.data(), 2, int(in.size() / 2)}; }
};
Data data(int vocab, int T, uint64_t seed) {
  std::mt19937_64 rng(seed);
  Data d;
  for (int i = 0; i < 2 * T; ++i) d.in.push_back(int32_t(rng() % vocab)), d.tgt.push_back(int32_t(rng() % vocab));
  return d;
}

// The analytic gradient against (L(w + h) - L(w - h)) / 2h, h = 1e-2, for
// 6 elements of every param (loss in double sums, fp32 model: the difference
// quotient carries ~1e-5 of rounding noise; the truncation error is O(h^2)).
TEST(LlamaModel, GradientsMatchFiniteDifferences) {
  const LlamaConfig c = small_config();
  Llama m(c);
  randomize(m, 7);
  const Data d = data(c.vocab, 12, 3);
  GradHooks h(m);
  m.forward(d.batch(), h);
  m.backward(h);
  NullHooks nh;
  std::mt19937_64 rng(11);
  const float step = 1e-2f;
  for (int p = 0; p < int(m.params().size()); ++p) {
    const ParamSpec& s = m.params()[size_t(p)];
    double gmax = 0;
    for (float g : h.grads[size_t(p)]) gmax = std::max(gmax, double(std::fabs(g)));
    for (int k = 0; k < 6; ++k) {
      int64_t i = int64_t(rng() % uint64_t(s.numel()));
      if (s.name == "embed") i = int64_t(d.in[size_t(k)]) * c.d_model + int64_t(rng() % uint64_t(c.d_model));
      float* w = m.weights(p);
      const float w0 = w[i];
      w[i] = w0 + step;
      const double lp = m.forward(d.batch(), nh);
      w[i] = w0 - step;
      const double lm = m.forward(d.batch(), nh);
      w[i] = w0;
      const double fd = (lp - lm) / (2.0 * step);
      EXPECT_NEAR(h.grads[size_t(p)][size_t(i)], fd, 2e-3 * gmax + 1e-4) << s.name << "[" << i << "]";
    }
  }
  // Hook order: forward 0..L+1, backward L+1..0.
  EXPECT_EQ(h.before, (std::vector<int>{0, 1, 2, 3}));
  EXPECT_EQ(h.after, (std::vector<int>{3, 2, 1, 0}));
}

TEST(LlamaModel, BitwiseTheSameOnOneAndTwoThreads) {
  const LlamaConfig c = small_config();
  std::vector<std::vector<float>> g[2];
  float loss[2];
  for (int r = 0; r < 2; ++r) {
    omp_set_num_threads(r + 1);
    Llama m(c);
    randomize(m, 5);
    const Data d = data(c.vocab, 16, 9);
    GradHooks h(m);
    loss[r] = m.forward(d.batch(), h);
    m.backward(h);
    g[r] = h.grads;
  }
  omp_set_num_threads(2);
  EXPECT_EQ(std::memcmp(&loss[0], &loss[1], 4), 0);
  for (size_t p = 0; p < g[0].size(); ++p)
    EXPECT_EQ(std::memcmp(g[0][p].data(), g[1][p].data(), 4 * g[0][p].size()), 0) << p;
}

// A tied head: the embedding's gradient holds the head's and the lookup's parts.
TEST(LlamaModel, TiedHeadGradientIsTheSumOfBothUses) {
  LlamaConfig c = small_config();
  c.tie_embeddings = true;
  Llama m(c);
  randomize(m, 13);
  EXPECT_EQ(m.params().back().name, "norm.w");
  const Data d = data(c.vocab, 8, 4);
  GradHooks h(m);
  m.forward(d.batch(), h);
  m.backward(h);
  NullHooks nh;
  // Row of a token that is never an input: only the head's part.
  std::vector<bool> used(static_cast<size_t>(c.vocab));
  for (int32_t t : d.in) used[size_t(t)] = true;
  int row = 0;
  while (used[size_t(row)]) ++row;
  for (int64_t i : {int64_t(row) * c.d_model + 3, int64_t(d.in[0]) * c.d_model + 5}) {
    float* w = m.weights(0);
    const float w0 = w[i];
    w[i] = w0 + 1e-2f;
    const double lp = m.forward(d.batch(), nh);
    w[i] = w0 - 1e-2f;
    const double lm = m.forward(d.batch(), nh);
    w[i] = w0;
    EXPECT_NEAR(h.grads[0][size_t(i)], (lp - lm) / 2e-2, 2e-4) << i;
  }
}

}  // namespace
}  // namespace mxdp
