// Metrics parsing, the SVG loss plot and `mxdp plot`.
#include <gtest/gtest.h>

#include <cmath>
#include <regex>
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

// The points of <polyline class="cls" ... points="...">, or none.
std::vector<XY> polyline_points(const std::string& svg, const std::string& cls) {
  std::smatch m;
  const std::regex re("<polyline class=\"" + cls + "\"[^>]* points=\"([^\"]*)\"");
  if (!std::regex_search(svg, m, re)) return {};
  std::vector<XY> pts;
  std::istringstream is(m[1].str());
  std::string pair;
  while (is >> pair) {
    const auto comma = pair.find(',');
    pts.push_back({std::stod(pair.substr(0, comma)), std::stod(pair.substr(comma + 1))});
  }
  return pts;
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
