// Metrics parsing, the SVG loss plot and `mxdp plot`.
#include <gtest/gtest.h>

#include <cmath>
#include <regex>
#include <set>
#include <sstream>

#include "util/check.h"
#include "train/plot.h"
#include "tmpdir_util.h"

using namespace mxdp;
using namespace mxdp::testing;

namespace {

// The first broken line's report (parse_metrics skips such lines), or the
// error that stopped the parse, or "".
std::string error_of_parse(const std::string& text) {
  std::istringstream in(text);
  try {
    const LossCurves c = parse_metrics(in, "m.jsonl");
    for (const std::string& w : c.broken) EXPECT_EQ(w.find("json.exception"), std::string::npos) << "library text in: " << w;
    return c.broken.empty() ? "" : c.broken[0];
  } catch (const mxdp::Error& e) {
    const std::string w = e.what();
    EXPECT_EQ(w.find("json.exception"), std::string::npos) << "library text in: " << w;
    return w;
  } catch (const std::exception& e) {
    ADD_FAILURE() << "not an mxdp::Error: " << e.what();
    return e.what();
  }
  return "";
}

struct XY {
  double x, y;
};

// "x1,y1 x2,y2 ..." as points.
std::vector<XY> parse_points(const std::string& attr) {
  std::vector<XY> pts;
  std::istringstream is(attr);
  std::string pair;
  while (is >> pair) {
    const auto comma = pair.find(',');
    pts.push_back({std::stod(pair.substr(0, comma)), std::stod(pair.substr(comma + 1))});
  }
  return pts;
}

// The points of <polyline class="cls" ... points="...">, or none.
std::vector<XY> polyline_points(const std::string& svg, const std::string& cls) {
  std::smatch m;
  const std::regex re("<polyline class=\"" + cls + "\"[^>]* points=\"([^\"]*)\"");
  if (!std::regex_search(svg, m, re)) return {};
  return parse_points(m[1].str());
}

// Every <polyline class="cls" data-run="RUN" ... points="...">, in document order.
struct RunLine {
  std::string run, stroke, attrs;
  std::vector<XY> pts;
};
std::vector<RunLine> run_polylines(const std::string& svg, const std::string& cls) {
  const std::regex re("<polyline class=\"" + cls + "\" data-run=\"([^\"]*)\"([^>]*) points=\"([^\"]*)\"");
  const std::regex stroke_re(" stroke=\"([^\"]*)\"");
  std::vector<RunLine> out;
  for (auto it = std::sregex_iterator(svg.begin(), svg.end(), re); it != std::sregex_iterator(); ++it) {
    RunLine l{(*it)[1].str(), "", (*it)[2].str(), parse_points((*it)[3].str())};
    std::smatch sm;
    if (std::regex_search(l.attrs, sm, stroke_re)) l.stroke = sm[1].str();
    out.push_back(std::move(l));
  }
  return out;
}

size_t count(const std::string& s, const std::string& needle) {
  size_t n = 0;
  for (size_t at = s.find(needle); at != std::string::npos; at = s.find(needle, at + 1)) ++n;
  return n;
}

// The text between the first `open` and the next `close` after it.
std::string section(const std::string& s, const std::string& open, const std::string& close) {
  const size_t a = s.find(open);
  if (a == std::string::npos) return "";
  const size_t b = s.find(close, a);
  return s.substr(a, b - a);
}

// Pixel positions must be an affine image of the data: the relative position
// of every point between the first and the last equals that of its value.
void expect_affine(const std::vector<double>& data, const std::vector<double>& px) {
  ASSERT_EQ(data.size(), px.size());
  ASSERT_GE(data.size(), 2u);
  const double d0 = data.front(), d1 = data.back(), p0 = px.front(), p1 = px.back();
  for (size_t i = 0; i < data.size(); ++i)
    EXPECT_NEAR((px[i] - p0) / (p1 - p0), (data[i] - d0) / (d1 - d0), 2e-4) << i;
}

}  // namespace

