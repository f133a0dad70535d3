// The two tables the layers above ask instead of switching: the weight-format
// table (formats/format.h) and the model registry (models/registry.h). Expected
// values come from the formats' definitions (docs/formats.md: bytes per element
// and per block), from the codec reference's own size functions (quant.h), and
// from GPT-2's parameter count written out by hand, not from the tables.
#include <gtest/gtest.h>

#include <set>
#include <string>

#include "engine/layout.h"
#include "engine/options.h"
#include "formats/format.h"
#include "formats/quant.h"
#include "models/registry.h"
#include "util/check.h"

namespace mxdp {
namespace {

TEST(FormatTable, RowsAreInEnumOrderAndNamesRoundTrip) {
  const auto rows = all_formats();
  ASSERT_EQ(rows.size(), 4u);
  std::set<std::string> names;
  for (size_t i = 0; i < rows.size(); ++i) {
    EXPECT_EQ(int(rows[i].id), int(i));
    EXPECT_EQ(&format_traits(rows[i].id), &rows[i]);
    EXPECT_EQ(parse_weight_format(rows[i].name), rows[i].id);
    EXPECT_STREQ(to_string(rows[i].id), rows[i].name);
    names.insert(rows[i].name);
  }
  EXPECT_EQ(names, (std::set<std::string>{"bf16", "mxfp8", "nvfp4", "fp8b128"}));
  EXPECT_EQ(format_names(), "bf16, mxfp8, nvfp4, fp8b128");
}

TEST(FormatTable, UnknownNameIsAnErrorListingTheKnownOnes) {
  try {
    parse_weight_format("fp8");
    FAIL() << "no error";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("'fp8'"), std::string::npos) << m;
    EXPECT_NE(m.find("bf16, mxfp8, nvfp4, fp8b128"), std::string::npos) << m;
  }
}

// Bytes per shard from the formats' definitions: bf16 2 bytes an element;
// MXFP8 1 byte an element and one E8M0 byte per 32; NVFP4 half a byte an
// element and one E4M3 byte per 16. And the same from quant.h's layout
// functions for a 1 x n row (the codec reference's own sizes).
TEST(FormatTable, PayloadBytesMatchTheFormatsDefinitions) {
  for (int64_t n : {256, 512, 4096, 1 << 20}) {
    const FormatTraits& bf = format_traits(WeightFormat::Bf16);
    const FormatTraits& mx = format_traits(WeightFormat::Mxfp8);
    const FormatTraits& nv = format_traits(WeightFormat::Nvfp4);
    EXPECT_EQ(bf.code_bytes(n), 2 * n);
    EXPECT_EQ(bf.scales_bytes(n), 0);
    EXPECT_EQ(mx.code_bytes(n), n);
    EXPECT_EQ(mx.scales_bytes(n), n / 32);
    EXPECT_EQ(nv.code_bytes(n), n / 2);
    EXPECT_EQ(nv.scales_bytes(n), n / 16);
    EXPECT_EQ(mx.code_bytes(n), mxfp8_code_bytes(1, n));
    EXPECT_EQ(mx.scales_bytes(n), mxfp8_scale_bytes_rowwise(1, n));
    EXPECT_EQ(nv.code_bytes(n), nvfp4_code_bytes(1, n));
    EXPECT_EQ(nv.scales_bytes(n), nvfp4_scale_bytes(1, n));
    EXPECT_EQ(mx.matrix_scales(3, n) * mx.scale_bytes, mxfp8_scale_bytes_rowwise(3, n));
    EXPECT_EQ(nv.matrix_scales(3, n) * nv.scale_bytes, nvfp4_scale_bytes(3, n));
    EXPECT_EQ(bf.matrix_scales(3, n), 0);
    for (const FormatTraits& t : all_formats()) {
      const PayloadShape p = payload_shape(t.id, n);
      EXPECT_EQ(p.code_bytes, t.code_bytes(n));
      EXPECT_EQ(p.scale_bytes, t.scales_bytes(n));
      EXPECT_EQ(p.shard_bytes % kPayloadAlign, 0);
      EXPECT_GE(p.shard_bytes, p.code_bytes + p.scale_bytes);
      EXPECT_LT(p.shard_bytes, p.code_bytes + p.scale_bytes + kPayloadAlign);
    }
  }
}

TEST(FormatTable, PropertiesTheEngineAsksFor) {
  EXPECT_EQ(format_traits(WeightFormat::Mxfp8).block, kMxfp8Block);
  EXPECT_EQ(format_traits(WeightFormat::Nvfp4).block, kNvfp4Block);
  // Only NVFP4 has a tensor scale; only MXFP8's rounding option changes bits.
  for (const FormatTraits& t : all_formats()) {
    EXPECT_EQ(t.tensor_amax, t.id == WeightFormat::Nvfp4) << t.name;
    EXPECT_EQ(t.rounding_applies, t.id == WeightFormat::Mxfp8) << t.name;
    EXPECT_EQ(t.low_precision(), t.id != WeightFormat::Bf16) << t.name;
    EXPECT_EQ(t.fits_grad_buffer, t.id == WeightFormat::Mxfp8) << t.name;  // the documented reuse
  }
  // Grad-buffer reuse: accepted with the formats whose row says so, refused
  // with the others, in the options' validation.
  for (const FormatTraits& t : all_formats()) {
    DpOptions o;
    o.distributed_optimizer = true;
    o.reuse_grad_buf = true;
    o.weight_format = t.id;
    if (t.fits_grad_buffer)
      EXPECT_NO_THROW(o.validate(2)) << t.name;
    else
      EXPECT_THROW(o.validate(2), Error) << t.name;
  }
}

// GPT-2 124M's parameter count, by hand: token and position embeddings, 12
// blocks of 12 C^2 + 13 C (two layer norms, qkv, attention projection, MLP),
// the final layer norm; the vocabulary padded to 50304 as stored. llm.c prints
// the same 124,475,904 for this model.
TEST(ModelRegistry, Gpt2PresetHasGpt2sParameterCount) {
  const ModelConfig c = model_config("gpt2-124m");
  EXPECT_EQ(c.arch, "gpt2");
  EXPECT_STREQ(c.spec().name, "gpt2");
  const int64_t C = 768, L = 12, T = 1024, V = 50304;
  const int64_t expected = V * C + T * C + L * (12 * C * C + 13 * C) + 2 * C;
  EXPECT_EQ(expected, 124475904);
  EXPECT_EQ(c.spec().num_parameters(c), expected);
  int64_t summed = 0;
  for (const ParamSpec& p : c.spec().param_specs(c)) summed += p.numel();
  EXPECT_EQ(summed, expected);
  EXPECT_EQ(c.spec().vocab(c), 50257);
  EXPECT_EQ(c.spec().max_seq(c), 1024);
  EXPECT_EQ(c.spec().n_layer(c), 12);
}

// Training FLOPs a token (MFU's numerator): 6 a weight of every matrix
// product (the head over the real vocabulary, tied or not; no embedding
// lookups, biases or norms) + 6 n_layer seq_len d_attn for attention over the
// causal half of the scores (PaLM's count, 12 n_layer seq_len d_attn, takes
// them all). The values are the formula worked from each model's published
// config.json:
//   gpt2-124m, T 1024: 6 (12 * 12 * 768^2 + 50257 * 768) + 6 * 12 * 1024 * 768;
//   llama3.2-1b, T 2048: hidden 2048, 16 layers, 32 heads and 8 K/V heads of
//     64, intermediate 8192, vocab 128256: 6 (16 (2048 * 3072 + 2048 * 2048 +
//     3 * 8192 * 2048) + 128256 * 2048) + 6 * 16 * 2048 * 2048;
//   qwen2.5-0.5b, T 2048: hidden 896, 24 layers, 14 heads and 2 K/V heads of
//     64, intermediate 4864, vocab 151936 (its q/k/v biases are not counted).
// gpubench_llama's count (6 per parameter, norms included, + the same causal
// attention) printed 7.81754e9 for llama3.2-1b at T 2048 on an H100: its norms'
// 6 * 67584 FLOPs above this one.
TEST(ModelRegistry, TrainFlopsPerTokenCountTheMatrixProducts) {
  const auto flops = [](const char* name, int T) {
    const ModelConfig c = model_config(name);
    return c.spec().train_flops_per_token(c, T);
  };
  EXPECT_EQ(flops("gpt2-124m", 1024), 797815296.0);
  EXPECT_EQ(flops("llama3.2-1b", 2048), 7817134080.0);
  EXPECT_EQ(flops("qwen2.5-0.5b", 2048), 3228008448.0);
  // Attention's share grows with the sequence: 6 * 12 * 768 a token more for each token of T.
  EXPECT_EQ(flops("gpt2-124m", 2048) - flops("gpt2-124m", 1024), 6.0 * 12 * 768 * 1024);
}

TEST(ModelRegistry, CpuModelIsTheConfigsModel) {
  ModelOverrides o;
  o.n_layer = 2;
  o.n_head = 2;
  o.d_model = 64;
  o.max_seq = 32;
  o.vocab = 256;
  const ModelConfig c = model_config("gpt2-124m", o);
  const auto model = c.spec().build_cpu(c);
  ASSERT_TRUE(model);
  EXPECT_EQ(model->vocab(), 256);
  EXPECT_EQ(model->max_seq(), 32);
  const auto specs = c.spec().param_specs(c);
  ASSERT_EQ(model->params().size(), specs.size());
  for (size_t i = 0; i < specs.size(); ++i) {
    EXPECT_EQ(model->params()[i].name, specs[i].name);
    EXPECT_EQ(model->params()[i].shape, specs[i].shape);
  }
}

TEST(ModelRegistry, CheckpointRecordsRoundTripAndGpt2NeedsNoArchKey) {
  const ModelConfig c = model_config("gpt2-124m");
  nlohmann::json extra = nlohmann::json::object();
  record_model_config(extra, c);
  EXPECT_FALSE(extra.contains("arch"));  // GPT-2 checkpoints are as they always were
  EXPECT_TRUE(records_model_config(extra, c));
  const ModelConfig back = checkpoint_model_config(extra, "ckpt");
  EXPECT_EQ(back.arch, c.arch);
  EXPECT_EQ(back.config, c.config);

  nlohmann::json other = extra;
  other["arch"] = "gpt2";
  EXPECT_TRUE(records_model_config(other, c));
  other["model"]["n_layer"] = 3;
  EXPECT_FALSE(records_model_config(other, c));
}

TEST(ModelRegistry, UnknownArchitecturesAndMissingConfigsAreErrors) {
  try {
    model_spec("mamba");
    FAIL() << "no error";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("'mamba'"), std::string::npos) << m;
    EXPECT_NE(m.find("gpt2"), std::string::npos) << m;
  }
  nlohmann::json extra = nlohmann::json::object();
  record_model_config(extra, model_config("gpt2-124m"));
  extra["arch"] = "mamba";
  EXPECT_THROW(checkpoint_model_config(extra, "ckpt"), Error);
  EXPECT_THROW(checkpoint_model_config(nlohmann::json::object(), "ckpt"), Error);
  nlohmann::json partial = {{"model", {{"vocab", 256}}}};
  try {
    checkpoint_model_config(partial, "some/ckpt");
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("some/ckpt"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace mxdp
