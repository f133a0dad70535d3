// What every EngineOps implementation shares: the checked range list of
// adamw_quantize_ranges and its range-by-range form (engine_ops.h).
#include "engine/engine_ops.h"

#include <algorithm>

#include "formats/format.h"
#include "util/check.h"

namespace mxdp {

AdamWRanges::AdamWRanges(WeightFormat f, std::vector<AdamWRange> list) : format_(f), list_(std::move(list)) {
  const FormatTraits& ft = format_traits(f);
  // A tensor amax spans ranges: two passes, not one.
  MXDP_CHECK(!ft.tensor_amax, "adamw_ranges: ", ft.name,
             " needs the tensor amax first (adamw_amax, then quantize), not one fused pass over ranges");
  const bool slabs = ft.block_rows > 1;
  int64_t end = 0, scales_end = 0;  // of the previous range
  for (size_t i = 0; i < list_.size(); ++i) {
    const AdamWRange& r = list_[i];
    MXDP_CHECK(r.len >= 0, "adamw_ranges: range ", i, " has a negative length (", r.len, ")");
    MXDP_CHECK(r.begin >= end, "adamw_ranges: range ", i, " begins at ", r.begin,
               ", before the end of the range ahead of it (", end, "): ranges must be in order and disjoint");
    MXDP_CHECK(r.choice >= 0 && r.choice < kMaxAdamWChoices, "adamw_ranges: range ", i, " picks AdamW choice ",
               r.choice, "; there are at most ", kMaxAdamWChoices);
    if (slabs) {
      // A 128-row tile spans the range's rows: the range is a matrix.
      MXDP_CHECK(r.cols > 0, "adamw_ranges: range ", i, " of ", ft.name, " has no cols; its ", ft.block_rows,
                 "-row tiles need the matrix's width");
      check_slab_range(f, r.len, r.cols, "adamw_ranges");
      MXDP_CHECK(r.scale_pos >= scales_end, "adamw_ranges: range ", i, "'s scales begin at ", r.scale_pos,
                 ", before the end of the scales of the range ahead of it (", scales_end,
                 "): their scales must be in order and disjoint too");
      scales_end = r.scale_pos + ft.matrix_scales(r.len / r.cols, r.cols);
    } else {
      MXDP_CHECK(r.begin % ft.block == 0, "adamw_ranges: range ", i, " begins at ", r.begin, ", inside a ", ft.name,
                 " block of ", ft.block, " elements");
      MXDP_CHECK(r.cols == 0 && r.scale_pos == 0, "adamw_ranges: range ", i, " of ", ft.name,
                 " gives cols or a scale position; a row-block format's scales follow from its begin");
    }
    end = r.begin + r.len;
    choices_needed_ = std::max(choices_needed_, r.choice + 1);
  }
}

uint8_t* AdamWRanges::scales_of(const AdamWRange& r, uint8_t* scales) const {
  if (!scales) return nullptr;
  const FormatTraits& ft = format_traits(format_);
  return scales + (ft.block_rows > 1 ? r.scale_pos * ft.scale_bytes : ft.scales_bytes(r.begin));
}

void AdamWRanges::check_choices(std::span<const AdamWChoice> choices) const {
  MXDP_CHECK(int64_t(choices.size()) >= choices_needed_ && int64_t(choices.size()) <= kMaxAdamWChoices,
             "adamw_quantize_ranges: the ranges pick among ", choices_needed_, " AdamW choices, got ", choices.size(),
             " (at most ", kMaxAdamWChoices, ")");
}

void EngineOps::adamw_quantize_each_range(ScaleRounding r, float* p, float* m, float* v, const float* g,
                                          const StepControl* ctl, std::span<const AdamWChoice> choices,
                                          const AdamWRanges& ranges, uint8_t* codes, uint8_t* scales) {
  ranges.check_choices(choices);
  const WeightFormat f = ranges.format();
  const FormatTraits& ft = format_traits(f);
  for (const AdamWRange& a : ranges.list())
    adamw_quantize(f, r, p + a.begin, m + a.begin, v + a.begin, g + a.begin, a.len, ctl, choices[size_t(a.choice)],
                   codes + ft.code_bytes(a.begin), ranges.scales_of(a, scales), a.cols);
}

}  // namespace mxdp
