// mxdp: data-parallel LLM training with low-precision parameter gather.
#include <cstdio>
#include <exception>

#include "util/check.h"
#include "cli/commands.h"

int main(int argc, char** argv) {
  CLI::App app{"mxdp: data-parallel LLM training whose parameters travel in MXFP8 / NVFP4"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "mxdp 0.1");
  mxdp::cli::Runner run;
  mxdp::cli::add_quantize_commands(app, run);
  mxdp::cli::add_prepare_command(app, run);
  mxdp::cli::add_train_command(app, run);
  mxdp::cli::add_sample_command(app, run);
  mxdp::cli::add_plot_command(app, run);
  mxdp::cli::add_plan_command(app, run);
  mxdp::cli::add_export_command(app, run);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  try {
    return run ? run() : 0;
  } catch (const mxdp::Error& e) {
    std::fprintf(stderr, "mxdp: error: %s\n", e.what());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "mxdp: error: %s\n", e.what());
    return 1;
  }
}