TEST(Metrics, ParsesKeepsLastPerStepAndSorts) {
  const std::string text =
      "{\"kind\": \"config\", \"B\": 8}\n"
      "{\"kind\": \"train\", \"step\": 1, \"loss\": 5.5, \"lr\": 0.001}\n"
      "\n"
      "{\"kind\": \"train\", \"step\": 2, \"loss\": 5.0}\r\n"
      "{\"kind\": \"eval\", \"step\": 2, \"loss\": 5.25}\n"
      "{\"kind\": \"train\", \"step\": 3, \"loss\": 4.5}\n"
      "{\"kind\": \"train\", \"step\": 2, \"loss\": 4.75}\n"  // resumed run rewrites step 2
      "{\"loss\": 4.0, \"step\": 4, \"kind\": \"train\"}\n"
      "{\"kind\": \"train\", \"step\": 5, \"loss\": null}\n"
      "{\"kind\": \"eval\", \"step\": 4, \"loss\": 4.25, \"ppl\": 70}\n";
  std::istringstream in(text);
  const LossCurves c = parse_metrics(in, "m.jsonl");
  ASSERT_EQ(c.train.size(), 4u);
  const int64_t steps[] = {1, 2, 3, 4};
  const double losses[] = {5.5, 4.75, 4.5, 4.0};
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(c.train[i].step, steps[i]);
    EXPECT_EQ(c.train[i].loss, losses[i]);
  }
  ASSERT_EQ(c.eval.size(), 2u);
  EXPECT_EQ(c.eval[0].step, 2);
  EXPECT_EQ(c.eval[0].loss, 5.25);
  EXPECT_EQ(c.eval[1].step, 4);
  EXPECT_EQ(c.eval[1].loss, 4.25);
  EXPECT_EQ(c.nonfinite, 1u);
  EXPECT_EQ(c.other_kinds, 1u);
}

TEST(Metrics, MalformedLinesNameTheLine) {
  const std::string ok = "{\"kind\": \"train\", \"step\": 1, \"loss\": 2.0}\n";
  EXPECT_TRUE(error_of_parse(ok + ok).empty());
  struct Case {
    std::string line, want;
  } cases[] = {
      {"{\"kind\": \"train\", \"step\": 2, \"loss\": 2.0", "not valid JSON"},
      {"[1, 2, 3]", "expected a JSON object, got array"},
      {"{\"step\": 2, \"loss\": 2.0}", "no string \"kind\""},
      {"{\"kind\": \"train\", \"loss\": 2.0}", "no integer \"step\""},
      {"{\"kind\": \"eval\", \"step\": 2.5, \"loss\": 2.0}", "no integer \"step\""},
      {"{\"kind\": \"train\", \"step\": -1, \"loss\": 2.0}", "negative step -1"},
      {"{\"kind\": \"train\", \"step\": 2, \"loss\": \"2.0\"}", "no numeric \"loss\""},
      {"{\"kind\": \"train\", \"step\": 2}", "no numeric \"loss\""},
      // Found by fuzz/fuzz_metrics: a number too large for a double escaped as a library exception.
      {"{\"kind\": \"train\", \"step\": 2, \"loss\": 5e732012}", "not valid JSON"},
      {"{\"kind\": \"other\", \"o\": 53307.5e732012}", "not valid JSON"},
  };
  for (const auto& c : cases) {
    // The bad line is line 3 (after a good line and a blank one); it is
    // reported and skipped, and the good lines around it still count.
    const std::string text = ok + "\n" + c.line + "\n" + "{\"kind\": \"eval\", \"step\": 4, \"loss\": 1.5}\n";
    const std::string msg = error_of_parse(text);
    EXPECT_TRUE(contains(msg, "m.jsonl:3: ")) << c.line << " -> " << msg;
    EXPECT_TRUE(contains(msg, c.want)) << c.line << " -> " << msg;
    std::istringstream in(text);
    const LossCurves got = parse_metrics(in, "m.jsonl");
    EXPECT_EQ(got.broken.size(), 1u) << c.line;
    ASSERT_EQ(got.train.size(), 1u) << c.line;
    EXPECT_EQ(got.train[0].loss, 2.0);
    ASSERT_EQ(got.eval.size(), 1u) << c.line;
    EXPECT_EQ(got.eval[0].loss, 1.5);
  }
}

