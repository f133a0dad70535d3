// mxdp prepare --input FILE --output DIR [--val-fraction 0.1]
// Tokenizes a text file (bytes) into DIR/train.bin and DIR/val.bin (docs/data.md).
#include <memory>
#include <string>

#include "cli/commands.h"
#include "data.h"

namespace mxdp::cli {

void add_prepare_command(CLI::App& app, Runner& run) {
  struct Opts {
    std::string input, output;
    double val_fraction = 0.1;
  };
  auto o = std::make_shared<Opts>();
  CLI::App* cmd = app.add_subcommand(
      "prepare", "Tokenize a text file (byte-level, vocab 256) into train.bin and val.bin token shards");
  cmd->add_option("--input", o->input, "Text file to tokenize (any bytes)")->required();
  cmd->add_option("--output", o->output, "Directory for train.bin and val.bin (created if missing)")->required();
  cmd->add_option("--val-fraction", o->val_fraction,
                  "Fraction of the text, taken from its end, that becomes val.bin; in (0, 1)")
      ->capture_default_str();
  cmd->callback([o, &run] {
    run = [o] {
      prepare(o->input, o->output, o->val_fraction);
      return 0;
    };
  });
}

}  // namespace mxdp::cli
