// `mxdp export` and `mxdp train --init-from` (src/models/gpt2/hf_gpt2.h), checked by
// readers that share no code with mxdp: the `safetensors` package reads the
// export, and a numpy forward pass of GPT-2 (scripts/hf_gpt2_numpy.py) must
// reproduce mxdp's eval loss within 1e-5 relative from it. export -> init-from
// gives back the masters bit for bit, also from a file the safetensors package
// wrote in the hub's naming and from two shards and an index written without
// mxdp's exporter; wrong names, shapes and configs are refused.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <set>

#include "hf_shards.h"
#include "io/checkpoint.h"
#include "models/gpt2/hf_gpt2.h"
#include "models/gpt2/spec.h"
#include "python_util.h"
#include "train/trained_weights.h"

using namespace mxdp::testing;
using nlohmann::json;

namespace {

// vocab 300 (padded to 384 rows in mxdp): the export must drop the padding.
const char* kModel = "--d-model 64 --n-head 4 --seq-len 32 --batch-size 4 --threads 1 --progress lines --sample-tokens 0";
struct Flags {  // defaults a test may replace (CLI11 refuses a flag given twice)
  std::string layers = "--n-layer 2", vocab = "--vocab 300", lr = "--lr 1e-2 --warmup-steps 2";
};
constexpr int kWindows = 3 * 4;  // --eval-batches 3 x --batch-size 4, one rank


std::string corpus(const TempDir& d) {
  std::string text;
  for (int i = 0; i < 200; ++i)
    text += "In the beginning God created the heaven and the earth. And the earth was without form, and void; " +
            std::to_string(i * 7919 % 1000) + "\n";
  write_file(d / "t.txt", text);
  return d / "t.txt";
}

double last_eval_loss(const std::string& metrics, int64_t* step = nullptr) {
  double loss = NAN;
  std::istringstream in(read_file(metrics));
  for (std::string line; std::getline(in, line);) {
    const json j = json::parse(line);
    if (j["kind"] == "eval") {
      loss = j["loss"].get<double>();
      if (step) *step = j["step"].get<int64_t>();
    }
  }
  return loss;
}

std::vector<double> eval_losses(const std::string& metrics) {
  std::vector<double> v;
  std::istringstream in(read_file(metrics));
  for (std::string line; std::getline(in, line);) {
    const json j = json::parse(line);
    if (j["kind"] == "eval") v.push_back(j["loss"].get<double>());
  }
  return v;
}

// The numpy GPT-2's loss on the export in `dir` (the last line it prints).
double numpy_loss(const TempDir& d, const std::string& dir) {
  const RunResult r = run_python(quote(source_path("scripts/hf_gpt2_numpy.py")) + " --model " + quote(dir) + " --tokens " +
                                     quote(d / "t.txt.mxdp/val.bin") + " --seq-len 32 --windows " + std::to_string(kWindows),
                                 dir + ".numpy.log");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  const size_t nl = r.output.find_last_of('\n', r.output.size() - 2);
  return std::stod(r.output.substr(nl + 1));
}

RunResult train(const TempDir& d, const std::string& name, const std::string& args, const Flags& f = {}) {
  return run_mxdp("train --device cpu --data " + quote(d / "t.txt") + " " + kModel + " " + f.layers + " " + f.vocab + " " + f.lr +
                      " --eval-batches 3 --metrics " +
                      quote(d / (name + ".jsonl")) + " --save-dir " + quote(d / name) + " " + args,
                  d / (name + ".log"));
}

double rel(double a, double b) { return std::fabs(a - b) / std::fabs(b); }

class ExportFormat : public ::testing::TestWithParam<const char*> {};

}  // namespace