TEST(LossSvg, DrawsBothSeriesAtTheirValues) {
  LossCurves c;
  const std::vector<double> ts = {10, 20, 30, 45, 60, 80, 100}, tl = {5.0, 4.1, 3.5, 3.0, 2.6, 2.3, 2.2};
  const std::vector<double> es = {20, 60, 100}, el = {4.4, 2.9, 2.4};
  for (size_t i = 0; i < ts.size(); ++i) c.train.push_back({int64_t(ts[i]), tl[i]});
  for (size_t i = 0; i < es.size(); ++i) c.eval.push_back({int64_t(es[i]), el[i]});
  for (bool log_y : {false, true}) {
    PlotOptions o;
    o.title = "run <a> & b";
    o.log_y = log_y;
    const std::string svg = loss_svg(c, o);
    EXPECT_EQ(svg.rfind("<svg xmlns=\"http://www.w3.org/2000/svg\"", 0), 0u);
    EXPECT_TRUE(svg.ends_with("</svg>\n"));
    EXPECT_TRUE(contains(svg, "run &lt;a&gt; &amp; b")) << "title not escaped";
    EXPECT_EQ(count(svg, "<polyline class=\"train\""), 1u);
    EXPECT_EQ(count(svg, "<polyline class=\"eval\""), 1u);
    const auto tp = polyline_points(svg, "train"), ep = polyline_points(svg, "eval");
    ASSERT_EQ(tp.size(), ts.size());
    ASSERT_EQ(ep.size(), es.size());
    EXPECT_EQ(count(section(svg, "<g class=\"eval-markers\"", "</g>"), "<circle"), es.size());
    // Same x and y mapping for both series: check each against the union.
    std::vector<double> sx, px, ly, py;
    for (size_t i = 0; i < ts.size(); ++i) sx.push_back(ts[i]), px.push_back(tp[i].x);
    for (size_t i = 0; i < es.size(); ++i) sx.push_back(es[i]), px.push_back(ep[i].x);
    for (size_t i = 0; i < tl.size(); ++i) ly.push_back(log_y ? std::log10(tl[i]) : tl[i]), py.push_back(tp[i].y);
    for (size_t i = 0; i < el.size(); ++i) ly.push_back(log_y ? std::log10(el[i]) : el[i]), py.push_back(ep[i].y);
    expect_affine(sx, px);
    expect_affine(ly, py);
    // Larger step is further right; larger loss is higher (smaller y); all inside the frame.
    EXPECT_GT(tp.back().x, tp.front().x);
    EXPECT_GT(tp.back().y, tp.front().y) << "loss went down, so the line must go down the page";
    for (const auto& p : tp) {
      EXPECT_GE(p.x, 80 - 1e-6);
      EXPECT_LE(p.x, o.width - 30 + 1e-6);
      EXPECT_GE(p.y, 50 - 1e-6);
      EXPECT_LE(p.y, o.height - 60 + 1e-6);
    }
    // Ticks with labels on both axes, an axis title, a legend with both series.
    EXPECT_GE(count(section(svg, "<g class=\"x-ticks\"", "</g>"), "<text"), 3u);
    EXPECT_GE(count(section(svg, "<g class=\"y-ticks\"", "</g>"), "<text"), 3u);
    EXPECT_TRUE(contains(svg, ">step</text>"));
    EXPECT_TRUE(contains(svg, log_y ? ">loss (log scale)</text>" : ">loss</text>"));
    const std::string legend = section(svg, "<g class=\"legend\"", "</g>");
    EXPECT_TRUE(contains(legend, "train loss (last 2.2000)"));
    EXPECT_TRUE(contains(legend, "eval loss (last 2.4000)"));
  }
}

