// mxdp's CPU Llama against transformers' LlamaForCausalLM and Qwen2ForCausalLM:
// golden files that scripts/make_llama_golden.py wrote with transformers
// (fp32, eager attention) for two small random configs, read here through
// mxdp's own Hugging Face import (config.json -> LlamaConfig, model.safetensors
// -> weights), so the test covers the import too. Compared: the logits of
// every position, the mean cross-entropy, and the gradient of every parameter.
//
// Tolerance: both sides compute in fp32 with different summation orders
// (PyTorch's blocked GEMMs and reductions against mxdp's sequential loops), so
// results differ by rounding only: a few ulps per operation, compounded over
// 2 blocks. Logits: |d| <= 1e-4 + 1e-4 |ref| (logits are O(1..10)); the loss:
// 1e-5 relative; each gradient: |d| <= 1e-4 * max|ref of that tensor| + 1e-7.
// A wrong formula (rotate_half vs interleaved RoPE, a missing norm weight,
// no Llama 3 scaling, a GQA head mapped to the wrong k/v head) moves results
// by orders of magnitude more (the test was checked to fail on each).
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>

#include "io/safetensors.h"
#include "models/llama/hf_llama.h"
#include "models/llama/llama.h"

namespace mxdp {
namespace {

namespace fs = std::filesystem;

class GradHooks : public ModelHooks {
 public:
  explicit GradHooks(const Model& m) {
    for (const auto& p : m.params()) grads.emplace_back(size_t(p.numel()), 0.f);
  }
  void before_layer(int) override {}
  float* grad(int p) override { return grads.at(size_t(p)).data(); }
  void after_layer_backward(int) override {}
  std::vector<std::vector<float>> grads;
};

std::string golden_dir(const std::string& name) {
  return std::string(MXDP_SOURCE_DIR) + "/tests/data/llama_golden/" + name;
}

// max |got - ref| over the tensor, and whether each element is within atol + rtol |ref|.
::testing::AssertionResult close(const std::string& what, const float* got, const std::vector<float>& ref,
                                 double atol, double rtol) {
  double worst = 0;
  size_t bad = 0, at = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    const double e = std::fabs(double(got[i]) - ref[i]);
    if (!(e <= atol + rtol * std::fabs(ref[i]))) {
      if (bad++ == 0) at = i;
    }
    worst = std::max(worst, e);
  }
  if (bad == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << what << ": " << bad << " of " << ref.size() << " elements off, first at "
                                       << at << " (" << got[at] << " vs " << ref[at] << "), max |diff| " << worst;
}

void check_case(const std::string& name) {
  const std::string dir = golden_dir(name);
  ASSERT_TRUE(fs::exists(dir + "/golden.safetensors")) << dir << ": run scripts/make_llama_golden.py";
  const LlamaConfig c = read_hf_llama_config(dir);
  Llama m(c);
  m.init_weights(99);  // overwritten: every weight must come from the file
  init_from_hf_llama(m, dir);
  const SafetensorsFile g(dir + "/golden.safetensors");
  auto get = [&](const std::string& n) {
    const SafeTensorInfo* t = g.find(n);
    EXPECT_NE(t, nullptr) << n;
    return t ? g.read_f32(*t) : std::vector<float>();
  };
  const std::vector<float> tok = get("tokens"), tgt = get("targets"), logits = get("logits"), loss = get("loss");
  const SafeTensorInfo* ti = g.find("tokens");
  ASSERT_TRUE(ti && ti->shape.size() == 2);
  const int B = int(ti->shape[0]), T = int(ti->shape[1]);
  std::vector<int32_t> in(tok.begin(), tok.end()), out(tgt.begin(), tgt.end());
  GradHooks h(m);
  const float l = m.forward({in.data(), out.data(), B, T}, h);
  EXPECT_NEAR(l, loss.at(0), 1e-5 * loss.at(0)) << name;
  ASSERT_EQ(logits.size(), size_t(B) * T * c.vocab);
  for (int b = 0; b < B; ++b)
    for (int t = 0; t < T; ++t) {
      const std::vector<float> ref(logits.begin() + (int64_t(b) * T + t) * c.vocab,
                                   logits.begin() + (int64_t(b) * T + t + 1) * c.vocab);
      ASSERT_TRUE(close(name + " logits b" + std::to_string(b) + " t" + std::to_string(t), m.logits(b, t), ref, 1e-4,
                        1e-4));
    }
  m.backward(h);
  int compared = 0;
  for (const HfLlamaTensor& t : hf_llama_tensors(c)) {
    const std::vector<float> ref = get("grad." + t.name);
    const ParamSpec& s = m.params()[size_t(t.param)];
    const int64_t row = s.shape.size() == 2 ? s.shape[1] : 1;
    double rmax = 0;
    for (float v : ref) rmax = std::max(rmax, double(std::fabs(v)));
    EXPECT_GT(rmax, 0.0) << t.name;
    EXPECT_TRUE(close(name + " grad " + t.name, h.grads[size_t(t.param)].data() + t.row0 * row, ref, 1e-4 * rmax + 1e-7,
                      0.0));
    ++compared;
  }
  EXPECT_EQ(compared + 4, int(g.tensors().size())) << "every gradient of the file is compared";
}

TEST(LlamaGolden, Llama3UntiedWithRopeScalingMatchesTransformers) { check_case("llama3"); }
TEST(LlamaGolden, Qwen2TiedWithBiasesMatchesTransformers) { check_case("qwen2"); }

}  // namespace
}  // namespace mxdp
