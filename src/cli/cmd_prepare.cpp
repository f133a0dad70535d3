// Placeholder until the subcommand lands; its owner replaces this file.
#include "cli/commands.h"

namespace mxdp::cli {
void add_prepare_command(CLI::App&, Runner&) {}
}  // namespace mxdp::cli
