// mxdp sample: generate text from a checkpoint's fp32 master weights.
#include <cstdio>
#include <memory>

#include "check.h"
#include "checkpoint.h"
#include "cli/commands.h"
#include "runtime.h"
#include "sample.h"
#include "trainer.h"

namespace mxdp::cli {

void add_sample_command(CLI::App& app, Runner& run) {
  struct Opts {
    std::string load, prompt = "And God said", device = "auto";
    SampleOptions s;
  };
  auto o = std::make_shared<Opts>();
  o->s.seed = 1;
  CLI::App* cmd = app.add_subcommand("sample", "Generate text from a checkpoint");
  cmd->option_defaults()->always_capture_default();
  cmd->add_option("--load", o->load, "Checkpoint file, or a --save-dir (its latest)")->required();
  cmd->add_option("--prompt", o->prompt, "Text to continue");
  cmd->add_option("--tokens", o->s.tokens, "Tokens (bytes) to generate");
  cmd->add_option("--temperature", o->s.temperature, "Softmax temperature (0 = greedy)");
  cmd->add_option("--top-k", o->s.top_k, "Sample among the k most likely tokens (0 = all)");
  cmd->add_option("--seed", o->s.seed, "Sampling seed");
  cmd->add_option("--device", o->device, "Where the model runs: cuda, cpu, or auto (cuda where a GPU is present)")
      ->check(CLI::IsMember({"auto", "cpu", "cuda"}));
  cmd->callback([o, &run] {
    run = [o] {
      const std::string path = resolve_checkpoint(o->load);
      CheckpointData c = read_checkpoint(path, /*moments=*/false);
      const GptConfig cfg = model_from_checkpoint(c.extra, path);
      const Device device = resolve_device(o->device);
      auto ops = make_engine_ops(device);
      auto model_ptr = make_gpt(device, cfg, *ops);
      GptModel& model = *model_ptr;
      MXDP_CHECK(c.params.size() == model.params().size(), path, ": ", c.params.size(),
                 " params in the checkpoint, the model has ", model.params().size());
      for (size_t p = 0; p < c.params.size(); ++p) {
        MXDP_CHECK(c.params[p].shape == model.params()[p].shape, path, ": param '", c.params[p].name,
                   "' has another shape than the model's");
        model.set_weights(int(p), c.params[p].master.data());
      }
      std::printf("%s%s\n", o->prompt.c_str(), generate(model, o->prompt, o->s).c_str());
      return 0;
    };
  });
}

}  // namespace mxdp::cli