TEST_P(ExportFormat, NumpyForwardOfTheExportGivesTheEvalLoss) {
  const std::string fmt = GetParam();
  TempDir d;
  MXDP_REQUIRE_PYTHON(d, "numpy, safetensors");
  corpus(d);
  const RunResult tr = train(d, "ck", "--steps 20 --eval-every 20 --weight-format " + fmt);
  ASSERT_EQ(tr.exit_code, 0) << tr.output;
  int64_t step = 0;
  const double eval = last_eval_loss(d / "ck.jsonl", &step);
  ASSERT_EQ(step, 20);

  for (const char* w : {"trained", "master"}) {
    const RunResult ex = run_mxdp("export --load " + quote(d / "ck") + " --output " + quote(d / w) + " --weights " + w,
                                  d / (std::string(w) + ".log"));
    ASSERT_EQ(ex.exit_code, 0) << ex.output;
  }
  const double trained = numpy_loss(d, d / "trained"), master = numpy_loss(d, d / "master");
  EXPECT_LE(rel(trained, eval), 1e-5) << fmt << ": numpy " << trained << ", mxdp eval " << eval;
  if (fmt != "bf16") {
    EXPECT_GT(rel(master, eval), 1e-5) << "the masters' loss must differ, or this test could not tell the weights apart";
  }
  std::printf("%s: mxdp eval %.10f, numpy on the export %.10f (trained), %.10f (masters)\n", fmt.c_str(), eval,
              trained, master);

  // bf16 in the file: MXFP8 and BF16 weights are bf16-exact, so nothing changes.
  const RunResult eb = run_mxdp("export --load " + quote(d / "ck") + " --output " + quote(d / "bf16") + " --dtype bf16",
                                d / "bf16.log");
  ASSERT_EQ(eb.exit_code, 0) << eb.output;
  const double bf = numpy_loss(d, d / "bf16");
  if (fmt != "nvfp4") {
    EXPECT_EQ(bf, trained) << "a bf16 export of " << fmt << " weights is lossless";
  }
  EXPECT_LE(rel(bf, eval), fmt == "nvfp4" ? 1e-3 : 1e-5);

  // The layout, as the safetensors package sees it.
  const RunResult dump = run_python(quote(source_path("tests/py/st_tool.py")) + " dump " + quote(d / "trained/model.safetensors") +
                                        " " + quote(d / "dump.json"),
                                    d / "dump.log");
  ASSERT_EQ(dump.exit_code, 0) << dump.output;
  const json j = json::parse(read_file(d / "dump.json"));
  std::set<std::string> names;
  for (auto it = j["tensors"].begin(); it != j["tensors"].end(); ++it) names.insert(it.key());
  std::set<std::string> want = {"transformer.wte.weight", "transformer.wpe.weight", "transformer.ln_f.weight",
                                "transformer.ln_f.bias"};
  for (int l = 0; l < 2; ++l)
    for (const char* n : {"ln_1.weight", "ln_1.bias", "attn.c_attn.weight", "attn.c_attn.bias", "attn.c_proj.weight",
                          "attn.c_proj.bias", "ln_2.weight", "ln_2.bias", "mlp.c_fc.weight", "mlp.c_fc.bias",
                          "mlp.c_proj.weight", "mlp.c_proj.bias"})
      want.insert("transformer.h." + std::to_string(l) + "." + n);
  EXPECT_EQ(names, want) << "no lm_head.weight: the head is tied";
  const auto& t = j["tensors"];
  EXPECT_EQ(t["transformer.wte.weight"]["shape"], json({300, 64})) << "padding rows dropped";
  EXPECT_EQ(t["transformer.h.0.attn.c_attn.weight"]["shape"], json({64, 192})) << "Conv1D: [in, out]";
  EXPECT_EQ(t["transformer.h.1.mlp.c_fc.weight"]["shape"], json({64, 256}));
  EXPECT_EQ(t["transformer.h.1.mlp.c_proj.weight"]["shape"], json({256, 64}));
  EXPECT_EQ(t["transformer.h.0.attn.c_attn.weight"]["dtype"], "F32");
  EXPECT_EQ(j["metadata"]["format"], "pt");
  const json cfg = json::parse(read_file(d / "trained/config.json"));
  EXPECT_EQ(cfg["model_type"], "gpt2");
  EXPECT_EQ(cfg["vocab_size"], 300);
  EXPECT_EQ(cfg["n_positions"], 128);
  EXPECT_EQ(cfg["n_embd"], 64);
  EXPECT_EQ(cfg["n_layer"], 2);
  EXPECT_EQ(cfg["n_head"], 4);
  EXPECT_EQ(cfg["activation_function"], "gelu_new");
  EXPECT_EQ(cfg["tie_word_embeddings"], true);
}

INSTANTIATE_TEST_SUITE_P(Formats, ExportFormat, ::testing::Values("bf16", "mxfp8", "nvfp4"),
                         [](const auto& i) { return std::string(i.param); });

