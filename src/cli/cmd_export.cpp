// mxdp export --load CKPT --output DIR [--weights trained|master] [--dtype fp32|bf16]
// Writes a checkpoint as a Hugging Face model, through its architecture's
// adapter (ModelSpec::hf_export; GPT-2: models/gpt2/hf_gpt2.h, Llama/Qwen2: models/llama/hf_llama.h).
#include <memory>
#include <string>

#include "cli/commands.h"
#include "models/registry.h"
#include "train/trained_weights.h"

namespace mxdp::cli {

void add_export_command(CLI::App& app, Runner& run) {
  struct Opts {
    std::string load, output, weights = "trained", dtype = "fp32";
  };
  auto o = std::make_shared<Opts>();
  CLI::App* cmd = app.add_subcommand(
      "export", "Write a checkpoint as a Hugging Face model directory (config.json + model.safetensors): GPT-2, Llama or Qwen2");
  cmd->option_defaults()->always_capture_default();
  cmd->add_option("--load", o->load, "Checkpoint file, or a --save-dir (its latest)")->required();
  cmd->add_option("--output", o->output, "Directory to write (created if missing)")->required();
  cmd->add_option("--weights", o->weights,
                  "trained: the weights training computed with (masters through the checkpoint's gather format); "
                  "master: the fp32 masters")
      ->check(CLI::IsMember({"trained", "master"}));
  cmd->add_option("--dtype", o->dtype, "Tensor dtype in the file")->check(CLI::IsMember({"fp32", "bf16"}));
  cmd->callback([o, &run] {
    run = [o] {
      const InferenceWeights w = load_inference_weights(o->load, parse_weights_mode(o->weights));
      w.config.spec().hf_export(w, o->output, o->dtype == "bf16", stdout);
      return 0;
    };
  });
}

}  // namespace mxdp::cli
