// mxdp plot --metrics FILE --output OUT.svg [--title T] [--log-y]
// Draws train and eval loss against step from a metrics JSON-lines file (plot.h).
#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>

#include "util/check.h"
#include "cli/commands.h"
#include "io/fileio.h"
#include "train/plot.h"

namespace mxdp::cli {

void add_plot_command(CLI::App& app, Runner& run) {
  struct Opts {
    std::string metrics, output, title;
    bool log_y = false;
  };
  auto o = std::make_shared<Opts>();
  CLI::App* cmd = app.add_subcommand("plot", "Plot train and eval loss against step from a metrics file, as SVG");
  cmd->add_option("--metrics", o->metrics, "Metrics file: JSON lines with \"kind\", \"step\", \"loss\"")->required();
  cmd->add_option("--output", o->output, "SVG file to write (convert to PNG with rsvg-convert if needed)")
      ->required();
  cmd->add_option("--title", o->title, "Plot title (default: the metrics file name)");
  cmd->add_flag("--log-y", o->log_y, "Log-scale loss axis");
  cmd->callback([o, &run] {
    run = [o] {
      const std::string ext = std::filesystem::path(o->output).extension().string();
      MXDP_CHECK(ext == ".svg", "--output must name an .svg file, got '", o->output,
                 "' (for PNG: rsvg-convert OUT.svg -o OUT.png)");
      const LossCurves curves = read_metrics(o->metrics);
      for (size_t i = 0; i < curves.broken.size() && i < 3; ++i)
        std::fprintf(stderr, "plot: skipped %s\n", curves.broken[i].c_str());
      if (curves.broken.size() > 3) std::fprintf(stderr, "plot: skipped %zu more broken lines\n", curves.broken.size() - 3);
      MXDP_CHECK(!curves.train.empty() || !curves.eval.empty() || curves.broken.empty() ||
                     curves.nonfinite + curves.other_kinds > 0,
                 o->metrics, " holds no metrics line, only ", curves.broken.size(), " broken ones (the first: ",
                 curves.broken.empty() ? "" : curves.broken[0], ")");
      PlotOptions opts;
      opts.title = o->title.empty() ? "Loss: " + std::filesystem::path(o->metrics).filename().string() : o->title;
      opts.log_y = o->log_y;
      const std::string svg = loss_svg(curves, opts);
      // Write then rename (every write checked), so that a viewer never sees half a file.
      write_file_atomic(o->output, svg);
      std::printf("plot: %zu train and %zu eval points", curves.train.size(), curves.eval.size());
      if (curves.nonfinite) std::printf(", %zu non-finite losses not drawn", curves.nonfinite);
      if (!curves.broken.empty()) std::printf(", %zu broken lines skipped", curves.broken.size());
      std::printf(" -> %s\n", o->output.c_str());
      return 0;
    };
  });
}

}  // namespace mxdp::cli