// Two runs of different lengths and losses: both axes span both runs, every
// point of each run sits at its own value on those shared axes, each run has
// its colour, eval is dashed, and the legend names the runs.
TEST(LossSvg, TwoRunsDrawnAtTheirValuesOnSharedAxes) {
  struct Run {
    std::string name;
    std::vector<double> ts, tl, es, el;
  };
  // bf16 runs longer (to step 160) and reaches a lower loss; fp8 starts higher.
  const Run runs[] = {
      {"fp8", {0, 20, 40, 60, 80, 100}, {6.0, 4.5, 3.8, 3.3, 3.0, 2.9}, {50, 100}, {3.9, 3.1}},
      {"bf16 <x>", {0, 40, 80, 120, 160}, {5.5, 3.6, 2.8, 2.4, 2.1}, {80, 160}, {3.0, 2.3}},
  };
  std::vector<NamedCurves> in;
  for (const auto& r : runs) {
    NamedCurves n{r.name, {}};
    for (size_t i = 0; i < r.ts.size(); ++i) n.curves.train.push_back({int64_t(r.ts[i]), r.tl[i]});
    for (size_t i = 0; i < r.es.size(); ++i) n.curves.eval.push_back({int64_t(r.es[i]), r.el[i]});
    in.push_back(std::move(n));
  }
  for (bool log_y : {false, true}) {
    PlotOptions o;
    o.log_y = log_y;
    const std::string svg = loss_svg(in, o);
    EXPECT_EQ(svg.rfind("<svg xmlns=\"http://www.w3.org/2000/svg\"", 0), 0u);
    EXPECT_TRUE(svg.ends_with("</svg>\n"));
    const auto train = run_polylines(svg, "train"), eval = run_polylines(svg, "eval");
    ASSERT_EQ(train.size(), 2u);
    ASSERT_EQ(eval.size(), 2u);
    EXPECT_EQ(count(svg, "<polyline class=\"train\""), 2u);
    EXPECT_EQ(count(svg, "<polyline class=\"eval\""), 2u);
    EXPECT_EQ(count(svg, "<g class=\"eval-markers\""), 2u);
    // Every point of both runs against the union of all values: one x and one y mapping.
    std::vector<double> sx, px, ly, py;
    const auto yv = [&](double l) { return log_y ? std::log10(l) : l; };
    for (size_t r = 0; r < 2; ++r) {
      EXPECT_EQ(train[r].run, r == 0 ? "fp8" : "bf16 &lt;x&gt;");
      EXPECT_EQ(eval[r].run, train[r].run);
      ASSERT_EQ(train[r].pts.size(), runs[r].ts.size());
      ASSERT_EQ(eval[r].pts.size(), runs[r].es.size());
      for (size_t i = 0; i < runs[r].ts.size(); ++i) {
        sx.push_back(runs[r].ts[i]), px.push_back(train[r].pts[i].x);
        ly.push_back(yv(runs[r].tl[i])), py.push_back(train[r].pts[i].y);
      }
      for (size_t i = 0; i < runs[r].es.size(); ++i) {
        sx.push_back(runs[r].es[i]), px.push_back(eval[r].pts[i].x);
        ly.push_back(yv(runs[r].el[i])), py.push_back(eval[r].pts[i].y);
      }
      // Each run's eval markers: one circle per eval point, at the eval line's points.
      const std::string markers = section(svg, "<g class=\"eval-markers\" data-run=\"" + eval[r].run + "\"", "</g>");
      EXPECT_EQ(count(markers, "<circle"), runs[r].es.size()) << eval[r].run;
      EXPECT_TRUE(contains(markers, "stroke=\"" + eval[r].stroke + "\"")) << markers;
      // Same colour for a run's train and eval; eval dashed, train not.
      EXPECT_EQ(train[r].stroke, eval[r].stroke);
      EXPECT_TRUE(contains(eval[r].attrs, "stroke-dasharray")) << eval[r].attrs;
      EXPECT_FALSE(contains(train[r].attrs, "stroke-dasharray")) << train[r].attrs;
    }
    EXPECT_NE(train[0].stroke, train[1].stroke) << "each run needs its own colour";
    expect_affine(sx, px);
    expect_affine(ly, py);
    // The axes span both runs: step 0 (both) at the left edge, bf16's last step 160 at the
    // right edge (fp8 ends at 100, left of it); the highest loss (fp8's 6.0) near the top,
    // the lowest (bf16's 2.1) near the bottom, all inside the frame.
    EXPECT_NEAR(train[0].pts.front().x, 80, 1e-6);
    EXPECT_NEAR(train[1].pts.back().x, o.width - 30, 1e-6);
    EXPECT_LT(train[0].pts.back().x, train[1].pts.back().x);
    EXPECT_NEAR(train[0].pts.front().y - 50, (o.height - 60 - 50) * 0.05 / 1.1, 0.02);
    EXPECT_NEAR(o.height - 60 - train[1].pts.back().y, (o.height - 60 - 50) * 0.05 / 1.1, 0.02);
    // The legend names both runs, each with its train and eval loss.
    const std::string legend = section(svg, "<g class=\"legend\"", "</g>");
    EXPECT_TRUE(contains(legend, "fp8 train (last 2.9000)")) << legend;
    EXPECT_TRUE(contains(legend, "fp8 eval (last 3.1000)")) << legend;
    EXPECT_TRUE(contains(legend, "bf16 &lt;x&gt; train (last 2.1000)")) << legend;
    EXPECT_TRUE(contains(legend, "bf16 &lt;x&gt; eval (last 2.3000)")) << legend;
  }
  // One run through the vector form is the single-run plot, unchanged: no run names.
  EXPECT_EQ(loss_svg(std::vector<NamedCurves>{in[0]}, {}), loss_svg(in[0].curves, {}));
  EXPECT_FALSE(contains(loss_svg(in[0].curves, {}), "data-run"));
}

