// libFuzzer harness: the metrics reader of `mxdp plot` (plot.h) and the SVG it
// draws, on untrusted text. Only mxdp::Error may escape.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <string>

#include "util/check.h"
#include "train/plot.h"

using namespace mxdp;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::istringstream in(std::string(reinterpret_cast<const char*>(data), size));
  try {
    const LossCurves c = parse_metrics(in, "fuzz.jsonl");
    PlotOptions o;
    o.log_y = size % 2 == 1;
    loss_svg(c, o);
  } catch (const Error&) {
  } catch (const std::exception& e) {
    std::fprintf(stderr, "not an mxdp::Error: %s\n", e.what());
    std::abort();
  }
  return 0;
}
