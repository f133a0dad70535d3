// mxdp plot --metrics FILE [FILE ...] --output OUT.svg [--label NAME ...] [--title T] [--log-y]
// Draws train and eval loss against step from metrics JSON-lines files (plot.h),
// several runs on one plot.
#include <cstdio>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "util/check.h"
#include "cli/commands.h"
#include "io/fileio.h"
#include "train/plot.h"

namespace mxdp::cli {

namespace {

// The legend names of the runs in `paths` without --label: each file's parent
// directory (runs/fp8/metrics.jsonl -> "fp8"); the file name where that is
// empty or shared with another run; the path as given where the file name is
// shared too.
std::vector<std::string> run_names(const std::vector<std::string>& paths) {
  namespace fs = std::filesystem;
  const auto dir_of = [](const std::string& p) {
    const std::string d = fs::path(p).lexically_normal().parent_path().filename().string();
    return d == "." || d == ".." ? std::string() : d;
  };
  const auto file_of = [](const std::string& p) { return fs::path(p).filename().string(); };
  std::map<std::string, int> dirs, files;
  for (const auto& p : paths) ++dirs[dir_of(p)], ++files[file_of(p)];
  std::vector<std::string> names;
  for (const auto& p : paths) {
    const std::string d = dir_of(p), f = file_of(p);
    names.push_back(!d.empty() && dirs[d] == 1 ? d : !f.empty() && files[f] == 1 ? f : p);
  }
  return names;
}

// Each --metrics file is one run: a file given twice (as written, or by
// another path to the same file) would draw the same curves twice.
void check_files(const std::vector<std::string>& paths) {
  namespace fs = std::filesystem;
  std::map<std::string, size_t> first;  // the file's path, normalized -> its 1-based position
  for (size_t i = 0; i < paths.size(); ++i) {
    std::error_code ec;
    fs::path key = fs::weakly_canonical(paths[i], ec);
    if (ec) key = fs::path(paths[i]).lexically_normal();
    const auto [at, fresh] = first.emplace(key.string(), i + 1);
    MXDP_CHECK(fresh, "--metrics '", paths[i], "' is given twice (files ", at->second, " and ", i + 1,
               "): each file is one run");
  }
}

// Each --label names one run in the legend and in data-run: none may be empty
// or name two runs.
void check_labels(const std::vector<std::string>& labels) {
  std::map<std::string, size_t> first;  // label -> its 1-based position
  for (size_t i = 0; i < labels.size(); ++i) {
    MXDP_CHECK(!labels[i].empty(), "--label number ", i + 1, " is empty: give every run a name to show in the legend");
    const auto [at, fresh] = first.emplace(labels[i], i + 1);
    MXDP_CHECK(fresh, "--label '", labels[i], "' is given twice (labels ", at->second, " and ", i + 1,
               "): give every run a name of its own, or the legend cannot tell them apart");
  }
}

}  // namespace

void add_plot_command(CLI::App& app, Runner& run) {
  struct Opts {
    std::vector<std::string> metrics, labels;
    std::string output, title;
    bool log_y = false;
  };
  auto o = std::make_shared<Opts>();
  CLI::App* cmd = app.add_subcommand("plot", "Plot train and eval loss against step from metrics files, as SVG");
  cmd->add_option("--metrics", o->metrics,
                  "Metrics file(s): JSON lines with \"kind\", \"step\", \"loss\"; several (--metrics A B, or "
                  "--metrics A --metrics B) draw several runs on one plot")
      ->required();
  cmd->add_option("--label", o->labels,
                  "Legend name of each run, in the order of --metrics, one per file, each its own and not "
                  "empty (default: the file's directory name, else its file name). Runs have tab10's ten "
                  "colours; from the 11th run on, each ten draws its lines in a dash pattern of its own");
  cmd->add_option("--output", o->output, "SVG file to write (convert to PNG with rsvg-convert if needed)")
      ->required();
  cmd->add_option("--title", o->title, "Plot title (default: the metrics file name, or the run names)");
  cmd->add_flag("--log-y", o->log_y, "Log-scale loss axis");
  cmd->callback([o, &run] {
    run = [o] {
      const std::string ext = std::filesystem::path(o->output).extension().string();
      MXDP_CHECK(ext == ".svg", "--output must name an .svg file, got '", o->output,
                 "' (for PNG: rsvg-convert OUT.svg -o OUT.png)");
      MXDP_CHECK(o->labels.empty() || o->labels.size() == o->metrics.size(), "--label was given ",
                 o->labels.size(), " time(s) for ", o->metrics.size(),
                 " --metrics file(s): give one label per file, in the same order, or none");
      check_labels(o->labels);
      check_files(o->metrics);
      const std::vector<std::string> names = o->labels.empty() ? run_names(o->metrics) : o->labels;
      std::vector<NamedCurves> runs;
      for (size_t r = 0; r < o->metrics.size(); ++r) {
        const std::string& path = o->metrics[r];
        LossCurves curves = read_metrics(path);
        for (size_t i = 0; i < curves.broken.size() && i < 3; ++i)
          std::fprintf(stderr, "plot: skipped %s\n", curves.broken[i].c_str());
        if (curves.broken.size() > 3)
          std::fprintf(stderr, "plot: skipped %zu more broken lines%s\n", curves.broken.size() - 3,
                       o->metrics.size() > 1 ? (" of " + path).c_str() : "");
        MXDP_CHECK(!curves.train.empty() || !curves.eval.empty() || curves.broken.empty() ||
                       curves.nonfinite + curves.other_kinds > 0,
                   path, " holds no metrics line, only ", curves.broken.size(), " broken ones (the first: ",
                   curves.broken.empty() ? "" : curves.broken[0], ")");
        MXDP_CHECK(!curves.train.empty() || !curves.eval.empty(), path, " holds no train or eval loss to plot",
                   o->metrics.size() > 1 ? " (run '" + names[r] + "')" : std::string());
        runs.push_back({names[r], std::move(curves)});
      }
      PlotOptions opts;
      if (!o->title.empty()) {
        opts.title = o->title;
      } else if (runs.size() == 1) {
        opts.title = "Loss: " + std::filesystem::path(o->metrics[0]).filename().string();
      } else {
        opts.title = "Loss:";
        for (size_t r = 0; r < runs.size(); ++r) opts.title += (r ? " vs " : " ") + runs[r].name;
      }
      opts.log_y = o->log_y;
      const std::string svg = loss_svg(runs, opts);
      // Write then rename (every write checked), so that a viewer never sees half a file.
      write_file_atomic(o->output, svg);
      // One line per run; the single-run line is unchanged: "plot: N train and M eval points ... -> OUT".
      for (const auto& r : runs) {
        const LossCurves& c = r.curves;
        std::printf("plot: ");
        if (runs.size() > 1) std::printf("%s: ", r.name.c_str());
        std::printf("%zu train and %zu eval points", c.train.size(), c.eval.size());
        if (c.nonfinite) std::printf(", %zu non-finite losses not drawn", c.nonfinite);
        if (!c.broken.empty()) std::printf(", %zu broken lines skipped", c.broken.size());
        std::printf(" -> %s\n", o->output.c_str());
      }
      return 0;
    };
  });
}

}  // namespace mxdp::cli