TEST(HfGpt2, ExportThenInitFromRoundTripsBitForBit) {
  TempDir d;
  MXDP_REQUIRE_PYTHON(d, "numpy, safetensors");
  corpus(d);
  ASSERT_EQ(train(d, "a", "--steps 10 --eval-every 10").exit_code, 0) << read_file(d / "a.log");
  const RunResult ex = run_mxdp("export --load " + quote(d / "a") + " --output " + quote(d / "hf") + " --weights master",
                                d / "ex.log");
  ASSERT_EQ(ex.exit_code, 0) << ex.output;
  // The same tensors as the hub's GPT-2 files name them (no "transformer.",
  // attention-mask buffers), written by the safetensors package, with a tied lm_head.
  const std::string st = quote(source_path("tests/py/st_tool.py"));
  ASSERT_EQ(run_python(st + " edit " + quote(d / "hf/model.safetensors") + " " + quote(d / "hub.safetensors") + " strip-prefix",
                       d / "e1.log").exit_code, 0) << read_file(d / "e1.log");
  ASSERT_EQ(run_python(st + " edit " + quote(d / "hf/model.safetensors") + " " + quote(d / "head.safetensors") + " add-head",
                       d / "e2.log").exit_code, 0) << read_file(d / "e2.log");

  const std::string path_a = d / "a/step_000010.ckpt";
  const mxdp::CheckpointData a = mxdp::read_checkpoint(path_a);
  const double eval_a = last_eval_loss(d / "a.jsonl");
  int run = 0;
  for (const std::string& from : {d / "hf", d / "hf/model.safetensors", d / "hub.safetensors", d / "head.safetensors"}) {
    const std::string name = "b" + std::to_string(run++);
    // lr 0: the one step leaves the weights as they were loaded.
    Flags lr0;
    lr0.lr = "--lr 0 --min-lr 0";
    const RunResult tr = train(d, name, "--steps 1 --eval-first --eval-every 1 --init-from " + quote(from), lr0);
    ASSERT_EQ(tr.exit_code, 0) << from << "\n" << tr.output;
    EXPECT_TRUE(contains(tr.output, "init_from")) << tr.output;
    const std::string path_b = d / (name + "/step_000001.ckpt");
    const mxdp::CheckpointData b = mxdp::read_checkpoint(path_b);
    ASSERT_EQ(a.params.size(), b.params.size());
    for (size_t p = 0; p < a.params.size(); ++p) {
      ASSERT_EQ(a.params[p].master.size(), b.params[p].master.size());
      EXPECT_EQ(std::memcmp(a.params[p].master.data(), b.params[p].master.data(), a.params[p].master.size() * 4), 0)
          << from << ": param " << a.params[p].name << " did not round-trip bit for bit";
    }
    const std::vector<double> ev = eval_losses(d / (name + ".jsonl"));
    ASSERT_EQ(ev.size(), 2u);
    EXPECT_EQ(ev[0], eval_a) << from << ": the first eval reads the loaded weights through the same gather";
  }
}

// In memory, without the CLI: export, then init-from the directory and from
// its two shards gives every weight back bit for bit (wte's padding rows 0).
TEST(HfGpt2, InitFromReadsAShardedDirectory) {
  TempDir d;
  const mxdp::GptConfig c{.vocab = 300, .padded_vocab = 384, .max_seq = 32, .n_layer = 2, .n_head = 4, .d_model = 64};
  mxdp::Gpt a(c);
  a.init_weights(7);
  mxdp::InferenceWeights w;
  w.path = "memory";
  w.config = mxdp::gpt2_model_config(c);
  w.specs = a.params();
  for (size_t p = 0; p < w.specs.size(); ++p) w.weights.emplace_back(a.weights(int(p)), a.weights(int(p)) + w.specs[p].numel());
  w.describe = "master";
  mxdp::export_hf_gpt2(w, d / "hf", /*bf16=*/false, nullptr);
  write_two_shards(d / "hf/model.safetensors", d / "sharded");
  for (const std::string& from : {d / "hf", d / "sharded"}) {
    mxdp::Gpt b(c);
    b.init_weights(8);  // other values everywhere: the import must overwrite each
    mxdp::init_from_hf_gpt2(b, from);
    for (size_t p = 0; p < w.specs.size(); ++p)
      EXPECT_EQ(std::memcmp(b.weights(int(p)), w.weights[p].data(), 4 * w.weights[p].size()), 0)
          << from << ": " << w.specs[p].name;
  }
}

