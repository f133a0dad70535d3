#include "train/trained_weights.h"

#include <cstring>

#include "util/check.h"
#include "formats/codec.h"
#include "engine/layout.h"
#include "formats/format.h"
#include "formats/fp8_block.h"
#include "formats/quant.h"
#include "train/checkpoints.h"

namespace mxdp {

void trained_weights(const ParamSpec& spec, const float* master, WeightFormat format, ScaleRounding rounding,
                     float* out) {
  const int64_t n = spec.numel();
  const FormatTraits& t = format_traits(gather_format(spec, format));
  if (!t.low_precision()) {
    for (int64_t i = 0; i < n; ++i) out[i] = codec::bf16_to_f32(codec::bf16_from_f32(master[i]));
    return;
  }
  // A 2-D param the format takes: its codes and scales (row-wise, or tiles),
  // sized by the table, and its tensor amax where the format has one.
  const int64_t rows = spec.shape[0], cols = spec.shape[1];
  std::vector<uint8_t> codes(size_t(t.code_bytes(n))), scales(size_t(t.matrix_scales(rows, cols) * t.scale_bytes));
  const float tensor_amax = t.tensor_amax ? amax(master, n) : 0.0f;
  // The codec itself: quant.h has one per format (the table holds no codec).
  switch (t.id) {
    case WeightFormat::Mxfp8:
      mxfp8_quantize_rowwise(master, rows, cols, {Fp8Kind::E4M3, rounding}, codes.data(), scales.data());
      mxfp8_dequantize_rowwise(codes.data(), scales.data(), rows, cols, Fp8Kind::E4M3, out);
      return;
    case WeightFormat::Nvfp4:
      nvfp4_quantize_rowwise(master, rows, cols, tensor_amax, codes.data(), scales.data());
      nvfp4_dequantize_rowwise(codes.data(), scales.data(), nvfp4_tensor_scale(tensor_amax).s_dec, rows, cols, out);
      return;
    case WeightFormat::Fp8b128:
      fp8b128_quantize(master, rows, cols, codes.data(), reinterpret_cast<float*>(scales.data()));
      fp8b128_dequantize(codes.data(), reinterpret_cast<const float*>(scales.data()), rows, cols, out);
      return;
    case WeightFormat::Bf16:
      break;
  }
  MXDP_FAIL("trained_weights: no codec for ", t.name);
}

WeightsMode parse_weights_mode(const std::string& s) {
  if (s == "trained") return WeightsMode::Trained;
  if (s == "master") return WeightsMode::Master;
  MXDP_FAIL("--weights must be trained or master, got '", s, "'");
}

InferenceWeights load_inference_weights(const std::string& where, WeightsMode mode) {
  InferenceWeights w;
  w.path = resolve_checkpoint(where);
  w.mode = mode;
  const CheckpointData c = read_checkpoint(w.path, /*moments=*/false);
  w.config = checkpoint_model_config(c.extra, w.path);
  const ModelSpec& spec = w.config.spec();
  const int vocab = spec.vocab(w.config);
  w.specs = spec.param_specs(w.config);
  w.iteration = c.iteration;
  w.data_vocab = vocab;
  if (c.extra.contains("data_vocab")) {
    MXDP_CHECK(c.extra["data_vocab"].is_number_integer() && c.extra["data_vocab"].get<int64_t>() >= 1 &&
                   c.extra["data_vocab"].get<int64_t>() <= vocab,
               w.path, ": the checkpoint's data_vocab ", c.extra["data_vocab"].dump(), " is not in [1, ", vocab, "]");
    w.data_vocab = c.extra["data_vocab"].get<int64_t>();
  }
  MXDP_CHECK(c.params.size() == w.specs.size(), w.path, ": ", c.params.size(), " params in the checkpoint, its model (",
             spec.n_layer(w.config), " layers) has ", w.specs.size());
  WeightFormat format = WeightFormat::Bf16;
  ScaleRounding rounding = ScaleRounding::RCeil;
  if (mode == WeightsMode::Trained) {
    MXDP_CHECK(c.extra.contains("weight_format") && c.extra["weight_format"].is_string(), w.path,
               ": the checkpoint does not record the gather format it was trained with (written by an older "
               "mxdp); pass --weights master to use its fp32 masters");
    format = parse_weight_format(c.extra["weight_format"].get<std::string>());
    const FormatTraits& t = format_traits(format);
    // The embedding tables' format (engine/layout.h's embedding_format).
    // Checkpoints written before it was recorded gathered them in the
    // weight format, fp8b128 included: for those, no param is a table.
    const bool recorded = c.extra.contains("embedding_format");
    if (!recorded)
      for (ParamSpec& s : w.specs) s.embedding = false;
    MXDP_CHECK(!recorded || c.extra["embedding_format"] == to_string(embedding_format(format)), w.path,
               ": the checkpoint's embedding tables travelled in ", c.extra["embedding_format"].dump(),
               ", but this mxdp gathers them in ", to_string(embedding_format(format)), " under ", t.name,
               "; pass --weights master to use its fp32 masters");
    if (c.extra.contains("mxfp8_scale_rounding"))
      rounding = parse_scale_rounding(c.extra["mxfp8_scale_rounding"].get<std::string>());
    const bool tables_apart = recorded && embedding_format(format) != format;
    MXDP_CHECK(!t.rounding_applies || c.extra.contains("mxfp8_scale_rounding"), w.path, ": an ", t.name,
               " checkpoint must record its mxfp8_scale_rounding");
    w.describe = std::string("as trained: ") + t.name +
                 (t.rounding_applies ? std::string(" (") + to_string(rounding) + ")" : std::string()) +
                 (tables_apart ? " for 2-D weights but the embeddings" : " for 2-D weights") + ", bf16 for the rest";
  } else {
    w.describe = "fp32 masters";
  }
  w.weights.resize(w.specs.size());
  for (size_t p = 0; p < w.specs.size(); ++p) {
    const ParamState& ps = c.params[p];
    MXDP_CHECK(ps.name == w.specs[p].name && ps.shape == w.specs[p].shape, w.path, ": param ", p, " is '", ps.name,
               "' in the checkpoint but '", w.specs[p].name, "' in its model");
    w.weights[p].resize(ps.master.size());
    if (mode == WeightsMode::Master)
      std::memcpy(w.weights[p].data(), ps.master.data(), ps.master.size() * sizeof(float));
    else
      trained_weights(w.specs[p], ps.master.data(), format, rounding, w.weights[p].data());
  }
  return w;
}

void set_model_weights(LanguageModel& model, const InferenceWeights& w) {
  const auto& specs = model.params();
  MXDP_CHECK(specs.size() == w.specs.size(), w.path, ": ", w.specs.size(), " params, the model has ", specs.size());
  // Inference: no engine will take initial values from this model, so it
  // keeps none (a GPU model would otherwise hold an fp32 copy of every weight).
  model.release_initial_weights();
  for (size_t p = 0; p < specs.size(); ++p) {
    MXDP_CHECK(specs[p].shape == w.specs[p].shape, w.path, ": param '", w.specs[p].name,
               "' has another shape than the model's");
    model.set_weights(int(p), w.weights[p].data());
  }
}

}  // namespace mxdp
