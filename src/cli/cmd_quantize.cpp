// Placeholder until the subcommand lands; its owner replaces this file.
#include "cli/commands.h"

namespace mxdp::cli {
void add_quantize_commands(CLI::App&, Runner&) {}
}  // namespace mxdp::cli
