// The weights a trained model computes with, rebuilt from a checkpoint.
//
// Training never computes with the fp32 masters: every forward (train, eval,
// the end-of-run sample) reads the weights as gathered, i.e. each param
// quantized to its gather format and dequantized again (docs/interop.md, "The
// weights as trained"; the formats themselves: docs/formats.md):
//   - 2-D params the format takes (engine/layout.h's gather_format: rows of
//     whole 32-element blocks; for fp8b128 any rows, cols a multiple of 16,
//     and not the embedding tables) travel in the run's weight format (bf16,
//     mxfp8, nvfp4 or fp8b128);
//   - every other param (norms, biases, tables under fp8b128) travels in BF16.
// The engine quantizes per bucket shard over its laid-out buffer, but every
// param starts at a 64-element offset and shards are multiples of 256
// elements, so MXFP8's 32-blocks and NVFP4's 16-blocks never straddle two
// params, and NVFP4's tensor scale is the amax of the whole param (the
// all-reduced max of its shards); fp8b128's shards hold whole 128-row slabs
// of a param (its last slab may be short), so its 128x128 tiles, partial ones
// at the edges included, are those of the whole matrix. Quantizing each param on its own with the
// format reference (quant.h) therefore gives the engine's bits exactly;
// tests/mpitest_trained_weights.cpp holds the two equal at dp 1..4.
//
// A checkpoint records the format it was trained with in its `extra` JSON
// ("weight_format", "embedding_format", "mxfp8_scale_rounding");
// load_inference_weights() uses it. One without "embedding_format" predates the
// fp8b128 tables-in-bf16 rule: its tables are rebuilt in its weight format.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "io/checkpoint.h"
#include "models/registry.h"
#include "engine/options.h"

namespace mxdp {

// Param `spec`'s compute weights when its fp32 masters are `master` and the
// run gathered in `format` with `rounding` (numel floats out).
void trained_weights(const ParamSpec& spec, const float* master, WeightFormat format, ScaleRounding rounding,
                     float* out);

// Which weights inference uses: as trained (through the gather format, the
// default) or the fp32 masters.
enum class WeightsMode : uint8_t { Trained, Master };
WeightsMode parse_weights_mode(const std::string& s);  // "trained" or "master"

// A checkpoint opened for inference: the model config, the parameter list and
// every param's fp32 compute weights.
struct InferenceWeights {
  std::string path;
  ModelConfig config;  // any registered architecture (models/registry.h)
  std::vector<ParamSpec> specs;
  std::vector<std::vector<float>> weights;  // per param, numel floats
  int64_t iteration = 0;
  // The vocabulary of the data it was trained on (the checkpoint's data_vocab;
  // older checkpoints: the model's): <= 256 means bytes, no tokenizer needed.
  int64_t data_vocab = 0;
  WeightsMode mode = WeightsMode::Trained;
  std::string describe;  // e.g. "as trained: mxfp8 (rceil) for 2-D weights, bf16 for the rest"
};

// Reads `path` (a .ckpt file or a save dir with `latest`), checks its params
// against the model config it records, and builds the weights for `mode`.
// WeightsMode::Trained needs the checkpoint to record its gather format.
InferenceWeights load_inference_weights(const std::string& path, WeightsMode mode);

// Puts every param's weights into `model` (set_weights), shapes checked.
void set_model_weights(LanguageModel& model, const InferenceWeights& w);

}  // namespace mxdp
