#include "models/llama/spec.h"

#include <fmt/format.h>

#include "models/llama/hf_llama.h"
#include "models/llama/llama.h"
#include "util/check.h"

#if defined(MXDP_HAVE_CUDA) && defined(MXDP_HAVE_CUDNN)
#include "models/cuda/stream_graphs.h"
#include "models/llama/cuda/llama_cuda.h"
#endif

namespace mxdp {

using nlohmann::json;

ModelConfig llama_model_config(const LlamaConfig& c) { return {"llama", llama_config_json(c)}; }

LlamaConfig llama_config_of(const ModelConfig& c) {
  MXDP_CHECK(c.arch == "llama", "a ", c.arch, " model config is not a Llama's");
  return llama_config_from_json(c.config, "model config");
}

std::string llama_describe(const LlamaConfig& c) {
  std::string s = fmt::format("n_layer {}, n_head {}, n_kv_head {}, head_dim {}, d_model {}, d_ff {}, max_seq {}, "
                              "vocab {}, rope_theta {:g}",
                              c.n_layer, c.n_head, c.n_kv_head, c.head_dim, c.d_model, c.d_ff, c.max_seq, c.vocab,
                              c.rope_theta);
  if (c.rope_scaling.factor != 0.0) s += fmt::format(" (llama3 scaling x{:g})", c.rope_scaling.factor);
  s += fmt::format(", rms_eps {:g}", c.rms_eps);
  if (c.qkv_bias) s += ", qkv bias";
  s += c.tie_embeddings ? ", tied head" : ", untied head";
  return s;
}

namespace {

ModelConfig from_preset(const std::string& name, const ModelOverrides& o) {
  LlamaConfig c = llama_config(name);
  if (o.n_layer > 0) c.n_layer = o.n_layer;
  if (o.n_head > 0) {
    c.n_head = o.n_head;
    if (c.n_head % c.n_kv_head != 0) c.n_kv_head = c.n_head;  // the group no longer divides: plain MHA
  }
  if (o.d_model > 0) c.d_model = o.d_model;
  if (o.n_head > 0 || o.d_model > 0) c.head_dim = c.d_model / c.n_head;
  if (o.max_seq > 0) c.max_seq = o.max_seq;
  if (o.vocab > 0) c.vocab = o.vocab;
  return llama_model_config(c);
}

ModelConfig from_hf_dir(const std::string& dir, const ModelOverrides& o) {
  MXDP_CHECK(o.n_layer <= 0 && o.n_head <= 0 && o.d_model <= 0 && o.vocab <= 0, "--model '", dir,
             "' is a Hugging Face directory: its config.json sets the shape (only --max-seq may change it)");
  LlamaConfig c = read_hf_llama_config(dir);
  if (o.max_seq > 0) c.max_seq = o.max_seq;
  return llama_model_config(c);
}

bool reads_hf_config(const json& hf) {
  const std::string t = hf.is_object() && hf.contains("model_type") && hf["model_type"].is_string()
                            ? hf["model_type"].get<std::string>()
                            : "";
  return t == "llama" || t == "qwen2";
}

#if defined(MXDP_HAVE_CUDA) && defined(MXDP_HAVE_CUDNN)
std::unique_ptr<LanguageModel> build_cuda(const ModelConfig& c, void* stream) {
  return cuda::make_llama(llama_config_of(c), static_cast<cudaStream_t>(stream),
                          {.cuda_graphs = cuda::cuda_graphs_from_env()});
}
#else
constexpr std::nullptr_t build_cuda = nullptr;  // built without CUDA and cuDNN
#endif

void hf_import(LanguageModel& model, const std::string& path) {
  auto* m = dynamic_cast<LlamaModel*>(&model);
  MXDP_CHECK(m, "the Llama Hugging Face import needs a model the llama spec built");
  init_from_hf_llama(*m, path);
}

}  // namespace

const ModelSpec& llama_spec() {
  static const ModelSpec spec = with_config_entries<llama_config_of, llama_param_specs, llama_train_flops_per_token, Llama>({
      .name = "llama",
      .presets = llama_config_names,
      .from_preset = from_preset,
      .from_json = [](const json& m, const std::string& what) {
        return llama_model_config(llama_config_from_json(m, what));
      },
      .describe = [](const ModelConfig& c) { return llama_describe(llama_config_of(c)); },
      .build_cuda = build_cuda,
      .hf_import = hf_import,
      .hf_export = export_hf_llama,
      .reads_hf_config = reads_hf_config,
      .from_hf_dir = from_hf_dir,
  });
  return spec;
}

}  // namespace mxdp