TEST(HfGpt2, InitFromRefusesWhatDoesNotFit) {
  TempDir d;
  MXDP_REQUIRE_PYTHON(d, "numpy, safetensors");
  corpus(d);
  ASSERT_EQ(train(d, "a", "--steps 2 --eval-every 0").exit_code, 0) << read_file(d / "a.log");
  ASSERT_EQ(run_mxdp("export --load " + quote(d / "a") + " --output " + quote(d / "hf"), d / "ex.log").exit_code, 0);
  const std::string st = quote(source_path("tests/py/st_tool.py")), src = quote(d / "hf/model.safetensors");
  auto edit = [&](const std::string& out, const std::string& op) {
    const RunResult r = run_python(st + " edit " + src + " " + quote(d / out) + " " + op, d / (out + ".log"));
    EXPECT_EQ(r.exit_code, 0) << r.output;
    return d / out;
  };
  auto init_error = [&](const std::string& from, const std::string& more = "", const Flags& f = {}) {
    const RunResult r = train(d, "x", "--steps 1 --eval-every 0 --init-from " + quote(from) + " " + more, f);
    EXPECT_NE(r.exit_code, 0) << r.output;
    return r.output;
  };
  Flags one_layer, vocab256;
  one_layer.layers = "--n-layer 1";
  vocab256.vocab = "--vocab 256";
  std::string e = init_error(d / "hf", "", one_layer);
  EXPECT_TRUE(contains(e, "n_layer is 2 but the model being built has 1 (pass --n-layer 2)")) << e;
  e = init_error(d / "hf/model.safetensors", "", one_layer);
  EXPECT_TRUE(contains(e, "tensor 'transformer.h.1.")) << e;
  EXPECT_TRUE(contains(e, "is not part of a GPT-2 with the model's 1 layers (pass --n-layer to match)")) << e;
  e = init_error(d / "hf/model.safetensors", "", vocab256);
  EXPECT_TRUE(contains(e, "'transformer.wte.weight' has shape [300, 64]")) << e;
  EXPECT_TRUE(contains(e, "needs [256, 64]")) << e;
  e = init_error(edit("drop.safetensors", "drop transformer.h.0.ln_1.bias"));
  EXPECT_TRUE(contains(e, "tensor 'transformer.h.0.ln_1.bias' ([64]) is missing")) << e;
  e = init_error(edit("t.safetensors", "transpose transformer.h.1.mlp.c_fc.weight"));
  EXPECT_TRUE(contains(e, "'transformer.h.1.mlp.c_fc.weight' has shape [256, 64]")) << e;
  EXPECT_TRUE(contains(e, "needs [64, 256]")) << e;
  e = init_error(edit("extra.safetensors", "add transformer.h.0.attn.q_proj.weight"));
  EXPECT_TRUE(contains(e, "'transformer.h.0.attn.q_proj.weight' is not part of a GPT-2")) << e;
  e = init_error(edit("bad.safetensors", "add-bad-head"));
  EXPECT_TRUE(contains(e, "lm_head.weight differs from wte.weight")) << e;
  std::string bytes = read_file(d / "hf/model.safetensors");
  write_file(d / "cut.safetensors", bytes.substr(0, bytes.size() - 10));
  e = init_error(d / "cut.safetensors");
  EXPECT_TRUE(contains(e, "outside the 509942-byte buffer") || contains(e, "the tensors end at byte")) << e;
  e = init_error(d / "nothing");
  EXPECT_TRUE(contains(e, "cannot open safetensors file")) << e;
  e = init_error(d / "hf", "--load " + quote(d / "a"));
  EXPECT_TRUE(contains(e, "--init-from starts a run from given weights, --load resumes one")) << e;
  json cfg = json::parse(read_file(d / "hf/config.json"));
  cfg["activation_function"] = "gelu";
  write_file(d / "hf/config.json", cfg.dump());
  e = init_error(d / "hf");
  EXPECT_TRUE(contains(e, "activation_function is \"gelu\"")) << e;
}
