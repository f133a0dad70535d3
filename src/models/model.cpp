// What model.h declares beyond the interface.
#include "models/model.h"

#include "formats/format.h"

namespace mxdp {

int check_fp8_compute(const std::vector<ParamSpec>& params, const std::string& model) {
  const FormatTraits& tiles = format_traits(WeightFormat::Fp8b128);
  int n = 0;
  for (const ParamSpec& p : params) {
    if (!p.fp8_linear) continue;
    MXDP_CHECK(p.shape.size() == 2 && tiles.eligible(p.shape[0], p.shape[1]),
               "--compute-dtype fp8 computes with whole 128x128 tiles of each linear weight, but ", p.name, " is ",
               shape_string(p.shape), ": pass a --d-model that is a multiple of 128 (the model's widths follow it), ",
               "or --compute-dtype bf16");
    ++n;
  }
  MXDP_CHECK(n > 0, "--compute-dtype fp8: ", model.empty() ? std::string("this model") : model,
             " does not compute with FP8 weights (yet; GPT-2 does); use --compute-dtype bf16");
  return n;
}

}  // namespace mxdp