// Beyond ten runs the colours repeat, so each further ten draws its lines in
// a dash pattern of its own: among 40 runs no two train lines, and no two eval
// lines, share both colour and pattern; the legend draws each the same way;
// the 41st run looks like the first (as documented).
TEST(LossSvg, FortyRunsAllLookDifferent) {
  std::vector<NamedCurves> in;
  for (int r = 0; r < 41; ++r) {
    NamedCurves n{"run" + std::to_string(r), {}};
    n.curves.train = {{0, 5.0 - 0.01 * r}, {10, 4.0 - 0.01 * r}};
    n.curves.eval = {{10, 4.5 - 0.01 * r}};
    in.push_back(std::move(n));
  }
  const std::string svg = loss_svg(in, {});
  const std::regex dash_re(" stroke-dasharray=\"([^\"]*)\"");
  const auto dash_of = [&](const std::string& attrs) {
    std::smatch m;
    return std::regex_search(attrs, m, dash_re) ? m[1].str() : std::string();
  };
  const std::string legend = section(svg, "<g class=\"legend\"", "</g>\n</svg>");
  for (const char* cls : {"train", "eval"}) {
    const auto lines = run_polylines(svg, cls);
    ASSERT_EQ(lines.size(), 41u);
    std::set<std::pair<std::string, std::string>> looks;
    for (size_t r = 0; r < 40; ++r) {
      const std::string dash = dash_of(lines[r].attrs);
      EXPECT_TRUE(looks.insert({lines[r].stroke, dash}).second) << cls << " of run " << r << " looks like another's";
      EXPECT_EQ(dash.empty(), std::string(cls) == "train" && r < 10) << cls << " " << r;
      // The legend's sample line of this run and series: the same colour and pattern.
      const std::string sample = "stroke=\"" + lines[r].stroke + "\" stroke-width=\"1.5\"" +
                                 (dash.empty() ? "" : " stroke-dasharray=\"" + dash + "\"") + "/>";
      const std::string text = ">run" + std::to_string(r) + " " + cls + " (last";
      const size_t at = legend.find(text);
      ASSERT_NE(at, std::string::npos) << text;
      EXPECT_TRUE(contains(legend.substr(legend.rfind("<line", at), at - legend.rfind("<line", at)), sample))
          << cls << " " << r << ": " << legend.substr(legend.rfind("<line", at), at - legend.rfind("<line", at));
    }
    EXPECT_EQ(lines[40].stroke, lines[0].stroke);
    EXPECT_EQ(dash_of(lines[40].attrs), dash_of(lines[0].attrs));
  }
}

TEST(LossSvg, SeveralRunsErrorsNameTheRun) {
  NamedCurves a{"fp8", {}}, b{"bf16", {}};
  a.curves.train.push_back({1, 3.0});
  EXPECT_THROW(loss_svg(std::vector<NamedCurves>{}, {}), mxdp::Error);
  try {
    loss_svg({a, b}, {});
    FAIL() << "a run with nothing to draw must fail";
  } catch (const mxdp::Error& e) {
    EXPECT_TRUE(contains(e.what(), "no train or eval loss points to plot in run 'bf16'")) << e.what();
  }
  b.curves.eval.push_back({2, 0.0});
  PlotOptions lg;
  lg.log_y = true;
  try {
    loss_svg({a, b}, lg);
    FAIL() << "log scale with a zero loss must fail";
  } catch (const mxdp::Error& e) {
    EXPECT_TRUE(contains(e.what(), "needs every loss > 0, the smallest is 0 (run 'bf16')")) << e.what();
  }
}

