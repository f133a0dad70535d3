// mxdp: data-parallel LLM training with low-precision parameter gather.
#include <cstdio>
#include <exception>

#include "cli/commands.h"
#include "comm/launcher.h"
#include "util/check.h"
#include "util/env.h"

namespace {

// One sentence, once: an error the ranks agreed on (thrown alike on every
// rank) is printed by rank 0 alone; its source location only when asked.
int report(const std::exception& e, bool verbose) {
  const auto* me = dynamic_cast<const mxdp::Error*>(&e);
  int rank = 0;
  try {
    rank = mxdp::this_launch().rank;
  } catch (...) {  // a malformed launcher environment: print from every process
  }
  if (me && me->every_rank() && rank != 0) return 1;
  std::fprintf(stderr, "mxdp: error: %s\n", e.what());
  if (verbose && me && !me->where().empty()) std::fprintf(stderr, "mxdp: (at %s)\n", me->where().c_str());
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"mxdp: data-parallel LLM training whose parameters travel in MXFP8 / NVFP4"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "mxdp 0.1");
  bool verbose = false;
  app.add_flag("-v,--verbose", verbose, "On an error, also print where in mxdp's source it was detected "
               "(also MXDP_VERBOSE=1)");
  app.fallthrough();  // `mxdp train ... --verbose` as well as `mxdp --verbose train ...`
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
    verbose = mxdp::env_flag("MXDP_VERBOSE", false) || verbose;  // 1 or 0 (util/env.h); another value is an error
    return run ? run() : 0;
  } catch (const std::exception& e) {
    return report(e, verbose);
  }
}
