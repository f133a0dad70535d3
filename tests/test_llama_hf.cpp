// The Llama family to and from Hugging Face directories (models/llama/hf_llama.h)
// through the CLI: `mxdp train --model llama-tiny` on the CPU, `mxdp export`,
// then `mxdp train --model DIR --init-from DIR --eval-first --steps 0` must give
// the first run's last eval loss bit for bit (the exported fp32 masters become
// the new run's masters, the same weight format makes the same weights, the
// same eval batches). The export's layout is read by the `safetensors` package
// (names and shapes as transformers' state dict), the masters come back bit for
// bit in memory, also from a sharded directory (model.safetensors.index.json)
// written here without mxdp's exporter; bf16 exports round each weight to
// nearest even; a mismatching config.json or a missing tensor is refused.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "formats/codec.h"
#include "hf_shards.h"
#include "io/safetensors.h"
#include "models/llama/hf_llama.h"
#include "models/llama/spec.h"
#include "python_util.h"
#include "train/trained_weights.h"
#include "util/check.h"

using namespace mxdp::testing;
using nlohmann::json;

namespace mxdp {
namespace {

namespace fs = std::filesystem;

const char* kArgs =
    "--device cpu --model llama-tiny --n-layer 2 --seq-len 32 --batch-size 4 --threads 1 --progress lines "
    "--sample-tokens 0 --eval-batches 3 --lr 1e-2 --warmup-steps 2";

void corpus(const TempDir& d) {
  std::string text;
  for (int i = 0; i < 200; ++i)
    text += "In the beginning God created the heaven and the earth. " + std::to_string(i * 7919 % 1000) + "\n";
  mxdp::testing::write_file(d / "t.txt", text);
}

std::vector<double> eval_losses(const std::string& metrics) {
  std::vector<double> v;
  std::istringstream in(mxdp::testing::read_file(metrics));
  for (std::string line; std::getline(in, line);) {
    const json j = json::parse(line);
    if (j["kind"] == "eval") v.push_back(j["loss"].get<double>());
  }
  return v;
}

RunResult train(const TempDir& d, const std::string& name, const std::string& args) {
  return run_mxdp("train --data " + quote(d / "t.txt") + " " + args + " --metrics " + quote(d / (name + ".jsonl")) +
                      " --save-dir " + quote(d / name),
                  d / (name + ".log"));
}

TEST(LlamaHf, ExportThenInitFromGivesTheEvalLossBitForBit) {
  TempDir d;
  corpus(d);
  const RunResult a = train(d, "a", std::string(kArgs) + " --steps 6 --eval-every 6 --weight-format mxfp8");
  ASSERT_EQ(a.exit_code, 0) << a.output;
  const std::vector<double> ea = eval_losses(d / "a.jsonl");
  ASSERT_EQ(ea.size(), 1u);
  const RunResult ex = run_mxdp("export --load " + quote(d / "a") + " --output " + quote(d / "hf") + " --weights master",
                                d / "export.log");
  ASSERT_EQ(ex.exit_code, 0) << ex.output;
  const std::string model = "--device cpu --model " + quote(d / "hf") + " --init-from " + quote(d / "hf") +
                            " --seq-len 32 --batch-size 4 --threads 1 --progress lines --sample-tokens 0 "
                            "--eval-batches 3 --weight-format mxfp8";
  const RunResult b = train(d, "b", model + " --steps 0 --eval-first");
  ASSERT_EQ(b.exit_code, 0) << b.output;
  EXPECT_TRUE(contains(b.output, "n_kv_head 2")) << b.output;
  const std::vector<double> eb = eval_losses(d / "b.jsonl");
  ASSERT_EQ(eb.size(), 1u) << b.output;
  EXPECT_EQ(eb[0], ea[0]) << "init-from the export must evaluate exactly like the run it came from";
  // Continued pretraining from the directory trains.
  const RunResult c = train(d, "c", model + " --steps 2 --eval-every 2");
  ASSERT_EQ(c.exit_code, 0) << c.output;
}

InferenceWeights trained_tiny(const TempDir& d) {
  corpus(d);
  const RunResult a = train(d, "a", std::string(kArgs) + " --steps 2 --weight-format bf16");
  EXPECT_EQ(a.exit_code, 0) << a.output;
  return load_inference_weights(d / "a", WeightsMode::Master);
}

TEST(LlamaHf, ExportLayoutAsTheSafetensorsPackageReadsIt) {
  TempDir d;
  MXDP_REQUIRE_PYTHON(d, "safetensors, numpy");
  const InferenceWeights w = trained_tiny(d);
  export_hf_llama(w, d / "hf", /*bf16=*/false, nullptr);
  const RunResult dump = run_python(quote(source_path("tests/py/st_tool.py")) + " dump " +
                                        quote(d / "hf/model.safetensors") + " " + quote(d / "dump.json"),
                                    d / "dump.log");
  ASSERT_EQ(dump.exit_code, 0) << dump.output;
  const json t = json::parse(mxdp::testing::read_file(d / "dump.json"))["tensors"];
  std::set<std::string> names;
  for (auto it = t.begin(); it != t.end(); ++it) names.insert(it.key());
  std::set<std::string> want = {"model.embed_tokens.weight", "model.norm.weight"};
  for (int l = 0; l < 2; ++l)
    for (const char* n : {"input_layernorm.weight", "self_attn.q_proj.weight", "self_attn.k_proj.weight",
                          "self_attn.v_proj.weight", "self_attn.o_proj.weight", "post_attention_layernorm.weight",
                          "mlp.gate_proj.weight", "mlp.up_proj.weight", "mlp.down_proj.weight"})
      want.insert("model.layers." + std::to_string(l) + "." + n);
  EXPECT_EQ(names, want) << "tied: no lm_head.weight";
  // llama-tiny: C 64, 4 heads of 16, 2 k/v heads, d_ff 192, vocab 256.
  EXPECT_EQ(t["model.embed_tokens.weight"]["shape"], json({256, 64}));
  EXPECT_EQ(t["model.layers.0.self_attn.q_proj.weight"]["shape"], json({64, 64}));
  EXPECT_EQ(t["model.layers.0.self_attn.k_proj.weight"]["shape"], json({32, 64}));
  EXPECT_EQ(t["model.layers.1.mlp.gate_proj.weight"]["shape"], json({192, 64}));
  EXPECT_EQ(t["model.layers.1.mlp.down_proj.weight"]["shape"], json({64, 192}));
  const json cfg = json::parse(mxdp::testing::read_file(d / "hf/config.json"));
  EXPECT_EQ(cfg["architectures"], json({"LlamaForCausalLM"}));
  EXPECT_EQ(cfg["num_key_value_heads"], 2);
  EXPECT_EQ(cfg["tie_word_embeddings"], true);
}

TEST(LlamaHf, RoundTripsBitForBitAlsoSharded) {
  TempDir d;
  const InferenceWeights w = trained_tiny(d);
  const LlamaConfig c = llama_config_of(w.config);
  export_hf_llama(w, d / "hf", false, nullptr);
  auto expect_weights = [&](const std::string& dir, bool bf16) {
    Llama m(read_hf_llama_config(dir));
    EXPECT_EQ(m.config(), c);
    init_from_hf_llama(m, dir);
    for (size_t p = 0; p < w.weights.size(); ++p) {
      std::vector<float> want = w.weights[p];
      if (bf16)
        for (float& x : want) x = codec::bf16_to_f32(codec::bf16_from_f32(x));
      EXPECT_EQ(std::memcmp(m.weights(int(p)), want.data(), 4 * want.size()), 0) << dir << ": " << w.specs[p].name;
    }
  };
  expect_weights(d / "hf", false);
  export_hf_llama(w, d / "hf16", true, nullptr);
  expect_weights(d / "hf16", true);

  // Two shards and an index, as save_pretrained writes big models.
  auto shard = write_two_shards(d / "hf/model.safetensors", d / "sharded");
  fs::copy_file(d / "hf/config.json", d / "sharded/config.json");
  expect_weights(d / "sharded", false);

  // A shard missing a tensor is refused, naming it.
  shard[1].pop_back();
  write_safetensors(d / ("sharded/" + shard_name(1)), shard[1], {});
  Llama m(c);
  try {
    init_from_hf_llama(m, d / "sharded");
    ADD_FAILURE() << "a missing tensor was accepted";
  } catch (const Error& e) {
    EXPECT_TRUE(contains(e.what(), "is missing")) << e.what();
  }
}

TEST(LlamaHf, MismatchingConfigIsRefusedNamingTheFix) {
  TempDir d;
  const InferenceWeights w = trained_tiny(d);
  export_hf_llama(w, d / "hf", false, nullptr);
  LlamaConfig other = llama_config_of(w.config);
  other.n_kv_head = 4;
  Llama m(other);
  try {
    init_from_hf_llama(m, d / "hf");
    ADD_FAILURE() << "accepted";
  } catch (const Error& e) {
    EXPECT_TRUE(contains(e.what(), "--model")) << e.what();
  }
  const RunResult r = run_mxdp("train --device cpu --data " + quote(d / "t.txt") + " --model " + quote(d / "hf") +
                                   " --n-layer 3 --steps 1",
                               d / "bad.log");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_TRUE(contains(r.output, "config.json sets the shape")) << r.output;
}

}  // namespace
}  // namespace mxdp