TEST(LossSvg, EdgeCasesAndErrors) {
  LossCurves c;
  EXPECT_THROW(loss_svg(c, {}), mxdp::Error);  // nothing to plot
  c.train.push_back({5, 3.0});                  // one point, one value: still a valid plot
  const std::string one = loss_svg(c, {});
  EXPECT_EQ(polyline_points(one, "train").size(), 1u);
  EXPECT_EQ(polyline_points(one, "eval").size(), 0u);
  EXPECT_FALSE(contains(one, "eval loss"));
  EXPECT_FALSE(contains(one, "nan")) << one;
  c.eval.push_back({6, 0.0});
  PlotOptions lg;
  lg.log_y = true;
  try {
    loss_svg(c, lg);
    FAIL() << "log scale with a zero loss must fail";
  } catch (const mxdp::Error& e) {
    EXPECT_TRUE(contains(e.what(), "needs every loss > 0")) << e.what();
  }
}

TEST(PlotCli, WritesSvgAndReportsErrors) {
  TempDir d;
  std::string good;
  for (int s = 1; s <= 50; ++s) good += "{\"kind\":\"train\",\"step\":" + std::to_string(s) + ",\"loss\":" +
                                        std::to_string(4.0 / s + 1) + "}\n";
  good += "{\"kind\":\"eval\",\"step\":25,\"loss\":1.3}\n{\"kind\":\"eval\",\"step\":50,\"loss\":1.2}\n";
  write_file(d / "m.jsonl", good);
  write_file(d / "bad.jsonl", "{\"kind\":\"train\",\"step\":1,\"loss\":2}\n{\"kind\":\"train\",\"step\":2,\n");
  const std::string out = d / "log.txt";
  auto q = [](const std::string& s) { return "'" + s + "'"; };

  auto r = run_mxdp("plot --metrics " + q(d / "m.jsonl") + " --output " + q(d / "m.svg") + " --log-y", out);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(contains(r.output, "50 train and 2 eval points")) << r.output;
  const std::string svg = read_file(d / "m.svg");
  EXPECT_EQ(polyline_points(svg, "train").size(), 50u);
  EXPECT_EQ(polyline_points(svg, "eval").size(), 2u);
  EXPECT_FALSE(fs::exists(d / "m.svg.tmp"));

  // A cut last line (issue 21, item 6): reported, skipped, the rest drawn.
  r = run_mxdp("plot --metrics " + q(d / "bad.jsonl") + " --output " + q(d / "b.svg"), out);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(contains(r.output, "plot: skipped " + d / "bad.jsonl" + ":2: not valid JSON")) << r.output;
  EXPECT_TRUE(contains(r.output, "1 train and 0 eval points, 1 broken lines skipped")) << r.output;
  EXPECT_EQ(polyline_points(read_file(d / "b.svg"), "train").size(), 1u);
  // Nothing but broken lines: an error, naming the first.
  write_file(d / "junk.jsonl", "not json\n{\"kind\":\n");
  r = run_mxdp("plot --metrics " + q(d / "junk.jsonl") + " --output " + q(d / "j.svg"), out);
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_TRUE(contains(r.output, "holds no metrics line, only 2 broken ones")) << r.output;
  EXPECT_FALSE(fs::exists(d / "j.svg"));
  r = run_mxdp("plot --metrics " + q(d / "none.jsonl") + " --output " + q(d / "b.svg"), out);
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_TRUE(contains(r.output, "cannot read metrics file")) << r.output;
  r = run_mxdp("plot --metrics " + q(d / "m.jsonl") + " --output " + q(d / "m.png"), out);
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_TRUE(contains(r.output, "must name an .svg file")) << r.output;
}

