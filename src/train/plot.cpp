// Metrics parsing and the SVG loss plot; the contract is in plot.h.
#include "train/plot.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <fstream>
#include <iterator>
#include <map>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "util/check.h"

namespace mxdp {

// ---- metrics ----------------------------------------------------------------

LossCurves parse_metrics(std::istream& in, const std::string& name) {
  using nlohmann::json;
  std::map<int64_t, double> train, eval;  // step -> loss; later lines overwrite
  LossCurves out;
  std::string line;
  // One line: its point, or an Error naming the line (the line is then
  // skipped and reported: one cut line, e.g. after a full disk or a kill,
  // must not make the whole file unplottable).
  const auto parse_line = [&](size_t lineno) {
    json j;
    try {
      j = json::parse(line);
    } catch (const json::parse_error& e) {
      MXDP_FAIL(name, ":", lineno, ": not valid JSON (syntax error near column ", e.byte, ")");
    } catch (const json::exception&) {
      MXDP_FAIL(name, ":", lineno, ": not valid JSON (a number out of range)");
    }
    MXDP_CHECK(j.is_object(), name, ":", lineno, ": expected a JSON object, got ", j.type_name());
    MXDP_CHECK(j.contains("kind") && j["kind"].is_string(), name, ":", lineno, ": no string \"kind\"");
    const std::string kind = j["kind"].get<std::string>();
    if (kind != "train" && kind != "eval") {
      ++out.other_kinds;
      return;
    }
    MXDP_CHECK(j.contains("step") && j["step"].is_number_integer(), name, ":", lineno,
               ": no integer \"step\"");
    const int64_t step = j["step"].get<int64_t>();
    MXDP_CHECK(step >= 0, name, ":", lineno, ": negative step ", step);
    MXDP_CHECK(j.contains("loss") && (j["loss"].is_number() || j["loss"].is_null()), name, ":", lineno,
               ": no numeric \"loss\"");
    const double loss = j["loss"].is_null() ? NAN : j["loss"].get<double>();
    auto& series = kind == "train" ? train : eval;
    if (!std::isfinite(loss)) {
      ++out.nonfinite;
      series.erase(step);
      return;
    }
    series[step] = loss;
  };
  for (size_t lineno = 1; std::getline(in, line); ++lineno) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.find_first_not_of(" \t") == std::string::npos) continue;
    try {
      parse_line(lineno);
    } catch (const Error& e) {
      out.broken.push_back(e.what());
    }
  }
  MXDP_CHECK(!in.bad(), name, ": read error");
  for (auto [s, l] : train) out.train.push_back({s, l});
  for (auto [s, l] : eval) out.eval.push_back({s, l});
  return out;
}

LossCurves read_metrics(const std::string& path) {
  std::ifstream in(path);
  if (!in) MXDP_FAIL("cannot read metrics file '", path, "': ", std::strerror(errno));
  return parse_metrics(in, path);
}

// ---- SVG --------------------------------------------------------------------

