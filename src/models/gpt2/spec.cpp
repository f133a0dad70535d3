#include "models/gpt2/spec.h"

#include "models/gpt2/hf_gpt2.h"
#include "util/check.h"

#if defined(MXDP_HAVE_CUDA) && defined(MXDP_HAVE_CUDNN)
#include "models/cuda/stream_graphs.h"
#include "models/gpt2/cuda/gpt_cuda.h"
#endif

namespace mxdp {

using nlohmann::json;

ModelConfig gpt2_model_config(const GptConfig& m) {
  validate(m);
  return {"gpt2",
          {{"vocab", m.vocab}, {"padded_vocab", m.padded_vocab}, {"max_seq", m.max_seq},
           {"n_layer", m.n_layer}, {"n_head", m.n_head}, {"d_model", m.d_model}}};
}

namespace {

GptConfig from_json_unchecked(const json& m, const std::string& what) {
  try {
    return GptConfig{m.at("vocab").get<int>(),   m.at("padded_vocab").get<int>(), m.at("max_seq").get<int>(),
                     m.at("n_layer").get<int>(), m.at("n_head").get<int>(),       m.at("d_model").get<int>()};
  } catch (const std::exception& e) {
    MXDP_FAIL(what, ": the checkpoint's model config ", m.dump(), " is incomplete: ", e.what());
  }
}

ModelConfig from_preset(const std::string& name, const ModelOverrides& o) {
  GptConfig m = gpt_config(name);
  if (o.n_layer > 0) m.n_layer = o.n_layer;
  if (o.n_head > 0) m.n_head = o.n_head;
  if (o.d_model > 0) m.d_model = o.d_model;
  if (o.max_seq > 0) m.max_seq = o.max_seq;
  if (o.vocab > 0) m.vocab = o.vocab, m.padded_vocab = (o.vocab + 127) / 128 * 128;
  return gpt2_model_config(m);
}

ModelConfig from_json(const json& m, const std::string& what) {
  return gpt2_model_config(from_json_unchecked(m, what));
}

std::string describe(const ModelConfig& c) {
  const GptConfig m = gpt2_config(c);
  return "n_layer " + std::to_string(m.n_layer) + ", n_head " + std::to_string(m.n_head) + ", d_model " +
         std::to_string(m.d_model) + ", max_seq " + std::to_string(m.max_seq) + ", vocab " + std::to_string(m.vocab);
}

#if defined(MXDP_HAVE_CUDA) && defined(MXDP_HAVE_CUDNN)
std::unique_ptr<LanguageModel> build_cuda(const ModelConfig& c, void* stream) {
  return cuda::make_gpt(gpt2_config(c), static_cast<cudaStream_t>(stream), {.cuda_graphs = cuda::cuda_graphs_from_env()});
}
#else
constexpr std::nullptr_t build_cuda = nullptr;  // built without CUDA and cuDNN
#endif

void hf_import(LanguageModel& model, const std::string& path) {
  auto* gpt = dynamic_cast<GptModel*>(&model);
  MXDP_CHECK(gpt, "the gpt2 Hugging Face import needs a model the gpt2 spec built");
  init_from_hf_gpt2(*gpt, path);
}

}  // namespace

GptConfig gpt2_config(const ModelConfig& c) {
  MXDP_CHECK(c.arch == "gpt2", "a ", c.arch, " model config is not a GPT-2's");
  GptConfig m = from_json_unchecked(c.config, "model config");
  validate(m);
  return m;
}

const ModelSpec& gpt2_spec() {
  static const ModelSpec spec = with_config_entries<gpt2_config, gpt_param_specs, gpt_train_flops_per_token, Gpt>({
      .name = "gpt2",
      .presets = gpt_config_names,
      .from_preset = from_preset,
      .from_json = from_json,
      .describe = describe,
      .build_cuda = build_cuda,
      .hf_import = hf_import,
      .hf_export = export_hf_gpt2,
  });
  return spec;
}

}  // namespace mxdp