// Several --metrics files on one plot: names from the directories (or the file
// names where the directories are the same), or from --label; a --label count
// that is not the files' count is refused; one report line per run.
TEST(PlotCli, SeveralRunsWithLabels) {
  TempDir d;
  fs::create_directories(d / "runs/fp8");
  fs::create_directories(d / "runs/bf16");
  auto metrics = [](double scale, int steps) {
    std::string m = "{\"kind\":\"config\",\"B\":8}\n";
    for (int s = 1; s <= steps; ++s)
      m += "{\"kind\":\"train\",\"step\":" + std::to_string(s) + ",\"loss\":" + std::to_string(scale * (4.0 / s + 1)) +
           "}\n";
    m += "{\"kind\":\"eval\",\"step\":" + std::to_string(steps) + ",\"loss\":" + std::to_string(scale * 1.5) + "}\n";
    return m;
  };
  write_file(d / "runs/fp8/metrics.jsonl", metrics(1.0, 40));
  write_file(d / "runs/bf16/metrics.jsonl", metrics(0.9, 30) + "{\"kind\":\"train\",\n");
  const std::string a = quote(d / "runs/fp8/metrics.jsonl"), b = quote(d / "runs/bf16/metrics.jsonl");
  const std::string out = d / "log.txt", svg_path = d / "two.svg";
  const auto runs_of = [](const std::string& svg) {
    std::vector<std::string> names;
    for (const auto& l : run_polylines(svg, "train")) names.push_back(l.run);
    return names;
  };

  // --metrics A B: names from the directories, a line per run, the title names both.
  auto r = run_mxdp("plot --metrics " + a + " " + b + " --output " + quote(svg_path), out);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(contains(r.output, "plot: fp8: 40 train and 1 eval points -> " + svg_path + "\n")) << r.output;
  EXPECT_TRUE(contains(r.output, "plot: bf16: 30 train and 1 eval points, 1 broken lines skipped -> " + svg_path))
      << r.output;
  EXPECT_TRUE(contains(r.output, "plot: skipped " + d / "runs/bf16/metrics.jsonl" + ":33: not valid JSON")) << r.output;
  std::string svg = read_file(svg_path);
  EXPECT_EQ(runs_of(svg), (std::vector<std::string>{"fp8", "bf16"}));
  EXPECT_EQ(run_polylines(svg, "train")[0].pts.size(), 40u);
  EXPECT_EQ(run_polylines(svg, "train")[1].pts.size(), 30u);
  EXPECT_EQ(run_polylines(svg, "eval").size(), 2u);
  EXPECT_TRUE(contains(svg, ">Loss: fp8 vs bf16</text>")) << svg.substr(0, 600);
  EXPECT_TRUE(contains(section(svg, "<g class=\"legend\"", "</g>"), ">bf16 eval (last 1.3500)<"));

  // --metrics A --metrics B --label x --label y: the labels, in order.
  r = run_mxdp("plot --metrics " + a + " --metrics " + b + " --label 'FP8 (e4m3)' --label BF16 --output " +
                   quote(svg_path),
               out);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(contains(r.output, "plot: FP8 (e4m3): 40 train")) << r.output;
  EXPECT_TRUE(contains(r.output, "plot: BF16: 30 train")) << r.output;
  EXPECT_EQ(runs_of(read_file(svg_path)), (std::vector<std::string>{"FP8 (e4m3)", "BF16"}));

  // A label count that is not the files' count: refused, nothing written.
  for (const std::string labels : {"--label x", "--label x --label y --label z"}) {
    r = run_mxdp("plot --metrics " + a + " " + b + " " + labels + " --output " + quote(d / "bad.svg"), out);
    EXPECT_EQ(r.exit_code, 1) << r.output;
    EXPECT_TRUE(contains(r.output, "--label was given")) << r.output;
    EXPECT_TRUE(contains(r.output, "for 2 --metrics file(s)")) << r.output;
    EXPECT_FALSE(fs::exists(d / "bad.svg"));
  }

  // An empty label, or one given to two runs, is refused: the legend could not tell the runs apart.
  for (const auto& [labels, want] :
       {std::pair<std::string, std::string>{"--label x --label ''", "--label number 2 is empty"},
        {"--label same --label same", "--label 'same' is given twice (labels 1 and 2)"}}) {
    r = run_mxdp("plot --metrics " + a + " " + b + " " + labels + " --output " + quote(d / "bad.svg"), out);
    EXPECT_EQ(r.exit_code, 1) << r.output;
    EXPECT_TRUE(contains(r.output, want)) << r.output;
    EXPECT_FALSE(fs::exists(d / "bad.svg"));
  }

  // One file given twice, as written or by another path to it: refused, nothing written.
  for (const std::string& again : {a, quote(d / "runs/bf16/../fp8/metrics.jsonl")}) {
    r = run_mxdp("plot --metrics " + a + " " + b + " " + again + " --output " + quote(d / "bad.svg"), out);
    EXPECT_EQ(r.exit_code, 1) << r.output;
    EXPECT_TRUE(contains(r.output, "is given twice (files 1 and 3)")) << r.output;
    EXPECT_FALSE(fs::exists(d / "bad.svg"));
  }

  // Two files of one directory: their file names. A file directly in the working
  // directory (no parent in its path): its file name.
  write_file(d / "runs/fp8/other.jsonl", metrics(1.1, 20));
  r = run_mxdp("plot --metrics " + a + " " + quote(d / "runs/fp8/other.jsonl") + " --output " + quote(svg_path), out);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(runs_of(read_file(svg_path)), (std::vector<std::string>{"metrics.jsonl", "other.jsonl"}));
  r = run_mxdp("plot --metrics " + b + " " + quote(d / "runs/fp8/other.jsonl") + " --output " + quote(svg_path), out);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(runs_of(read_file(svg_path)), (std::vector<std::string>{"bf16", "fp8"}));

  // A run with nothing to draw is named.
  write_file(d / "runs/fp8/empty.jsonl", "{\"kind\":\"config\",\"B\":8}\n");
  const std::string empty = d / "runs/fp8/empty.jsonl";
  r = run_mxdp("plot --metrics " + a + " " + quote(empty) + " --output " + quote(d / "e.svg"), out);
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_TRUE(contains(r.output, empty + " holds no train or eval loss to plot (run 'empty.jsonl')")) << r.output;
  EXPECT_FALSE(fs::exists(d / "e.svg"));
}

