// mxdp prepare --input FILE --output DIR [--val-fraction 0.1] [--tokenizer tokenizer.json]
// Tokenizes a text file (bytes, or a BPE tokenizer) into DIR/train.bin and DIR/val.bin (docs/data.md).
#include <memory>
#include <string>

#include "cli/commands.h"
#include "data/data.h"
#include "data/tokenizer.h"

namespace mxdp::cli {

void add_prepare_command(CLI::App& app, Runner& run) {
  struct Opts {
    std::string input, output;
    double val_fraction = 0.1;
    std::string tokenizer;
  };
  auto o = std::make_shared<Opts>();
  CLI::App* cmd = app.add_subcommand(
      "prepare", "Tokenize a text file (byte-level, vocab 256) into train.bin and val.bin token shards");
  cmd->add_option("--input", o->input, "Text file to tokenize (any bytes)")->required();
  cmd->add_option("--output", o->output, "Directory for train.bin and val.bin (created if missing)")->required();
  cmd->add_option("--val-fraction", o->val_fraction,
                  "Fraction of the text, taken from its end, that becomes val.bin; in (0, 1)")
      ->capture_default_str();
  cmd->add_option("--tokenizer", o->tokenizer,
                  "Encode with this Hugging Face tokenizer.json (byte-level BPE: GPT-2, Llama 3, Qwen2, SmolLM2) instead of bytes; "
                  "a copy goes next to the shards (src/data/tokenizer.h)");
  cmd->callback([o, &run] {
    run = [o] {
      if (!o->tokenizer.empty())
        prepare_with_tokenizer(o->input, o->output, o->val_fraction, o->tokenizer);
      else
        prepare(o->input, o->output, o->val_fraction);
      return 0;
    };
  });
}

}  // namespace mxdp::cli
