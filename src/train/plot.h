// Loss curves: read a metrics file, draw train and eval loss against step as
// an SVG (no dependencies; opens in any browser, converts with rsvg-convert).
//
// Metrics file: JSON lines. Each non-blank line is an object with at least
//   "kind": "train" | "eval"   (lines of any other kind are skipped)
//   "step": integer >= 0
//   "loss": number (null, which is how nlohmann::json writes NaN/Inf, is a
//           non-finite loss: the point is counted in `nonfinite` and not drawn)
// Other keys are ignored. A line that is not JSON, not an object, or lacks one
// of these fields is an error naming the file and the line number.
// When one (kind, step) appears on several lines, the LAST one wins: a run
// resumed from a checkpoint appends steps that replace those logged after the
// checkpoint was written. Points come back sorted by step.
//
// SVG: train loss as a line (<polyline class="train">), eval loss as a line
// with a circle per point (<polyline class="eval"> + <g class="eval-markers">),
// axes with ticks and labels, a title and a legend; y linear or log10.
// Several runs share one plot: both axes span all of them, each run has its
// own colour (tab10; train solid, eval dashed with markers), its elements carry
// data-run="NAME" and come in the order of the runs, and the legend names
// them. The colours repeat after ten runs: each further ten draws both its
// lines in a dash pattern of its own (dotted, dash-dot, long dashes), so the
// first 40 runs all look different. One run is drawn as before: train blue,
// eval red, no run names.
#pragma once

#include <cstdint>
#include <istream>
#include <string>
#include <vector>

namespace mxdp {

struct MetricPoint {
  int64_t step = 0;
  double loss = 0;
};

struct LossCurves {
  std::vector<MetricPoint> train, eval;  // sorted by step, one point per step
  size_t nonfinite = 0;                  // train/eval lines whose loss was null/NaN/Inf
  size_t other_kinds = 0;                // lines of another kind, skipped
  std::vector<std::string> broken;       // lines that are not a metrics line, skipped: "name:LINE: why"
};

// `name` is used in messages ("name:LINE: ..."). A line that is not a metrics
// line is skipped and listed in `broken`; only a read error throws.
LossCurves parse_metrics(std::istream& in, const std::string& name);
LossCurves read_metrics(const std::string& path);

struct PlotOptions {
  std::string title = "Loss";
  bool log_y = false;  // log10 loss axis; every plotted loss must then be > 0
  int width = 900;
  int height = 540;
};

// One run of a plot with several: its legend name and its curves.
struct NamedCurves {
  std::string name;
  LossCurves curves;
};

// Fails when there is no run, or a run has nothing to draw (the message names
// it), or, for log_y, a loss is <= 0.
std::string loss_svg(const std::vector<NamedCurves>& runs, const PlotOptions& opts);
// One run (a thin wrapper); fails when there is nothing to draw.
std::string loss_svg(const LossCurves& curves, const PlotOptions& opts);

}  // namespace mxdp