// The SVG must be one a real renderer accepts (skipped where rsvg-convert is absent).
TEST(PlotCli, SvgRendersWithRsvg) {
  if (std::system("command -v rsvg-convert >/dev/null 2>&1") != 0) GTEST_SKIP() << "rsvg-convert not installed";
  TempDir d;
  LossCurves c;
  for (int s = 0; s < 100; ++s) c.train.push_back({s, 3.0 * std::exp(-s / 30.0) + 1});
  c.eval.push_back({50, 1.7});
  c.eval.push_back({99, 1.2});
  for (bool log_y : {false, true}) {
    PlotOptions o;
    o.log_y = log_y;
    write_file(d / "p.svg", loss_svg(c, o));
    const std::string cmd = "rsvg-convert '" + (d / "p.svg") + "' -o '" + (d / "p.png") + "' 2>'" + (d / "err") + "'";
    EXPECT_EQ(std::system(cmd.c_str()), 0) << read_file(d / "err");
    EXPECT_EQ(read_file(d / "p.png").substr(1, 3), "PNG");
  }
}

TEST(PlotCli, TwoRunSvgRendersWithRsvg) {
  if (std::system("command -v rsvg-convert >/dev/null 2>&1") != 0) GTEST_SKIP() << "rsvg-convert not installed";
  TempDir d;
  NamedCurves a{"fp8", {}}, b{"bf16 & co", {}};
  for (int s = 0; s < 100; ++s) a.curves.train.push_back({s, 3.0 * std::exp(-s / 30.0) + 1});
  for (int s = 0; s < 150; s += 2) b.curves.train.push_back({s, 2.8 * std::exp(-s / 25.0) + 0.9});
  a.curves.eval = {{50, 1.7}, {99, 1.2}};
  b.curves.eval = {{50, 1.5}, {100, 1.1}, {148, 1.0}};
  for (bool log_y : {false, true}) {
    PlotOptions o;
    o.log_y = log_y;
    write_file(d / "p.svg", loss_svg({a, b}, o));
    const std::string cmd = "rsvg-convert '" + (d / "p.svg") + "' -o '" + (d / "p.png") + "' 2>'" + (d / "err") + "'";
    EXPECT_EQ(std::system(cmd.c_str()), 0) << read_file(d / "err");
    EXPECT_EQ(read_file(d / "p.png").substr(1, 3), "PNG");
  }
}