namespace {

std::string xml_escape(const std::string& s) {
  std::string o;
  for (char c : s) {
    switch (c) {
      case '&': o += "&amp;"; break;
      case '<': o += "&lt;"; break;
      case '>': o += "&gt;"; break;
      case '"': o += "&quot;"; break;
      default: o += c;
    }
  }
  return o;
}

// 1, 2 or 5 times a power of ten, near range/target.
double nice_step(double range, int target) {
  const double raw = range / target;
  const double mag = std::pow(10.0, std::floor(std::log10(raw)));
  const double f = raw / mag;
  return (f < 1.5 ? 1 : f < 3 ? 2 : f < 7 ? 5 : 10) * mag;
}

// Multiples of `step` in [lo, hi].
std::vector<double> linear_ticks(double lo, double hi, double step) {
  std::vector<double> t;
  const double first = std::ceil(lo / step - 1e-9);
  for (double i = first;; i += 1) {
    const double v = i * step;
    if (v > hi + step * 1e-9) break;
    t.push_back(std::abs(v) < step * 1e-9 ? 0.0 : v);
  }
  return t;
}

// Decimals enough to tell ticks `step` apart.
std::string tick_label(double v, double step) {
  const int dec = std::max(0, int(std::ceil(-std::log10(step) - 1e-9)));
  return fmt::format("{:.{}f}", v, dec);
}

// An axis: data value -> pixel, plus ticks (value, label).
struct Axis {
  double lo, hi;  // in axis space (log10 of the value for a log axis)
  bool log;
  double p0, p1;  // pixels of lo and hi
  double to_px(double v) const {
    const double a = log ? std::log10(v) : v;
    return p0 + (a - lo) / (hi - lo) * (p1 - p0);
  }
  std::vector<std::pair<double, std::string>> ticks;
};

void make_linear_ticks(Axis& ax, int target, bool integer) {
  double step = nice_step(ax.hi - ax.lo, target);
  if (integer) step = std::max(step, 1.0);
  for (double v : linear_ticks(ax.lo, ax.hi, step)) ax.ticks.push_back({v, tick_label(v, step)});
}

void make_log_ticks(Axis& ax) {
  const double vlo = std::pow(10.0, ax.lo), vhi = std::pow(10.0, ax.hi);
  // Decades if there are enough of them, then 1-2-5, else plain linear ticks
  // (a loss that moves within one decade), placed on the log scale.
  for (const std::vector<double>& mults : {std::vector<double>{1}, std::vector<double>{1, 2, 5}}) {
    std::vector<double> vals;
    for (int e = int(std::floor(ax.lo)); e <= int(std::ceil(ax.hi)); ++e)
      for (double m : mults) {
        const double v = m * std::pow(10.0, e);
        if (v >= vlo * (1 - 1e-12) && v <= vhi * (1 + 1e-12)) vals.push_back(v);
      }
    if (vals.size() >= 3) {
      for (double v : vals) ax.ticks.push_back({v, fmt::format("{:g}", v)});
      return;
    }
  }
  const double step = nice_step(vhi - vlo, 8);
  for (double v : linear_ticks(vlo, vhi, step))
    if (v > 0) ax.ticks.push_back({v, tick_label(v, step)});
}

std::string points_attr(const std::vector<MetricPoint>& pts, const Axis& x, const Axis& y) {
  std::string s;
  for (const auto& p : pts) {
    if (!s.empty()) s += ' ';
    s += fmt::format("{:.2f},{:.2f}", x.to_px(double(p.step)), y.to_px(p.loss));
  }
  return s;
}

// How a run's lines are drawn: their colours and stroke-dasharrays ("" = solid).
struct RunStyle {
  const char* train_color;
  const char* eval_color;
  const char* train_dash;
  const char* eval_dash;
};

// One run: train blue, eval red, both solid. Several: run r draws both lines
// in tab10's colour r % 10; the first ten runs draw train solid and eval
// dashed, each later ten both lines in a dash pattern of its own (dotted,
// dash-dot, long dashes), so that runs r and r + 10 differ; after 40 runs the
// styles repeat. Eval always has its markers.
RunStyle run_style(size_t run, bool multi) {
  if (!multi) return {"#1f77b4", "#d62728", "", ""};
  static const char* const kColors[] = {"#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd",
                                        "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"};
  static const char* const kDashes[] = {"", "2,2", "8,3,2,3", "16,4"};
  const char* color = kColors[run % std::size(kColors)];
  const size_t ten = run / std::size(kColors) % std::size(kDashes);
  return {color, color, kDashes[ten], ten == 0 ? "6,4" : kDashes[ten]};
}

std::string dash_attr(const char* dash) {
  return *dash ? fmt::format(" stroke-dasharray=\"{}\"", dash) : std::string();
}

// Where a plot draws: its two axes, spanning every run's points, and the
// margins around the plot area.
struct Canvas {
  static constexpr double left = 80, right = 30, top = 50, bottom = 60;
  double W, H;
  Axis x, y;
};

Canvas make_canvas(const std::vector<NamedCurves>& runs, const PlotOptions& o) {
  double xmin = INFINITY, xmax = -INFINITY, ymin = INFINITY, ymax = -INFINITY;
  const std::string* ymin_run = nullptr;
  for (const auto& r : runs)
    for (const auto* s : {&r.curves.train, &r.curves.eval})
      for (const auto& p : *s) {
        xmin = std::min(xmin, double(p.step));
        xmax = std::max(xmax, double(p.step));
        if (p.loss < ymin) ymin = p.loss, ymin_run = &r.name;
        ymax = std::max(ymax, p.loss);
      }
  if (o.log_y)
    MXDP_CHECK(ymin > 0, "log-scale plot needs every loss > 0, the smallest is ", ymin,
               runs.size() > 1 ? " (run '" + *ymin_run + "')" : std::string());
  if (xmin > 0 && xmin <= 0.05 * xmax) xmin = 0;  // a run logged from step 1: start the axis at 0
  if (xmax == xmin) xmin -= 1, xmax += 1;
  double ylo = o.log_y ? std::log10(ymin) : ymin, yhi = o.log_y ? std::log10(ymax) : ymax;
  const double pad = yhi == ylo ? (o.log_y ? 0.05 : std::max(std::abs(ylo) * 0.05, 0.5)) : (yhi - ylo) * 0.05;
  ylo -= pad, yhi += pad;

  const double W = o.width, H = o.height;
  Canvas c{W, H, Axis{xmin, xmax, false, Canvas::left, W - Canvas::right, {}},
           Axis{ylo, yhi, o.log_y, H - Canvas::bottom, Canvas::top, {}}};
  make_linear_ticks(c.x, 8, /*integer=*/true);
  if (o.log_y)
    make_log_ticks(c.y);
  else
    make_linear_ticks(c.y, 6, false);
  return c;
}

// The SVG's opening: background, title, grid, ticks, the frame and the axis labels.
std::string svg_frame(const Canvas& c, const PlotOptions& o) {
  const double left = c.left, right = c.right, top = c.top, bottom = c.bottom, W = c.W, H = c.H;
  std::string s;
  s += fmt::format(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{0}\" height=\"{1}\" viewBox=\"0 0 {0} {1}\" "
      "font-family=\"DejaVu Sans, Helvetica, Arial, sans-serif\" font-size=\"12\">\n",
      o.width, o.height);
  s += fmt::format("<rect width=\"{}\" height=\"{}\" fill=\"white\"/>\n", o.width, o.height);
  s += fmt::format("<text x=\"{:.1f}\" y=\"30\" text-anchor=\"middle\" font-size=\"16\" font-weight=\"bold\">{}</text>\n",
                   (left + W - right) / 2, xml_escape(o.title));

  s += "<g class=\"grid\" stroke=\"#e0e0e0\" stroke-width=\"1\">\n";
  for (auto& [v, l] : c.x.ticks)
    s += fmt::format("<line x1=\"{0:.2f}\" y1=\"{1}\" x2=\"{0:.2f}\" y2=\"{2}\"/>\n", c.x.to_px(v), top, H - bottom);
  for (auto& [v, l] : c.y.ticks)
    s += fmt::format("<line x1=\"{1}\" y1=\"{0:.2f}\" x2=\"{2}\" y2=\"{0:.2f}\"/>\n", c.y.to_px(v), left, W - right);
  s += "</g>\n";
  s += "<g class=\"x-ticks\" text-anchor=\"middle\">\n";
  for (auto& [v, l] : c.x.ticks) {
    const double px = c.x.to_px(v);
    s += fmt::format("<line x1=\"{0:.2f}\" y1=\"{1}\" x2=\"{0:.2f}\" y2=\"{2}\" stroke=\"black\"/>", px, H - bottom,
                     H - bottom + 5);
    s += fmt::format("<text x=\"{:.2f}\" y=\"{}\">{}</text>\n", px, H - bottom + 19, l);
  }
  s += "</g>\n<g class=\"y-ticks\" text-anchor=\"end\">\n";
  for (auto& [v, l] : c.y.ticks) {
    const double py = c.y.to_px(v);
    s += fmt::format("<line x1=\"{1}\" y1=\"{0:.2f}\" x2=\"{2}\" y2=\"{0:.2f}\" stroke=\"black\"/>", py, left - 5,
                     left);
    s += fmt::format("<text x=\"{}\" y=\"{:.2f}\" dy=\"0.35em\">{}</text>\n", left - 8, py, l);
  }
  s += "</g>\n";
  s += fmt::format("<rect class=\"frame\" x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"none\" stroke=\"black\"/>\n",
                   left, top, W - left - right, H - top - bottom);
  s += fmt::format("<text x=\"{:.1f}\" y=\"{}\" text-anchor=\"middle\" font-size=\"13\">step</text>\n",
                   (left + W - right) / 2, H - 18);
  s += fmt::format(
      "<text x=\"0\" y=\"0\" transform=\"translate(22,{:.1f}) rotate(-90)\" text-anchor=\"middle\" "
      "font-size=\"13\">{}</text>\n",
      (top + H - bottom) / 2, o.log_y ? "loss (log scale)" : "loss");
  return s;
}

// data-run="NAME" on a run's elements, where there are several.
std::string run_attr(const std::vector<NamedCurves>& runs, size_t run) {
  return runs.size() > 1 ? fmt::format(" data-run=\"{}\"", xml_escape(runs[run].name)) : std::string();
}

// Every train line, then every eval line with its markers (on top).
std::string svg_series(const std::vector<NamedCurves>& runs, const Canvas& cv) {
  const bool multi = runs.size() > 1;
  std::string s;
  for (size_t i = 0; i < runs.size(); ++i) {
    const LossCurves& c = runs[i].curves;
    if (c.train.empty()) continue;
    const RunStyle st = run_style(i, multi);
    s += fmt::format("<polyline class=\"train\"{} fill=\"none\" stroke=\"{}\" stroke-width=\"1.5\"{} "
                     "stroke-linejoin=\"round\" points=\"{}\"/>\n",
                     run_attr(runs, i), st.train_color, dash_attr(st.train_dash), points_attr(c.train, cv.x, cv.y));
    if (c.train.size() == 1)  // a one-point line draws nothing
      s += fmt::format("<circle{} cx=\"{:.2f}\" cy=\"{:.2f}\" r=\"2.5\" fill=\"{}\"/>\n", run_attr(runs, i),
                       cv.x.to_px(double(c.train[0].step)), cv.y.to_px(c.train[0].loss), st.train_color);
  }
  for (size_t i = 0; i < runs.size(); ++i) {
    const LossCurves& c = runs[i].curves;
    if (c.eval.empty()) continue;
    const RunStyle st = run_style(i, multi);
    s += fmt::format("<polyline class=\"eval\"{} fill=\"none\" stroke=\"{}\" stroke-width=\"1.5\"{} points=\"{}\"/>\n",
                     run_attr(runs, i), st.eval_color, dash_attr(st.eval_dash), points_attr(c.eval, cv.x, cv.y));
    s += fmt::format("<g class=\"eval-markers\"{} fill=\"white\" stroke=\"{}\" stroke-width=\"1.5\">\n",
                     run_attr(runs, i), st.eval_color);
    for (const auto& p : c.eval)
      s += fmt::format("<circle cx=\"{:.2f}\" cy=\"{:.2f}\" r=\"3.5\"/>\n", cv.x.to_px(double(p.step)),
                       cv.y.to_px(p.loss));
    s += "</g>\n";
  }
  return s;
}

// The legend, top right inside the plot area: per run its train and its eval entry.
std::string svg_legend(const std::vector<NamedCurves>& runs, const Canvas& cv) {
  const bool multi = runs.size() > 1;
  struct Entry {
    std::string label;
    bool eval;
    const char* color;
    const char* dash;
  };
  std::vector<Entry> entries;
  size_t longest = 0;
  for (size_t i = 0; i < runs.size(); ++i) {
    const LossCurves& c = runs[i].curves;
    const std::string who = multi ? runs[i].name + " " : "";
    const RunStyle st = run_style(i, multi);
    if (!c.train.empty())
      entries.push_back({fmt::format("{}train{} (last {:.4f})", who, multi ? "" : " loss", c.train.back().loss), false,
                         st.train_color, st.train_dash});
    if (!c.eval.empty())
      entries.push_back({fmt::format("{}eval{} (last {:.4f})", who, multi ? "" : " loss", c.eval.back().loss), true,
                         st.eval_color, st.eval_dash});
  }
  for (const auto& e : entries) longest = std::max(longest, e.label.size());
  // Wide enough for the longest label (about 7 px a character at font-size 12).
  const double lw = multi ? std::max(200.0, 58 + 7.0 * double(longest)) : 200;
  const double lh = 10 + 20.0 * entries.size(), lx = cv.W - cv.right - lw - 10, ly = cv.top + 10;
  std::string s = fmt::format(
      "<g class=\"legend\">\n<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"white\" "
      "fill-opacity=\"0.9\" stroke=\"#999\"/>\n",
      lx, ly, lw, lh);
  for (size_t i = 0; i < entries.size(); ++i) {
    const double cy = ly + 15 + 20.0 * i;
    const Entry& e = entries[i];
    s += fmt::format("<line x1=\"{}\" y1=\"{}\" x2=\"{}\" y2=\"{}\" stroke=\"{}\" stroke-width=\"1.5\"{}/>", lx + 10,
                     cy, lx + 40, cy, e.color, dash_attr(e.dash));
    if (e.eval)
      s += fmt::format("<circle cx=\"{}\" cy=\"{}\" r=\"3.5\" fill=\"white\" stroke=\"{}\" stroke-width=\"1.5\"/>",
                       lx + 25, cy, e.color);
    s += fmt::format("<text x=\"{}\" y=\"{}\" dy=\"0.35em\">{}</text>\n", lx + 48, cy, xml_escape(e.label));
  }
  return s + "</g>\n";
}

}  // namespace

std::string loss_svg(const LossCurves& c, const PlotOptions& o) { return loss_svg({NamedCurves{"", c}}, o); }

std::string loss_svg(const std::vector<NamedCurves>& runs, const PlotOptions& o) {
  MXDP_CHECK(!runs.empty(), "no runs to plot");
  for (const auto& r : runs)
    MXDP_CHECK(!r.curves.train.empty() || !r.curves.eval.empty(), "no train or eval loss points to plot",
               r.name.empty() ? std::string() : " in run '" + r.name + "'");
  MXDP_CHECK(o.width >= 200 && o.height >= 150, "plot size ", o.width, "x", o.height, " is too small");
  const Canvas c = make_canvas(runs, o);
  return svg_frame(c, o) + svg_series(runs, c) + svg_legend(runs, c) + "</svg>\n";
}

}  // namespace mxdp
