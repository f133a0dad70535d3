// What model.h declares beyond the interface.
#include "models/model.h"

#include "formats/format.h"

namespace mxdp {

int check_fp8_compute(const std::vector<ParamSpec>& params, const std::string& model) {
  const FormatTraits& tiles = format_traits(WeightFormat::Fp8b128);
  int n = 0;
  for (const ParamSpec& p : params) {
    if (!p.fp8_linear) continue;
    // W {N, K} and W^T {K, N} are both fp8b128 weights the GEMMs read.
    const bool fits = p.shape.size() == 2 && tiles.eligible(p.shape[0], p.shape[1]) &&
                      tiles.eligible(p.shape[1], p.shape[0]);
    MXDP_CHECK(fits, "--compute-dtype fp8 needs both sides of each linear weight a multiple of 16 (the FP8 GEMMs' ",
               "alignment), but ", p.name, " is ", shape_string(p.shape),
               ": pass a --d-model and --n-head whose widths (the model's weights follow them) are multiples of 16, "
               "or --compute-dtype bf16");
    ++n;
  }
  MXDP_CHECK(n > 0, "--compute-dtype fp8: ", model.empty() ? std::string("this model") : model,
             " does not compute with FP8 weights (yet; GPT-2 and Llama do); use --compute-dtype bf16");
  return n;
}

void Fp8Compute::check(int n_blocks, const std::string& model) const {
  MXDP_CHECK(bf16_first >= 0 && bf16_last >= 0, "--num-layers-at-start-in-bf16 and --num-layers-at-end-in-bf16 ",
             "must be >= 0, got ", bf16_first, " and ", bf16_last);
  MXDP_CHECK(bf16_first + bf16_last < n_blocks, "--num-layers-at-start-in-bf16 ", bf16_first,
             " and --num-layers-at-end-in-bf16 ", bf16_last, " leave none of ",
             model.empty() ? std::string("the model") : model, "'s ", n_blocks,
             " blocks in FP8: keep fewer in bf16, or train with --compute-dtype bf16");
}

std::vector<ParamSpec> Fp8Compute::apply(std::vector<ParamSpec> params, int n_blocks, const std::string& model) const {
  if (!on) return params;
  check(n_blocks, model);
  for (ParamSpec& p : params) p.fp8_linear = p.fp8_linear && fp8_block(p.layer - 1, n_blocks);
  check_fp8_compute(params, model);
  return params;
}

}  // namespace mxdp
